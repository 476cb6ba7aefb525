"""training/launcher_watch.py: which processes a worker watches, and what it does once one is gone.

The worker here is a plain Python child (no TensorFlow); its "launcher" is its parent, named in
BERT_LAUNCHER as launch/runner.py names itself, and reading the child's stdout through a pipe.
Killing the parent with SIGKILL leaves the child re-parented, its stdout a closed pipe. The real
launchers (horovodrun, mpirun) killed under a training run: tests/test_lost_worker.py."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import ROOT
from training.launcher_watch import LAUNCHER_ENV, LauncherWatch, log_path, watched_processes

pytestmark = pytest.mark.process

# The parent: names itself the launcher, starts the worker with its stdout a pipe to itself, reads
# one line (the worker is watching), then waits to be killed.
PARENT = textwrap.dedent(
    """
    import os, socket, subprocess, sys, time
    env = dict(os.environ, BERT_LAUNCHER=f"{socket.gethostname()}:{os.getpid()}")
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env,
                             stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(600)
    """
)
# The worker: watches, says so, then prints a line every 50 ms until the watch reports; the prints
# after the parent died must not fail. Its last words go to a file named by the test.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {root!r})
    from training.launcher_watch import LauncherWatch
    with LauncherWatch(sys.argv[1], period_s=0.2) as watch:
        print("watching", [p.pid for p in watch.processes], flush=True)
        deadline = time.monotonic() + 60
        while watch.gone() is None and time.monotonic() < deadline:
            print("still here", flush=True)
            time.sleep(0.05)
        print("stopped:", watch.gone(), flush=True)
    """
)


def test_a_process_no_launcher_started_watches_nothing():
    environ = {k: v for k, v in os.environ.items() if k not in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")}
    environ = {
        k: v for k, v in environ.items() if k not in ("PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID", LAUNCHER_ENV)
    }
    assert watched_processes(environ) == []
    watch = LauncherWatch("unused.log", processes=[])
    with watch:
        assert sys.stdout.__class__.__name__ != "_SurvivingStream"  # nothing wrapped
    assert watch.gone() is None


def test_the_launcher_named_in_the_environment_is_watched_up_to_it():
    # This test process as the launcher of a child that lists what it would watch.
    import socket

    env = dict(os.environ, **{LAUNCHER_ENV: f"{socket.gethostname()}:{os.getpid()}"})
    code = f"import sys; sys.path.insert(0, {ROOT!r}); from training.launcher_watch import watched_processes; print([p.pid for p in watched_processes()])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"[{os.getpid()}]"
    # Named on another host: not this host's process, so no launcher is found above the child.
    env[LAUNCHER_ENV] = f"elsewhere:{os.getpid()}"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_rank_names_the_log_file():
    assert log_path("out", {"HOROVOD_RANK": "3"}) == os.path.join("out", "launcher_gone.rank-3.log")
    assert log_path("out", {"OMPI_COMM_WORLD_RANK": "1"}) == os.path.join("out", "launcher_gone.rank-1.log")
    assert log_path("out", {}) == os.path.join("out", "launcher_gone.rank-0.log")


def test_a_launcher_killed_outright_is_found_gone_and_the_output_goes_on_in_the_log(tmp_path):
    log = tmp_path / "launcher_gone.rank-0.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, WORKER.format(root=ROOT), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child_pid, said = parent.stdout.readline().split(" ", 1)
        assert said.startswith("watching [") and str(parent.pid) in said, said
        child = psutil.Process(int(child_pid))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        killed = time.monotonic()
        child.wait(timeout=30)  # it ended by itself: no print to the closed pipe failed it
        seconds = time.monotonic() - killed
    finally:
        parent.kill()
    text = log.read_text()
    assert re.search(rf"stopped: its launcher \(python[\d.]*, pid {parent.pid}\) is gone", text), text
    assert "still here" in text.split("stopped:")[0]  # lines after the parent died, kept
    assert seconds < 5, f"{seconds:.1f} s"
