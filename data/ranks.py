"""The MPI ranks of one data stage: what they decide together, and the stop when a rank is lost.

prepare_data.py started by `mpirun` or `srun` hands a stage the mpi4py communicator; one process
passes None and every method here returns at once (rank 0 of 1), so a stage has one code path.

A rank that dies must not leave the others waiting for ever. OpenMPI's mpirun ends every rank as
soon as one exits abnormally and says which (`prterun noticed that process rank 1 with PID ... on
node ... exited on signal 9 (Killed).`). What no launcher notices is a rank that stops without
exiting (a frozen host, a stalled file system, a stopped process) or a launcher that leaves the
others running (srun without --kill-on-bad-exit): so every rank beats a heartbeat
(common/heartbeat.py) in the stage's directory (the stages need a file system every rank shares
anyway), and a rank waiting at a barrier names the ranks whose heartbeat went stale (unchanged for
`timeout_s` on the waiting rank's clock, so the hosts' clocks need not agree), then aborts the job.
"""

from __future__ import annotations

import array
import contextlib
import os
import pickle
import socket
import sys
import time

from common.heartbeat import Heartbeat

HEARTBEAT_DIR = ".ranks"  # <stage directory>/.ranks/<stage>/rank-R
DEFAULT_TIMEOUT_S = 120.0
_POLL_S = 0.05


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Ranks:
    """Rank `rank` of `world` in one stage's run; a context manager that beats the heartbeat."""

    def __init__(self, comm, directory: str, stage: str, timeout_s: float = DEFAULT_TIMEOUT_S, log=None):
        self.comm = comm
        self.rank = comm.Get_rank() if comm is not None else 0
        self.world = comm.Get_size() if comm is not None else 1
        self.stage = stage
        self.timeout_s = timeout_s
        self.log = log or _stderr
        self.folder = os.path.join(directory, HEARTBEAT_DIR, stage)
        self.heartbeat = Heartbeat(
            self.folder,
            self.rank,
            self.world,
            interval_s=max(0.2, min(2.0, timeout_s / 5)),
            stale_s=timeout_s,
            name="rank-heartbeat",
        )

    def __enter__(self) -> "Ranks":
        if self.world > 1:
            self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.world > 1:
            self.heartbeat.__exit__(*exc)
            with contextlib.suppress(OSError):
                os.remove(self.heartbeat.path(self.rank))
            for folder in (self.folder, os.path.dirname(self.folder)):  # the last rank out removes them
                with contextlib.suppress(OSError):
                    os.rmdir(folder)

    def _check(self, at: str) -> None:
        """Aborts every rank, naming the lost ones, when a heartbeat has gone stale."""
        lost = self.heartbeat.stale()
        if not lost:
            return
        named = ", ".join(f"rank {beat.rank} (pid {beat.pid} on {beat.host})" for beat in lost)
        self.log(
            f"[{self.stage}] error: {named} has not been heard from for {self.timeout_s:g} s while rank "
            f"{self.rank} waited for it {at} (it died or hangs); every rank stops now: re-run the same "
            f"command to continue (verified outputs are kept)."
        )
        self.comm.Abort(2)

    def _wait(self, request, at: str) -> None:
        """Waits for a non-blocking collective, checking the others' heartbeats once a second: a
        blocking one would wait for ever on a rank that hangs."""
        last_check = time.monotonic()
        while not request.Test():
            time.sleep(_POLL_S)
            if time.monotonic() - last_check >= 1.0:
                self._check(at)
                last_check = time.monotonic()

    def barrier(self, at: str) -> None:
        """Returns once every rank got here; `at` says where, for the sentence naming a lost rank."""
        if self.world > 1:
            self._wait(self.comm.Ibarrier(), at)

    def allgather(self, value, at: str) -> list:
        """[value of rank 0, value of rank 1, ...] on every rank (any picklable value)."""
        if self.world == 1:
            return [value]
        data = pickle.dumps(value)
        sizes = array.array("q", bytes(8 * self.world))
        self._wait(self.comm.Iallgather(array.array("q", [len(data)]), sizes), at)
        offsets = [sum(sizes[:r]) for r in range(self.world)]
        gathered = bytearray(sum(sizes))
        self._wait(self.comm.Iallgatherv(data, [gathered, (list(sizes), offsets), "B"]), at)
        view = memoryview(gathered)
        return [pickle.loads(view[o : o + n]) for o, n in zip(offsets, sizes)]

    def bcast(self, value, at: str):
        """Rank 0's `value` on every rank."""
        return self.allgather(value if self.rank == 0 else None, at)[0]

    def window(self, total: int) -> tuple[int, int]:
        """This rank's share [lo, hi) of `total` units (bytes), contiguous and in rank order."""
        return self.rank * total // self.world, (self.rank + 1) * total // self.world

    def layout(self) -> dict:
        """{"ranks": world, "hosts": how many hosts they run on} for a stage's summary; {} for one
        process."""
        if self.world == 1:
            return {}
        names = self.allgather(socket.gethostname(), "while the ranks named their hosts")
        return {"ranks": self.world, "hosts": len(set(names))}


def gather_errors(ranks: Ranks, error: str | None, at: str) -> None:
    """Every rank's error sentence (None: none) gathered; raises one UserError on every rank naming
    the ranks that failed, so no rank is left at a barrier its failed peer never reaches."""
    from common.errors import UserError

    errors = [(r, e) for r, e in enumerate(ranks.allgather(error, at)) if e]
    if not errors:
        return
    if ranks.world == 1:
        raise UserError(errors[0][1])
    raise UserError("; ".join(f"rank {r}: {e}" for r, e in errors[:3]) + (" ..." if len(errors) > 3 else ""))


@contextlib.contextmanager
def reported(ranks: Ranks, at: str):
    """Runs the block on every rank and then gathers the failures (gather_errors): a UserError's
    sentence, or an unexpected exception's type and words (its traceback printed by its rank)."""
    from common.errors import UserError

    error = None
    try:
        yield
    except UserError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001  (reported by every rank; the traceback is printed here)
        if ranks.world == 1:
            raise
        import traceback

        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
    gather_errors(ranks, error, at)
