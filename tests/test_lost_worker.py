"""No silent hang: when one of two Horovod workers dies (kill -9) or freezes (SIGSTOP: a hung
host, a network partition), the other stops within a bound with one sentence naming the lost
worker and the last checkpoint, the launch ends non-zero, and the same command resumes.
No orphans: when the launcher itself is killed (SIGKILL to horovodrun or mpirun), both workers
stop at the same update with a checkpoint and the sentence, in their own log files."""

import os
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf

from conftest import BIN, notice_after_step, worker_env
from test_preemption import pretraining_command, rank_process
from tools import tiny_pretraining as tiny

pytestmark = [pytest.mark.slow, pytest.mark.process]
HOROVODRUN = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]


def _command(data, output_dir, **flags):
    # 40 updates, a checkpoint every 4: the loss lands after one, well before the end. One padded
    # shape (bin_size 0) and no XLA: what is tested is the lost worker, not the layout or the
    # compiler, and each binned shape is seconds of tracing (each compile more) in every worker.
    values = dict(
        train_batch_size=64, use_horovod=True, num_train_steps=40, bin_size=0, use_xla=False, **flags
    )
    return [*HOROVODRUN, *pretraining_command(data, output_dir, **values)]


def _resumes(data, output_dir, checkpoint):
    resumed = subprocess.run(_command(data, output_dir), env=worker_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {checkpoint}" in resumed.stdout


def test_a_killed_worker_stops_the_other_at_once_naming_it_and_the_checkpoint(tmp_path):
    data = tiny.setup(tmp_path / "data", files=2, per_file=60)
    out = tmp_path / "run"
    status, seconds, err = notice_after_step(
        _command(data, out), out, worker_env(), 6, lambda p: rank_process(p, 1).kill()
    )
    assert status != 0
    assert "Process name: 1\nExit code: 137" in err  # horovodrun names the dead worker
    match = re.search(
        r"Worker 0 lost the other workers after step (\d+) \(Horovod shut down[^)]*\); "
        r"the last checkpoint is (\S+): re-run the same command",
        err,
    )
    assert match, err[-3000:]
    assert seconds < 60, f"{seconds:.1f} s"
    print(f"kill -9 of rank 1: rank 0 out {seconds:.2f} s later")
    _resumes(data, out, match.group(2))


def test_a_frozen_worker_is_named_by_the_watchdog_within_its_timeout(tmp_path):
    data = tiny.setup(tmp_path / "data", files=2, per_file=60)
    out = tmp_path / "run"
    # Gloo's own timeout is set far off, as MPI has none: the watchdog alone must end the wait.
    env = worker_env(HOROVOD_GLOO_TIMEOUT_SECONDS="600")
    status, seconds, err = notice_after_step(
        _command(data, out, worker_timeout_seconds=10), out, env, 6, lambda p: rank_process(p, 1).suspend()
    )
    assert status != 0
    match = re.search(
        r"Worker 0 lost the other workers after step (\d+) \(no update for 10 s; worker 1 "
        r"stopped beating first\); the last checkpoint is (\S+): re-run",
        err,
    )
    assert match, err[-3000:]
    assert 10 <= seconds < 60, f"{seconds:.1f} s"
    print(f"SIGSTOP of rank 1: rank 0 out {seconds:.2f} s later (watchdog timeout 10 s)")
    _resumes(data, out, match.group(2))


def test_a_broken_gloo_connection_counts_as_a_lost_worker_as_horovods_shutdown_does():
    # Which one a worker sees first when its peer is killed is a race (both came up in CI).
    import tensorflow as tf

    from training.watchdog import is_horovod_shutdown

    reset = (
        "{{function_node __inference_<lambda>_4044}} [/tmp/horovod-0.28.1/third_party/compatible17_gloo/"
        "gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:62855: Connection reset by peer"
    )
    assert is_horovod_shutdown(tf.errors.UnknownError(None, None, reset))
    assert is_horovod_shutdown(RuntimeError("Horovod has been shut down. This was caused by ..."))
    assert not is_horovod_shutdown(tf.errors.InvalidArgumentError(None, None, "Mismatched allreduce shapes"))


def _mpirun(data, output_dir, **flags):
    values = dict(
        train_batch_size=64, use_horovod=True, num_train_steps=40, bin_size=0, use_xla=False, **flags
    )
    mpirun = shutil.which("mpirun", path=BIN + os.pathsep + os.environ["PATH"])
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [
        mpirun,
        *root,
        "-np",
        "2",
        "--oversubscribe",
        "-x",
        "PYTHONPATH",
        sys.executable,
        *pretraining_command(data, output_dir, **values),
    ]


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_a_launcher_killed_outright_leaves_no_worker_running(tmp_path, launcher):
    data = tiny.setup(tmp_path / "data", files=2, per_file=60)
    out = tmp_path / "run"
    # A checkpoint every 100 updates: the one the stop writes is the only one.
    command = (_command if launcher == "horovodrun" else _mpirun)(data, out, save_checkpoints_steps=100)
    workers = []

    def kill_the_launcher(process):
        for child in psutil.Process(process.pid).children(recursive=True):
            try:
                program, *args = child.cmdline()
                if os.path.basename(program).startswith("python") and "run_pretraining.py" in " ".join(args):
                    workers.append(child)
            except psutil.Error:
                continue
        process.kill()

    status, _, _ = notice_after_step(command, out, worker_env(), 3, kill_the_launcher)
    assert status == -9 and len(workers) == 2
    killed = time.monotonic()
    gone, alive = psutil.wait_procs(workers, timeout=120)
    assert not alive, f"{len(alive)} worker(s) still running 120 s after the launcher was killed"
    print(f"{launcher} killed: both workers out {time.monotonic() - killed:.1f} s later")
    # What each worker said, where it could still be read: horovodrun's process that started it
    # sends SIGTERM when horovodrun is gone (a notice); mpirun's leave theirs running, for the
    # launcher watch to find gone. The watch says so at once; OpenMPI may abort a worker a few
    # seconds after its PMIx server (mpirun) is gone, before the stop's own sentence. A worker
    # that wrote nothing after the launcher's end (rank 1's progress goes nowhere) has no file.
    logs = [path.read_text() for path in sorted(out.glob("launcher_gone.rank-*.log"))]
    if launcher == "mpirun":
        found = [
            re.search(r"Its launcher \((mpirun|prterun), pid \d+\) is gone: this worker stops", log)
            for log in logs
        ]
        assert any(found), logs  # the first worker to find it: the other may stop on its notice
    stops = re.findall(
        r"Stopped (because its launcher \((\w+), pid \d+\) is gone,|for a preemption "
        r"notice \((SIGTERM|another worker's notice)\)) at step (\d+)",
        "".join(logs),
    )
    aborted = launcher == "mpirun" and "MPI_ERRORS_ARE_FATAL" in "".join(logs)
    assert stops or aborted, logs
    steps = {int(stop[-1]) for stop in stops}  # every worker that says it stopped: the same update
    assert len(steps) <= 1, stops
    latest = tf.train.latest_checkpoint(str(out))
    if steps or latest:
        # The stop's checkpoint (the only one: the run saves every 100), with both workers' states.
        step = steps.pop() if steps else int(latest.rsplit("-", 1)[1])
        assert latest.endswith(f"ckpt-{step}")
        assert {f"ckpt-{step}-rank-0-of-2", f"ckpt-{step}-rank-1-of-2"} <= set(
            os.listdir(out / "worker_state")
        )
    assert {w.pid for w in gone} == {w.pid for w in workers}
