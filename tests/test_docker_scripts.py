"""scripts/docker/: build.sh and launch.sh turn their options into the docker or podman command
docs/container.md describes (dry runs) and refuse bad arguments with one clear sentence; podman
gets only the resource limits this shell may grant. The image itself is built and run by
scripts/docker/test.sh (CI) and scripts/docker/check_gpu_build.sh (the GPU recipe)."""

import os
import shlex
import subprocess

import pytest

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bash(*args, env=None, cwd=ROOT):
    full_env = {k: v for k, v in os.environ.items() if k != "BERT_CONTAINER_ENGINE"}
    full_env.update(env or {})
    return subprocess.run(["bash", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300)


def _printed_command(result):
    """The command a launcher printed with --dry-run (printf %q), as an argv list."""
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout.strip().splitlines()[-1])


def _values(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_launch_builds_nvidias_docker_run_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    result = _bash(
        "scripts/docker/launch.sh",
        "--dry-run",
        "--gpus",
        "0,1",
        "--data",
        str(data),
        "--results",
        str(tmp_path / "results"),
        "--env",
        "NCCL_SOCKET_IFNAME=ib0",
        "--",
        "python",
        "run_pretraining.py",
        "--note",
        "two words",
    )
    argv = _printed_command(result)
    assert argv[:2] == ["docker", "run"]
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    for flag in ["--net=host", "--shm-size=1g", "--rm"]:
        assert flag in argv
    ulimits = [argv[i + 1] for i, a in enumerate(argv) if a == "--ulimit"]
    assert ulimits == ["memlock=-1", "stack=67108864"]
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert volumes == [f"{ROOT}:/workspace/bert", f"{data}:/data", f"{tmp_path / 'results'}:/results"]
    assert argv[argv.index("-e") + 1] == "NCCL_SOCKET_IFNAME=ib0"
    # The command comes through unchanged, after the image.
    assert argv[-5:] == ["bert-tf2:latest", "python", "run_pretraining.py", "--note", "two words"]
    assert not (tmp_path / "results").exists()  # a dry run creates nothing


def test_launch_defaults_and_ipc_host():
    argv = _printed_command(
        _bash(
            "scripts/docker/launch.sh",
            "--dry-run",
            "--ipc-host",
            "--no-code-mount",
            env={"NV_VISIBLE_DEVICES": "all", "BERT_IMAGE": "reg.io/me/bert:1"},
        )
    )
    assert argv[argv.index("--gpus") + 1] == "all"
    assert "--ipc=host" in argv and not any(a.startswith("--shm-size") for a in argv)
    assert f"{ROOT}:/workspace/bert" not in argv
    assert argv[-2:] == ["reg.io/me/bert:1", "/bin/bash"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "0,x"], "--gpus must be all, none or a list of GPU indices"),
        (["--data", "/no/such/dir"], "--data /no/such/dir is not a directory"),
        (["--shm-size", "lots"], "--shm-size must look like 1g"),
        (["--mount", "relative:/x"], "--mount 'relative:/x' must be /SRC:/DST"),
        (["--mount", "/no/such/dir:/x"], "--mount source /no/such/dir does not exist"),
        (["--env", "1BAD=x"], "--env '1BAD=x' must be NAME or NAME=VALUE"),
        (["--frobnicate"], "unknown option: --frobnicate"),
    ],
)
def test_launch_refuses_bad_arguments(args, message):
    result = _bash("scripts/docker/launch.sh", "--dry-run", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_build_passes_the_build_arguments():
    argv = _printed_command(
        _bash(
            "scripts/docker/build.sh",
            "--dry-run",
            "--tag",
            "bert-tf2:dev",
            "--uid",
            "1234",
            "--gid",
            "99",
            "--cuda-cc-list",
            "80,90",
        )
    )
    assert argv[:4] == ["docker", "build", "--tag", "bert-tf2:dev"]
    build_args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert build_args == ["BERT_UID=1234", "BERT_GID=99", "HOROVOD_BUILD_CUDA_CC_LIST=80,90"]
    assert argv[-1] == ROOT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tag", "Bert:Latest"], "is not a valid image name"),
        (["--cuda-cc-list", "8.0"], "--cuda-cc-list must look like 80,90"),
        (["--uid", "1000"], "--uid and --gid go together"),
        (["--tf-package", "torch==2.0"], "--tf-package must be a tensorflow requirement"),
        (["--engine", "lxc"], "--engine must be docker or podman (got 'lxc')"),
        (["--gpu-operations", "MPI"], "--gpu-operations must be NCCL or none"),
        (["--nccl-link", "dynamic"], "--nccl-link must be STATIC or SHARED"),
        (["--local-base", "--base-image", "x"], "--local-base and --base-image exclude each other"),
    ],
)
def test_build_refuses_bad_arguments(args, message):
    result = _bash("scripts/docker/build.sh", "--dry-run", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_build_cpu_on_the_local_base_with_podman():
    result = _bash(
        "scripts/docker/build.sh",
        "--dry-run",
        "--engine",
        "podman",
        "--cpu",
        "--local-base",
        "--tag",
        "b:cpu",
    )
    argv = _printed_command(result)
    # The Dockerfile's SHELL instruction needs the docker format (podman writes OCI by default).
    assert argv[:6] == ["podman", "build", "--format", "docker", "--tag", "b:cpu"]
    assert _values(argv, "--build-arg") == [
        "BASE_IMAGE=localhost/bert-tf2-base:bookworm",
        "HOROVOD_GPU_OPERATIONS=",
        "BERT_TF_PACKAGE=tensorflow-cpu==2.21.0",
    ]
    assert "Horovod GPU operations: none" in result.stdout


def test_build_gpu_operations_and_nccl_link_reach_the_build_arguments():
    argv = _printed_command(
        _bash("scripts/docker/build.sh", "--dry-run", "--gpu-operations", "NCCL", "--nccl-link", "SHARED")
    )
    assert _values(argv, "--build-arg") == ["HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_NCCL_LINK=SHARED"]


def test_the_engine_comes_from_the_environment_when_not_named():
    argv = _printed_command(
        _bash("scripts/docker/build.sh", "--dry-run", env={"BERT_CONTAINER_ENGINE": "podman"})
    )
    assert argv[:2] == ["podman", "build"]


def test_launch_with_podman_names_gpus_as_cdi_devices(tmp_path):
    argv = _printed_command(
        _bash(
            "scripts/docker/launch.sh",
            "--dry-run",
            "--engine",
            "podman",
            "--gpus",
            "0,3",
            "--results",
            str(tmp_path),
        )
    )
    assert argv[:2] == ["podman", "run"]
    assert _values(argv, "--device") == ["nvidia.com/gpu=0", "nvidia.com/gpu=3"]
    assert "--gpus" not in argv
    argv = _printed_command(
        _bash(
            "scripts/docker/launch.sh",
            "--dry-run",
            "--engine",
            "podman",
            "--gpus",
            "all",
            "--results",
            str(tmp_path),
        )
    )
    assert _values(argv, "--device") == ["nvidia.com/gpu=all"]


def test_launch_with_podman_asks_only_for_limits_this_shell_may_grant(tmp_path):
    # podman cannot raise a container's limits above the caller's hard limits (no
    # CAP_SYS_RESOURCE): lowered hard limits must come through as the container's, and docker's
    # daemon keeps NVIDIA's unlimited locked memory.
    launch = f"bash scripts/docker/launch.sh --dry-run --gpus none --results {tmp_path}"
    script = f"ulimit -l 1024 -n 4096 -s 8192 -u 500 && {launch} --engine podman"
    argv = _printed_command(_bash("-c", script))
    assert _values(argv, "--ulimit") == [
        "nofile=4096:4096",
        "nproc=500:500",
        f"memlock={1024 * 1024}",
        f"stack={8192 * 1024}",
    ]
    argv = _printed_command(_bash("-c", f"ulimit -l 1024 && {launch} --engine docker"))
    assert _values(argv, "--ulimit") == ["memlock=-1", "stack=67108864"]


def test_launch_refuses_a_missing_engine_in_one_sentence(tmp_path):
    # A PATH holding every program of this one but podman.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in reversed(os.environ["PATH"].split(os.pathsep)):
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                if name != "podman":
                    (bin_dir / name).unlink(missing_ok=True)
                    (bin_dir / name).symlink_to(os.path.join(directory, name))
    result = _bash(
        "scripts/docker/launch.sh",
        "--engine",
        "podman",
        "--gpus",
        "none",
        "--results",
        str(tmp_path / "r"),
        env={"PATH": str(bin_dir)},
    )
    assert result.returncode == 2
    assert "[launch] podman is not installed on this machine" in result.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(os.path.isdir("/dev/infiniband"), reason="this machine has InfiniBand devices")
def test_launch_infiniband_needs_the_devices():
    result = _bash("scripts/docker/launch.sh", "--dry-run", "--infiniband")
    assert result.returncode == 2
    assert "--infiniband: this machine has no /dev/infiniband" in result.stderr
