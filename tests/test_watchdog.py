"""training/watchdog.py in one process: a worker that stops beating is named after the timeout
with the last checkpoint, never before; one worker starts no thread; leaving the context stops
the thread; the sentence when Horovod notices first; which errors mean a peer is gone.

The module reads time.monotonic(): the tests put a fake clock in its place and move it by hand,
so "past the timeout" never depends on how busy the machine is. The thread itself still waits
real periods (timeout_s / 4), so timeouts here are a fraction of a second. os._exit is replaced
by a recorder that stops the watchdog instead of the test process."""

import dataclasses
import os
import sys
import threading
import time

import pytest

from common.errors import UserError
from training import watchdog
from training.watchdog import Watchdog, WorkersLost, is_horovod_shutdown, quiet_workers

TIMEOUT_S = 0.2  # the thread wakes every 0.05 s of real time
SETTLE_S = 0.3  # six of its periods: long enough for it to act on what it sees


@dataclasses.dataclass
class Workers:
    """What Watchdog reads of training.distributed.Distributed."""

    rank: int = 0
    size: int = 2


class Clock:
    """Stands in for the `time` module inside training.watchdog."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(watchdog, "time", fake)
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
            dog._done.set()

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(sys, "argv", ["run_pretraining.py"])
    return calls


def make(tmp_path, exits, rank=0, size=2, checkpoint=lambda: None):
    dog = Watchdog(str(tmp_path), Workers(rank, size), TIMEOUT_S, checkpoint)
    exits.watch(dog)
    return dog


def stamp(tmp_path, rank, seconds_ago):
    """A heartbeat file of `rank` last touched `seconds_ago` (real time)."""
    path = tmp_path / "heartbeat" / f"rank-{rank}"
    path.parent.mkdir(exist_ok=True)
    path.touch()
    t = time.time() - seconds_ago
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


def test_quiet_workers_are_those_stale_against_the_newest_or_missing(tmp_path):
    for rank, ago in ((0, 0), (1, 10), (2, 1)):  # rank 3 has no file
        stamp(tmp_path, rank, ago)
    assert quiet_workers(str(tmp_path), 4, stale_s=5) == [1, 3]
    assert quiet_workers(str(tmp_path), 4, stale_s=20) == [3]
    assert quiet_workers(str(tmp_path), 3, stale_s=0.5) == [1, 2]
    assert quiet_workers(str(tmp_path / "none"), 2, stale_s=5) == []  # nobody beat: none stands out


# ---- the alarm -------------------------------------------------------------------------------


def test_a_worker_that_stops_beating_is_named_after_the_timeout_with_the_last_checkpoint(
    tmp_path, clock, exits, capsys
):
    stamp(tmp_path, 1, seconds_ago=60)  # rank 1 froze a minute ago; rank 2 never beat
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
        heartbeat = tmp_path / "heartbeat" / "rank-1"
        assert heartbeat.is_file()
        old = time.time() - 60
        os.utime(heartbeat, (old, old))
        assert wait_for(lambda: heartbeat.stat().st_mtime > old + 30)  # touched while the main thread idles
        dog.beat(1)
        dog.beat(2)
    assert not thread.is_alive() and watchdog_threads() == []
    os.utime(heartbeat, (old, old))
    clock.now += 1000
    time.sleep(SETTLE_S)
    assert heartbeat.stat().st_mtime == old and exits == []  # no touch, no alarm after leaving
    with pytest.raises(KeyError):  # an error inside the block goes through, the thread still stops
        with make(tmp_path, exits):
            raise KeyError("boom")
    assert watchdog_threads() == []


# ---- when Horovod notices first --------------------------------------------------------------


def test_the_sentence_when_horovod_noticed_first(tmp_path, exits):
    stamp(tmp_path, 0, seconds_ago=0)
    stamp(tmp_path, 1, seconds_ago=0)
    stamp(tmp_path, 2, seconds_ago=0)
    dog = make(tmp_path, exits, rank=1, size=3)
    dog.beat(7)
    error = dog.lost("Horovod shut down")
    assert isinstance(error, WorkersLost) and isinstance(error, UserError)
    assert str(error) == (
        "Worker 1 lost the other workers after step 7 (Horovod shut down; the launcher's output "
        "names the worker that exited); no checkpoint was written yet: re-run the same command to "
        "continue from it."
    )
    # Only others are named: this worker's own stale file is not, worker 2's is.
    stamp(tmp_path, 1, seconds_ago=60)
    stamp(tmp_path, 2, seconds_ago=60)
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
