"""A preemption notice to one of two Horovod workers, and a changed worker count on resume.

Two workers (batch B, one micro-batch per update) are stopped by SIGUSR1 to rank 1 alone: both stop
at the same update with a checkpoint and both workers' states. From copies of that stopped run:
- the same command on two workers ends with exactly the weights of the uninterrupted run;
- the same flags run by one process continue from the checkpoint with two micro-batches of B per
  update (the global batch and the peak rate kept), on the same sequences (the data order does not
  depend on the worker count), and end with the weights and optimizer slots of the uninterrupted
  two-worker run within 1e-6: only the summation order differs.
The uninterrupted and the stopped runs are made once per masking and shared by both. Dropout is
off: its masks are drawn per worker."""

import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import BIN, notice_after_step, worker_env
from test_preemption import STEPS, STOP_AFTER, _arrays, _assert_identical, pretraining_command, rank_process
from tools import tiny_pretraining as tiny

pytestmark = [pytest.mark.slow, pytest.mark.process]
HOROVODRUN = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
# TensorFlow graphs: a resize and a notice to one worker are what is tested. Two workers' XLA programs
# around Horovod's sum are tested in tests/test_mpirun.py, XLA's exact resume in test_preemption.py;
# here each worker compiled every shape at the same moment, cold, for about half of this file's CPU.
FLAGS = dict(train_batch_size=64, num_accumulation_steps=1, use_xla=False)


@pytest.fixture(scope="module", params=["static", "dynamic"])
def two_worker_runs(request, tmp_path_factory):
    """(data, the uninterrupted two-worker run, the two-worker run stopped by SIGUSR1 to rank 1,
    its exit status, its stderr, seconds from the notice to its exit) for one masking."""
    root = tmp_path_factory.mktemp(f"two_workers_{request.param}")
    data = tiny.setup(root / "data", files=2, per_file=60, dropout=False, masking=request.param)
    straight, stopped = root / "straight", root / "stopped"
    env = worker_env()
    uninterrupted = subprocess.run(
        [*HOROVODRUN, *pretraining_command(data, straight, use_horovod=True, **FLAGS)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    status, seconds, err = notice_after_step(
        [*HOROVODRUN, *pretraining_command(data, stopped, use_horovod=True, **FLAGS)],
        stopped,
        env,
        STOP_AFTER,
        lambda p: rank_process(p, 1).send_signal(signal.SIGUSR1),  # rank 1 alone gets the notice
    )
    return data, straight, stopped, status, err, seconds


@pytest.mark.parametrize("two_worker_runs", ["static"], indirect=True)
def test_sigusr1_to_one_of_two_workers_stops_both_at_the_same_update(two_worker_runs, tmp_path):
    data, straight, stopped, status, err, seconds = two_worker_runs
    assert status != 0, err[-3000:]  # horovodrun reports the workers' 75 as a failure of its own
    lines = re.findall(r"Stopped for a preemption notice \((.+?)\) at step (\d+)", err)
    assert sorted(reason for reason, _ in lines) == ["SIGUSR1", "another worker's notice"], err[-3000:]
    (step,) = {int(s) for _, s in lines}  # both workers stopped at the same update
    assert tf.train.latest_checkpoint(str(stopped)).endswith(f"ckpt-{step}")
    assert {f"ckpt-{step}-rank-0-of-2", f"ckpt-{step}-rank-1-of-2"} <= set(
        os.listdir(stopped / "worker_state")
    )
    print(f"two workers: SIGUSR1 to rank 1, both out {seconds:.2f} s later (step {step})")

    resumed_dir = tmp_path / "resumed"
    shutil.copytree(stopped, resumed_dir)
    resumed = subprocess.run(
        [*HOROVODRUN, *pretraining_command(data, resumed_dir, use_horovod=True, **FLAGS)],
        env=worker_env(),
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_identical(resumed_dir, straight, STEPS)


def test_two_workers_stopped_and_resumed_on_one_end_as_the_uninterrupted_two_worker_run(
    two_worker_runs, tmp_path
):
    data, straight, stopped, status, err, _ = two_worker_runs
    assert status != 0 and "Stopped for a preemption notice" in err, err[-3000:]
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(stopped, resumed_dir)
    checkpoint = tf.train.latest_checkpoint(str(resumed_dir))
    stopped_at = int(checkpoint.rsplit("-", 1)[1])
    assert STOP_AFTER <= stopped_at < STEPS

    # The same flags in one process: the checkpoint decides the accumulation.
    resumed = subprocess.run(
        [sys.executable, *pretraining_command(data, resumed_dir, **FLAGS)],
        env=worker_env(),
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"{checkpoint} was written by 2 worker(s) with a global batch of 128: 1 worker(s) x 64 "
        "sequences x 2 micro-batch(es) per update keep it, and the peak learning rate stays 0.002"
    ) in resumed.stdout, resumed.stdout[-3000:]

    got, want = _arrays(resumed_dir, STEPS), _arrays(straight, STEPS)
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
