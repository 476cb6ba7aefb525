"""scripts/run.sub's relay (launch/runner.py's `requeue`) deciding whether to requeue, in this
process, with a stand-in `scontrol` on PATH that records its calls and shows a time limit: a job
whose runs stop twice in a row without a new checkpoint under its results directory ends with one
sentence naming the limit to raise, instead of requeueing forever. Under a real SLURM:
tests/test_slurm.py."""

import json
import os
import sys

import pytest

from launch.runner import (
    EARLY_NOTICES_ENV,
    NOTICE_SECONDS_ENV,
    REQUEUE_RESULTS_ENV,
    newest_checkpoints,
    requeue,
    seconds_left,
)

pytestmark = pytest.mark.process  # each run's command is a child process

JOB = "4242"
# What CheckpointManager writes: the newest checkpoint, then the kept ones and their times.
INDEX = """model_checkpoint_path: "ckpt-{step}"
all_model_checkpoint_paths: "ckpt-{step}"
all_model_checkpoint_timestamps: {time}
last_preserved_timestamp: 1765130000.0
"""


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A stand-in `scontrol` first on PATH: its calls, one a line, in the returned file."""
    calls = tmp_path / "scontrol.log"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/bash\necho "$*" >> {calls}\n'
        f'[[ "$*" != "-o show job {JOB}" ]] || echo "JobId={JOB} JobName=bert-tf2 TimeLimit=00:03:00 TimeMin=N/A"\n'
    )
    fake.chmod(0o755)
    # squeue's time left (%L): what the file `left` holds, an hour unless a test writes it.
    (fake.parent / "squeue").write_text(f"#!/bin/bash\ncat {tmp_path}/left 2>/dev/null || echo 1:00:00\n")
    (fake.parent / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    calls.touch()
    return calls


def _run(results, restarts, saves=None, status=75, early=""):
    """One run of the job (SLURM_RESTART_COUNT=`restarts`) whose command writes checkpoint
    `saves` (a step) under results/phase_1, when given, and exits with `status`; `early`: the
    notices run.sub's batch shell got before the relay (BERT_EARLY_NOTICES)."""
    index = results / "phase_1" / "checkpoint"
    save = f"import os; os.makedirs({str(index.parent)!r}, exist_ok=True); " if saves is not None else ""
    if saves is not None:
        save += f"open({str(index)!r}, 'w').write({INDEX.format(step=saves, time=1765130000 + saves)!r}); "
    command = [sys.executable, "-c", f"{save}import sys; sys.exit({status})"]
    environ = {
        REQUEUE_RESULTS_ENV: str(results),
        "SLURM_RESTART_COUNT": str(restarts),
        EARLY_NOTICES_ENV: early,
        NOTICE_SECONDS_ENV: "120",
    }
    return requeue(command, JOB, environ)


def _state(results):
    path = results / f".requeue-{JOB}.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_second_run_in_a_row_without_a_new_checkpoint_ends_the_job_naming_its_time_limit(
    tmp_path, scontrol, capsys
):
    results = tmp_path / "results"  # not there yet: the relay makes it for its state
    assert _run(results, 0) == 0  # a first run without a checkpoint: a start-up's preemption
    assert scontrol.read_text() == f"requeue {JOB}\n"
    assert _state(results) == {"restarts": 0, "idle_runs": 1}
    out = capsys.readouterr().out
    assert f"[run.sub] no new checkpoint under {results} in this run: one more such run ends the job" in out
    assert f"requeueing job {JOB}" in out

    assert _run(results, 1) == 2
    assert scontrol.read_text() == f"requeue {JOB}\n-o show job {JOB}\n"  # no second requeue
    captured = capsys.readouterr()
    assert "requeueing" not in captured.out
    assert captured.err == (
        f"[run.sub] job {JOB} stopped 2 times in a row without a new checkpoint under {results}, so it is "
        "not requeued again: its time limit (TimeLimit=00:03:00) leaves no room for run.sub's notice "
        "(--signal=B:USR1@120, 120 s before the limit), the start-up and one checkpoint; raise the limit "
        "(sbatch --time=MINUTES, or #SBATCH --time) and submit it again.\n"
    )
    assert _state(results) is None


def test_a_run_that_saved_a_new_checkpoint_starts_the_count_again(tmp_path, scontrol, capsys):
    results = tmp_path / "results"
    assert _run(results, 0, saves=50) == 0
    assert _state(results) == {"restarts": 0, "idle_runs": 0}
    assert _run(results, 1) == 0  # stopped during its start-up: one idle run
    assert _run(results, 2, saves=100) == 0
    assert _run(results, 3) == 0
    assert _state(results) == {"restarts": 3, "idle_runs": 1}
    # The same step saved again (a run stopped before its first update) is no progress.
    assert _run(results, 4, saves=100) == 2
    assert scontrol.read_text() == f"requeue {JOB}\n" * 4 + f"-o show job {JOB}\n"
    assert "not requeued again" in capsys.readouterr().err


def test_a_notice_before_the_relay_stops_the_run_before_its_command_starts(tmp_path, scontrol, capsys):
    results = tmp_path / "results"
    assert _run(results, 0, saves=50, early="USR1") == 0  # requeued; the command never ran
    assert not (results / "phase_1").exists() and _state(results) == {"restarts": 0, "idle_runs": 1}
    out = capsys.readouterr().out
    assert "[run.sub] SIGUSR1 before the command started: not starting it" in out
    assert _run(results, 1, early="USR1 TERM") == 2
    assert scontrol.read_text() == f"requeue {JOB}\n-o show job {JOB}\n"


def test_a_time_limit_already_within_the_notice_stops_the_run_before_its_command_starts(
    tmp_path, scontrol, capsys
):
    results = tmp_path / "results"
    (tmp_path / "left").write_text("1:55\n")  # the notice was due 5 s ago, perhaps lost
    assert _run(results, 0, saves=50) == 0 and not (results / "phase_1").exists()
    assert (
        "[run.sub] 115 s left, within the notice's 120 s before the command started"
        in capsys.readouterr().out
    )
    (tmp_path / "left").write_text("2:01\n")
    assert _run(results, 1, saves=50) == 0 and newest_checkpoints(str(results)) == {"phase_1": "ckpt-50"}


def test_seconds_left_reads_squeues_time_left():
    assert [seconds_left(s) for s in ("1:55", "59:59", "1:00:00", "2-03:04:05", "0:00")] == [
        115,
        3599,
        3600,
        ((2 * 24 + 3) * 60 + 4) * 60 + 5,
        0,
    ]
    assert seconds_left("UNLIMITED") is None and seconds_left("NOT_SET\n") is None


def test_state_from_another_restart_is_not_counted_and_an_ended_job_leaves_none(tmp_path, scontrol):
    results = tmp_path / "results"
    assert _run(results, 0) == 0
    # Restarts 0 wrote it; a run at restart 2 (a requeue the relay did not make in between, such
    # as `scontrol requeue` by hand) starts the count again.
    assert _run(results, 2) == 0 and _state(results) == {"restarts": 2, "idle_runs": 1}
    assert _run(results, 3, status=0) == 0 and _state(results) is None  # completed
    assert _run(results, 0) == 0
    assert _run(results, 1, status=4) == 4 and _state(results) is None  # failed: not requeued
    assert scontrol.read_text() == f"requeue {JOB}\n" * 3


def test_newest_checkpoints_names_each_output_directorys_newest_checkpoint(tmp_path):
    for name, step, time in (("phase_1", 90, 1.5), ("phase_2", 10, 2.5), ("tune/trial_3", 7, 3.5)):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "checkpoint").write_text(INDEX.format(step=step, time=time))
    (tmp_path / "empty").mkdir()
    found = newest_checkpoints(str(tmp_path))
    assert found == {"phase_1": "ckpt-90", "phase_2": "ckpt-10", "tune/trial_3": "ckpt-7"}
    # A save of the same step rewrites the index with a new time: still the same checkpoint.
    (tmp_path / "phase_1" / "checkpoint").write_text(INDEX.format(step=90, time=99.5))
    assert newest_checkpoints(str(tmp_path)) == found
    assert newest_checkpoints(str(tmp_path / "missing")) == {}


def test_a_sigterm_for_srun_goes_as_sigusr1_which_srun_passes_on_to_its_tasks():
    """srun takes SIGTERM as "end the step now" (its tasks killed without a checkpoint); SIGUSR1 it
    passes on to every task, which takes it as the same notice. Under a real SLURM: the fault soak
    in tests/test_slurm.py."""
    import signal

    from launch.runner import _forwarded

    assert _forwarded(signal.SIGTERM, ["srun", "--mpi=pmix", "bash"]) == signal.SIGUSR1
    assert _forwarded(signal.SIGTERM, ["/usr/bin/srun"]) == signal.SIGUSR1
    assert _forwarded(signal.SIGUSR1, ["srun"]) == signal.SIGUSR1
    assert _forwarded(signal.SIGTERM, ["mpirun", "-np", "2"]) == signal.SIGTERM
    assert _forwarded(signal.SIGINT, ["bash", "scripts/run_pretraining_lamb.sh"]) == signal.SIGINT
