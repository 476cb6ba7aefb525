"""TensorFlow's start-up notes, kept out of the output of every entry point and launcher.

TensorFlow 2.21's C++ libraries log a few notes while they load, before TensorFlow reads
TF_CPP_MIN_LOG_LEVEL and before absl logging is initialised, so no environment variable hides
them (levels 2 and 3 were tried): absl's "WARNING: All log messages before absl::InitializeLog()
is called are written to STDERR", the oneDNN note (port.cc; on CPUs where oneDNN's custom
operations are on, such as AVX-512 ones) and the CPU-feature notes (cpu_feature_guard.cc), each
once per library that carries them. `quiet_startup()` makes the first `import tensorflow` of the
process run with stderr captured at the file-descriptor level, then writes back every captured
line except those notes: nothing else is dropped, oneDNN stays on, and whatever TensorFlow prints
after it has loaded reaches stderr untouched.

The same first import also leaves out Keras' optional integrations with scikit-learn and
matplotlib (`keras.wrappers`, `keras.visualization`): Keras, loaded by TensorFlow, imports both
when they are installed (scikit-learn brings SciPy), about 2 of the 6-7 CPU seconds that starting
TensorFlow takes, and no entry point uses them. Keras imports them in `try` blocks and goes on
without them; afterwards they import normally for whoever asks.

And it runs with Python's cyclic garbage collector paused. The import makes about 280,000 objects
(modules, classes, functions that live as long as the process), and the collector would traverse
them in each of its full collections: five during the import, more while the steps are traced.
After the import one collection clears whatever the import left unreachable and `gc.freeze()`
moves the rest out of the collector's view, so later collections see only what the run makes.
That is about 0.6 of the 2.6 CPU seconds of the import and about 1 of the 8 of a tiny pretraining
run.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

# The notes, and only them: a line that merely resembles one is kept.
STARTUP_NOTES = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations are on\. .*"
    r"|I\d{4} [\d:. ]+\d+ cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized to use "
    r"available CPU instructions in performance-critical operations\."
    r"|To enable the following instructions: [A-Z0-9_ ,]+, in other operations, rebuild TensorFlow "
    r"with the appropriate compiler flags\.)\r?\n?$"
)


def without_notes(text: str) -> str:
    """`text` without the start-up notes' lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not STARTUP_NOTES.match(line))


# Imported by Keras (during `import tensorflow`) only when installed, and used by no entry point.
OPTIONAL_KERAS_INTEGRATIONS = ("sklearn", "matplotlib")


def _import_quietly(exec_module, module) -> None:
    """Runs `exec_module(module)` (TensorFlow's import) with stderr captured, the notes dropped,
    Keras' optional integrations left out and the garbage collector paused; what the import
    made and still holds is frozen afterwards."""
    left_out = [name for name in OPTIONAL_KERAS_INTEGRATIONS if name not in sys.modules]
    for name in left_out:
        sys.modules[name] = None  # `import name` raises ImportError, which Keras expects
    collecting = gc.isenabled()
    gc.disable()
    try:
        _import_without_notes(exec_module, module)
    finally:
        for name in left_out:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]
        if collecting:
            gc.collect()
            gc.enable()
        gc.freeze()


def _import_without_notes(exec_module, module) -> None:
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            exec_module(module)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            sys.stderr.write(without_notes(capture.read().decode("utf-8", errors="replace")))
            sys.stderr.flush()


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        _import_quietly(self._loader.exec_module, module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the `tensorflow` package the first time it is imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def quiet_startup() -> None:
    """Lets the first `import tensorflow` of this process (wherever it happens) drop the start-up
    notes; a no-op once TensorFlow is imported or the hook is in place."""
    if "tensorflow" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
