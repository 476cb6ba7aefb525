"""Exact resume: kill -9 a run between checkpoints (dropout on, accumulation 2, XLA), re-run the
same command, and every variable of the final checkpoint equals an uninterrupted run's."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tiny_pretraining as tiny
from conftest import ROOT, kill_after_step, logged_steps

pytestmark = pytest.mark.slow
STEPS, SAVE_EVERY, KILL_AFTER = 10, 4, 5  # checkpoints at 4, 8, 10; killed after step 5 is logged


def _command(data, output_dir):
    # Batch 128 x 2 micro-batches makes an update long enough (tens of ms on 2 cores) for the
    # kill to land between checkpoints 4 and 8.
    flags = tiny.flags(
        data,
        output_dir,
        num_train_steps=STEPS,
        save_checkpoints_steps=SAVE_EVERY,
        num_accumulation_steps=2,
        train_batch_size=128,
        num_warmup_steps=2,
        keep_checkpoints=2,
        use_xla=True,
        seed=7,
    )
    return [sys.executable, os.path.join(ROOT, "run_pretraining.py"), *flags]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)


def _arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_kill_9_between_checkpoints_then_the_same_command_ends_bit_identical(masking, tmp_path):
    # dropout 0.1 in the config; dynamic records are masked as read, from their place in the order
    data = tiny.setup(tmp_path / "data", files=2, per_file=60, masking=masking)
    straight, killed = tmp_path / "straight", tmp_path / "killed"

    uninterrupted = subprocess.Popen(
        _command(data, straight), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    kill_after_step(_command(data, killed), killed, _env(), KILL_AFTER)
    latest = tf.train.latest_checkpoint(str(killed))
    assert latest is not None and latest.endswith(f"ckpt-{SAVE_EVERY}"), (
        f"the kill did not land between checkpoints {SAVE_EVERY} and {2 * SAVE_EVERY} (latest {latest})"
    )
    assert max(logged_steps(killed / "log.jsonl")) >= KILL_AFTER  # work past the checkpoint was lost

    resumed = subprocess.run(_command(data, killed), env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {latest}" in resumed.stdout
    assert uninterrupted.wait(timeout=300) == 0, uninterrupted.stderr.read()[-3000:]

    want, got = _arrays(str(straight / f"ckpt-{STEPS}")), _arrays(str(killed / f"ckpt-{STEPS}"))
    assert set(got) == set(want)
    assert any(n.endswith("/adam_m") for n in got) and "training_state/optimizer/iterations" in got
    diffs = {
        n: float(np.max(np.abs(got[n].astype(np.float64) - want[n].astype(np.float64)), initial=0.0))
        for n in want
    }
    assert max(diffs.values()) == 0.0, sorted(diffs.items(), key=lambda kv: -kv[1])[:5]
    # Dropout and the input order really were in play: the model moved, and both logs agree
    # step by step (the resumed log holds no duplicate of the lost steps).
    with open(straight / "log.jsonl") as f:
        straight_log = [json.loads(line) for line in f]
    with open(killed / "log.jsonl") as f:
        killed_log = [json.loads(line) for line in f]
    assert [e["step"] for e in killed_log] == list(range(1, STEPS + 1))
    assert [e["loss"] for e in killed_log] == [e["loss"] for e in straight_log]
    # The worker's input position and dropout seeds went along with the checkpoint.
    assert set(os.listdir(killed / "worker_state")) == {
        f"ckpt-{2 * SAVE_EVERY}-rank-0-of-1",
        f"ckpt-{STEPS}-rank-0-of-1",
    }
