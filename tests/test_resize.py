"""A changed worker count on resume. Two Horovod workers (batch B, one micro-batch per update) are
stopped by a preemption notice; the same flags run by one process continue from their checkpoint
with two micro-batches of B per update (the global batch and the peak rate kept), on the same
sequences (the data order does not depend on the worker count), and end with the weights and
optimizer slots of the uninterrupted two-worker run within 1e-6: only the summation order differs.
Dropout is off: its masks are drawn per worker."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tiny_pretraining as tiny
from conftest import BIN, notice_after_step, worker_env
from test_preemption import STEPS, STOP_AFTER, pretraining_command, rank_process

pytestmark = pytest.mark.slow
HOROVODRUN = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
FLAGS = dict(train_batch_size=64, num_accumulation_steps=1)


def _arrays(output_dir, step):
    reader = tf.train.load_checkpoint(os.path.join(output_dir, f"ckpt-{step}"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_two_workers_stopped_and_resumed_on_one_end_as_the_uninterrupted_two_worker_run(masking, tmp_path):
    data = tiny.setup(tmp_path / "data", files=2, per_file=60, dropout=False, masking=masking)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    env = worker_env()
    two = [*HOROVODRUN]
    uninterrupted = subprocess.run(
        [*two, *pretraining_command(data, straight, use_horovod=True, **FLAGS)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]

    status, _, err = notice_after_step(
        [*two, *pretraining_command(data, stopped, use_horovod=True, **FLAGS)],
        stopped,
        env,
        STOP_AFTER,
        lambda p: rank_process(p, 1).send_signal(signal.SIGUSR1),
    )
    assert status != 0 and "Stopped for a preemption notice" in err, err[-3000:]
    checkpoint = tf.train.latest_checkpoint(str(stopped))
    stopped_at = int(checkpoint.rsplit("-", 1)[1])
    assert STOP_AFTER <= stopped_at < STEPS

    # The same flags in one process: the checkpoint decides the accumulation.
    resumed = subprocess.run(
        [sys.executable, *pretraining_command(data, stopped, **FLAGS)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"{checkpoint} was written by 2 worker(s) with a global batch of 128: 1 worker(s) x 64 "
        "sequences x 2 micro-batch(es) per update keep it, and the peak learning rate stays 0.002"
    ) in resumed.stdout, resumed.stdout[-3000:]

    got, want = _arrays(stopped, STEPS), _arrays(straight, STEPS)
    assert set(got) == set(want)
    state = {n for n in want if n.startswith("training_state/")}
    for name in state - {"training_state/num_workers", "training_state/learning_rate_workers"}:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # iterations, position
    assert int(got["training_state/sequences_consumed"]) == STEPS * 128
    differences = {n: float(np.max(np.abs(got[n] - want[n]), initial=0)) for n in set(want) - state}
    worst = sorted(differences.items(), key=lambda kv: -kv[1])[:3]
    assert worst[0][1] <= 1e-6, worst
    print(
        f"2 workers stopped at step {stopped_at}, resumed on 1: largest difference {worst[0][1]:.2e} ({worst[0][0]})"
    )
