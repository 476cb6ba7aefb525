"""Static checks of the container and cluster tooling: the Dockerfiles and every shell script are
lint-clean, the linters do catch findings, and run.sub (no SLURM here) builds the srun command
docs/container.md describes and refuses bad arguments with one clear sentence. The docker scripts'
own tests are in test_docker_scripts.py; scripts/docker/test.sh builds and runs the image."""

import os
import shlex
import subprocess

import pytest

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bash(*args, env=None, cwd=ROOT):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300)


def _printed_command(result):
    """The command a launcher printed with --dry-run (printf %q), as an argv list."""
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout.strip().splitlines()[-1])


def test_dockerfile_and_every_shell_script_are_lint_clean():
    result = _bash("scripts/lint.sh")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[lint] clean" in output
    assert "Haskell Dockerfile Linter 2.15.1: Dockerfile" in output
    assert "[lint] ruff 0.17.6: ." in output  # the whole tree, lint and format
    checked = output.split("[lint] shellcheck 0.11.0: ", 1)[1].splitlines()[0].split()
    for script in [
        "scripts/setup.sh",
        "scripts/test.sh",
        ".ci/run",
        "scripts/run.sub",
        "scripts/lint.sh",
        "scripts/docker/build.sh",
        "scripts/docker/launch.sh",
    ]:
        assert script in checked


def test_the_linters_fail_on_a_finding(tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/bash\nrm -rf $1/tmp\n")  # unquoted expansion: SC2086
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN cd /tmp && make\n")  # untagged image, cd in RUN
    module = tmp_path / "bad.py"
    module.write_text("import os\nx  =  1\n")  # unused import (F401) and unformatted
    result = _bash("scripts/lint.sh", str(script), str(dockerfile), str(module))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "F401" in output and "would be reformatted" in output
    assert "SC2086" in output
    assert "DL3006" in output and "DL3003" in output
    assert "[lint] clean" not in output


def _run_sub_dry_run(tmp_path, **env):
    """scripts/run.sub's dry run in a 2-node x 4-task allocation, data and results under tmp_path."""
    allocation = {
        "BERT_DRY_RUN": "1",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_SUBMIT_DIR": ROOT,
        "DATADIR": str(tmp_path / "data"),
        "RESULTSDIR": str(tmp_path / "results"),
        **env,
    }
    return _bash("scripts/run.sub", "python", "run_pretraining.py", "--note", "two words", env=allocation)


def test_run_sub_starts_one_task_per_gpu_in_the_container(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    result = _run_sub_dry_run(tmp_path, CONT="/shared/bert-tf2.sqsh")
    argv = _printed_command(result)
    assert "2 node(s) x 4 task(s) = 8 workers" in result.stdout
    assert argv[:3] == ["srun", "--mpi=pmix", "--ntasks-per-node=4"]
    assert "--container-image=/shared/bert-tf2.sqsh" in argv
    assert f"--container-mounts={ROOT}:/workspace/bert,{data}:/data,{tmp_path / 'results'}:/results" in argv
    assert "--container-workdir=/workspace/bert" in argv
    assert argv[-4:] == ["python", "run_pretraining.py", "--note", "two words"]


def test_run_sub_without_a_container_starts_each_task_from_the_checkout(tmp_path):
    result = _run_sub_dry_run(tmp_path, CONT="none", BERT_PYTHON="/opt/py/bin/python")
    argv = _printed_command(result)
    assert f"2 node(s) x 4 task(s) = 8 workers; no container (CONT=none); code {ROOT}" in result.stdout
    assert argv[:3] == ["srun", "--mpi=pmix", "--ntasks-per-node=4"]
    assert f"--chdir={ROOT}" in argv and not any(a.startswith("--container") for a in argv)
    # The wrapper puts the checkout's Python first on PATH ($0), then runs the command as given.
    assert argv[-5:] == ["/opt/py/bin", "python", "run_pretraining.py", "--note", "two words"]


@pytest.mark.parametrize(
    "env, args, message",
    [
        ({"SLURM_JOB_ID": ""}, ["python", "x.py"], "not inside a SLURM job"),
        ({"SLURM_JOB_ID": "1", "CONT": ""}, ["python", "x.py"], "set CONT"),
        (
            {"SLURM_JOB_ID": "1", "CONT": "img.sqsh", "DATADIR": "/no/such/dir"},
            ["python", "x.py"],
            "DATADIR /no/such/dir is not a directory",
        ),
        ({"SLURM_JOB_ID": "1"}, [], "give the command to run"),
    ],
)
def test_run_sub_refuses_to_start_without_what_it_needs(env, args, message):
    result = _bash("scripts/run.sub", *args, env={"CONT": "", "DATADIR": "", **env})
    assert result.returncode == 2
    assert message in result.stderr
