"""One Azure ML job at a time in an output folder: `python azureml/output_lock.py FOLDER COMMAND...`.

Every job whose output is a fixed datastore folder starts its command with this line. Re-submitting
the job continues from the checkpoints in that folder (by design); two submissions running at once
would write one set of checkpoints from two runs. So the job's rank 0 holds `FOLDER/azureml-job.lock`
while COMMAND runs, and rewrites it every `interval_s` with `JOB HOST PID COUNT`, the count one
higher each time (in place, as common/heartbeat.py beats: never a rename, which a blob mount does
as a copy and a delete that a reader could see as no lock at all).

The rule, on every rank before COMMAND starts:
- no lock, or a lock naming this job (Azure ML restarting it after a preemption): go on at once;
- a lock naming another job whose contents change: that job is running: refuse in one sentence
  (exit 2) without touching the folder;
- a lock naming another job whose contents stand still for `stale_s` on this host's clock (a job
  killed outright, its node taken): it is dead: rank 0 takes the lock over and the run continues.
After writing the lock, rank 0 waits `settle_s` and reads it again: of two jobs that found no lock
at the same moment, the one whose write landed last keeps it and the other refuses. The other ranks
wait for rank 0 to hold the lock for this job. When COMMAND ends, whatever its status, rank 0
removes the lock if it still names this job, so a preempted job (exit 75) that is submitted again
continues at once. SIGTERM, SIGUSR1 and SIGINT are relayed to COMMAND (launch/runner.py).

The job is AZUREML_RUN_ID (Azure ML sets it in every job; MLFLOW_RUN_ID, also set, is the
fallback), the rank OMPI_COMM_WORLD_RANK (mpirun's, under distribution: mpi; 0 otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_NAME = "azureml-job.lock"
REFUSED_EXIT_STATUS = 2
# A beat every 15 s; a holder silent for 5 minutes is dead; 60 s for a write to reach the other
# nodes' mounts of the same blob folder (their caches) before rank 0 trusts that it holds the lock.
INTERVAL_S, STALE_S, SETTLE_S = 15.0, 300.0, 60.0


class Busy(Exception):
    """Another job holds the folder: the sentence that says which and what to do."""


@dataclasses.dataclass(frozen=True)
class Holder:
    job: str
    host: str
    pid: str
    count: int

    @classmethod
    def parse(cls, text: str) -> "Holder | None":
        fields = text.split()
        if len(fields) < 4 or not fields[3].isdigit():
            return None
        return cls(fields[0], fields[1], fields[2], int(fields[3]))


class OutputLock:
    """Job `job`'s rank `rank` in `folder`: `acquire()` (rank 0 takes the lock, the others wait for
    it) raises Busy while another job runs there; `release()` removes it if it is still ours."""

    def __init__(
        self,
        folder: str,
        job: str,
        rank: int,
        *,
        interval_s: float = INTERVAL_S,
        stale_s: float = STALE_S,
        settle_s: float = SETTLE_S,
        poll_s: float = 1.0,
    ):
        self.path = os.path.join(folder, LOCK_NAME)
        self.folder, self.job, self.rank = folder, job, rank
        self.interval_s, self.stale_s, self.settle_s = interval_s, stale_s, settle_s
        self.poll_s = min(poll_s, interval_s / 2)
        self._count = 0
        self._stop = threading.Event()
        self._thread = None

    # -- the file
    def read(self) -> str:
        try:
            with open(self.path, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return ""

    def _contents(self) -> str:
        return f"{self.job} {socket.gethostname()} {os.getpid()} {self._count}\n"

    def _write(self, flags: int) -> None:
        fd = os.open(self.path, os.O_WRONLY | flags, 0o644)
        try:
            os.write(fd, self._contents().encode())
        finally:
            os.close(fd)

    def _busy(self, text: str) -> Busy:
        holder = Holder.parse(text)
        who = f"job {holder.job} (host {holder.host}, pid {holder.pid})" if holder else "another job"
        return Busy(
            f"{self.folder} is in use by {who}, which is still running: wait for it to end, or give this "
            "job another output path (submit.py --output results=...) to start a separate run."
        )

    # -- taking it
    def acquire(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        if self.rank == 0:
            self._take()
            self._start_beating()
        else:
            self._wait_for_rank_0()

    def _take(self) -> None:
        seen, since = self.read(), time.monotonic()
        while True:
            holder = Holder.parse(seen)
            if not seen:
                try:
                    self._write(os.O_CREAT | os.O_EXCL)
                    break
                except FileExistsError:  # another job created it since we looked: it runs
                    raise self._busy(self.read()) from None
            if holder is not None and holder.job == self.job:
                self._write(os.O_TRUNC)  # this job's own lock, from before Azure ML restarted it
                return
            if time.monotonic() - since >= self.stale_s:
                self._write(os.O_TRUNC)  # silent for stale_s: its job was killed outright
                break
            time.sleep(self.poll_s)
            now = self.read()
            if now != seen:
                if now:
                    raise self._busy(now)
                seen = now  # released: take it at the next turn
        time.sleep(self.settle_s)
        holder = Holder.parse(self.read())
        if holder is None or (holder.job, holder.host, holder.pid) != (
            self.job,
            socket.gethostname(),
            str(os.getpid()),
        ):
            raise self._busy(self.read())

    def _wait_for_rank_0(self) -> None:
        first, start = self.read(), time.monotonic()
        limit = self.stale_s + self.settle_s + 4 * self.interval_s + 60
        while time.monotonic() - start < limit:
            text = self.read()
            holder = Holder.parse(text)
            if holder is not None and holder.job == self.job and holder.count >= 1:
                return
            if holder is not None and holder.job != self.job and text != first:
                raise self._busy(text)
            time.sleep(self.poll_s)
        raise Busy(
            f"rank 0 of job {self.job} did not take {self.path} within {limit:.0f} s: see rank 0's log."
        )

    # -- holding it
    def _start_beating(self) -> None:
        self._beat()  # count 1: the other ranks go on
        self._thread = threading.Thread(target=self._run, daemon=True, name="output-lock")
        self._thread.start()

    def _beat(self) -> None:
        self._count += 1
        with contextlib.suppress(OSError):  # a missed write is only a later beat
            self._write(os.O_CREAT)  # in place: the count only grows, so the file is never cut short

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._beat()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            holder = Holder.parse(self.read())
            if holder is not None and holder.job == self.job:
                with contextlib.suppress(OSError):
                    os.remove(self.path)


def job_id(environ) -> str:
    return environ.get("AZUREML_RUN_ID", "").strip() or environ.get("MLFLOW_RUN_ID", "").strip()


def main(argv=None, environ=None) -> int:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python azureml/output_lock.py",
        description="Run COMMAND while this Azure ML job holds FOLDER's lock (one job at a time).",
    )
    parser.add_argument("folder", help="the job's output folder (${{outputs.results}})")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the launcher line to run")
    parser.add_argument("--job_id", default=job_id(environ), help="default: AZUREML_RUN_ID")
    parser.add_argument("--interval_s", type=float, default=INTERVAL_S)
    parser.add_argument("--stale_s", type=float, default=STALE_S)
    parser.add_argument("--settle_s", type=float, default=SETTLE_S)
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("give the command to run after the folder")
    if not args.job_id or any(c.isspace() for c in args.job_id):
        print(
            "output_lock.py: no job id: run this in an Azure ML job (AZUREML_RUN_ID) or give --job_id.",
            file=sys.stderr,
        )
        return REFUSED_EXIT_STATUS
    rank = int(environ.get("OMPI_COMM_WORLD_RANK", "0") or 0)
    lock = OutputLock(
        args.folder,
        args.job_id,
        rank,
        interval_s=args.interval_s,
        stale_s=args.stale_s,
        settle_s=args.settle_s,
    )
    try:
        lock.acquire()
    except Busy as e:
        print(f"output_lock.py: {e}", file=sys.stderr)
        return REFUSED_EXIT_STATUS
    if rank == 0:
        print(f"output_lock.py: job {args.job_id} holds {lock.path}", flush=True)
    sys.path.insert(0, ROOT)
    from launch.engine import Step
    from launch.runner import Notices, run_step

    try:
        with Notices() as notices:
            return run_step(Step(list(args.command)), notices)
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
