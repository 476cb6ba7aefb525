"""training/watchdog.py in one process: a worker that stops beating is named after the timeout
with the last checkpoint, never before; one worker starts no thread; leaving the context stops
the thread; the sentence when Horovod notices first; which errors mean a peer is gone; a
heartbeat is judged by its contents on this worker's clock, never by the time its file carries.

The watchdog and common/heartbeat.py read time.monotonic(): the tests put a fake clock in its
place and move it by hand, so "past the timeout" never depends on how busy the machine is. The thread itself still waits
real periods (timeout_s / 4), so timeouts here are a fraction of a second. os._exit is replaced
by a recorder that stops the watchdog instead of the test process."""

import dataclasses
import os
import sys
import threading
import time

import pytest

from common import heartbeat
from common.errors import UserError
from training import watchdog
from training.watchdog import Watchdog, WorkersLost, is_horovod_shutdown

TIMEOUT_S = 0.2  # the thread wakes every 0.05 s of real time
SETTLE_S = 0.3  # six of its periods: long enough for it to act on what it sees


@dataclasses.dataclass
class Workers:
    """What Watchdog reads of training.distributed.Distributed."""

    rank: int = 0
    size: int = 2


class Clock:
    """Stands in for the `time` module inside training.watchdog and common.heartbeat."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(watchdog, "time", fake)
    monkeypatch.setattr(heartbeat, "time", fake)
    return fake


class Exits(list):
    """The statuses os._exit was called with; `watch(dog)` lets a call stop that dog's thread."""

    def __init__(self):
        super().__init__()
        self.dogs = []

    def watch(self, dog):
        self.dogs.append(dog)


@pytest.fixture
def exits(monkeypatch):
    """os._exit recorded: each call also stops the watched watchdogs' threads, as exiting would."""
    calls = Exits()

    def fake_exit(status):
        calls.append(status)
        for dog in calls.dogs:
            dog.heartbeat._stop.set()

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(sys, "argv", ["run_pretraining.py"])
    return calls


def make(tmp_path, exits, rank=0, size=2, checkpoint=lambda: None):
    dog = Watchdog(str(tmp_path), Workers(rank, size), TIMEOUT_S, checkpoint)
    exits.watch(dog)
    return dog


def write_beat(tmp_path, rank, text, mtime_offset_s=0.0):
    """Rank `rank`'s heartbeat file holding `text`, its mtime `mtime_offset_s` from now (a writer
    whose clock runs ahead or behind)."""
    path = tmp_path / "heartbeat" / f"rank-{rank}"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    t = time.time() + mtime_offset_s
    os.utime(path, (t, t))
    return path


def wait_for(condition, within_s=5.0):
    deadline = time.monotonic() + within_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def watchdog_threads():
    return [t for t in threading.enumerate() if t.name == "bert-watchdog"]


# ---- which workers went quiet ----------------------------------------------------------------


def test_quiet_workers_are_those_whose_heartbeat_stood_still_on_this_clock(tmp_path, clock, exits):
    # Rank 1's file was written a second ago by a host whose clock runs an hour ahead, rank 2's
    # by one an hour behind, rank 3 never beat. Only what changes in them counts.
    write_beat(tmp_path, 1, "node1 11 5\n", mtime_offset_s=3600 - 1)
    write_beat(tmp_path, 2, "node2 22 5\n", mtime_offset_s=-3600)
    dog = make(tmp_path, exits, rank=0, size=4)
    dog.heartbeat.look()
    assert "stopped beating first" not in str(dog.lost("Horovod shut down"))  # nobody stale yet
    clock.now += 1.0
    write_beat(tmp_path, 2, "node2 22 6\n", mtime_offset_s=-3600)  # rank 2 beats; rank 1 does not
    write_beat(tmp_path, 1, "node1 11 5\n", mtime_offset_s=3600)  # touched, the same count
    assert "(Horovod shut down; workers 1, 3 stopped beating first)" in str(dog.lost("Horovod shut down"))
    assert exits == []


# ---- the alarm -------------------------------------------------------------------------------


def test_a_worker_that_stops_beating_is_named_after_the_timeout_with_the_last_checkpoint(
    tmp_path, clock, exits, capsys
):
    write_beat(tmp_path, 1, "node1 11 7\n")  # rank 1 froze (its file is fresh); rank 2 never beat
    checkpoint = ["/runs/a/ckpt-2"]
    dog = make(tmp_path, exits, rank=0, size=3, checkpoint=lambda: checkpoint[0])
    with dog:
        dog.beat(1)
        dog.beat(2)
        checkpoint[0] = "/runs/a/ckpt-4"  # asked when the alarm goes, not before
        clock.now += TIMEOUT_S - 0.01
        time.sleep(SETTLE_S)
        assert exits == [], "an alarm before the timeout"
        clock.now += 0.02
        assert wait_for(lambda: exits), "no alarm after the timeout"
    assert exits == [2]  # LOST_WORKER_EXIT_STATUS: the launcher then stops the others
    assert capsys.readouterr().err == (
        "run_pretraining.py: error: Worker 0 lost the other workers after step 2 (no update for "
        "0.2 s; workers 1, 2 stopped beating first); the last checkpoint is /runs/a/ckpt-4: re-run "
        "the same command to continue from it.\n"
    )


def test_no_alarm_before_the_second_beat_nor_while_beats_keep_coming(tmp_path, clock, exits):
    dog = make(tmp_path, exits)
    with dog:
        dog.beat(1)  # the first update compiles, for minutes maybe: not armed yet
        clock.now += 1000
        time.sleep(SETTLE_S)
        assert exits == []
        for step in range(2, 12):  # 10 updates of 0.15 s: 1.5 s in all, each within the timeout
            clock.now += 0.15
            dog.beat(step)
            time.sleep(0.03)
        assert exits == []
        clock.now += TIMEOUT_S + 0.01
        assert wait_for(lambda: exits)
    assert exits == [2] and dog.step == 11


def test_one_worker_starts_no_thread_and_writes_no_heartbeat(tmp_path, clock, exits):
    dog = make(tmp_path, exits, size=1)
    before = len(watchdog_threads())
    with dog:
        assert len(watchdog_threads()) == before
        dog.beat(1)
        dog.beat(2)
        clock.now += 1000
        time.sleep(SETTLE_S)
    assert exits == [] and not (tmp_path / "heartbeat").exists()


def test_entering_starts_the_heartbeat_and_leaving_stops_it(tmp_path, clock, exits):
    dog = make(tmp_path, exits, rank=1, size=2)
    with dog as entered:
        assert entered is dog
        (thread,) = watchdog_threads()
        assert thread.daemon  # never keeps a finished process alive
        beats = tmp_path / "heartbeat" / "rank-1"
        first = beats.read_text()
        assert first.split()[1:] == [str(os.getpid()), "0"]
        assert wait_for(lambda: beats.read_text() != first)  # beaten while the main thread idles
        dog.beat(1)
        dog.beat(2)
    assert not thread.is_alive() and watchdog_threads() == []
    last = beats.read_text()
    clock.now += 1000
    time.sleep(SETTLE_S)
    assert beats.read_text() == last and exits == []  # no beat, no alarm after leaving
    with pytest.raises(KeyError):  # an error inside the block goes through, the thread still stops
        with make(tmp_path, exits):
            raise KeyError("boom")
    assert watchdog_threads() == []


# ---- when Horovod notices first --------------------------------------------------------------


def test_the_sentence_when_horovod_noticed_first(tmp_path, clock, exits):
    for rank in range(3):
        write_beat(tmp_path, rank, f"node{rank} {rank} 1\n")
    dog = make(tmp_path, exits, rank=1, size=3)
    dog.beat(7)
    error = dog.lost("Horovod shut down")
    assert isinstance(error, WorkersLost) and isinstance(error, UserError)
    assert str(error) == (
        "Worker 1 lost the other workers after step 7 (Horovod shut down; the launcher's output "
        "names the worker that exited); no checkpoint was written yet: re-run the same command to "
        "continue from it."
    )
    # Only others are named: this worker's own standing file is not, worker 2's is.
    clock.now += 60
    write_beat(tmp_path, 0, "node0 0 2\n")
    assert "(Horovod shut down; worker 2 stopped beating first)" in str(dog.lost("Horovod shut down"))
    assert exits == []


def test_the_thread_wakes_often_enough_for_the_timeout():
    assert Watchdog("/x", Workers(), 300, lambda: None).period == 2.0
    assert Watchdog("/x", Workers(), 4, lambda: None).period == 1.0


class HorovodInternalError(RuntimeError):
    """Named as Horovod's own."""


@pytest.mark.parametrize(
    "error, gone",
    [
        (
            RuntimeError("Horovod has been shut down. This was caused by an exception on one of the ranks"),
            True,
        ),
        (HorovodInternalError("ncclCommInitRank failed"), True),
        (
            RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer"),
            True,
        ),
        (ValueError("Incompatible shapes: [2,4] vs. [2,5]"), False),
        (RuntimeError("Horovod is shutting"), False),
    ],
)
def test_which_errors_say_a_peer_is_gone(error, gone):
    assert is_horovod_shutdown(error) is gone
