"""The per-test CPU log (BERT_TEST_CPU_LOG, tests/conftest.py) and its summary (tests/cpu_log.py):
CPU spent in the test process and in a child it waited for land on the test that spent them."""

import json
import os
import subprocess
import sys
import time
import types

import pytest

import conftest
import cpu_log

pytestmark = pytest.mark.process

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def _logged_test(nodeid: str, own_s: float, child_s: float) -> None:
    protocol = conftest.pytest_runtest_protocol(types.SimpleNamespace(nodeid=nodeid), None)
    next(protocol)  # the hook's half before the test
    exec(BURN.format(s=own_s), {})
    subprocess.run([sys.executable, "-c", BURN.format(s=child_s)], check=True)
    with pytest.raises(StopIteration):
        protocol.send(None)  # and after it


def test_each_test_logs_its_own_and_its_childrens_cpu_and_the_summary_sums_them(
    tmp_path, monkeypatch, capsys
):
    log = tmp_path / "cpu.jsonl"
    monkeypatch.setattr(conftest, "CPU_LOG", str(log))
    started, began = time.monotonic(), time.time()
    _logged_test("tests/test_a.py::test_one", 0.3, 0.1)
    _logged_test("tests/test_a.py::test_two", 0.0, 0.6)
    _logged_test("tests/test_b.py::test_three", 0.1, 0.0)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["test"] for e in entries] == [
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two",
        "tests/test_b.py::test_three",
    ]
    one, two, three = entries
    assert one["self"] >= 0.3 and 0.1 <= one["children"] < 0.3
    assert two["self"] < 0.2 and two["children"] >= 0.6
    assert three["self"] >= 0.1 and three["children"] < 0.1
    assert sum(e["wall"] for e in entries) <= time.monotonic() - started + 0.03  # each rounded to 0.01
    # Which process ran each test, and when it began: the run's schedule can be drawn from them.
    assert {e["worker"] for e in entries} == {os.environ.get("PYTEST_XDIST_WORKER", "main")}
    starts = [e["began"] for e in entries]
    assert began - 0.01 <= starts[0] <= starts[1] <= starts[2] <= time.time()
    assert starts[1] - starts[0] >= one["wall"] - 0.02

    cpu_log.main([str(log), "--top", "1"])
    out = capsys.readouterr().out
    total = sum(e["self"] + e["children"] for e in entries)
    assert out.startswith(f"3 tests, {total:.0f} CPU s")
    by_file, by_test = out.split("\n\n")[1:]
    a = sum(e["self"] + e["children"] for e in entries[:2])
    assert by_file.splitlines()[2].split() == [
        f"{a:.1f}",
        f"{one['wall'] + two['wall']:.1f}",
        "2",
        "tests/test_a.py",
    ]
    assert len(by_test.splitlines()) == 3 and by_test.splitlines()[2].endswith("tests/test_a.py::test_two")


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "CPU_LOG", None)
    monkeypatch.chdir(tmp_path)
    _logged_test("tests/test_a.py::test_one", 0.0, 0.0)
    assert list(tmp_path.iterdir()) == []
