"""The `process` marker's guard: a test that starts a process (a subprocess, a fork, a spawn)
without the marker fails, in the whole suite as in its fast tier (`scripts/test.sh --fast`,
which leaves the marked tests out), so a mis-marked test is caught on the next run, never
silently slow.

Python starts a process through six calls: subprocess's (which `subprocess.run`, `os.popen` and
asyncio use), os.fork, os.forkpty, os.posix_spawn(p), os.system, and _posixsubprocess.fork_exec
(multiprocessing's spawn). The guard wraps each once per pytest process; while it watches (the
setup and the call of an unmarked test) a start is recorded, and refused in the main thread
before any process exists. A test's teardown is not watched: a session fixture's server stops
in the teardown of whichever test happens to run last.
"""

import _posixsubprocess
import contextlib
import functools
import os
import platform
import subprocess
import threading

import pytest

MARKER = "process"
HINT = (
    f"mark it @pytest.mark.{MARKER} (or its module `pytestmark = pytest.mark.{MARKER}`): "
    "tests that start processes stay out of `scripts/test.sh --fast`"
)


class ProcessGuard:
    """Records (and in the main thread refuses) every process start while it watches."""

    def __init__(self):
        self.started: list[str] | None = None  # a list while watching

    @contextlib.contextmanager
    def watching(self):
        """Watches for the block; yields the list of the starts it records (nests: an outer watch
        sees none of an inner one's)."""
        outer, self.started = self.started, []
        try:
            yield self.started
        finally:
            self.started = outer

    def notice(self, how: str, what) -> None:
        if self.started is None:
            return
        self.started.append(f"{how}({_describe(what)})")
        if threading.current_thread() is threading.main_thread():
            pytest.fail(f"this test started a process, {self.started[-1]}: {HINT}", pytrace=True)

    def install(self) -> None:
        """Wraps the calls that start processes (once per process)."""
        if getattr(subprocess.Popen._execute_child, "process_guard", False):
            return
        # platform.processor() runs `uname -p` the first time anything asks (transformers and torch
        # do as they import): asked here, once, it is not a start inside whichever test is first.
        platform.processor()
        _wrap(subprocess.Popen, "_execute_child", self, lambda popen, args, *_, **__: ("subprocess", args))
        _wrap(_posixsubprocess, "fork_exec", self, lambda args, *_, **__: ("fork_exec", args))
        _wrap(os, "fork", self, lambda: ("os.fork", ""))
        _wrap(os, "forkpty", self, lambda: ("os.forkpty", ""))
        _wrap(os, "system", self, lambda command: ("os.system", command))
        _wrap(os, "posix_spawn", self, lambda path, argv, *_, **__: ("os.posix_spawn", argv))
        _wrap(os, "posix_spawnp", self, lambda path, argv, *_, **__: ("os.posix_spawnp", argv))


def _wrap(owner, name: str, guard: ProcessGuard, describe) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def guarded(*args, **kwargs):
        guard.notice(*describe(*args, **kwargs))
        return original(*args, **kwargs)

    guarded.process_guard = True
    setattr(owner, name, guarded)


def _describe(what) -> str:
    if isinstance(what, (list, tuple)):
        what = " ".join(os.fsdecode(w) if isinstance(w, bytes) else str(w) for w in what)
    text = str(what)
    return text if len(text) <= 200 else text[:200] + "..."


GUARD = ProcessGuard()


class Plugin:
    """Watches the setup and the call of every test without the marker."""

    @staticmethod
    def _watch(item):
        if item.get_closest_marker(MARKER) is not None:
            return (yield)
        with GUARD.watching() as started:
            result = yield
        if started:  # a start the test itself did not see fail (another thread's)
            pytest.fail(f"this test started a process, {started[0]}: {HINT}", pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._watch(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from self._watch(item))
