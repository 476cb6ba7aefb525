"""A worker whose launcher is gone stops, with a checkpoint, instead of training on unsupervised.

Killed with SIGKILL, OpenMPI's mpirun (and the project's own launcher, above horovodrun or mpirun)
leaves its workers running (horovodrun's helper processes send theirs SIGTERM, a notice): the
workers are re-parented, their stdout and stderr break (a closed pipe, a pseudo-terminal that
answers EIO), and they train on, nobody reading them, until a resumed run started beside them is refused
or they overwrite its checkpoints (or a progress line written to the broken stream kills them
between two checkpoints). `LauncherWatch` looks, once a second in a thread, at this worker's
parent and every process above it up to its launcher; once one of them is gone it reports the
launcher gone: training.preemption.StopRequests takes that as a notice, so every worker stops at
the same update with a checkpoint and the sentence saying why, exit status 75 as for a preemption
(the same command continues). From the moment a watched process is gone, or a write to stdout or
stderr fails because nobody reads them (EPIPE, EIO), both go to
<output_dir>/launcher_gone.rank-N.log, the sentence included: a line cannot fail the checkpoint. The
watch says what it found there at once; under mpirun, OpenMPI may abort the worker a few seconds
after its launcher is gone (the PMIx server went with it), after the checkpoint maybe but before
the stop's own sentence.

The launcher of a worker is the nearest process above it named as one (horovodrun; mpirun,
prterun and their per-host daemons prted/orted; slurmstepd, which starts srun's tasks; sshd, which
starts horovodrun's workers on other hosts), or, higher up, the project's own launcher
(`python -m launch`, launch/runner.py), which names itself in BERT_LAUNCHER for its steps. A
process no launcher started (no launcher's rank variable in its environment) watches nothing: a
run started by hand under nohup outlives its terminal as it should. srun itself is not above its
tasks: a task whose srun was killed is SLURM's to end (with the job step, or the job).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading

from training.distributed import RANK_VARIABLES, launched_world

LAUNCHER_ENV = "BERT_LAUNCHER"  # "HOST:PID" of launch/runner.py, set for the steps it runs
LAUNCHER_NAMES = frozenset(
    {
        "horovodrun",
        "mpirun",
        "mpiexec",
        "prterun",
        "orterun",
        "prted",
        "orted",
        "slurmstepd",
        "sshd",
        "sshd-session",
    }
)
# What a launcher sets in its workers' environment: without one, nothing launched this process.
LAUNCHED_MARKERS = (*RANK_VARIABLES, "SLURM_STEP_ID", LAUNCHER_ENV)
PERIOD_S = 1.0
LOG_NAME = "launcher_gone.rank-{rank}.log"
UNREAD_ERRNOS = (errno.EPIPE, errno.EIO)  # a closed pipe; a pseudo-terminal whose reader is gone


def log_path(output_dir: str, environ=None) -> str:
    """This worker's file for its output once its launcher is gone."""
    _, rank = launched_world(os.environ if environ is None else environ)
    return os.path.join(output_dir, LOG_NAME.format(rank=rank))


def launcher_id() -> str:
    """What launch/runner.py puts in LAUNCHER_ENV for its steps: this host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _project_launcher(environ) -> int | None:
    """The pid of the project's launcher named in LAUNCHER_ENV, when it runs on this host."""
    host, _, pid = environ.get(LAUNCHER_ENV, "").rpartition(":")
    return int(pid) if host == socket.gethostname() and pid.isdigit() else None


def watched_processes(environ=None) -> list:
    """The psutil.Process objects from this process's parent up to its launcher (see the module
    docstring); [] when no launcher started it or none is found above it."""
    import psutil

    environ = os.environ if environ is None else environ
    if not any(name in environ for name in LAUNCHED_MARKERS):
        return []
    try:
        ancestors = psutil.Process().parents()  # the parent first, then up to pid 1
    except psutil.Error:  # a process table this process may not read: nothing to watch
        return []
    names = [_name(process) for process in ancestors]
    nearest = next((i for i, name in enumerate(names) if name in LAUNCHER_NAMES), None)
    own_pid = _project_launcher(environ)
    own = next((i for i, process in enumerate(ancestors) if process.pid == own_pid), None)
    top = max((i for i in (nearest, own) if i is not None), default=None)
    return [] if top is None else ancestors[: top + 1]


def _name(process) -> str:
    try:
        return process.name()
    except Exception:  # gone meanwhile, or not ours to read
        return ""


def _running(process) -> bool:
    """Whether `process` (the same one: psutil compares its start time) still runs; a zombie, dead
    but not yet reaped by its parent, does not."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _SurvivingStream:
    """sys.stdout or sys.stderr while watched: a write or flush that fails because nobody reads
    the stream any more sends both streams to the log file and is done there."""

    def __init__(self, stream, redirect):
        self._stream = stream
        self._redirect = redirect

    def _surviving(self, method, *args):
        try:
            return method(*args)
        except OSError as error:
            if error.errno not in UNREAD_ERRNOS:
                raise
            self._redirect()
            return method(*args)

    def write(self, text):
        return self._surviving(self._stream.write, text)

    def flush(self):
        return self._surviving(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed stream: the stop still happens
        pass


class LauncherWatch:
    """Watches the processes between this worker and its launcher (see the module docstring);
    while entered, sys.stdout and sys.stderr survive their reader's exit.

    log_path: where this process's stdout and stderr go once one of them is gone.
    processes: what to watch (default: watched_processes())."""

    def __init__(self, log_path: str, processes=None, period_s: float = PERIOD_S):
        self.log_path = log_path
        self.processes = watched_processes() if processes is None else list(processes)
        # Named now: a process that is gone has no name to read.
        self.names = [f"{_name(p) or 'a process'}, pid {p.pid}" for p in self.processes]
        self.launcher = self.names[-1] if self.names else None
        self.period_s = period_s
        self._gone = None  # the sentence's part, once a watched process is gone
        self._done = threading.Event()
        self._thread = None
        self._streams = None  # (sys.stdout, sys.stderr) as they were before __enter__
        self._redirected = False
        self._lock = threading.Lock()

    def __enter__(self):
        if self.processes:
            self._streams = (sys.stdout, sys.stderr)
            sys.stdout = _SurvivingStream(sys.stdout, self._redirect_output)
            sys.stderr = _SurvivingStream(sys.stderr, self._redirect_output)
            self._done.clear()
            self._thread = threading.Thread(target=self._watch, name="bert-launcher-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._streams is not None:
            sys.stdout, sys.stderr = self._streams  # writing to the log file too, once redirected
            self._streams = None
        return False

    def gone(self) -> str | None:
        """None while every watched process runs; then what is gone, e.g. "its launcher
        (horovodrun, pid 812) is gone"."""
        return self._gone

    def check(self) -> str | None:
        """Looks once (what the thread does each period); returns gone()."""
        if self._gone is None:
            lost = [i for i, p in enumerate(self.processes) if not _running(p)]
            if lost:
                self._redirect_output()
                if lost[-1] == len(self.processes) - 1:
                    self._gone = f"its launcher ({self.launcher}) is gone"
                else:
                    self._gone = (
                        f"{self.names[lost[0]]}, between it and its launcher ({self.launcher}), is gone"
                    )
                # Said at once: under mpirun, OpenMPI may abort the worker a few seconds after its
                # launcher (its PMIx server) is gone, maybe before the stop's own sentence.
                _say(
                    f"{self._gone[0].upper()}{self._gone[1:]}: this worker stops at the next update, with a checkpoint."
                )
        return self._gone

    def _watch(self) -> None:
        while not self._done.wait(self.period_s):
            if self.check() is not None:
                return

    def _redirect_output(self) -> None:
        """stdout and stderr (file descriptors 1 and 2, whoever writes them) to log_path from now on:
        nobody reads the old ones, and a line written to them would fail (EPIPE, EIO), in the middle
        of the checkpoint that stops the run maybe."""
        with self._lock:
            if self._redirected:
                return
            try:
                os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
                fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError:  # the output directory cannot take it: the lines are lost, not the stop
                fd = os.open(os.devnull, os.O_WRONLY)
            try:
                for target in (1, 2):
                    os.dup2(fd, target)
            finally:
                os.close(fd)
            self._redirected = True
