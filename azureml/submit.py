"""Checks an Azure ML job of azureml/jobs/ and prints (or runs) its `az ml job create` line.

    python azureml/submit.py pretrain --nodes 4 --input data=azureml://datastores/NAME/paths/bert/data_dir
    python azureml/submit.py pretrain-debug --submit
    python azureml/submit.py finetune-glue --set inputs.task_name=RTE --output results=azureml://...

--nodes and --gpus_per_node set resources.instance_count and distribution.process_count_per_instance,
and the launcher's worker count (inputs.num_gpus or inputs.num_gpu) to their product, so the three
cannot disagree. Before printing or submitting it checks the job: Azure ML's own schema
(azure.ai.ml.load_job, when the SDK is installed; `az` checks it again on submission), every
${{inputs.X}} / ${{outputs.Y}} / ${{search_space.Z}} of the command declared, MPI for the jobs whose
launcher counts workers, and then the command itself through the launcher's --dry_run on this
machine, with local folders in place of the datastore paths and mpirun's rank variables set as Azure
ML sets them on every rank. A job whose output is a fixed folder must hold azureml/output_lock.py's
lock on it, and bf16 is refused on the clusters whose GPUs lack it. Only the standard library, PyYAML and bash are needed (and `az` with its
ml extension to submit).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS_DIR = os.path.join(ROOT, "azureml", "jobs")
PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs|search_space)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
WORKER_INPUTS = ("num_gpus", "num_gpu")  # the launchers' worker-count setting, as each names it
FOLDER_TYPES = ("uri_folder", "uri_file", "custom_model", "mlflow_model")
COMPUTE_DIR = os.path.join(ROOT, "azureml", "compute")
# The command's first words in a job whose output is a fixed folder (azureml/output_lock.py).
LOCK = re.compile(r"^\s*python azureml/output_lock\.py (\S+)\s+")
NO_BF16_SIZES = ("Standard_ND40rs_v2", "Standard_NC4as_T4_v3")  # V100 and T4: fp16 or fp32 only


class JobError(ValueError):
    """A job spec that cannot run as written: one sentence per problem."""


def job_path(name: str) -> str:
    """A job file: a path, or a name under azureml/jobs/ ("pretrain" -> azureml/jobs/pretrain.yml)."""
    if os.path.isfile(name):
        return os.path.abspath(name)
    path = os.path.join(JOBS_DIR, name if name.endswith(".yml") else name + ".yml")
    if not os.path.isfile(path):
        names = sorted(f[:-4] for f in os.listdir(JOBS_DIR) if f.endswith(".yml"))
        raise JobError(f"No job {name!r}: give a file or one of {', '.join(names)}.")
    return path


def _scalar(text: str):
    """A --set value as `az --set` reads it: whole numbers become ints, the rest stays text."""
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else text


def apply_sets(spec: dict, sets: dict) -> dict:
    """`spec` with each dotted key of `sets` set (inputs.data.path=..., resources.instance_count=2)."""
    for key, value in sets.items():
        node = spec
        *parents, last = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {} if node.get(part) is None else {"path": node[part]}
            node = node[part]
        node[last] = value
    return spec


def read_job(path: str, sets: dict | None = None) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return apply_sets(yaml.safe_load(f), dict(sets or {}))


def worker_sets(spec: dict, nodes: int | None, gpus_per_node: int | None) -> dict:
    """The --set entries for --nodes / --gpus_per_node: both resource fields and the launcher's
    worker count, their product."""
    if nodes is None and gpus_per_node is None:
        return {}
    if "distribution" not in spec:
        raise JobError("--nodes and --gpus_per_node apply to MPI jobs; this job runs one process.")
    nodes = nodes if nodes is not None else spec.get("resources", {}).get("instance_count", 1)
    per = gpus_per_node if gpus_per_node is not None else spec["distribution"]["process_count_per_instance"]
    sets = {"resources.instance_count": nodes, "distribution.process_count_per_instance": per}
    for name in WORKER_INPUTS:
        if name in spec.get("inputs", {}):
            sets[f"inputs.{name}"] = nodes * per
    return sets


def _command_of(spec: dict) -> str:
    return (spec.get("trial") or {}).get("command") or spec.get("command") or ""


def world_size(spec: dict) -> int:
    """How many processes Azure ML starts: instance_count x process_count_per_instance under MPI."""
    distribution = spec.get("distribution") or {}
    if distribution.get("type") != "mpi":
        return 1
    return int(spec.get("resources", {}).get("instance_count", 1)) * int(
        distribution.get("process_count_per_instance", 1)
    )


def problems(spec: dict) -> list:
    """What Azure ML's schema lets through but the job cannot run with, one sentence each."""
    found = []
    command = _command_of(spec)
    declared = {
        "inputs": spec.get("inputs") or {},
        "outputs": spec.get("outputs") or {},
        "search_space": spec.get("search_space") or {},
    }
    for kind, name in PLACEHOLDER.findall(command):
        if name not in declared[kind]:
            found.append(f"The command uses ${{{{{kind}.{name}}}}} but the job declares no {kind} '{name}'.")
    distribution = spec.get("distribution")
    counted = [n for n in WORKER_INPUTS if n in declared["inputs"]]
    if distribution is not None and distribution.get("type") != "mpi":
        found.append(
            f"distribution type '{distribution.get('type')}' starts processes our launchers do not see as "
            "ranks (they read mpirun's environment): use type: mpi."
        )
    elif counted:
        name = counted[0]
        workers = int(declared["inputs"][name])
        if workers != world_size(spec):
            found.append(
                f"inputs.{name}={workers} but Azure ML starts {world_size(spec)} process(es) "
                "(instance_count x process_count_per_instance); set them together with --nodes / --gpus_per_node."
            )
    found += _fixed_output_problems(spec, command)
    precision = declared["inputs"].get("precision") if "${{inputs.precision}}" in command else None
    if precision == "bf16" and compute_size(spec) in NO_BF16_SIZES:
        found.append(
            f"inputs.precision=bf16 but {spec['compute']} is {compute_size(spec)}, whose GPUs have no bf16: "
            "use fp16 there, or an A100 / H100 compute (nd-h100-v5, nd-a100-v4, nc-a100-v4)."
        )
    return found


def _fixed_output_problems(spec: dict, command: str) -> list:
    """A fixed datastore folder is where a re-submission continues; two jobs at once there would mix
    two runs' checkpoints, so the command must hold azureml/output_lock.py's lock on it. A sweep's
    trials run at once: each needs a folder of its own (no path)."""
    found = []
    lock = LOCK.match(command)
    for name, entry in (spec.get("outputs") or {}).items():
        if not (isinstance(entry, dict) and entry.get("path")):
            continue
        if spec.get("type") == "sweep":
            found.append(
                f"outputs.{name} has a fixed path, which every trial of the sweep would share: leave the path "
                "out (Azure ML gives each trial its own folder)."
            )
        elif lock is None or lock.group(1) != f"${{{{outputs.{name}}}}}":
            found.append(
                f"outputs.{name} is a fixed folder that a second submission would share: start the command "
                f"with `python azureml/output_lock.py ${{{{outputs.{name}}}}}` (one job at a time there)."
            )
    return found


def compute_size(spec: dict) -> str:
    """The VM size of the job's compute when azureml/compute/ defines it ("" otherwise)."""
    name = str(spec.get("compute") or "").removeprefix("azureml:")
    path = os.path.join(COMPUTE_DIR, f"{name}.yml")
    if not name or not os.path.isfile(path):
        return ""
    import yaml

    with open(path, encoding="utf-8") as f:
        return (yaml.safe_load(f) or {}).get("size", "")


def check(path: str, sets: dict | None = None) -> dict:
    """The job spec with `sets` applied; raises JobError (or the SDK's ValidationError) when it
    would not run."""
    spec = read_job(path, sets)
    try:
        from azure.ai.ml import load_job
    except ImportError:
        load_job = None
    if load_job is not None:
        overrides = [{key: value} for key, value in (sets or {}).items()]
        try:
            load_job(path, params_override=overrides)
        except Exception as e:  # the SDK's ValidationError and marshmallow's, with Azure ML's reasons
            raise JobError(f"{os.path.relpath(path, ROOT)}: Azure ML's schema refuses it: {e}") from None
    found = problems(spec)
    if found:
        raise JobError(f"{os.path.relpath(path, ROOT)}: " + " ".join(found))
    return spec


def _sample(dimension: dict) -> str:
    """One value of a sweep dimension, as a trial's command would get it."""
    kind = dimension["type"]
    if kind in ("choice", "randint"):
        return str(dimension["values"][0] if kind == "choice" else 0)
    low = float(dimension["min_value"])
    return repr(math.exp(low)) if kind.startswith("log") else repr(low)


def local_command(spec: dict, workdir: str) -> str:
    """The job's command with its placeholders filled for this machine: folders under `workdir`
    for data inputs and outputs, the literal inputs' values, a sample of each sweep dimension."""
    inputs, outputs = spec.get("inputs") or {}, spec.get("outputs") or {}

    def fill(match) -> str:
        kind, name = match.groups()
        if kind == "search_space":
            return _sample(spec["search_space"][name])
        entry = (inputs if kind == "inputs" else outputs)[name]
        if isinstance(entry, dict) and (kind == "outputs" or entry.get("type") in FOLDER_TYPES):
            folder = os.path.join(workdir, kind, name)
            os.makedirs(folder, exist_ok=True)
            return shlex.quote(folder)
        value = entry.get("default") if isinstance(entry, dict) else entry
        return str(value)

    return PLACEHOLDER.sub(fill, _command_of(spec))


def rank_environment(spec: dict) -> dict:
    """What this machine's environment becomes for the dry run: Azure ML's variables of the job,
    and mpirun's rank variables on rank 0 when Azure ML starts several processes; no scheduler's
    or launcher's variables from outside."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_", "HOROVOD_")) and k != "LAUNCHER_ARGS"
    }
    env.update({k: str(v) for k, v in (spec.get("environment_variables") or {}).items()})
    world = world_size(spec)
    if world > 1:
        env.update(OMPI_COMM_WORLD_SIZE=str(world), OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0")
    return env


def dry_run(spec: dict, workdir: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs the job's command as one of its ranks would, with --dry_run: the launcher validates
    every argument and prints the resolved plan. A prepare_data.py stage (data-prep-ranks) has no
    launcher of its own: its command must be one that scripts/data_download.sh --dry_run plans."""
    command = LOCK.sub("", local_command(spec, workdir))  # the lock takes no part in a dry run
    env = rank_environment(spec)
    argv = shlex.split(command)
    if argv[:2] == ["python", "prepare_data.py"]:
        data_dir = argv[argv.index("--data_dir") + 1]
        plan = subprocess.run(
            ["bash", "scripts/data_download.sh", f"--data_dir={data_dir}", "--dry_run"],
            cwd=ROOT,
            env={k: v for k, v in env.items() if not k.startswith("OMPI_")},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        stage = " ".join(shlex.quote(a) for a in argv[1:])
        if plan.returncode == 0 and not any(line.endswith(stage) for line in plan.stdout.splitlines()):
            plan.returncode = 1
            plan.stderr += f"\nThe stage `{stage}` is none of scripts/data_download.sh's planned commands."
        return plan
    launcher, separator, passed_on = command.partition(" -- ")  # after --: the entry point's flags
    return subprocess.run(
        ["bash", "-c", f"{launcher} --dry_run{separator}{passed_on}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def az_command(path: str, sets: dict) -> list:
    argv = ["az", "ml", "job", "create", "-f", os.path.relpath(path, os.getcwd())]
    if sets:
        argv += ["--set", *(f"{key}={value}" for key, value in sets.items())]
    return argv


def _pairs(values, what: str) -> dict:
    pairs = {}
    for item in values or ():
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise JobError(f"{what} takes NAME=VALUE (got {item!r}).")
        pairs[key] = value
    return pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python azureml/submit.py",
        description="Check an azureml/jobs/ job (schema, placeholders, the launcher's --dry_run) and print "
        "or run its `az ml job create` line.",
    )
    parser.add_argument("job", help="a name under azureml/jobs/ (pretrain, finetune-squad, ...) or a file")
    parser.add_argument("--nodes", type=int, help="instances (resources.instance_count)")
    parser.add_argument("--gpus_per_node", type=int, help="processes per instance, one per GPU")
    parser.add_argument("--compute", help="the compute cluster's name (default: the job's)")
    parser.add_argument("--input", action="append", metavar="NAME=PATH", help="a data input's path")
    parser.add_argument("--output", action="append", metavar="NAME=PATH", help="an output's datastore path")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="any field, as az --set")
    parser.add_argument("--name", help="the job's name (default: Azure ML picks one)")
    parser.add_argument("--no_dry_run", action="store_true", help="skip the launcher's dry run here")
    parser.add_argument("--submit", action="store_true", help="run the az command after the checks")
    args = parser.parse_args(argv)
    try:
        path = job_path(args.job)
        spec = read_job(path)
        sets = worker_sets(spec, args.nodes, args.gpus_per_node)
        if args.compute:
            sets["compute"] = (
                args.compute if args.compute.startswith("azureml:") else f"azureml:{args.compute}"
            )
        sets.update({f"inputs.{k}.path": v for k, v in _pairs(args.input, "--input").items()})
        sets.update({f"outputs.{k}.path": v for k, v in _pairs(args.output, "--output").items()})
        sets.update({k: _scalar(v) for k, v in _pairs(args.set, "--set").items()})
        if args.name:
            sets["name"] = args.name
        spec = check(path, sets)
        if not args.no_dry_run:
            with tempfile.TemporaryDirectory(prefix="azureml-dry-run.") as workdir:
                result = dry_run(spec, workdir)
            print(result.stdout, end="")
            if result.returncode != 0:
                print(result.stderr, end="", file=sys.stderr)
                raise JobError(f"The job's command failed the launcher's dry run (exit {result.returncode}).")
    except JobError as e:
        print(f"submit.py: {e}", file=sys.stderr)
        return 2
    command = az_command(path, sets)
    print(shlex.join(command))
    if args.submit:
        return subprocess.call(command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
