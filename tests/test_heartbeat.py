"""common/heartbeat.py: what a heartbeat file holds, and the one rule for "stale" that both
watchdogs (data/ranks.py, training/watchdog.py) apply: contents unchanged for stale_s on the
observer's own clock. The files' mtimes (stamped by other hosts' clocks) never count.

The module reads time.monotonic(): a fake clock stands in for it, moved by hand."""

import os
import threading
import time

import pytest

from common import heartbeat
from common.heartbeat import Beat, Heartbeat

STALE_S = 10.0


class Clock:
    def __init__(self):
        self.now = 500.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(heartbeat, "time", fake)
    return fake


def observer(folder, world=3):
    return Heartbeat(str(folder), 0, world, interval_s=0.02, stale_s=STALE_S)


def write(folder, rank, text, mtime_offset_s=0.0):
    """Rank `rank`'s file with `text`, stamped `mtime_offset_s` from now (a host's clock ahead or behind)."""
    path = folder / f"rank-{rank}"
    path.write_text(text)
    t = time.time() + mtime_offset_s
    os.utime(path, (t, t))


def test_a_heartbeat_whose_count_moves_is_never_stale_whatever_its_mtime(tmp_path, clock):
    watcher = observer(tmp_path)
    for count in range(5):
        # The writers' clocks are a day ahead and a day behind; this clock jumps far each time.
        write(tmp_path, 1, f"a 1 {count}\n", mtime_offset_s=86400)
        write(tmp_path, 2, f"b 2 {count}\n", mtime_offset_s=-86400)
        assert watcher.stale() == []
        clock.now += 10 * STALE_S


def test_a_heartbeat_that_stands_still_goes_stale_after_stale_s_on_this_clock(tmp_path, clock):
    watcher = observer(tmp_path)
    write(tmp_path, 1, "nodeA 4242 7\n")
    write(tmp_path, 2, "nodeB 99 3\n")
    watcher.look()
    for _ in range(4):  # rank 1 touched again and again (a fresh mtime), its count standing still
        clock.now += STALE_S / 4
        write(tmp_path, 1, "nodeA 4242 7\n")
        write(tmp_path, 2, f"nodeB 99 {int(clock.now)}\n")
        assert watcher.stale() == []  # exactly stale_s: not yet
    clock.now += 0.01
    assert watcher.stale() == [Beat(1, "nodeA", "4242")]
    write(tmp_path, 1, "nodeA 4242 8\n")  # it beats again: no longer stale
    assert watcher.stale() == []


def test_a_missing_heartbeat_goes_stale_from_the_first_look(tmp_path, clock):
    watcher = observer(tmp_path, world=2)
    watcher.look()
    clock.now += STALE_S + 0.01
    assert watcher.stale() == [Beat(1, "an unknown host", "?")]


def test_the_thread_beats_a_count_and_leaving_stops_it(tmp_path):
    beating = Heartbeat(str(tmp_path / "beats"), 1, 2, interval_s=0.02, stale_s=STALE_S, name="test-beat")
    with beating:
        path = tmp_path / "beats" / "rank-1"
        host, pid, count = path.read_text().split()
        assert (pid, count) == (str(os.getpid()), "0")
        (thread,) = [t for t in threading.enumerate() if t.name == "test-beat"]
        assert thread.daemon
        deadline = time.monotonic() + 5
        while int(path.read_text().split()[2]) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert int(path.read_text().split()[2]) >= 3
    assert not thread.is_alive()
    last = path.read_text()
    time.sleep(0.1)
    assert path.read_text() == last  # left in place, no longer beaten
