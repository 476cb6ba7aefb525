"""Stopping for a preemption: a notice reaches any worker, every worker stops at the same update,
one checkpoint holds everything an exact resume needs, and the process exits with
common.errors.PREEMPTED_EXIT_STATUS (75) so a scheduler can requeue the same command.

How a notice arrives:
- SIGTERM (Kubernetes, SLURM at the time limit, cloud evictions) or SIGUSR1 (SLURM's
  `--signal=USR1@120` warning) to the worker process;
- the file STOP in the output directory (`touch <output_dir>/STOP`): the launchers write it when
  they themselves get the signal, rather than signalling horovodrun or mpirun, which would kill
  the workers a few seconds later whatever they were doing;
- the worker's launcher gone (training/launcher_watch.py: horovodrun or mpirun killed with
  SIGKILL leave their workers running, unsupervised): the same stop, its sentence saying so.

Agreement: the loop asks `stop_now()` before each update (StopRequests is the loop's safeguard
for it); with several workers the local notices
are summed across workers (a one-number allreduce on the host), so all of them see a notice that
reached any one at the same update boundary, and none queues an update the others will not.
"""

from __future__ import annotations

import os
import signal
import time

from common.errors import Preempted
from training.safeguard import Safeguard

STOP_FILE_NAME = "STOP"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def request_stop(output_dir: str) -> str:
    """Asks the run writing `output_dir` to stop at its next update, with a checkpoint: writes its
    STOP file (the notice every worker of it sees), creating the directory if the run has not yet.
    What a supervisor that is not the run's signal target calls (the tuner for its trial; the
    shell launchers write the same file). Returns the file's path."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, STOP_FILE_NAME)
    with open(path, "w"):
        pass
    return path


def _process_start_time() -> float:
    """When this process started, in seconds since the epoch, to a clock tick (10 ms) on Linux: its
    start in ticks since boot (/proc/self/stat) set against the boot clock now. psutil's
    create_time adds that start to the boot time /proc/stat gives in whole seconds, so it can be up
    to a second early (0.95-1.04 s on the 2-core test machines), and a STOP file written in the
    second before the process started, by the run it continues, would count as a notice for it."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        running = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - running
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return psutil.Process().create_time()
    except (ImportError, OSError):
        return _IMPORTED


_IMPORTED = time.time()


class StopRequests(Safeguard):
    """A worker's preemption notices, and the agreement on them across workers; as the loop's
    safeguard, the stop at the update every worker agreed on, with a checkpoint of the step reached.

    output_dir: where the STOP file is looked for (every worker sees the same directory).
    distributed: training.distributed.Distributed (None: one worker).
    launcher: a training.launcher_watch.LauncherWatch, entered by its owner (None: the launcher is
    not watched)."""

    def __init__(self, output_dir: str, distributed=None, launcher=None):
        self.stop_file = os.path.join(output_dir, STOP_FILE_NAME)
        self.distributed = distributed
        self.launcher = launcher
        self.received = None  # the first stop signal's name, once one arrived
        self._previous = {}
        self._entered_by_loop = False

    def __enter__(self):
        """Installs the signal handlers (main thread only, as Python requires)."""
        if self._previous:
            return self  # already in force (its owner entered it before the loop started)
        for number in STOP_SIGNALS:
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()
        return False

    def _on_signal(self, number, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(number).name

    def clear_stale_file(self) -> None:
        """Removes a STOP file that an earlier, preempted run left (call on one worker, before the
        workers first agree on anything): its notice has been honoured. One written since this
        process started is a notice for this run and stays."""
        try:
            if os.path.getmtime(self.stop_file) < _process_start_time():
                os.remove(self.stop_file)
        except FileNotFoundError:
            pass

    def local(self) -> str | None:
        """This worker's notice: the signal's name, "STOP file", what of its launcher is gone
        (LauncherWatch.gone), or None."""
        if self.received:
            return self.received
        if self.launcher is not None and self.launcher.gone():
            return self.launcher.gone()
        return "STOP file" if os.path.exists(self.stop_file) else None

    def launcher_gone(self) -> str | None:
        """What of this worker's launcher is gone, when that is its own notice (else None)."""
        gone = self.launcher.gone() if self.launcher is not None else None
        return gone if gone is not None and self.local() == gone else None

    def stop_now(self) -> bool:
        """Whether any worker has a notice. Every worker calls it at the same update boundary."""
        mine = self.local() is not None
        if self.distributed is None or self.distributed.size == 1:
            return mine
        return self.distributed.any(mine)

    def reason(self) -> str:
        """What this worker saw, for the message (another worker's notice when it saw none)."""
        return self.local() or "another worker's notice"

    def start(self, run) -> None:
        self._entered_by_loop = not self._previous
        self.__enter__()

    def before_update(self, run, step: int) -> bool:
        return self.stop_now()

    def stopping(self, run) -> Preempted:
        """Saves the step reached (unless the latest checkpoint already holds it) and says so."""
        checkpointer, current = run.checkpointer, run.current
        latest = checkpointer.latest()
        if current > run.start and not (latest and latest.endswith(f"ckpt-{current}")):
            checkpointer.save(current)
            latest = checkpointer.latest()
        where = f"{latest} holds step {current}" if latest else "no checkpoint was written (no update yet)"
        gone = self.launcher_gone()
        why = f"because {gone}," if gone else f"for a preemption notice ({self.reason()})"
        return Preempted(
            f"Stopped {why} at step {current}: {where}; re-running the same command continues from there."
        )

    def end(self, run) -> None:
        if self._entered_by_loop:
            self.__exit__(None, None, None)
