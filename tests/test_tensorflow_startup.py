"""common/tensorflow_startup.py: TensorFlow's start-up notes are dropped from stderr, and nothing
else is: not a line that only resembles a note, not what TensorFlow or the program print later."""

import os
import subprocess
import sys

import pytest

from common.tensorflow_startup import without_notes
from conftest import ROOT

NOTES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795529806.681202   14971 port.cc:153] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors from different "
    "computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n",
    "I0000 00:00:1795529806.681202   14971 cpu_feature_guard.cc:227] This TensorFlow binary is optimized "
    "to use available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with "
    "the appropriate compiler flags.\n",
]
KEPT = [
    "E0000 00:00:1758131045.203198 3722035 cuda_dnn.cc:8579] Unable to register cuDNN factory\n",
    "W0000 00:00:1795529806.681202   14971 port.cc:153] oneDNN custom operations are on, but failed\n",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR (and more)\n",
    "Traceback (most recent call last):\n",
]


def test_only_the_notes_are_dropped():
    assert without_notes("".join(NOTES)) == ""
    mixed = [line for pair in zip(NOTES, KEPT) for line in pair]
    assert without_notes("".join(mixed)) == "".join(KEPT)


def _run(code):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.process
def test_an_import_prints_nothing_and_later_output_reaches_stderr():
    result = _run(
        "import os, sys\n"
        "from common.tensorflow_startup import quiet_startup\n"
        "quiet_startup()\n"
        "print('before', file=sys.stderr, flush=True)\n"
        "import keras  # imports tensorflow: the hook catches it wherever it happens\n"
        "import tensorflow as tf\n"
        "print(int(tf.constant(2) * 3))\n"
        "os.write(2, b'W0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on. later\\n')\n"
        "print('after', file=sys.stderr)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "6\n"
    assert (
        result.stderr
        == "before\nW0000 00:00:1.0 1 port.cc:153] oneDNN custom operations are on. later\nafter\n"
    )


@pytest.mark.process
def test_an_error_while_importing_is_still_shown():
    result = _run(
        "import sys\n"
        "from common.tensorflow_startup import quiet_startup\n"
        "quiet_startup()\n"
        "sys.modules['tensorflow.python'] = None  # the package's own import of it fails\n"
        "import tensorflow\n"
    )
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr or "ImportError" in result.stderr
    assert "absl::InitializeLog" not in result.stderr


@pytest.mark.process
def test_kerass_optional_integrations_wait_until_someone_asks_for_them():
    result = _run(
        "import sys\n"
        "from common.tensorflow_startup import quiet_startup\n"
        "quiet_startup()\n"
        "import tensorflow as tf\n"
        "print(int(tf.constant(2) * 3), sorted({'sklearn', 'matplotlib'} & set(sys.modules)))\n"
        "import sklearn.metrics, matplotlib  # installed: they import as usual afterwards\n"
        "print(sklearn.metrics.accuracy_score([1, 0], [1, 1]), matplotlib.__name__)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "6 []\n0.5 matplotlib\n"


@pytest.mark.process
def test_the_import_pauses_the_garbage_collector_and_freezes_what_it_made():
    result = _run(
        "import gc, weakref\n"
        "from common.tensorflow_startup import quiet_startup\n"
        "quiet_startup()\n"
        "full = gc.get_stats()[2]['collections']\n"
        "import tensorflow as tf\n"
        "print(gc.isenabled(), gc.get_stats()[2]['collections'] - full, gc.get_freeze_count() > 200_000)\n"
        "class Cycle: pass\n"
        "made = Cycle(); made.me = made; ref = weakref.ref(made); del made\n"
        "gc.collect()\n"
        "print(ref() is None)  # what the run makes later is collected as ever\n"
    )
    assert result.returncode == 0, result.stderr
    # Enabled again; one full collection (the one after the import, none during it); TensorFlow's
    # objects frozen.
    assert result.stdout == "True 1 True\nTrue\n"
    paused = _run(
        "import gc\n"
        "from common.tensorflow_startup import quiet_startup\n"
        "gc.disable()\n"
        "quiet_startup()\n"
        "import tensorflow\n"
        "print(gc.isenabled())\n"
    )
    assert paused.stdout == "False\n", paused.stderr  # a program that paused it keeps it paused
