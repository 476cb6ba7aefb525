"""The fault soak (tools/fault_soak.py): its plan from a seed, its usage sentences, its verdict on two
checkpoints, and one soak of three seeded faults through horovodrun with two workers: a preemption
notice to every worker, a killed worker and a non-finite batch, each restarted or rolled back,
ending bit-identical with the uninterrupted run."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, worker_env
from tools import fault_soak
from training.checkpointing import SEQUENCES_KEY, WORKERS_KEY


def test_every_kind_comes_once_in_each_five_faults_at_its_own_updates():
    plan = fault_soak.schedule(10, seed=4, max_delay_ms=500)
    assert plan == fault_soak.schedule(10, seed=4, max_delay_ms=500)  # the seed decides everything
    assert plan != fault_soak.schedule(10, seed=5, max_delay_ms=500)
    assert sorted(f.kind for f in plan[:5]) == sorted(fault_soak.KINDS)
    assert sorted(f.kind for f in plan[5:]) == sorted(fault_soak.KINDS)
    for i, fault in enumerate(plan):
        assert 10 * i + 5 <= fault.at <= 10 * i + 9 and 0 <= fault.delay_ms <= 500


def test_the_worker_count_comes_from_the_launcher():
    assert fault_soak.workers_of(["horovodrun", "-np", "4", "-H", "a:2,b:2"]) == 4
    assert fault_soak.workers_of(["mpirun", "--hostfile", "hosts", "-n", "8"]) == 8
    assert fault_soak.workers_of([]) == 1
    with pytest.raises(
        fault_soak.UsageError, match=r"--launcher 'mpirun --hostfile h' names no worker count"
    ):
        fault_soak.workers_of(["mpirun", "--hostfile", "h"])


def test_usage_errors_are_one_sentence_and_status_2(tmp_path, capsys):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("")
    cases = [
        (
            ["--work_dir", str(tmp_path / "old")],
            r"--work_dir .*old is not empty: the soak starts from nothing",
        ),
        (["--work_dir", str(tmp_path / "new"), "--faults", "0"], r"--faults must be at least 1, got 0\."),
        (["--work_dir", str(tmp_path / "new"), "--launcher", "nolauncher -np 2"], r"nolauncher is not found"),
    ]
    for argv, sentence in cases:
        assert fault_soak.main(argv) == 2
        assert re.search(sentence, capsys.readouterr().err)
    assert not (tmp_path / "new").exists()


def _checkpoint(folder, step, sequences, weight):
    import tensorflow as tf

    os.makedirs(folder, exist_ok=True)
    names = [WORKERS_KEY, SEQUENCES_KEY, "layer/kernel"]
    tensors = [tf.constant(2, tf.int64), tf.constant(sequences, tf.int64), tf.constant(weight, tf.float32)]
    tf.raw_ops.SaveV2(prefix=os.path.join(folder, f"ckpt-{step}"), tensor_names=names,
                      shape_and_slices=[""] * 3, tensors=tensors)  # fmt: skip
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')
    return str(folder)


def test_the_verdict_names_the_largest_difference_and_what_was_lost(tmp_path):
    weight = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    straight = _checkpoint(tmp_path / "a", 40, 640, weight)
    lines, same = fault_soak._compare(straight, _checkpoint(tmp_path / "b", 40, 640, weight))
    assert same and lines == [
        "bit-identical: all 3 tensors of ckpt-40 equal the uninterrupted run's",
        "nothing lost: both end at update 40 with 640 sequences consumed",
    ]
    lines, same = fault_soak._compare(
        straight, _checkpoint(tmp_path / "c", 40, 640, weight + [[0, 0], [0, 0.5]])
    )
    assert not same and lines[0] == "NOT identical: the largest difference is 0.5, in layer/kernel"
    lines, same = fault_soak._compare(straight, _checkpoint(tmp_path / "d", 36, 576, weight))
    assert not same and lines[1] == (
        "LOST: the soaked run ends at update 36 (576 sequences), the uninterrupted one at 40 (640)"
    )


@pytest.mark.slow
@pytest.mark.process
def test_three_seeded_faults_under_horovodrun_end_bit_identical(tmp_path):
    work = tmp_path / "soak"
    done = subprocess.run(
        [sys.executable, "-m", "tools.fault_soak", "--work_dir", str(work), "--faults", "3", "--seed", "1",
         "--", "--use_xla=false"],
        cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    print(out)
    rows = re.findall(
        r"^\| (\d) \| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| (\d+) \| ([\d.]+) \|$", out, re.M
    )
    assert [(r[0], r[1]) for r in rows] == [("1", "preempt"), ("2", "kill_worker"), ("3", "nonfinite")]
    preempt, killed, nonfinite = rows
    assert preempt[2].startswith("after update ") and "the workers stopped for the notice" in preempt[3]
    assert preempt[4].startswith("resumed from ckpt-") and preempt[5] == "0"  # the notice's checkpoint
    assert float(preempt[6]) > 1 and float(killed[6]) > 1  # a restart: start-up at least
    assert "a worker named the lost one" in killed[3] and killed[4].startswith("resumed from ckpt-")
    assert re.fullmatch(r"ckpt-\d+, sequences \d+-\d+ skipped", nonfinite[4])
    assert (
        "Verdict: bit-identical: all 147 tensors of ckpt-40 equal the uninterrupted run's; nothing lost: "
        "both end at update 40 with 672 sequences consumed; no process left running." in out
    )
    goodput = dict(re.findall(r"^\| (uninterrupted|soaked) \| (\d+) \|", out, re.M))
    assert goodput == {"uninterrupted": "1", "soaked": "3"}
    for run in ("uninterrupted", "soaked"):
        assert sorted(os.listdir(work / "logs" / run))[0] == "launch_1.stderr"
