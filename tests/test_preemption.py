"""Exact resume after a stop. kill -9 between checkpoints (dropout on, accumulation 2, XLA): the
same command run again ends with every variable of an uninterrupted run's final checkpoint.
Preemption: SIGTERM or SIGUSR1 to a worker (or to the launcher) stops every worker at the same
update with a checkpoint and exit status 75; the same command run again ends with exactly the
weights of a run that was never stopped. run_pretraining.py alone (the kill and the notice share
one uninterrupted run of each kind: static records in length bins, dynamic ones packed) and the
pretraining launcher here (run_classifier.py's kill and notice in tests/test_finetuning_job.py,
sharing one uninterrupted run); two Horovod workers with the notice sent to one of them in
tests/test_resize.py, which shares those runs with a resume on one worker; scripts/run.sub under a
real SLURM in tests/test_slurm.py."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np
import psutil
import pytest
import tensorflow as tf

from common.errors import PREEMPTED_EXIT_STATUS
from conftest import (
    LAUNCH_ENV,
    ROOT,
    XLA_CACHE_FLAG,
    kill_after_step,
    logged_steps,
    notice_after_step,
    packed_rows,
    pretraining_workspace,
    worker_env,
)
from tools import tiny_pretraining as tiny

pytestmark = [pytest.mark.slow, pytest.mark.process]
STEPS, SAVE_EVERY, STOP_AFTER = 10, 4, 5  # checkpoints at 4, 8, 10; the notice after step 5


def _arrays(output_dir, step):
    reader = tf.train.load_checkpoint(os.path.join(output_dir, f"ckpt-{step}"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _assert_identical(got_dir, want_dir, step):
    got, want = _arrays(got_dir, step), _arrays(want_dir, step)
    assert set(got) == set(want) and "training_state/optimizer/iterations" in got
    diffs = {
        n: float(np.max(np.abs(got[n].astype(np.float64) - want[n].astype(np.float64)), initial=0))
        for n in want
    }
    assert max(diffs.values()) == 0.0, sorted(diffs.items(), key=lambda kv: -kv[1])[:5]


def _stopped_at(stderr: str) -> int:
    match = re.search(
        r"Stopped for a preemption notice \((.+?)\) at step (\d+): (\S+) holds step \2;", stderr
    )
    assert match, stderr[-3000:]
    return int(match.group(2))


def pretraining_command(data, output_dir, **overrides):
    # Batch 128 x 2 micro-batches: an update long enough (tens of ms) for the notice to land
    # between checkpoints; dropout on, XLA on.
    values = dict(
        num_train_steps=STEPS,
        save_checkpoints_steps=SAVE_EVERY,
        num_accumulation_steps=2,
        train_batch_size=128,
        num_warmup_steps=2,
        use_xla=True,
        seed=7,
    )
    return [
        os.path.join(ROOT, "run_pretraining.py"),
        *tiny.flags(data, output_dir, **{**values, **overrides}),
    ]


class OneWorker(NamedTuple):
    data: dict
    straight: object  # the uninterrupted run's directory
    env: dict
    cache: str | None  # the runs' own XLA cache directory, or None (the suite's)
    compiled: set  # the cache's files after the uninterrupted run
    packing: bool  # --packing: the update's sequences packed into rows (training/packing.py)

    def command(self, output_dir, **overrides) -> list:
        # With their own cache, --trace_ahead as users get it: on, since a cache is in use.
        default = {"trace_ahead": None} if self.cache else {}
        if self.packing:
            default.update(packing="true", bin_size=None)
        return [sys.executable, *pretraining_command(self.data, output_dir, **default, **overrides)]


@pytest.fixture(scope="module", params=["static", "dynamic, packed"])
def one_worker(request, tmp_path_factory):
    """The uninterrupted run of one kind, shared by the kill -9 and the SIGTERM test: dropout
    on, accumulation 2, XLA. Static records run in length bins and keep their compiled programs
    in their own XLA cache, where a run that starts after the uninterrupted one, resumed or not,
    must add nothing: the same programs under the same names, though a resumed run meets its
    bins' lengths in another order (training/compile_cache.py). Dynamic records are masked as
    read, from their place in the order, and packed into rows within each update (--packing):
    the rows a resumed update packs are the uninterrupted run's."""
    masking, _, packed = request.param.partition(", ")
    root = tmp_path_factory.mktemp(f"one_worker_{masking}")
    data = tiny.setup(root / "data", files=2, per_file=60, masking=masking)
    straight = root / "straight"
    env, cache = worker_env(), None
    if masking == "static":
        cache = str(root / "xla_cache")
        own = f"--tf_xla_persistent_cache_directory={cache}"
        env["TF_XLA_FLAGS"] = env["TF_XLA_FLAGS"].replace(XLA_CACHE_FLAG, own)
    run = OneWorker(data, straight, env, cache, set(), packing=bool(packed))
    result = subprocess.run(run.command(straight), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("Traced the update's 3 programs for 4 bin lengths ahead" in result.stdout) == bool(cache)
    if run.packing:
        assert min(packed_rows(result.stdout)) < 128  # some of 128 sequences packed into fewer rows
    return run._replace(compiled=_cache_files(cache))


def _cache_files(cache: str | None) -> set:
    return set(os.listdir(cache)) if cache else set()


def _assert_nothing_compiled_anew(run: OneWorker) -> None:
    if run.cache:
        assert run.compiled and _cache_files(run.cache) == run.compiled


def test_kill_9_between_checkpoints_then_the_same_command_ends_bit_identical(one_worker, tmp_path):
    straight, env = one_worker.straight, one_worker.env
    killed = tmp_path / "killed"

    def command():
        # Batch 128 x 2 micro-batches: an update long enough (tens of ms on 2 cores) for the kill
        # to land between checkpoints 4 and 8.
        return one_worker.command(killed, keep_checkpoints=2)

    kill_after_step(command(), killed, env, STOP_AFTER)
    latest = tf.train.latest_checkpoint(str(killed))
    assert latest is not None and latest.endswith(f"ckpt-{SAVE_EVERY}"), (
        f"the kill did not land between checkpoints {SAVE_EVERY} and {2 * SAVE_EVERY} (latest {latest})"
    )
    assert max(logged_steps(killed / "log.jsonl")) >= STOP_AFTER  # work past the checkpoint was lost

    resumed = subprocess.run(command(), env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {latest}" in resumed.stdout
    got = _arrays(killed, STEPS)
    assert any(n.endswith("/adam_m") for n in got)
    _assert_identical(killed, straight, STEPS)
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
    _assert_nothing_compiled_anew(one_worker)


def test_sigterm_stops_one_worker_with_a_checkpoint_and_the_rerun_ends_bit_identical(one_worker, tmp_path):
    straight, env = one_worker.straight, one_worker.env
    stopped = tmp_path / "stopped"
    status, seconds, err = notice_after_step(
        one_worker.command(stopped),
        stopped,
        env,
        STOP_AFTER,
        lambda p: p.send_signal(signal.SIGTERM),
    )
    assert status == PREEMPTED_EXIT_STATUS, err[-3000:]
    step = _stopped_at(err)
    assert "(SIGTERM)" in err and STOP_AFTER <= step < STEPS
    assert tf.train.latest_checkpoint(str(stopped)).endswith(f"ckpt-{step}")  # nothing lost
    assert seconds < 60, f"{seconds:.1f} s from SIGTERM to the exit"
    print(f"one worker: SIGTERM to exit {seconds:.2f} s (stopped at step {step})")

    resumed = subprocess.run(one_worker.command(stopped), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {stopped}/ckpt-{step}" in resumed.stdout
    _assert_identical(stopped, straight, STEPS)
    _assert_nothing_compiled_anew(one_worker)


def rank_process(launcher: subprocess.Popen, rank: int) -> psutil.Process:
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("HOROVOD_RANK") == str(rank) and "run_pretraining.py" in " ".join(
                child.cmdline()
            ):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"no worker of rank {rank} under horovodrun")


def test_sigterm_to_the_launcher_stops_the_phase_and_a_rerun_finishes_both(tmp_path):
    """The launcher is signalled, not the worker: it writes the phase's STOP file, exits 75 and
    starts no phase 2; the same command then resumes phase 1 and runs phase 2."""
    env = pretraining_workspace(tmp_path, records=64)
    args = [
        "--preset=cpu_tiny",
        "--train_steps=20",  # phase 1: 18 updates; phase 2: (20 - 18) x 4 / 2 = 4
        "--train_batch_size_phase1=4",
        "--train_batch_size_phase2=2",
        "--num_accumulation_steps_phase2=1",
        "--warmup_steps_phase1=2",
        "--warmup_steps_phase2=1",
        "--save_checkpoint_steps=8",
        "--use_xla=false",
        "--do_eval=false",
    ]
    phase1 = tmp_path / "results" / "phase_1"
    command = ["bash", os.path.join(ROOT, "scripts", "run_pretraining_lamb.sh"), *args]
    full_env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    full_env.update(env, BERT_PYTHON=sys.executable)
    status, seconds, err = notice_after_step(
        command, phase1, full_env, 3, lambda p: p.send_signal(signal.SIGTERM), timeout_s=600
    )
    assert status == PREEMPTED_EXIT_STATUS, err[-3000:]
    assert "stopped for a preemption (SIGTERM): re-run the same command to continue" in err
    step = _stopped_at(err)
    assert 3 <= step < 18 and tf.train.latest_checkpoint(str(phase1)).endswith(f"ckpt-{step}")
    assert not (tmp_path / "results" / "phase_2").exists()  # phase 2 never started
    print(f"launcher: SIGTERM to exit {seconds:.2f} s (phase 1 stopped at step {step})")

    again = subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Resuming from {phase1}/ckpt-{step}" in again.stdout
    assert not (phase1 / "STOP").exists()  # the honoured notice was cleared
    assert tf.train.latest_checkpoint(str(phase1)).endswith("ckpt-18")
    assert tf.train.latest_checkpoint(str(tmp_path / "results" / "phase_2")).endswith("ckpt-4")


def test_request_stop_writes_the_notice_the_run_sees(tmp_path):
    from training.preemption import StopRequests, request_stop

    output_dir = tmp_path / "not_started_yet"
    notices = StopRequests(str(output_dir))
    assert notices.local() is None and notices.stop_now() is False
    path = request_stop(str(output_dir))
    assert path == str(output_dir / "STOP") and os.path.isfile(path)
    assert notices.local() == "STOP file" and notices.stop_now() is True
    notices.clear_stale_file()  # written after this process started: a notice for this run, kept
    assert notices.local() == "STOP file"


def test_a_stop_file_written_just_before_a_process_started_is_cleared_by_it(tmp_path):
    """The run a requeued or repeated command continues may have written its STOP file a fraction
    of a second before the new process starts: the new process clears it (its start time is
    exact to a clock tick, not to the second), and keeps one written after it started."""
    output_dir = tmp_path / "out"
    code = (
        "import os, sys, time\n"
        "from training.preemption import StopRequests, _process_start_time\n"
        "print(round(time.time() - _process_start_time(), 3))\n"
        "StopRequests(sys.argv[1]).clear_stale_file()\n"
        "print(os.path.exists(os.path.join(sys.argv[1], 'STOP')))\n"
    )
    from training.preemption import request_stop

    for _ in range(3):
        request_stop(str(output_dir))
        time.sleep(0.05)  # the old run's exit (more than a clock tick: 10 ms)
        done = subprocess.run(
            [sys.executable, "-c", code, str(output_dir)], env=worker_env(), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        running, kept = done.stdout.split()
        assert 0 <= float(running) < 0.5 and kept == "False", done.stdout
