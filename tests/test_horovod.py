"""Two Horovod workers (Gloo, and MPI where built) equal one worker with the doubled batch."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert.pretraining import BertPretrainer, pretraining_losses
from conftest import BIN, ROOT, random_batch, worker_env
from tools.tiny_pretraining import tiny_bert_config

pytestmark = [pytest.mark.slow, pytest.mark.process]


def _launch(controller, output):
    """Two local workers through horovodrun (Gloo) or OpenMPI's mpirun."""
    worker = [sys.executable, os.path.join(ROOT, "tests", "horovod_worker.py"), str(output)]
    env = worker_env()
    if controller == "gloo":
        if not os.path.exists(os.path.join(BIN, "horovodrun")):
            pytest.fail("horovodrun is missing: scripts/setup.sh builds Horovod")
        cmd = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", *worker]
    else:
        # mpirun directly: horovodrun --mpi emits OpenMPI 4 style `-bind-to none -map-by slot`,
        # which OpenMPI 5's prterun misreads ("Executable: none") unless given
        # --binding-args="--bind-to none --map-by slot" (tests/test_mpirun.py runs both ways).
        cmd = [
            "mpirun",
            "-np",
            "2",
            "--oversubscribe",
            "-x",
            "PYTHONPATH",
            "-x",
            "TF_CPP_MIN_LOG_LEVEL",
            *worker,
        ]
        if os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return dict(np.load(output))


def _single_worker_gradients(weights):
    config = tiny_bert_config()
    model = BertPretrainer(config)
    for i, variable in enumerate(model.trainable_variables):
        variable.assign(weights[f"w{i}"])
    batch = random_batch(config, batch=4, seq=16)
    with tf.GradientTape() as tape:
        loss = pretraining_losses(model(batch), batch)["loss"]
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)]


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_two_workers_match_one_worker_with_doubled_batch(tmp_path, controller):
    if controller == "mpi" and not shutil.which("mpirun", path=BIN + os.pathsep + os.environ["PATH"]):
        pytest.skip("no MPI runtime in this environment")
    got = _launch(controller, tmp_path / "out.npz")
    assert int(got["size"]) == 2
    reference = _single_worker_gradients(got)
    for i, expected in enumerate(reference):
        np.testing.assert_allclose(got[f"g{i}"], expected, atol=2e-6, rtol=1e-4)


# --- the train step and the whole job under horovodrun -----------------------------------------
# This file is also their worker: `python tests/test_horovod.py WORKDIR` under horovodrun.


def _unequal_mask_batch(config):
    """8 rows: the first 4 (rank 0's half) carry 1 masked token each, the last 4 carry 4."""
    batch = random_batch(config, batch=8, seq=16, predictions=4, seed=11)
    batch["masked_lm_weights"] = np.ones((8, 4), "float32")
    batch["masked_lm_weights"][:4, 1:] = 0.0
    return batch


def _tiny_no_dropout():
    return tiny_bert_config(dropout=False)


def _one_update(micro_batches, rank=0, distributed=None):
    import keras

    from training.train_step import PretrainingStep

    keras.utils.set_random_seed(1000 + rank)  # rank 1 starts elsewhere: the broadcast aligns it
    model = BertPretrainer(_tiny_no_dropout())
    step = PretrainingStep(
        model,
        keras.optimizers.SGD(0.5),
        accumulation_steps=len(micro_batches),
        distributed=distributed,
        jit_compile=True,
    )
    metrics = step(iter(micro_batches))
    assert metrics["applied"]
    return [w.numpy() for w in model.weights], metrics["loss"]


def _worker(workdir):
    import dataclasses
    import json

    from bert.checkpoints import model_variables
    from training import job, pretraining_job
    from training.distributed import Distributed

    dist = Distributed(use_horovod=True)
    batch = _unequal_mask_batch(_tiny_no_dropout())
    half = {k: v[dist.rank * 4 : (dist.rank + 1) * 4] for k, v in batch.items()}
    with tf.device("/CPU:0"):
        weights, loss = _one_update([half], dist.rank, dist)
    np.savez(
        os.path.join(workdir, f"update.rank{dist.rank}.npz"),
        loss=loss,
        **{f"w{i}": w for i, w in enumerate(weights)},
    )
    with open(os.path.join(workdir, "job.json")) as f:
        settings = pretraining_job.PretrainingSettings(**json.load(f), use_horovod=True)
    # Three updates, then the same job asked for a fourth: a two-worker resume (in this process,
    # so Keras' per-process variable names differ from the first run's).
    for total in (3, 4):
        result = job.run(
            dataclasses.replace(settings, num_train_steps=total), pretraining_job.PretrainingTask()
        )
        weights = model_variables(result["model"])
        np.savez(
            os.path.join(workdir, f"job{total}.rank{dist.rank}.npz"),
            step=result["step"],
            **{name.replace("/", "."): w.numpy() for name, w in weights.items()},
        )
    # Checkpoints by the clock, the clocks disagreeing: worker 0's finds every read an hour after
    # the last checkpoint, worker 1's never a second later. Worker 0's answer is both workers'.
    from training.save_clock import SaveClock

    hours = iter(range(1000))
    SaveClock.now = staticmethod((lambda: 3600.0 * next(hours)) if dist.rank == 0 else (lambda: 0.0))
    clocked = dataclasses.replace(
        settings,
        output_dir=os.path.join(workdir, "clock"),
        num_train_steps=3,
        save_checkpoints_steps=100,
        save_checkpoints_minutes=1.0,
        do_eval=False,
    )
    job.run(clocked, pretraining_job.PretrainingTask())


def _horovodrun(workdir):
    env = dict(
        os.environ,
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=ROOT,
        CUDA_VISIBLE_DEVICES="",
    )
    cmd = [
        os.path.join(BIN, "horovodrun"),
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        sys.executable,
        os.path.abspath(__file__),
        str(workdir),
    ]
    result = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """One horovodrun launch: a train-step update and a tiny run_pretraining job, both ranks."""
    import json

    from tools import tiny_pretraining as tiny

    if not os.path.exists(os.path.join(BIN, "horovodrun")):
        pytest.fail("horovodrun is missing: scripts/setup.sh builds Horovod")
    workdir = tmp_path_factory.mktemp("two_workers")
    data = tiny.setup(workdir / "data", files=2, per_file=40)
    job = {
        **data,
        "output_dir": str(workdir / "job"),
        "max_seq_length": tiny.SEQ,
        "max_predictions_per_seq": tiny.PREDICTIONS,
        "train_batch_size": 4,
        "num_accumulation_steps": 2,
        "learning_rate": 1e-3,
        "num_train_steps": 3,
        "num_warmup_steps": 1,
        "save_checkpoints_steps": 2,
        "log_every_n_steps": 1,
        "shuffle_buffer": 32,
        "do_eval": True,
        "seed": 3,
        # TensorFlow graphs: what is tested is two workers' job, not XLA's compiles, which both
        # workers would make at once (tests/test_mpirun.py runs two workers' steps with XLA).
        "use_xla": False,
    }
    with open(workdir / "job.json", "w") as f:
        json.dump(job, f)
    launch = _horovodrun(workdir)
    return workdir, data, job, launch


def test_one_update_of_2_workers_equals_1_worker_with_unequal_mask_counts(two_workers):
    workdir = two_workers[0]
    ranks = [dict(np.load(workdir / f"update.rank{r}.npz")) for r in range(2)]
    batch = _unequal_mask_batch(_tiny_no_dropout())
    with tf.device("/CPU:0"):
        big, big_loss = _one_update([batch])  # 1 x 2b
        halves = [{k: v[i * 4 : (i + 1) * 4] for k, v in batch.items()} for i in range(2)]
        accumulated, _ = _one_update(halves)  # 1 x b x 2
    count = len(big)
    for i in range(count):
        np.testing.assert_array_equal(ranks[0][f"w{i}"], ranks[1][f"w{i}"])
        np.testing.assert_allclose(ranks[0][f"w{i}"], big[i], atol=2e-6, rtol=0)
        np.testing.assert_allclose(accumulated[i], big[i], atol=2e-6, rtol=0)
    assert float(ranks[0]["loss"]) == pytest.approx(big_loss, abs=1e-5)


def test_run_pretraining_under_horovodrun_leaves_both_workers_identical_and_resumes(two_workers, capsys):
    import json

    import run_pretraining
    from tools import tiny_pretraining as tiny

    workdir, data, job, launch = two_workers
    out = workdir / "job"
    for total in (3, 4):
        ranks = [dict(np.load(workdir / f"job{total}.rank{r}.npz")) for r in range(2)]
        assert int(ranks[0]["step"]) == int(ranks[1]["step"]) == total
        names = [k for k in ranks[0] if k != "step"]
        assert len(names) == 2 * 16 + 5 + 2 + 5 + 2  # every weight, heads included
        # What rank 0 saved is what both workers hold, bit for bit.
        reader = tf.train.load_checkpoint(str(out / f"ckpt-{total}"))
        for name in names:
            np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
            np.testing.assert_array_equal(reader.get_tensor(name.replace(".", "/")), ranks[0][name])
    assert "Resuming from" in launch.stdout and str(out / "ckpt-3") in launch.stdout
    with open(out / "resolved_config.json") as f:
        resolved = json.load(f)
    assert resolved["workers"] == 2 and resolved["global_batch_size"] == 4 * 2 * 2
    assert resolved["effective_learning_rate"] == pytest.approx(2e-3)
    assert set(os.listdir(out / "worker_state")) == {
        f"ckpt-{step}-rank-{rank}-of-2" for step in (2, 3, 4) for rank in (0, 1)
    }
    with open(out / "log.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3, 4]  # rank 0 alone logs
    # Rank 0's, once per run: these two and the clock's (below).
    assert launch.stdout.count("Resolved pretraining settings:") == 3
    assert os.path.isfile(out / "eval_results.json")
    # One worker may continue it (tests/test_resize.py), but not with micro-batches that cannot
    # make the global batch of 16.
    flags = tiny.flags(data, out, num_train_steps=5, train_batch_size=3, use_horovod=False, use_xla=False)
    assert run_pretraining.main(flags) == 2
    assert (
        "ckpt-4 was trained with a global batch of 16 sequences on 2 worker(s); 1 worker(s) x "
        "--train_batch_size=3 cannot make it with whole micro-batches: use a --train_batch_size that "
        "divides 16."
    ) in capsys.readouterr().err


def test_a_checkpoint_due_by_worker_0s_clock_is_saved_by_both_workers(two_workers):
    workdir = two_workers[0]
    # Logged at every update, so each update is a read where the clock is asked.
    assert sorted(os.listdir(workdir / "clock" / "worker_state")) == [
        f"ckpt-{step}-rank-{rank}-of-2" for step in (1, 2, 3) for rank in (0, 1)
    ]


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    _worker(sys.argv[1])
