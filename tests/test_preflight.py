"""training/preflight.py: before anything is built, every worker shows it can do its part, or every
worker stops with one sentence naming the worker, its host and what is wrong; a worker that never
joins is named within --worker_timeout_seconds instead of a hang. The pieces by hand, then
run_pretraining.py: two workers under mpirun whose second worker sees other files and another
output directory, a worker stopped before it joins (horovodrun), and an output directory on a
disk too small for two checkpoints."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import run_pretraining
from bert.config import BertConfig
from common.heartbeat import Heartbeat
from conftest import BIN, ROOT, worker_env
from tools import tiny_pretraining as tiny
from training.preflight import (
    HEARTBEAT_DIR,
    Joining,
    _differences,
    _files_of,
    _gpu_problems,
    checkpoint_bytes,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny.setup(tmp_path_factory.mktemp("data"))


def test_the_checkpoint_estimate_is_the_models_weights_and_two_optimizer_slots_in_float32():
    from bert.pretraining import BertPretrainer

    config = tiny.tiny_bert_config()
    weights = sum(int(np.prod(w.shape)) for w in BertPretrainer(config).weights)
    assert checkpoint_bytes(config) == 3 * 4 * weights
    # BERT-base's 110,106,428 weights, as BertPretrainer builds them (counted once, 9 s to build).
    with open(os.path.join(ROOT, "configs", "bert_base.json")) as f:
        assert checkpoint_bytes(BertConfig(**json.load(f))) == 12 * 110_106_428


def test_a_flags_files_are_its_globs_directories_and_checkpoint_prefixes(tmp_path):
    for name in ("a.tfrecord", "b.tfrecord", "ckpt-4.index", "ckpt-4.data-00000-of-00001"):
        (tmp_path / name).write_text("x")
    assert _files_of(f"{tmp_path}/*.tfrecord")[0] == [f"{tmp_path}/a.tfrecord", f"{tmp_path}/b.tfrecord"]
    assert len(_files_of(f"{tmp_path}/a.tfrecord, {tmp_path}/ckpt-4")[0]) == 3
    assert len(_files_of(str(tmp_path))[0]) == 4
    assert _files_of(f"{tmp_path}/*.json") == ([], f"{tmp_path}/*.json matches no file")
    assert _files_of("gs://bucket/training/*") == ([], None)  # TensorFlow's to read, not checked here
    (tmp_path / "b.tfrecord").chmod(0)
    if os.geteuid() != 0:  # root reads anything
        assert _files_of(f"{tmp_path}/*.tfrecord")[1] == f"{tmp_path}/b.tfrecord cannot be read (permission)"


def _report(host, gpus=0, seen=None):
    return {"host": host, "problems": [], "seen": seen or {}, "gpus": gpus, "room": None}


def test_gpus_are_checked_against_the_workers_of_each_host_and_files_against_worker_0():
    reports = [_report("a", 8), _report("a", 8), _report("b", 1), _report("b", 1), _report("c", 0)]
    assert _gpu_problems(reports) == {
        2: "sees 1 GPU(s) for the 2 workers of its host: start at most 1 a host, or make every GPU "
        "visible (CUDA_VISIBLE_DEVICES)",
        3: "sees 1 GPU(s) for the 2 workers of its host: start at most 1 a host, or make every GPU "
        "visible (CUDA_VISIBLE_DEVICES)",
    }
    seen = [{"--input_files": [256, 4096]}, {"--input_files": [256, 4096]}, {"--input_files": [255, 4000]}]
    assert _differences([_report(h, seen=s) for h, s in zip("abc", seen)]) == [
        "worker 2 on host c sees 255 file(s) of 3.9 KiB (4000 bytes) for --input_files where worker 0 "
        "sees 256 of 4.0 KiB (4096 bytes)"
    ]


def test_the_workers_that_did_not_join_are_named_by_their_heartbeats(tmp_path):
    folder = tmp_path / HEARTBEAT_DIR
    folder.mkdir()
    stuck = Heartbeat(str(folder), 2, 3, interval_s=60, stale_s=1)
    stuck.beat()  # wrote once (host and pid), then stopped beating
    joining = Joining(str(tmp_path), 60, 0, 3, stream=sys.stdout)
    joining.heartbeat.stale_s = 0.2  # the timeout is not reached: the sentence is asked for
    with joining:
        time.sleep(0.5)
        said = joining.not_joined()
    host = open(folder / "rank-2").read().split()[0]
    assert said.startswith(
        f"worker 0 on host {host} waited 60 s (--worker_timeout_seconds) for the 3 workers"
    )
    assert f"worker 1 never beat in {folder} (not started, or it sees another --output_dir)" in said
    assert f"worker 2 on host {host} (pid {os.getpid()}) stopped beating" in said


def _flags(data, out, **overrides):
    return tiny.flags(data, out, use_xla="false", **overrides)


@pytest.mark.process
@pytest.mark.slow
def test_two_workers_that_see_different_things_stop_naming_each_difference(data, tmp_path):
    """Worker 1 (mpirun's second program) gets a vocab path that is not there, one of the two
    training files and its own output directory: what a worker on a host that mounts other
    storage sees. Every worker stops with the same sentence, before any model is built."""
    as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    (tmp_path / "hostfile").write_text("localhost slots=2\n")
    first = sorted(glob.glob(data["input_files"]))[0]
    worker = [sys.executable, run_pretraining.__file__]
    shared, other = tmp_path / "out", tmp_path / "elsewhere"
    command = [
        "mpirun",
        *as_root,
        *("--hostfile", str(tmp_path / "hostfile"), "--bind-to", "none"),
        *("-x", "PYTHONPATH", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "PATH"),
        *("-np", "1", *worker, *_flags(data, shared, use_horovod="true")),
        ":",
        *("-np", "1", *worker),
        *_flags(data, other, use_horovod="true", vocab_file=str(tmp_path / "vocab.txt"), input_files=first),
    ]
    done = subprocess.run(command, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    files = sorted(glob.glob(data["input_files"]))
    sizes = [os.path.getsize(f) for f in files]
    host = os.uname().nodename
    sentence = (
        f"Pre-flight: worker 1 on host {host} cannot read --vocab_file: {tmp_path}/vocab.txt matches no "
        f"file (and 2 more: worker 1 on host {host} does not see worker 0's --output_dir {other} (a file "
        f"worker 0 wrote there is not there): every worker must see one shared directory, or a resumed "
        f"run would read other checkpoints on each host; worker 1 on host {host} sees 1 file(s) of "
    )
    assert done.stderr.count(sentence) == 2, done.stderr[-3000:]  # both workers say it
    assert "for --input_files where worker 0 sees 2 of" in done.stderr and str(sum(sizes)) in done.stderr
    assert not glob.glob(str(shared / "ckpt-*")) and not os.path.exists(shared / ".preflight")


@pytest.mark.process
@pytest.mark.slow
def test_a_worker_that_never_joins_is_named_within_the_timeout(data, tmp_path):
    """Worker 1 is stopped (SIGSTOP) as soon as horovodrun starts it, long before it imports
    TensorFlow: worker 0 names it after --worker_timeout_seconds=8 and ends the job, exit 2."""
    out = tmp_path / "out"
    horovod = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
    launcher = subprocess.Popen(
        [
            *horovod,
            run_pretraining.__file__,
            *_flags(data, out, use_horovod="true", worker_timeout_seconds=8),
        ],
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stopped, deadline = None, time.monotonic() + 60
    while stopped is None and time.monotonic() < deadline:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            try:
                if child.environ().get("HOROVOD_RANK") == "1" and run_pretraining.__file__ in child.cmdline():
                    child.send_signal(signal.SIGSTOP)
                    stopped = child
                    break
            except psutil.Error:
                continue
        time.sleep(0.005)
    assert stopped is not None, "horovodrun never started worker 1"
    try:
        _, err = launcher.communicate(timeout=180)
    finally:
        try:
            stopped.kill()
        except psutil.Error:
            pass
    assert (
        f"Pre-flight: worker 0 on host {os.uname().nodename} waited 8 s (--worker_timeout_seconds) for the 2 "
        f"workers to answer: worker 1 never beat in {out / 'heartbeat'}" in err
    ), err[-3000:]
    assert "Process name: 0\nExit code: 2" in err


@pytest.mark.process
def test_an_output_directory_without_room_for_two_checkpoints_stops_before_the_model_is_built(
    data, tmp_path, mounts, capsys
):
    small = tmp_path / "small"
    small.mkdir()
    mounts("-t", "tmpfs", "-o", "size=256k", "tmpfs", target=small)
    assert run_pretraining.main(_flags(data, small / "out")) == 2
    err = capsys.readouterr().err
    assert (
        f"Pre-flight: worker 0 on host {os.uname().nodename} has 256.0 KiB (262144 bytes) free in "
        f"--output_dir {small / 'out'}, but two checkpoints need about 580.6 KiB (594552 bytes)." in err
    ), err[-2000:]
