"""No silent hang when a worker is lost.

A worker that dies closes its sockets: Horovod shuts down on the others within a second, and
the training loop turns its "Horovod has been shut down" (or the broken Gloo connection a
collective reports first) into one sentence. A worker that
stops without closing them (a frozen host, a network partition, a stopped process) leaves the
others waiting in a collective: over MPI for ever, over Gloo until HOROVOD_GLOO_TIMEOUT_SECONDS.
`Watchdog` bounds that wait: every worker beats once per update (after the update boundary where
all of them agreed on the preemption flag, so a beat means every worker got there), and its thread
beats the worker's heartbeat (common/heartbeat.py) in <output_dir>/heartbeat/ every few seconds
whatever the main thread is doing, and watches the others' (a frozen or dead worker's goes stale:
unchanged on this worker's clock, whatever the hosts' clocks say). When no beat came for
`timeout_s`, it names the workers whose heartbeats went stale and the last checkpoint, and ends the
process with LOST_WORKER_EXIT_STATUS, which makes the launcher (horovodrun, mpirun, srun) stop the
rest.
"""

from __future__ import annotations

import os
import sys
import time

from common.errors import UserError
from common.heartbeat import Heartbeat
from training.safeguard import Safeguard

LOST_WORKER_EXIT_STATUS = 2  # as for the UserError it is (common/cli.py)
HEARTBEAT_DIR = "heartbeat"


class WorkersLost(UserError):
    """Training cannot go on: a worker is gone. The sentence names it (when the heartbeats tell)
    and the checkpoint a re-run continues from."""


def _lost_sentence(rank: int, how: str, lost: list, step: int, checkpoint: str | None) -> str:
    who = (
        f"worker{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} stopped beating first"
        if lost
        else "the launcher's output names the worker that exited"
    )
    where = f"the last checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written yet"
    return (
        f"Worker {rank} lost the other workers after step {step} ({how}; {who}); {where}: "
        "re-run the same command to continue from it."
    )


def is_horovod_shutdown(error: BaseException) -> bool:
    """Whether `error` says a peer is gone: Horovod shut down (a worker exited and Horovod noticed
    first), or a collective's Gloo connection broke under it (the peer's socket was reset or
    closed before Horovod's shutdown reached this worker; which one comes first is a race)."""
    text = str(error)
    return (
        "Horovod has been shut down" in text
        or type(error).__name__ == "HorovodInternalError"
        or "gloo/transport" in text
    )


class Watchdog(Safeguard):
    """Ends this worker when the workers stop meeting; see the module docstring. As the loop's
    safeguard it beats before each update (after the preemption agreement) and turns Horovod's
    shutdown into the WorkersLost sentence.

    timeout_s: how long without a beat before giving up (above the longest update and checkpoint
    save); latest_checkpoint: a callable naming the checkpoint a re-run continues from."""

    def __init__(self, output_dir: str, distributed, timeout_s: float, latest_checkpoint):
        self.output_dir = output_dir
        self.rank, self.size = distributed.rank, distributed.size
        self.timeout_s = timeout_s
        self.latest_checkpoint = latest_checkpoint
        self.period = min(2.0, timeout_s / 4)
        self.step = 0
        self._beats = 0  # armed from the second beat: the first update compiles, for minutes maybe
        self._last = time.monotonic()
        # A worker is named once its heartbeat missed about three of its beats.
        self.heartbeat = Heartbeat(
            os.path.join(output_dir, HEARTBEAT_DIR),
            self.rank,
            self.size,
            interval_s=self.period,
            stale_s=3 * self.period,
            each_beat=self._watch,
            name="bert-watchdog",
        )

    def __enter__(self):
        if self.size > 1:
            self.heartbeat.__enter__()
            self.heartbeat.look()  # from now on, a worker that never beats goes stale too
        return self

    def __exit__(self, *exc):
        if self.size > 1:
            self.heartbeat.__exit__(*exc)
        return False

    def start(self, run) -> None:
        self.__enter__()

    def before_update(self, run, step: int) -> bool:
        self.beat(step)  # every worker got here: they just agreed on the preemption flag
        return False

    def error(self, run, error: Exception) -> Exception | None:
        if is_horovod_shutdown(error):
            return self.lost("Horovod shut down: a worker exited or its connection broke")
        return None

    def end(self, run) -> None:
        self.__exit__(None, None, None)

    def beat(self, step: int) -> None:
        """Every worker reached `step` (call after a point all of them pass together)."""
        self.step, self._last = step, time.monotonic()
        self._beats += 1

    def lost(self, how: str) -> WorkersLost:
        """The error for a lost worker, found by Horovod (`how`) or by this watchdog."""
        lost = [beat.rank for beat in self.heartbeat.stale()]
        return WorkersLost(_lost_sentence(self.rank, how, lost, self.step, self.latest_checkpoint()))

    def _watch(self) -> None:
        """After each heartbeat, in its thread: ends the process when no update came for timeout_s."""
        self.heartbeat.look()
        if self._beats >= 2 and time.monotonic() - self._last > self.timeout_s:
            message = self.lost(f"no update for {self.timeout_s:g} s")
            print(
                f"{os.path.basename(sys.argv[0]) or 'worker'}: error: {message}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(LOST_WORKER_EXIT_STATUS)
