"""azureml/: every job, compute and environment file loads with Azure ML's own SDK (offline: no
workspace, no network), every job's command passes its launcher's --dry_run as one of the ranks
Azure ML starts, the sweep searches run_tune's space for the metric our runs log, and specs that
cannot run are refused."""

from __future__ import annotations

import glob
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

pytest.importorskip("azure.ai.ml")
from azure.ai.ml import load_compute, load_environment, load_job  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AZUREML = os.path.join(ROOT, "azureml")
JOBS = sorted(glob.glob(os.path.join(AZUREML, "jobs", "*.yml")))
COMPUTES = sorted(glob.glob(os.path.join(AZUREML, "compute", "*.yml")))

_spec = importlib.util.spec_from_file_location("azureml_submit", os.path.join(AZUREML, "submit.py"))
submit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(submit)


_lock_spec = importlib.util.spec_from_file_location(
    "azureml_output_lock", os.path.join(AZUREML, "output_lock.py")
)
output_lock = importlib.util.module_from_spec(_lock_spec)
sys.modules[_lock_spec.name] = output_lock  # its dataclasses look themselves up there
_lock_spec.loader.exec_module(output_lock)

# Sizes Azure has retired (their compute can no longer be created): NCv3 on 2025-09-30.
RETIRED_SIZES = ("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3")


@pytest.fixture(autouse=True)
def _no_azure_profile(tmp_path, monkeypatch):
    """Hermetic: the SDK never sees a user's ~/.azure or a workspace config."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure"))


def _name(path: str) -> str:
    return os.path.basename(path)[: -len(".yml")]


def _write(tmp_path, spec: dict, name: str = "job.yml") -> str:
    """A copy of a job spec beside the originals' relative paths (code: ../..) still resolving."""
    folder = tmp_path / "azureml" / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_the_folder_holds_every_kind_of_job():
    names = {_name(p) for p in JOBS}
    assert {"data-prep", "data-prep-ranks", "pretrain", "pretrain-debug", "finetune-squad"} <= names
    assert {"finetune-glue", "sweep-glue"} <= names


@pytest.mark.parametrize("path", JOBS, ids=_name)
def test_job_loads_and_passes_our_checks(path):
    job = load_job(path)
    spec = submit.check(path)
    assert job.type == spec["type"]
    assert spec["environment" if spec["type"] == "command" else "trial"]
    if spec.get("distribution"):  # one process per GPU (or per node for the data stages)
        assert job.distribution.type == "mpi"


def test_environment_builds_from_the_repository_dockerfile():
    env = load_environment(os.path.join(AZUREML, "environment.yml"))
    assert os.path.realpath(os.path.join(AZUREML, env.build.path)) == ROOT
    assert env.build.dockerfile_path == "Dockerfile"
    assert os.path.isfile(os.path.join(ROOT, env.build.dockerfile_path))


@pytest.mark.parametrize("path", COMPUTES, ids=_name)
def test_compute_loads(path):
    compute = load_compute(path)
    assert compute.type == "amlcompute"
    assert compute.min_instances == 0  # no idle nodes billed between jobs
    assert compute.tier == ("low_priority" if "lowpri" in path else "dedicated")


def test_every_job_runs_on_a_compute_defined_here_of_a_current_size():
    sizes = {load_compute(p).name: load_compute(p).size for p in COMPUTES}
    assert not set(sizes.values()) & set(RETIRED_SIZES)
    assert {"Standard_ND96isr_H100_v5", "Standard_ND96asr_v4", "Standard_ND40rs_v2"} <= set(sizes.values())
    assert {"Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3"} <= set(sizes.values())
    for path in JOBS:
        spec = submit.read_job(path)
        assert spec["compute"].removeprefix("azureml:") in sizes, path


def test_pretraining_runs_on_nd_h100_v5_one_process_per_gpu():
    for name in ("pretrain", "pretrain-debug"):
        spec = submit.read_job(os.path.join(AZUREML, "jobs", f"{name}.yml"))
        assert "--precision=${{inputs.precision}}" in spec["command"]
        assert spec["inputs"]["precision"] == "fp16"  # every GPU here has fp16; bf16 on A100 / H100
        assert spec["compute"] == "azureml:nd-h100-v5"
        assert submit.compute_size(spec) == "Standard_ND96isr_H100_v5"
        assert spec["distribution"] == {"type": "mpi", "process_count_per_instance": 8}
        assert spec["outputs"]["results"]["mode"] == "rw_mount"
        # A fixed datastore folder: a re-submitted job mounts the same checkpoints and resumes ...
        assert spec["outputs"]["results"]["path"].startswith("azureml://datastores/")
        # ... and holds the folder's lock while it runs: a second job at once is refused.
        assert spec["command"].startswith("python azureml/output_lock.py ${{outputs.results}} bash ")
    assert (
        submit.read_job(os.path.join(AZUREML, "jobs", "pretrain-debug.yml"))["resources"]["instance_count"]
        == 1
    )


def test_bf16_is_refused_where_the_gpus_lack_it():
    path = os.path.join(AZUREML, "jobs", "pretrain.yml")
    submit.check(path, {"inputs.precision": "bf16"})  # H100: fine
    with pytest.raises(submit.JobError, match="Standard_ND40rs_v2, whose GPUs have no bf16"):
        submit.check(path, {"inputs.precision": "bf16", "compute": "azureml:nd40rs-v2"})
    sweep = os.path.join(AZUREML, "jobs", "sweep-glue.yml")
    with pytest.raises(submit.JobError, match="Standard_NC4as_T4_v3, whose GPUs have no bf16"):
        submit.check(sweep, {"inputs.precision": "bf16", "compute": "azureml:nc-t4-v3"})


def _dry_run(spec, tmp_path):
    result = submit.dry_run(spec, str(tmp_path / "work"))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.process
@pytest.mark.parametrize("path", JOBS, ids=_name)
def test_job_command_passes_the_launcher_dry_run(path, tmp_path):
    spec = submit.read_job(path)
    out = _dry_run(spec, tmp_path)
    work = str(tmp_path / "work")
    assert "dry run: nothing checked or started." in out
    name = "data" if "data" in spec["outputs"] else "results"
    assert os.path.join(work, "outputs", name) in out  # the datastore folder became the launcher's path
    world = submit.world_size(spec)
    if world > 1 and "prepare_data.py" not in submit._command_of(spec):
        # Azure ML's mpirun started the ranks: the launcher runs the entry point in place.
        assert f"workers: {world} (this process is one)" in out
        assert "--use_horovod=true" in out


@pytest.mark.process
def test_sweep_trials_evaluate_during_training(tmp_path):
    """The Bandit policy compares each trial's metric at every evaluation the trial logs to MLflow:
    the flag after `--` reaches run_classifier.py."""
    spec = submit.read_job(os.path.join(AZUREML, "jobs", "sweep-glue.yml"))
    command = next(line for line in _dry_run(spec, tmp_path).splitlines() if "run_classifier.py" in line)
    assert command.endswith(" --eval_every_n_steps=50")


@pytest.mark.process
def test_pretraining_dry_run_resolves_both_phases(tmp_path):
    spec = submit.read_job(os.path.join(AZUREML, "jobs", "pretrain.yml"))
    out = _dry_run(spec, tmp_path)
    results = os.path.join(str(tmp_path / "work"), "outputs", "results")
    assert "precision          = fp16, xla on" in out
    assert f"--output_dir={results}/phase_1" in out
    assert f"--init_checkpoint={results}/phase_1" in out  # phase 2 from phase 1, in the output
    assert "global batch       = 131072 (64 per worker x 128 accumulation x 16 workers)" in out


@pytest.mark.process
def test_submit_sets_nodes_gpus_and_the_worker_count_together(tmp_path, capsys):
    status = submit.main(["pretrain", "--nodes", "4", "--input", "data=azureml://datastores/d/paths/x"])
    out = capsys.readouterr().out
    assert status == 0
    assert "workers: 32 (this process is one)" in out
    assert (
        out.strip()
        .splitlines()[-1]
        .endswith(
            "azureml/jobs/pretrain.yml --set resources.instance_count=4 distribution.process_count_per_instance=8 "
            "inputs.num_gpus=32 inputs.data.path=azureml://datastores/d/paths/x"
        )
    )


def test_sweep_space_is_run_tunes_default_space():
    from tuning.search_space import DEFAULT_SPACE, build_space

    spec = submit.read_job(os.path.join(AZUREML, "jobs", "sweep-glue.yml"))
    space = spec["search_space"]
    ours = build_space(None, {})
    assert set(space) == set(DEFAULT_SPACE)
    for name, dim in ours.items():
        entry = space[name]
        if dim.choices:
            assert entry["type"] == "choice"
            assert tuple(entry["values"]) == dim.choices
        else:
            assert entry["type"] == ("loguniform" if dim.log else "uniform")
            bound = math.exp if dim.log else float
            assert bound(entry["min_value"]) == pytest.approx(dim.low, rel=1e-12)
            assert bound(entry["max_value"]) == pytest.approx(dim.high, rel=1e-12)
    # Each dimension reaches the trial's command as the flag run_tune's trials pass.
    for name, flag in (("learning_rate", "learning_rate"), ("train_batch_size", "batch_size")):
        assert f"--{flag}=${{{{search_space.{name}}}}}" in spec["trial"]["command"]
    assert "--epochs=${{search_space.num_train_epochs}}" in spec["trial"]["command"]
    assert "--num_gpu=1" in spec["trial"]["command"]  # run_tune's trials: one GPU, rates as sampled


def test_sweep_metric_and_bandit_policy():
    from training import tasks

    spec = submit.read_job(os.path.join(AZUREML, "jobs", "sweep-glue.yml"))
    task = spec["inputs"]["task_name"]
    # The metric run_tune maximises for the task: its first official dev metric, as log.jsonl names it.
    assert spec["objective"] == {"goal": "maximize", "primary_metric": tasks.find(task).metrics(task)[0]}
    job = load_job(os.path.join(AZUREML, "jobs", "sweep-glue.yml"))
    assert job.early_termination.type == "bandit"
    assert job.early_termination.slack_factor == 0.1


def _copy(name: str) -> dict:
    return submit.read_job(os.path.join(AZUREML, "jobs", f"{name}.yml"))


def test_wrong_distribution_type_is_refused(tmp_path):
    spec = _copy("pretrain")
    spec["distribution"]["type"] = "mpii"
    with pytest.raises(submit.JobError, match="schema refuses"):
        submit.check(_write(tmp_path, spec))
    spec["distribution"] = {"type": "pytorch", "process_count_per_instance": 8}  # valid for Azure ML
    with pytest.raises(submit.JobError, match="use type: mpi"):
        submit.check(_write(tmp_path, spec))


def test_missing_input_is_refused(tmp_path):
    spec = _copy("finetune-squad")
    del spec["inputs"]["squad"]  # Azure ML's schema lets this through; the service would not
    load_job(_write(tmp_path, spec))
    with pytest.raises(submit.JobError, match=r"inputs\.squad\}\} but the job declares no inputs 'squad'"):
        submit.check(_write(tmp_path, spec))


def test_sweep_dimension_missing_is_refused(tmp_path):
    spec = _copy("sweep-glue")
    del spec["search_space"]["num_train_epochs"]
    with pytest.raises(submit.JobError, match="no search_space 'num_train_epochs'"):
        submit.check(_write(tmp_path, spec))


@pytest.mark.process
def test_worker_count_that_disagrees_with_the_nodes_is_refused(tmp_path):
    path = os.path.join(AZUREML, "jobs", "pretrain.yml")
    with pytest.raises(submit.JobError, match=r"inputs\.num_gpus=16 but Azure ML starts 32"):
        submit.check(path, {"resources.instance_count": 4})
    # ... and the launcher refuses it too, on every rank, before any work.
    spec = submit.read_job(path, {"inputs.num_gpus": 8})
    result = submit.dry_run(spec, str(tmp_path / "work"))
    assert result.returncode == 2
    assert "num_gpus=8 but 16 worker processes were started" in result.stderr


@pytest.mark.process
def test_a_data_stage_the_recipe_does_not_plan_is_refused(tmp_path):
    spec = submit.read_job(
        os.path.join(AZUREML, "jobs", "data-prep-ranks.yml"), {"inputs.stage_flags": "--n_training_shards 7"}
    )
    result = submit.dry_run(spec, str(tmp_path / "work"))
    assert result.returncode != 0
    assert "none of scripts/data_download.sh's planned commands" in result.stderr


def test_a_fixed_output_without_the_lock_is_refused(tmp_path):
    spec = _copy("pretrain")
    spec["command"] = submit.LOCK.sub("", spec["command"])
    with pytest.raises(submit.JobError, match=r"outputs\.results is a fixed folder that a second submission"):
        submit.check(_write(tmp_path, spec))
    spec = _copy("sweep-glue")
    spec["outputs"]["results"]["path"] = "azureml://datastores/workspaceblobstore/paths/bert/results/sweep"
    with pytest.raises(submit.JobError, match="every trial of the sweep would share"):
        submit.check(_write(tmp_path, spec))


# azureml/output_lock.py, for real: processes on this machine, one folder, timings in tenths of seconds.
HOLD = "import sys, time; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); time.sleep(float(sys.argv[3]))"
FAST = ["--interval_s", "0.1", "--settle_s", "0.3"]


def _start(folder, job, *command, rank=0, stale_s=30.0, **popen):
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": str(rank)}
    argv = [sys.executable, os.path.join(AZUREML, "output_lock.py"), "--job_id", job, *FAST]
    argv += ["--stale_s", str(stale_s), str(folder), *command]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _hold(folder, job, seconds, marker, **kw):
    return _start(folder, job, sys.executable, "-c", HOLD, str(marker), job, str(seconds), **kw)


def _held_by(folder, job, timeout=10.0):
    """Waits until `job` holds the lock (count >= 1: past the settle time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = output_lock.Holder.parse(open_text(folder / output_lock.LOCK_NAME))
        if holder is not None and holder.job == job and holder.count >= 1:
            return holder
        time.sleep(0.02)
    raise AssertionError(f"{job} never held the lock")


def open_text(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.process
def test_a_second_job_at_once_is_refused_and_runs_once_the_first_has_ended(tmp_path):
    folder, marker = tmp_path / "results", tmp_path / "ran"
    first = _hold(folder, "job-A", 1.5, marker)
    _held_by(folder, "job-A")
    started = time.monotonic()
    second = _hold(folder, "job-B", 0, marker)
    _, err = second.communicate(timeout=20)
    assert second.returncode == output_lock.REFUSED_EXIT_STATUS
    assert time.monotonic() - started < 2.5  # seen beating within a few beats, before job-A ends
    assert "is in use by job job-A (host " in err and "another output path" in err
    assert first.wait(timeout=20) == 0
    assert not (folder / output_lock.LOCK_NAME).exists()  # released at the end
    again = _hold(folder, "job-B", 0, marker)  # the same submission again: it runs now
    assert again.wait(timeout=20) == 0
    assert marker.read_text().split() == ["job-A", "job-B"]


@pytest.mark.process
def test_two_jobs_starting_together_on_a_new_folder_one_runs(tmp_path):
    folder, marker = tmp_path / "results", tmp_path / "ran"
    jobs = [_hold(folder, name, 1, marker) for name in ("job-A", "job-B")]
    statuses = sorted(p.wait(timeout=20) for p in jobs)
    assert statuses == [0, output_lock.REFUSED_EXIT_STATUS]
    assert len(marker.read_text().split()) == 1


@pytest.mark.process
def test_a_job_killed_outright_leaves_a_lock_that_goes_stale(tmp_path):
    """A node taken without notice: the job's lock stops beating; the next submission waits stale_s
    (on its own clock), takes the lock over and runs. Azure ML restarting the same job goes on at once."""
    folder, marker = tmp_path / "results", tmp_path / "ran"
    dead = _hold(folder, "job-A", 60, marker, start_new_session=True)
    _held_by(folder, "job-A")
    while "job-A" not in open_text(marker):  # its command is running
        time.sleep(0.02)
    os.killpg(dead.pid, signal.SIGKILL)
    dead.wait(timeout=10)
    assert output_lock.Holder.parse(open_text(folder / output_lock.LOCK_NAME)).job == "job-A"
    started = time.monotonic()
    assert _hold(folder, "job-B", 0, marker, stale_s=1.5).wait(timeout=20) == 0
    assert time.monotonic() - started >= 1.5
    (folder / output_lock.LOCK_NAME).write_text("job-C host 1 7\n")  # job-C's own lock, before a restart
    started = time.monotonic()
    assert _hold(folder, "job-C", 0, marker, stale_s=30).wait(timeout=20) == 0
    assert time.monotonic() - started < 5
    assert marker.read_text().split() == ["job-A", "job-B", "job-C"]


@pytest.mark.process
def test_a_preemption_notice_reaches_the_command_and_a_resubmission_continues_at_once(tmp_path):
    folder = tmp_path / "results"
    trap = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(75)); "
        "print('ready', flush=True); time.sleep(30)"
    )
    job = _start(folder, "job-A", sys.executable, "-c", trap)
    assert job.stdout.readline().startswith("output_lock.py: job job-A holds")
    assert job.stdout.readline() == "ready\n"
    job.send_signal(signal.SIGTERM)  # to the wrapper alone, as mpirun passes it on
    assert job.wait(timeout=20) == 75  # the launcher's "stopped for a preemption" status, passed through
    assert not (folder / output_lock.LOCK_NAME).exists()
    started = time.monotonic()
    resubmitted = _start(folder, "job-B", sys.executable, "-c", "pass")
    assert resubmitted.wait(timeout=20) == 0 and time.monotonic() - started < 5


@pytest.mark.process
def test_the_other_ranks_follow_their_own_jobs_lock(tmp_path):
    folder, marker = tmp_path / "results", tmp_path / "ran"
    rank1 = _hold(folder, "job-A", 0, marker, rank=1)  # before rank 0: it waits for it
    time.sleep(0.5)
    assert rank1.poll() is None
    rank0 = _hold(folder, "job-A", 1.5, marker)
    assert rank1.wait(timeout=20) == 0
    other = _hold(folder, "job-B", 0, marker, rank=1)
    _, err = other.communicate(timeout=20)
    assert other.returncode == output_lock.REFUSED_EXIT_STATUS and "in use by job job-A" in err
    assert rank0.wait(timeout=20) == 0
    assert sorted(marker.read_text().split()) == ["job-A", "job-A"]
