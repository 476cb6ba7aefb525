"""Two workers launched by OpenMPI's mpirun train exactly like two workers launched through Gloo.

The smallest training run the project has: two updates of PretrainingStep (XLA micro-batch
gradients, float32 accumulation over 2 micro-batches, Horovod average, SGD update) on a tiny
BERT. Each worker starts from different random weights (the broadcast must fix that) and takes
its half of every global batch. The same run goes through three launchers:

- `horovodrun --gloo`                 (Gloo controller; what the other multi-worker tests use)
- `mpirun --hostfile`                 (MPI controller; the documented cluster launch, on localhost)
- `horovodrun --mpi --binding-args=…` (MPI controller through horovodrun; see _launch for why
                                       the binding arguments are needed with OpenMPI 5)

and the weights after each update are compared between launchers directly, between the two
ranks of each run, and with one process that sees all four micro-batches.

This file is also the worker: `python tests/test_mpirun.py OUT_PREFIX` under a launcher.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import BIN, ROOT, worker_env

UPDATES = 2
MICRO_BATCHES = 4  # per update, over all workers
pytestmark = [pytest.mark.slow, pytest.mark.process]


def _tiny_config():
    from tools.tiny_pretraining import tiny_bert_config

    # Dropout off: the runs being compared must not depend on per-process random streams.
    return tiny_bert_config(dropout=False)


def _micro_batches(config, update):
    """The update's global batch of 8 sequences as 4 micro-batches of 2, the same for every run."""
    from tests.conftest import random_batch

    batch = random_batch(config, batch=8, seq=16, seed=update)
    n = 8 // MICRO_BATCHES
    return [{k: v[i * n : (i + 1) * n] for k, v in batch.items()} for i in range(MICRO_BATCHES)]


def _train(rank, size, distributed=None):
    """Runs UPDATES updates as worker `rank` of `size`; returns the weights after each update."""
    import keras
    import tensorflow as tf

    from bert.pretraining import BertPretrainer
    from training.train_step import PretrainingStep

    config = _tiny_config()
    # On CPU everywhere, GPU machines included: the tolerances below are for float32 CPU kernels
    # (a GPU would bring TF32 matmuls and atomics). The GPU/NCCL check is in docs/container.md ("On a DGX-class node").
    with tf.device("/CPU:0"):
        keras.utils.set_random_seed(1000 + rank)  # rank 1 starts elsewhere: the broadcast aligns it
        model = BertPretrainer(config)
        share = MICRO_BATCHES // size
        step = PretrainingStep(
            model, keras.optimizers.SGD(0.5), accumulation_steps=share, distributed=distributed
        )
        history = []
        for update in range(UPDATES):
            mine = _micro_batches(config, update)[rank * share : (rank + 1) * share]
            metrics = step(iter(mine))
            assert metrics["applied"]
            history.append([w.numpy() for w in model.weights])
    return history


def _worker(prefix):
    import horovod.tensorflow as hvd

    from training.distributed import Distributed

    dist = Distributed(use_horovod=True)
    history = _train(dist.rank, dist.size, distributed=dist)
    np.savez(
        f"{prefix}.rank{dist.rank}.npz",
        size=dist.size,
        count=len(history[0]),
        mpi=hvd.mpi_enabled(),
        gloo=hvd.gloo_enabled(),
        **{f"u{u}_w{i}": w for u, weights in enumerate(history) for i, w in enumerate(weights)},
    )


def _load(path):
    data = np.load(path)
    weights = [[data[f"u{u}_w{i}"] for i in range(int(data["count"]))] for u in range(UPDATES)]
    return {
        "size": int(data["size"]),
        "mpi": bool(data["mpi"]),
        "gloo": bool(data["gloo"]),
        "weights": weights,
    }


def _launch(how, workdir):
    """Two local workers of this file through `how`; returns what each rank wrote."""
    prefix = str(workdir / how)
    worker = [sys.executable, os.path.abspath(__file__), prefix]
    # CUDA_VISIBLE_DEVICES="": workers never open a GPU (see _train), so none holds GPU memory.
    env = worker_env(CUDA_VISIBLE_DEVICES="")
    as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    if how == "gloo":
        cmd = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", *worker]
    elif how == "mpirun":
        hostfile = workdir / "hostfile"
        hostfile.write_text("localhost slots=2\n")
        cmd = [
            "mpirun",
            *as_root,
            "--hostfile",
            str(hostfile),
            "-np",
            "2",
            "--bind-to",
            "none",
            "-x",
            "PYTHONPATH",
            "-x",
            "TF_CPP_MIN_LOG_LEVEL",
            "-x",
            "PATH",
            *worker,
        ]
    else:
        # horovodrun --mpi writes OpenMPI 4 style single-dash options (`-bind-to none -map-by
        # slot`); OpenMPI 5's prterun takes `-bind-to` for a flag and `none` for the program
        # ("Executable: none"). Giving the binding arguments in the double-dash form replaces them.
        cmd = [
            os.path.join(BIN, "horovodrun"),
            "-np",
            "2",
            "-H",
            "localhost:2",
            "--mpi",
            "--binding-args=--bind-to none --map-by slot",
            *worker,
        ]
    result = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return [_load(f"{prefix}.rank{rank}.npz") for rank in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each launcher's two ranks, launched once per module and only when a test asks."""
    workdir = tmp_path_factory.mktemp("launches")
    cache = {}

    def get(how):
        if how not in cache:
            if how != "gloo" and not shutil.which("mpirun", path=BIN + os.pathsep + os.environ["PATH"]):
                pytest.skip("no MPI runtime in this environment")
            cache[how] = _launch(how, workdir)
        return cache[how]

    return get


def _assert_same(got, want, atol):
    for update, (a, b) in enumerate(zip(got, want)):
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            np.testing.assert_allclose(x, y, atol=atol, rtol=0, err_msg=f"update {update}, weight {i}")


def test_mpirun_two_workers_equal_gloo_two_workers(runs):
    gloo, mpi = runs("gloo"), runs("mpirun")
    assert [r["size"] for r in gloo + mpi] == [2, 2, 2, 2]
    # Really two different controllers, not the same one twice.
    assert all(r["gloo"] and not r["mpi"] for r in gloo)
    assert all(r["mpi"] and not r["gloo"] for r in mpi)
    # Both ranks of a run hold the same weights after every update (broadcast + average worked).
    for ranks in (gloo, mpi):
        _assert_same(ranks[1]["weights"], ranks[0]["weights"], atol=0.0)
    # The updates moved the weights, so the equality below says something.
    first, last = mpi[0]["weights"][0], mpi[0]["weights"][-1]
    assert max(np.abs(a - b).max() for a, b in zip(first, last)) > 1e-3
    # The direct comparison: MPI's allreduce and Gloo's give the same training step. Two-way
    # float32 sums are order-free, so the only slack is for XLA's CPU kernels.
    _assert_same(mpi[0]["weights"], gloo[0]["weights"], atol=1e-6)


def test_horovodrun_mpi_works_with_openmpi5_binding_args(runs):
    via_horovodrun, gloo = runs("horovodrun-mpi"), runs("gloo")
    assert all(r["size"] == 2 and r["mpi"] and not r["gloo"] for r in via_horovodrun)
    _assert_same(via_horovodrun[0]["weights"], gloo[0]["weights"], atol=1e-6)


def test_two_workers_equal_one_worker_with_every_micro_batch(runs):
    one = _train(rank=0, size=1)  # rank 0's initial weights, all four micro-batches accumulated
    _assert_same(runs("gloo")[0]["weights"], one, atol=2e-6)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    _worker(sys.argv[1])
