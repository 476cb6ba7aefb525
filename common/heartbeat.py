"""One heartbeat file per process in a shared folder, and the one rule for when one has stopped.

Both watchdogs that name a lost process use it: the MPI ranks of a data stage (data/ranks.py)
and the Horovod workers of a training run (training/watchdog.py). Each process's thread rewrites
`<folder>/rank-R` every `interval_s` with `HOST PID COUNT`, the count one higher at every beat, so
the contents change for as long as the process is scheduled, whatever its main thread is doing.

The rule: a heartbeat is stale when its contents have not changed for `stale_s`, measured on the
observer's own monotonic clock from when it saw them change. A missing file (a process that never
beat) reads as empty contents and goes stale the same way. Never an mtime: the time a file
carries is stamped by the writer's host (or the file server), and hosts' clocks differ (by
seconds under NTP, by minutes without it), so comparing another host's stamp with this host's
clock, or two hosts' stamps with each other, names a healthy process lost or misses a dead one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time


@dataclasses.dataclass(frozen=True)
class Beat:
    """What a stale heartbeat says of its process, for the sentence that names it."""

    rank: int
    host: str
    pid: str

    @classmethod
    def parse(cls, rank: int, text: str) -> "Beat":
        host, pid = (text.split()[:2] + ["", ""])[:2]
        return cls(rank, host or "an unknown host", pid or "?")


class Heartbeat:
    """Rank `rank` of `world` beating in `folder`, and what it has seen of the others' beats.

    A context manager: entering writes the first beat and starts a daemon thread that beats every
    `interval_s` (then calls `each_beat()`, if given, in that thread); leaving stops the thread and
    leaves the file as it is. `look()` reads the others' files; `stale()` names those whose contents
    stood still for more than `stale_s` (see the module docstring)."""

    def __init__(
        self,
        folder: str,
        rank: int,
        world: int,
        *,
        interval_s: float,
        stale_s: float,
        each_beat=None,
        name: str = "heartbeat",
    ):
        self.folder = folder
        self.rank, self.world = rank, world
        self.interval_s, self.stale_s = interval_s, stale_s
        self.each_beat = each_beat
        self.name = name
        self._count = 0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()  # look() runs in the beating thread and in the caller's
        self._seen: dict[int, tuple[str, float]] = {}  # rank -> (contents, when they last changed here)

    def path(self, rank: int) -> str:
        return os.path.join(self.folder, f"rank-{rank}")

    def __enter__(self) -> "Heartbeat":
        os.makedirs(self.folder, exist_ok=True)
        self.beat()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def beat(self) -> None:
        """Writes the next count (a missed write is only a later beat)."""
        text = f"{socket.gethostname()} {os.getpid()} {self._count}\n".encode()
        # Emptied at the first beat only, then overwritten in place: the count only grows, so a
        # reader never finds the file empty or cut short between two beats.
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if self._count == 0 else 0)
        self._count += 1
        with contextlib.suppress(OSError):
            fd = os.open(self.path(self.rank), flags, 0o644)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()
            if self.each_beat is not None:
                self.each_beat()

    def _read(self, rank: int) -> str:
        try:
            with open(self.path(rank)) as f:
                return f.read()
        except OSError:
            return ""

    def look(self) -> None:
        """Reads every other rank's heartbeat, noting on this clock when its contents changed."""
        now = time.monotonic()
        with self._lock:
            for rank in range(self.world):
                if rank == self.rank:
                    continue
                text = self._read(rank)
                seen = self._seen.get(rank)
                if seen is None or seen[0] != text:
                    self._seen[rank] = (text, now)

    def stale(self) -> list[Beat]:
        """The other ranks whose heartbeat has not changed for more than stale_s since this one
        first looked, in rank order (after one more look)."""
        self.look()
        now = time.monotonic()
        with self._lock:
            return [
                Beat.parse(rank, text)
                for rank, (text, changed) in sorted(self._seen.items())
                if now - changed > self.stale_s
            ]
