"""scripts/run.sub under a real SLURM (tests/slurm_cluster.py: munged, slurmctld and slurmd on this
machine): submitted with sbatch as docs/cluster.md tells users, HOROVOD_LAUNCHER=mpirun running the
pretraining launcher with two workers in a one-node allocation. SLURM's own signals to the batch
shell (`scancel -b -s USR1`, the notice run.sub asks for before the time limit, and SIGTERM, a
preemption's) stop the job with a checkpoint, run.sub requeues it, and the requeued job ends with
exactly the weights of a job that was never stopped; a job whose time limit comes within run.sub's
notice does not start its command and fails after one requeue, naming the time limit to raise,
instead of requeueing forever, and SLURM's notice before a longer limit reaches the command; a
worker killed outright fails the job with the launcher's error instead of hanging it; the fault
soak (tools/fault_soak.py --slurm) requeues twice, SIGTERM then SIGUSR1 to srun's tasks, and ends
bit-identical. Two nodes: tests/test_multihost.py."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf

from conftest import LAUNCH_ENV, ROOT, logged_steps, pretraining_workspace, worker_env
from slurm_cluster import MARK, slurm_cluster  # noqa: F401 (the session's cluster, a fixture)
from test_finetuning_launchers import tiny_pretrained
from test_preemption import _assert_identical, _stopped_at
from tools import tiny_pretraining as tiny

pytestmark = [pytest.mark.slow, pytest.mark.process]
# Phase 1: 90 updates of 2 x 4 sequences (tens of ms each: seconds for the notice to land in the
# phase), checkpoints every 50; phase 2: (100 - 90) x 8 / 8 = 10.
TRAIN_STEPS, PHASE1_STEPS, PHASE2_STEPS = 100, 90, 10
LAUNCHER_ARGS = [
    "--num_gpus=2",
    "--preset=cpu_tiny",
    f"--train_steps={TRAIN_STEPS}",
    "--train_batch_size_phase1=4",
    "--train_batch_size_phase2=4",
    "--num_accumulation_steps_phase2=1",
    "--warmup_steps_phase1=2",
    "--warmup_steps_phase2=1",
    "--save_checkpoint_steps=50",
    "--use_xla=false",
    "--do_eval=false",
    "--",
    "--log_every_n_steps=1",  # the first update shows in log.jsonl: the notice comes after it
]
JOB_S = 600  # one job from submission to its end, on two shared cores


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The launcher's data and vocab, with the tests' tiny BERT (L2/H32) fitted to them."""
    root = tmp_path_factory.mktemp("slurm_data")
    env = pretraining_workspace(root, records=64)
    config = dict(tiny.CONFIG, vocab_size=64, max_position_embeddings=512)
    with open(env["BERT_CONFIG"], "w") as f:
        json.dump(config, f)
    return root, env


def submit(
    cluster, workspace, name, command=("scripts/run_pretraining_lamb.sh", *LAUNCHER_ARGS), launcher="mpirun"
):
    """`sbatch -N 1 --ntasks-per-node=2 scripts/run.sub bash COMMAND...` (the pretraining launcher
    by default) from the checkout, results under RESULTSDIR=<workspace>/<name>; (job id, results,
    log). `launcher`: "mpirun" (HOROVOD_LAUNCHER=mpirun: COMMAND once, its workers started by
    mpirun) or "srun" (CONT=none: COMMAND in each of the tasks srun starts, no container)."""
    root, data_env = workspace
    results, log = root / name, root / f"{name}.out"
    env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV}
    env.update({k: v for k, v in data_env.items() if k != "RESULTS_DIR"})
    env.update({"HOROVOD_LAUNCHER": "mpirun"} if launcher == "mpirun" else {"CONT": "none"})
    env.update(RESULTSDIR=str(results))
    job_id = cluster.sbatch(
        "-N",
        "1",
        "--ntasks-per-node=2",
        f"--output={log}",
        "scripts/run.sub",
        "bash",
        *command,
        env=env,
        cwd=ROOT,
    )
    return job_id, results, log


def wait_for_step(cluster, job_id, output_dir, log, timeout_s=JOB_S):
    """Waits until the job's log.jsonl in `output_dir` shows an update; fails when the job ends
    or stalls first."""
    deadline = time.monotonic() + timeout_s
    while not logged_steps(os.path.join(output_dir, "log.jsonl")):
        state = cluster.job(job_id)["JobState"]
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job_id} is {state}: {_tail(log)}"
        assert time.monotonic() < deadline, f"job {job_id} logged no update in {timeout_s} s: {_tail(log)}"
        time.sleep(0.05)


def _tail(log, chars=3000):
    try:
        return log.read_text()[-chars:]
    except FileNotFoundError:
        return f"(no {log})"


def _final_step(output_dir):
    return int(tf.train.latest_checkpoint(str(output_dir)).rsplit("-", 1)[1])


def test_srun_starts_pmix_tasks(slurm_cluster):  # noqa: F811
    """What run.sub's default path needs of SLURM: `srun --mpi=pmix` gives each task its PMIx rank."""
    result = slurm_cluster.call(
        "srun", "--mpi=pmix", "-N", "1", "-n", "2", "bash", "-c", "echo rank $PMIX_RANK of $SLURM_NTASKS"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["rank 0 of 2", "rank 1 of 2"]


# Each signal's job, with how its workers start: srun's tasks (run.sub's default path, without a
# container) or mpirun from the batch shell.
SIGNALS = {"USR1": "srun", "TERM": "mpirun"}


@pytest.fixture(scope="module")
def stopped_jobs(slurm_cluster, workspace):  # noqa: F811
    """For each of SIGNALS, a job stopped by `scancel -b -s SIGNAL` once it logged an update, and
    requeued: {signal: dict(id, results, log, fields)}. The jobs run one after the other (run.sub's
    --exclusive), the second while the first waits to be eligible again."""
    jobs = {
        name: submit(slurm_cluster, workspace, f"stopped_{name}", launcher=how)
        for name, how in SIGNALS.items()
    }
    stopped = {}
    for name, (job_id, results, log) in jobs.items():
        wait_for_step(slurm_cluster, job_id, results / "phase_1", log)
        notice = slurm_cluster.call("scancel", "-b", "-s", name, job_id)
        assert notice.returncode == 0, notice.stderr
    for name, (job_id, results, log) in jobs.items():
        # Requeued: Restarts counts it at once, the state leaves COMPLETING once the old
        # allocation is gone.
        fields = slurm_cluster.wait_job(
            job_id,
            lambda f: f["Restarts"] == "1" and f["JobState"] != "COMPLETING",
            JOB_S,
            "requeued (Restarts=1, allocation released)",
        )
        stopped[name] = dict(signal=name, id=job_id, results=results, log=log, fields=fields)
    return stopped


@pytest.fixture(scope="module")
def straight(slurm_cluster, workspace, stopped_jobs, endless_job, time_limited_job):  # noqa: F811
    """The same command as the stopped jobs', never stopped: (job id, results, log), submitted
    while they wait to be eligible again (slurmctld holds a requeued job for its credentials'
    lifetime, tests/slurm_cluster.py's CRED_EXPIRE_S), after `endless_job` and `time_limited_job`
    (submitted only once the stopped jobs were seen requeued: run.sub's --exclusive runs one job at
    a time, and their runs before the stopped jobs' could let one of those complete its requeued
    run before the check that it requeued)."""
    return submit(slurm_cluster, workspace, "straight")


@pytest.fixture(params=list(SIGNALS))
def requeued(request, stopped_jobs):
    return stopped_jobs[request.param]


def test_a_signal_from_scancel_stops_the_job_with_a_checkpoint_and_requeues_it(requeued):
    assert requeued["fields"]["JobState"] in ("REQUEUED", "PENDING", "CONFIGURING", "RUNNING")
    text = requeued["log"].read_text()
    if SIGNALS[requeued["signal"]] == "srun":  # a task per worker, each running the launcher
        assert "no container (CONT=none)" in text and "workers: 2 (this process is one)" in text
    else:
        assert "through mpirun" in text and "workers: 2 (mpirun -np 2)" in text
    assert f"stopped for a preemption (SIG{requeued['signal']}): re-run the same command to continue" in text
    assert f"[run.sub] stopped for a preemption with a checkpoint: requeueing job {requeued['id']}" in text
    step = _stopped_at(text)
    assert 1 <= step < PHASE1_STEPS  # mid-phase
    assert tf.train.latest_checkpoint(str(requeued["results"] / "phase_1")).endswith(f"ckpt-{step}")


def _finished(cluster, job_id, timeout_s=2 * JOB_S):
    """Job `job_id`'s fields once it ended (not pending, requeued, running or completing: a
    completing job's allocation is still being released)."""
    return cluster.wait_job(
        job_id,
        lambda f: f["JobState"] not in ("PENDING", "REQUEUED", "CONFIGURING", "RUNNING", "COMPLETING"),
        timeout_s,
        "finished",
    )


def _worker(cluster, output_dir, rank):
    """The training process of `rank` writing to `output_dir`, among this cluster's processes."""
    for process in psutil.process_iter():
        try:
            environ = process.environ()
            if (
                environ.get(MARK) == cluster.name
                and environ.get("OMPI_COMM_WORLD_RANK") == str(rank)
                and f"--output_dir={output_dir}" in process.cmdline()
            ):
                return process
        except psutil.Error:
            continue
    raise AssertionError(f"no worker of rank {rank} writing {output_dir}")


def test_a_worker_killed_outright_fails_the_job_with_the_launchers_error(slurm_cluster, workspace):  # noqa: F811
    cluster = slurm_cluster
    job_id, results, log = submit(cluster, workspace, "killed")
    wait_for_step(cluster, job_id, results / "phase_1", log)
    _worker(cluster, results / "phase_1", 1).send_signal(signal.SIGKILL)
    killed = time.monotonic()

    fields = _finished(cluster, job_id, 300)
    seconds = time.monotonic() - killed
    assert seconds < 120, f"the job ended {seconds:.0f} s after its worker was killed"
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] != "0:0", fields
    assert fields["Restarts"] == "0"  # a failure is not a preemption: no requeue
    text = log.read_text()
    assert "run_pretraining_lamb.sh: error: phase 1 stopped with exit status" in text, text[-3000:]
    assert not (results / "phase_2").exists()


def test_the_requeued_job_resumes_and_ends_with_an_uninterrupted_jobs_weights(
    slurm_cluster,  # noqa: F811
    requeued,
    straight,
):
    cluster, job_id = slurm_cluster, requeued["id"]
    straight_id, straight_results, straight_log = straight
    fields = _finished(cluster, straight_id)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "0")
    fields = _finished(cluster, job_id)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), _tail(
        requeued["log"]
    )

    # One output file holds both runs of the job (run.sub's --open-mode=append).
    first, second = requeued["log"].read_text().split(f"requeueing job {job_id}\n", 1)
    step = _stopped_at(first)
    assert f"Resuming from {requeued['results']}/phase_1/ckpt-{step}." in second
    assert "== run_pretraining_lamb.sh: done" in second and "Resuming" not in straight_log.read_text()

    stopped = requeued["results"]
    assert _final_step(stopped / "phase_1") == _final_step(straight_results / "phase_1") == PHASE1_STEPS
    assert _final_step(stopped / "phase_2") == PHASE2_STEPS
    _assert_identical(stopped / "phase_1", straight_results / "phase_1", PHASE1_STEPS)
    _assert_identical(stopped / "phase_2", straight_results / "phase_2", PHASE2_STEPS)


def test_run_squad_sh_fine_tunes_on_two_workers_and_predicts_as_a_job(slurm_cluster, tmp_path_factory):  # noqa: F811
    """The SQuAD launcher submitted the same way: a tiny BERT fine-tuned on the SQuAD fixture by
    two workers that mpirun starts in the allocation, then the dev set predicted and scored."""
    root = tmp_path_factory.mktemp("slurm_squad")
    fixture = os.path.join(ROOT, "tests", "fixtures", "squad", "train-v1.1-tiny.json")
    squad = root / "squad" / "v1.1"
    squad.mkdir(parents=True)
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        shutil.copy(fixture, squad / name)
    env = {**tiny_pretrained(root, [fixture]), "SQUAD_DIR": str(root / "squad")}
    # Batch 2, learning rate, precision, XLA, GPUs (workers), sequence (the tiny model has 64
    # positions: questions of at most 24 tokens), stride, model, version.
    args = [
        "2",
        "1e-3",
        "fp32",
        "false",
        "2",
        "64",
        "32",
        "tiny",
        "1.1",
        "--epochs=1",
        "--",
        "--max_query_length=24",
    ]
    job_id, results, log = submit(slurm_cluster, (root, env), "results", ("scripts/run_squad.sh", *args))
    fields = _finished(slurm_cluster, job_id)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), _tail(log)
    output = results / "squad_v1.1_tiny"
    evaluated = json.loads((output / "eval_results.json").read_text())
    assert {"exact_match", "f1"} <= set(evaluated) and 0 <= evaluated["f1"] <= 100
    predictions = json.loads((output / "predictions.json").read_text())
    assert len(predictions) == 13  # every question of the fixture
    text = log.read_text()
    assert "through mpirun" in text and "workers: 2 (mpirun -np 2)" in text, text[-3000:]
    assert (
        "== run_squad.sh: results (" in text
        and f"f1                           = {evaluated['f1']:.4f}" in text
    )


# Stands in for a training command under run.sub: it waits for the notice, then completes (0), or
# with `endless` exits as a worker stopped for a notice does (75), every time (a job whose notice
# comes before its first update).
NOTICE_WAITER = """
import signal, sys, time

started, notices = time.monotonic(), []
signal.signal(signal.SIGUSR1, lambda *_: notices.append(time.monotonic()))
while not notices and time.monotonic() - started < 300:
    time.sleep(0.2)
print(f"SIGUSR1 after {notices[0] - started:.0f} s" if notices else "no SIGUSR1 in 300 s", flush=True)
sys.exit((75 if sys.argv[1:] == ["endless"] else 0) if notices else 1)
"""


def _submit_time_limited(cluster, root, minutes, *waiter_args):
    """`sbatch --time=MINUTES scripts/run.sub python3 -c NOTICE_WAITER WAITER_ARGS...` with
    RESULTSDIR=<root>/results (no checkpoint is ever written there): (job id, log, results)."""
    env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV}
    env["HOROVOD_LAUNCHER"] = "mpirun"  # run.sub runs COMMAND once in the batch shell
    env["RESULTSDIR"] = str(root / "results")
    command = [shutil.which("python3") or "python3", "-c", NOTICE_WAITER, *waiter_args]
    log = root / "job.out"
    job_id = cluster.sbatch(
        "-N", "1", f"--time={minutes}", f"--output={log}", "scripts/run.sub", *command, env=env
    )
    return job_id, log, root / "results"


@pytest.fixture(scope="module")
def time_limited_job(slurm_cluster, tmp_path_factory):  # noqa: F811
    """`sbatch --time=3 scripts/run.sub` of NOTICE_WAITER, submitted first: (job id, log, results)."""
    return _submit_time_limited(slurm_cluster, tmp_path_factory.mktemp("time_limit"), 3)


@pytest.fixture(scope="module")
def endless_job(slurm_cluster, tmp_path_factory):  # noqa: F811
    """`sbatch --time=2`, within the notice, of NOTICE_WAITER stopping for every notice: (job id,
    log, results)."""
    return _submit_time_limited(slurm_cluster, tmp_path_factory.mktemp("endless"), 2, "endless")


def test_the_time_limits_notice_reaches_the_command(slurm_cluster, time_limited_job):  # noqa: F811
    """run.sub's own `--signal=B:USR1@120` with a time limit of 3 minutes: SLURM sends the batch
    shell SIGUSR1 within the job's first 100 s, and the relay passes it on to the command (which then
    completes: COMPLETED, not TIMEOUT). (How the workers stop on that notice, and the requeue that
    follows, are as on scancel's: the tests above.)"""
    job_id, log, results = time_limited_job
    fields = _finished(slurm_cluster, job_id, 400)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "0"), _tail(
        log
    )
    assert fields["TimeLimit"] == "00:03:00"
    # Due 60 s into the job; sbatch's --signal may come up to 60 s earlier than due (measured: 35 s
    # into the command under CI's load, 57 s idle), and SLURM checks time limits every 30 s.
    seconds = int(log.read_text().split("SIGUSR1 after ", 1)[1].split(" s", 1)[0])
    assert 0 <= seconds <= 100, log.read_text()
    assert not list(results.glob(".requeue-*"))


def test_a_job_whose_notice_comes_before_any_checkpoint_ends_after_one_requeue(slurm_cluster, endless_job):  # noqa: F811
    """A time limit within run.sub's notice (2 minutes, the notice 120 s before it): the notice comes
    as the job starts, so the relay does not start the command (a training would stop before its
    first update, without a checkpoint); instead of requeueing forever, it requeues once (as for a
    preemption during a start-up) and then ends the job FAILED with one sentence that names
    SLURM's time limit to raise."""
    job_id, log, results = endless_job
    fields = _finished(slurm_cluster, job_id, 400)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "2:0", "1"), _tail(log)
    first, second = log.read_text().split(f"requeueing job {job_id}\n", 1)
    for run in (first, second):
        assert "before the command started: not starting it" in run and "SIGUSR1 after" not in run
    assert f"[run.sub] no new checkpoint under {results} in this run: one more such run ends the job" in first
    assert (
        f"[run.sub] job {job_id} stopped 2 times in a row without a new checkpoint under {results}, so it is "
        "not requeued again: its time limit (TimeLimit=00:02:00) leaves no room for run.sub's notice "
        "(--signal=B:USR1@120, 120 s before the limit), the start-up and one checkpoint; raise the limit "
        "(sbatch --time=MINUTES, or #SBATCH --time) and submit it again." in second
    ), second
    assert "requeueing" not in second and not list(results.glob(".requeue-*"))


def test_the_fault_soak_under_slurm_requeues_twice_and_ends_bit_identical(slurm_cluster, tmp_path):  # noqa: F811
    """tools/fault_soak.py --slurm: each run a job of scripts/run.sub (two srun tasks, CONT=none),
    a preemption's SIGTERM and the time limit's SIGUSR1 sent to the batch shell by scancel at
    seeded updates; run.sub requeues the job each time, and it ends bit-identical with the job
    that was never signalled."""
    env = slurm_cluster.environment({k: v for k, v in worker_env().items() if k not in LAUNCH_ENV})
    done = subprocess.run(
        [sys.executable, "-m", "tools.fault_soak", "--work_dir", str(tmp_path / "soak"), "--faults", "2",
         "--seed", "6", "--max_delay_ms", "0", "--slurm", "-N 1 --ntasks-per-node=2", "--",
         "--use_xla=false"],
        cwd=ROOT, env=dict(env, CONT="none"), capture_output=True, text=True, timeout=2 * JOB_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(done.stdout)
    rows = re.findall(
        r"^\| \d \| (\w+) \| after update \d+ \| ([^|]+) \| resumed from ckpt-\d+ \| 0 \|",
        done.stdout,
        re.M,
    )
    assert rows == [
        ("preempt", "requeued by run.sub (restart 1)"),
        ("time_limit", "requeued by run.sub (restart 2)"),
    ]
    assert "Verdict: bit-identical: all 147 tensors of ckpt-30 equal the uninterrupted run's" in done.stdout
    assert re.search(r"^\| soaked \| 3 \|", done.stdout, re.M)
