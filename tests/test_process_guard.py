"""The `process` marker's guard (tests/process_guard.py): every way Python starts a process is
refused while it watches, before the process exists, and recorded from any thread."""

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

from process_guard import GUARD


def _refused(start, what: str, made) -> None:
    with (
        GUARD.watching() as started,
        pytest.raises(pytest.fail.Exception, match="mark it @pytest.mark.process"),
    ):
        start()
    assert len(started) == 1 and what in started[0], started
    assert not made.exists()


def test_subprocess_is_refused_before_it_starts(tmp_path):
    made = tmp_path / "made"
    _refused(lambda: subprocess.run(["touch", str(made)]), f"subprocess(touch {made})", made)
    _refused(lambda: os.popen(f"touch {made}"), f"subprocess(touch {made})", made)
    _refused(lambda: os.system(f"touch {made}"), f"os.system(touch {made})", made)
    _refused(
        lambda: os.posix_spawnp("touch", ["touch", str(made)], os.environ),
        f"os.posix_spawnp(touch {made})",
        made,
    )


def test_fork_is_refused_before_it_forks(tmp_path):
    parent = os.getpid()
    try:
        _refused(os.fork, "os.fork()", tmp_path / "made")
    finally:
        if os.getpid() != parent:  # the guard let a fork through: the child must not go on testing
            os._exit(1)


def test_multiprocessing_spawn_is_refused(tmp_path):
    made = tmp_path / "made"
    process = multiprocessing.get_context("spawn").Process(target=made.touch)
    _refused(process.start, f"fork_exec({sys.executable}", made)


@pytest.mark.process
def test_another_threads_start_is_recorded_not_refused(tmp_path):
    """Only the main thread's start can fail the test where it happens; the hook fails the test
    afterwards for the others, and the start goes ahead."""
    made = tmp_path / "made"
    with GUARD.watching() as started:
        thread = threading.Thread(target=subprocess.run, args=(["touch", str(made)],))
        thread.start()
        thread.join()
    assert started == [f"subprocess(touch {made})"]
    assert made.exists()


def test_nothing_is_refused_unwatched_and_an_inner_watch_is_its_own():
    with GUARD.watching() as outer:
        with GUARD.watching() as inner, pytest.raises(pytest.fail.Exception):
            os.system("true")
        assert len(inner) == 1 and outer == []
    assert GUARD.started is not None  # this test's own watch (it is unmarked), restored
