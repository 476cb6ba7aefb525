"""LogFollower: a growing log.jsonl read piece by piece, torn lines and rewrites included."""

import json
import os

from training.metrics_log import LogFollower, read_log


def _line(step):
    return json.dumps({"step": step, "loss": 1.0 / step}) + "\n"


def test_the_follower_returns_each_completed_line_once(tmp_path):
    path = str(tmp_path / "log.jsonl")
    follower = LogFollower(path)
    assert follower.new_entries() == []  # not written yet
    with open(path, "w", encoding="utf-8") as f:
        f.write(_line(1) + _line(2) + _line(3)[:7])  # the third line is still being written
    assert [e["step"] for e in follower.new_entries()] == [1, 2]
    assert follower.new_entries() == []
    with open(path, "a", encoding="utf-8") as f:
        f.write(_line(3)[7:] + _line(4))
    assert [e["step"] for e in follower.new_entries()] == [3, 4]
    assert [e["step"] for e in read_log(path)] == [1, 2, 3, 4]


def test_a_rewritten_log_is_read_again_from_its_start(tmp_path):
    """A resumed run rewrites log.jsonl without the lines past its checkpoint (a new file in
    its place): the follower starts over on it, also when it is as long as before."""
    path = str(tmp_path / "log.jsonl")
    follower = LogFollower(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_line(1) + _line(2) + _line(3))
    assert len(follower.new_entries()) == 3
    replacement = str(tmp_path / "log.jsonl.tmp")
    with open(replacement, "w", encoding="utf-8") as f:
        f.write(_line(1) + _line(2) + _line(5))
    os.replace(replacement, path)
    assert [e["step"] for e in follower.new_entries()] == [1, 2, 5]
    with open(path, "w", encoding="utf-8") as f:  # truncated in place
        f.write(_line(1))
    assert [e["step"] for e in follower.new_entries()] == [1]
