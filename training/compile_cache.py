"""The same names for the same XLA programs in every run, so that TensorFlow's persistent
compilation cache (TF_XLA_FLAGS="--tf_xla_persistent_cache_directory=DIR", docs/container.md)
serves a resumed run too.

TensorFlow keys a cached program by the name of the function it was traced from, and numbers
that name (and the names of the functions inside it) from one process-wide counter that every
graph built so far has advanced. A resumed run builds more before its first update than a new
one (the restore), and with length bins it meets its shapes in another order, so each program it
traces is named differently and compiled again: seconds per shape on a CPU, minutes for
BERT-large on a GPU, at every restart of a days-long run.

So a run that keeps compiled programs (`persistent_cache_in_use`) first moves the counter on to
the next multiple of STRIDE (`settle_names`), the same value in a new and a resumed run since
both build far less than that before their first update, and then traces every program an update
may run, in one fixed order, each once for every bin length and row count (TrainStep's
`trace_ahead`). Tracing builds a
graph and compiles nothing: each program is still compiled, or loaded from the cache, the first
time it runs.

The counter is TensorFlow's private `ops.uid()` (no public way to name a traced function); where
a TensorFlow lacks it, programs are named as before and only the cache's hits are lost.
"""

from __future__ import annotations

# Counter values a process may use before its first update: 2**17 (131,072), against 1,275 for
# the tests' tiny model and 8,183 for BERT-large (9,483 resumed) seen at that point.
STRIDE = 1 << 17

CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def persistent_cache_in_use(environ) -> bool:
    """Whether TF_XLA_FLAGS in `environ` keeps compiled programs in a directory."""
    return any(flag.startswith(f"{CACHE_FLAG}=") for flag in environ.get("TF_XLA_FLAGS", "").split())


def settle_names() -> int | None:
    """Moves TensorFlow's name counter on to the next multiple of STRIDE and returns it (None where
    this TensorFlow has no such counter)."""
    try:
        from tensorflow.python.framework.ops import uid
    except ImportError:
        return None
    mark = (uid() // STRIDE + 1) * STRIDE
    while uid() < mark - 1:
        pass
    return mark
