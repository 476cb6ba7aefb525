"""scripts/run_pretraining_lamb.sh (both phases) and its _phase1.sh / _phase2.sh (one each).

Phase 1 runs 90% of train_steps at seq 128 / 20 predictions; phase 2 runs the rest, rescaled by
the ratio of the global batch sizes so both phases see the sequences NVIDIA's recipe gives them,
at seq 512 / 80 predictions, initialised from phase 1's final checkpoint with a fresh optimizer
and step. Learning rates are per worker: run_pretraining.py multiplies them by the worker count.
A re-run of the same command skips a finished phase and resumes an unfinished one.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import time

from common.errors import UserError
from data import paths as data_paths
from data.paths import PHASE_SHAPES
from launch.engine import Launcher, PathOption, Plan, Setting, Step
from launch.workers import UsageError
from training.job import JobSettings
from training.length_bins import bin_size_fits
from training.preemption import STOP_FILE_NAME
from training.pretraining_job import PretrainingSettings

PHASE1_FRACTION = (9, 10)  # phase 1 runs train_steps * 9 // 10 updates
# Where scripts/data_download.sh puts Google's uncased vocab (its default) under <root>/download/.
GOOGLE_VOCAB = os.path.join("google_pretrained_weights", "uncased_L-12_H-768_A-12", "vocab.txt")

# NVIDIA's positional arguments, in NVIDIA's order, with NVIDIA's defaults (DGX A100, 8 GPUs).
SETTINGS = (
    Setting("train_batch_size_phase1", "64", "count", "per-worker micro-batch, phase 1 (seq 128)"),
    Setting("train_batch_size_phase2", "8", "count", "per-worker micro-batch, phase 2 (seq 512)"),
    Setting("eval_batch_size", "8", "count", "per-worker evaluation batch", flag="eval_batch_size"),
    Setting("learning_rate_phase1", "7.5e-4", "rate", "peak learning rate per worker, phase 1"),
    Setting("learning_rate_phase2", "5e-4", "rate", "peak learning rate per worker, phase 2"),
    Setting.of_field(JobSettings, "precision", "fp16", positional=True),
    Setting.of_field(JobSettings, "use_xla", positional=True),
    Setting("num_gpus", "8", "count", "workers (one process per GPU)"),
    Setting("warmup_steps_phase1", "2000", "steps", "linear warmup updates, phase 1"),
    Setting("warmup_steps_phase2", "200", "steps", "linear warmup updates, phase 2"),
    Setting("train_steps", "7820", "count", "phase-1 updates are 90% of it; phase 2 the rest, rescaled"),
    Setting(
        "save_checkpoint_steps", "100", "count", "updates between checkpoints", flag="save_checkpoints_steps"
    ),
    Setting("num_accumulation_steps_phase1", "128", "count", "micro-batches per update, phase 1"),
    Setting("num_accumulation_steps_phase2", "512", "count", "micro-batches per update, phase 2"),
    Setting("bert_model", "large", "model", "configs/bert_<bert_model>.json (base, large, ...)"),
    Setting(
        "do_eval",
        "true",
        "bool",
        "evaluate on <phase data>/test/* at the end of each phase",
        positional=False,
    ),
    Setting(
        "masking",
        "static",
        "choice",
        "TFRecords masked when written (static) or unmasked, masked as read (dynamic): which "
        "scripts/data_download.sh --masking built (picks the default data directories)",
        choices=("static", "dynamic"),
        positional=False,
    ),
    Setting(
        "padding",
        "auto",
        "choice",
        "auto: each phase's layout (padded, bins of 32/64/128, packed, packed + bins) picked before "
        "training from its records' lengths (training/layout_choice.py); fixed: --bin_size and "
        "--packing_phaseN as given. A --bin_size or --packing_phaseN given wins over auto",
        choices=("auto", "fixed"),
        positional=False,
    ),
    Setting.of_field(JobSettings, "bin_size", passed_on=False),
    *(
        Setting(
            f"packing_phase{n}",
            "false",
            "bool",
            f"pack each update's sequences into rows of seq {PHASE_SHAPES[n][0]} (--packing), phase {n}",
            positional=False,
        )
        for n in (1, 2)
    ),
    Setting.of_field(JobSettings, "save_checkpoints_minutes", default=""),
    # Days on many nodes: a divergence rolls back by itself rather than wait for a person.
    Setting.of_field(PretrainingSettings, "on_divergence", default="rollback"),
    Setting.of_field(PretrainingSettings, "rollback_skip_updates"),
    Setting.of_field(PretrainingSettings, "max_rollbacks"),
)

PATHS = (
    PathOption(
        "data_dir", "BERT_DATA_DIR", "data root that scripts/data_download.sh wrote (default <repo>/data_dir)"
    ),
    PathOption("dataset", None, "the prepared corpus' name under the data root (default wikicorpus_en)"),
    PathOption("results_dir", "RESULTS_DIR", "phase_1/ and phase_2/ outputs (default <repo>/results)"),
    PathOption("bert_config", "BERT_CONFIG", "model config (default configs/bert_<bert_model>.json)"),
    PathOption(
        "vocab_file", "VOCAB_FILE", "vocab.txt (default: the data root's trained vocab, else Google's)"
    ),
    PathOption("phase1_data", "PHASE1_DATA", "phase-1 TFRecord dir with training/ and test/"),
    PathOption("phase2_data", "PHASE2_DATA", "phase-2 TFRecord dir with training/ and test/"),
    PathOption("init_checkpoint", "INIT_CHECKPOINT", "weights to start phase 1 from (ours, Google's or HF)"),
)


@dataclasses.dataclass(frozen=True)
class Phase:
    number: int
    max_seq_length: int
    max_predictions_per_seq: int
    batch: int
    accumulation: int
    learning_rate: str  # per worker, as given (passed on verbatim)
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


def plan_phases(v: dict, text: dict, run_phases) -> dict:
    """{1: Phase, 2: Phase}; zero steps or a warmup longer than its phase, in a phase that will
    run, is a UsageError."""
    workers = v["num_gpus"]
    batches = {n: (v[f"train_batch_size_phase{n}"], v[f"num_accumulation_steps_phase{n}"]) for n in (1, 2)}
    global_batch = {n: b * a * workers for n, (b, a) in batches.items()}
    steps = dict(zip((1, 2), phase_steps(v["train_steps"], global_batch[1], global_batch[2])))
    phases = {
        n: Phase(
            n,
            *PHASE_SHAPES[n],
            *batches[n],
            text[f"learning_rate_phase{n}"],
            v[f"warmup_steps_phase{n}"],
            steps[n],
            global_batch[n],
        )
        for n in (1, 2)
    }
    for n in run_phases:
        phase = phases[n]
        if phase.steps < 1:
            how = (
                "90% of train_steps, rounded down"
                if n == 1
                else f"(train_steps - {steps[1]}) x {global_batch[1]} / {global_batch[2]}, rounded down"
            )
            raise UsageError(
                f"phase {n} would run 0 steps ({how}, with train_steps={v['train_steps']}); raise train_steps."
            )
        if not bin_size_fits(v["bin_size"], phase.max_seq_length):
            raise UsageError(
                f"bin_size={v['bin_size']} exceeds phase {n}'s sequence length {phase.max_seq_length}; "
                "use at most that (0 pads to it)."
            )
        if phase.warmup > phase.steps:
            raise UsageError(
                f"warmup_steps_phase{n}={phase.warmup} exceeds phase {n}'s {phase.steps} "
                f"steps; lower it or raise train_steps."
            )
    return phases


def phase_output(results_dir: str, number: int) -> str:
    return os.path.join(results_dir, f"phase_{number}")


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


def masking_params(masking: str) -> dict:
    """data.paths' TFRecord parameters for `masking`: dynamic records are one unmasked copy."""
    return {"masking": "dynamic", "dupe_factor": 1} if masking == "dynamic" else {}


def _other_masking_hint(root: str, dataset: str, masking: str) -> str:
    """What to say when a default phase directory is missing but the other masking's exists: the
    user prepared dynamic records and forgot --masking dynamic, or the reverse."""
    other = "static" if masking == "dynamic" else "dynamic"
    dirs = data_paths.default_pretraining_dirs(root, dataset, **masking_params(other))
    if any(os.path.isdir(d) for d in dirs.values()):
        return f" (scripts/data_download.sh built {other}-masking records there: pass --masking {other})"
    return ""


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
        if not (os.path.exists(init_checkpoint) or glob.glob(glob.escape(init_checkpoint) + ".index")):
            raise UserError(
                f"INIT_CHECKPOINT {init_checkpoint} does not exist (give a checkpoint prefix, a "
                "directory holding one, or a Hugging Face model directory)."
            )
    files = {}
    for n in run_phases:
        for split in ("training", "test") if do_eval else ("training",):
            pattern = os.path.join(paths[f"phase{n}_data"], split, "*")
            try:
                files[n, split] = expand_globs(pattern, what=f"phase-{n} {split} data")
            except UserError as e:
                more = " (or run with --do_eval=false)" if split == "test" else ""
                raise UserError(
                    f"{e} Build it with scripts/data_download.sh or set PHASE{n}_DATA (or --phase{n}_data)"
                    f"{more}{paths.get('masking_hint', '') if not os.path.isdir(paths[f'phase{n}_data']) else ''}."
                ) from None
    from data.pretraining.schema import check_file

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


def _resolve_paths(launch) -> dict:
    """Every path the phases use, absolute: named option > environment variable > the default
    (data.paths: where scripts/data_download.sh writes)."""
    root = launch.path("data_dir", data_paths.data_root({}), "<repo>/data_dir")
    dataset = launch.request.paths.get("dataset") or data_paths.DEFAULT_DATASET
    launch.paths["dataset"] = (dataset, "--dataset" if "dataset" in launch.request.paths else "default")
    defaults = data_paths.default_pretraining_dirs(root, dataset, **masking_params(launch.text["masking"]))
    trained_vocab = os.path.join(data_paths.vocab_dir(root, dataset), "vocab.txt")
    google_vocab = os.path.join(root, "download", GOOGLE_VOCAB)
    use_google = not os.path.isfile(trained_vocab) and os.path.isfile(google_vocab)
    bert_model = launch.text["bert_model"]
    return {
        "data_dir": root,
        "results_dir": launch.path(
            "results_dir", os.path.join(launch.repo_root, "results"), "<repo>/results"
        ),
        "bert_config": launch.path(
            "bert_config", os.path.join(launch.repo_root, "configs", f"bert_{bert_model}.json"), "bert_model"
        ),
        "vocab_file": launch.path(
            "vocab_file",
            google_vocab if use_google else trained_vocab,
            "Google's uncased vocab" if use_google else "the data root's trained vocab",
        ),
        "phase1_data": launch.path("phase1_data", defaults["phase1"], "under data_dir"),
        "phase2_data": launch.path("phase2_data", defaults["phase2"], "under data_dir"),
        "init_checkpoint": launch.path("init_checkpoint", ""),
        "masking_hint": _other_masking_hint(root, dataset, launch.text["masking"]),
    }


def _given(launch, name: str) -> bool:
    return launch.source[name] != "default"


def choose_layout(launch, phase: Phase, paths: dict) -> tuple:
    """(bin_size, packing, how) of `phase`: what --bin_size / --packing_phaseN say when --padding is
    fixed or either was given; else the layout training/layout_choice.py predicts cheapest for a
    sample of the phase's training records (no TensorFlow), or the flags' defaults when there are
    none to read yet (a --dry_run before the data). `how` is the summary's text."""
    v, n = launch.value, phase.number
    packing_flag = f"packing_phase{n}"
    fixed = (v["bin_size"], v[packing_flag])

    def named(bin_size, packing):
        from training.layout_choice import Layout

        return Layout(0 if bin_size >= phase.max_seq_length else bin_size, packing).name

    if launch.text["padding"] == "fixed" or _given(launch, "bin_size") or _given(launch, packing_flag):
        given = [f"{x} from {launch.source[x]}" for x in ("bin_size", packing_flag) if _given(launch, x)]
        why = " and ".join(given) if given else f"padding fixed, from {launch.source['padding']}"
        return (*fixed, f"{named(*fixed)} ({why})")
    files = sorted(glob.glob(os.path.join(paths[f"phase{n}_data"], "training", "*")))
    from training import layout_choice

    try:
        from bert.config import read_config_file

        config = read_config_file(paths["bert_config"])
        found = layout_choice.for_records(
            files,
            config,
            phase.max_seq_length,
            phase.max_predictions_per_seq,
            phase.batch,
            phase.accumulation,
        )
    except (UserError, OSError, ValueError):
        found = None  # check_inputs names the config or file before training starts
    if found is None:
        return (*fixed, f"auto: {named(*fixed)} until there are records to read in {paths[f'phase{n}_data']}")
    chosen, predictions = found
    return (
        chosen.layout.bin_size,
        chosen.layout.packing,
        f"auto: {layout_choice.describe(chosen, predictions)}",
    )


def _phase_flags(phase: Phase, v: dict, paths: dict, init: str, workers: int, layout: tuple) -> list:
    data = paths[f"phase{phase.number}_data"]
    flags = [
        ("bert_config_file", paths["bert_config"]),
        ("vocab_file", paths["vocab_file"]),
        ("input_files", os.path.join(data, "training", "*")),
        ("output_dir", phase_output(paths["results_dir"], phase.number)),
    ]
    if init:
        flags.append(("init_checkpoint", init))
    flags += [
        ("max_seq_length", phase.max_seq_length),
        ("max_predictions_per_seq", phase.max_predictions_per_seq),
        ("train_batch_size", phase.batch),
        ("learning_rate", phase.learning_rate),
        ("num_train_steps", phase.steps),
        ("num_warmup_steps", phase.warmup),
        ("num_accumulation_steps", phase.accumulation),
        ("optimizer_type", "lamb"),
        ("use_horovod", "true" if workers > 1 else "false"),
        ("do_train", "true"),
    ]
    bin_size, packing, _ = layout
    flags.append(("bin_size", bin_size))
    if packing:
        flags.append(("packing", "true"))
    if v["do_eval"]:
        flags += [("do_eval", "true"), ("eval_files", os.path.join(data, "test", "*"))]
    return flags


# The setting or path behind each flag a phase's command gets ({n}: the phase's number).
ORIGIN = {
    "bert_config_file": "bert_config",
    "vocab_file": "vocab_file",
    "input_files": "phase{n}_data",
    "eval_files": "phase{n}_data",
    "output_dir": "results_dir",
    "init_checkpoint": "init_checkpoint",
    "use_horovod": "num_gpus",
    "packing": "packing_phase{n}",
    "bin_size": "bin_size",
    "do_eval": "do_eval",
}


def plan(launch, which: str) -> Plan:
    """The phases `which` ("both", "1", "2") names: their commands, the summary's notes, and the
    input checks that run before the first phase starts."""
    v, text = launch.value, launch.text
    run_phases = {"both": (1, 2), "1": (1,), "2": (2,)}[which]
    phases = plan_phases(v, text, run_phases)
    paths = _resolve_paths(launch)
    workers = launch.workers
    first_output = phase_output(paths["results_dir"], 1)
    init = {
        1: paths["init_checkpoint"],
        2: first_output if which == "both" else paths["init_checkpoint"] or first_output,
    }
    layouts = {n: choose_layout(launch, phases[n], paths) for n in run_phases}
    commands = {
        n: launch.command(
            [
                (f, x, ORIGIN.get(f, "").format(n=n))
                for f, x in _phase_flags(phases[n], v, paths, init[n], workers.count, layouts[n])
            ]
        )
        for n in run_phases
    }
    notes = [workers.line()]
    for n in run_phases:
        p = phases[n]
        steps_how = (
            f"90% of train_steps {v['train_steps']}"
            if n == 1
            else f"(train_steps {v['train_steps']} - {phases[1].steps}) x global batch "
            f"{phases[1].global_batch} / {p.global_batch}"
        )
        notes += [
            f"phase {n}: seq {p.max_seq_length}, {p.max_predictions_per_seq} predictions",
            f"  steps              = {p.steps} ({steps_how})",
            *workers.scaling(p.batch, p.learning_rate, p.accumulation),
            f"  warmup steps       = {p.warmup}",
            f"  precision          = {v['precision']}, xla {'on' if v['use_xla'] else 'off'}",
            f"  padding            = {layouts[n][2]}",
            f"  packing            = {'on' if layouts[n][1] else 'off'}",
            f"  data               = {paths[f'phase{n}_data']}",
            f"  output             = {phase_output(paths['results_dir'], n)}",
        ]
    notes.append(
        f"on divergence: roll back to the newest checkpoint, skipping the data through the diverged "
        f"update and {v['rollback_skip_updates']} more, at most {v['max_rollbacks']} times a phase"
        if text["on_divergence"] == "rollback"
        else "on divergence: stop (naming the last good checkpoint)"
    )
    if not paths["init_checkpoint"] and 1 in run_phases:
        notes.append("phase 1 starts from random weights (no INIT_CHECKPOINT).")
    if 2 in run_phases:
        notes.append(
            f"phase 2 starts from {init[2]} (phase 1's final checkpoint, step {phases[1].steps}) with every "
            "layer and both heads; its optimizer and step start fresh."
            if init[2] == first_output
            else f"phase 2 starts from {init[2]}; its optimizer and step start fresh."
        )

    def prepare(say) -> list:
        wait_s = 900 if workers.world > 1 else 0  # other ranks may finish phase 1 before rank 0 saved
        steps = []
        if 2 in run_phases:
            from_phase1 = init[2] == first_output
            if from_phase1 and 1 not in run_phases:
                verify_phase1_checkpoint(init[2], phases[1].steps, wait_s)
            elif not from_phase1 and checkpoint_step(first_output) != "missing":
                raise UserError(
                    f"Phase 2 could start from INIT_CHECKPOINT {init[2]} or from phase 1's output "
                    f"{first_output}; unset INIT_CHECKPOINT to continue phase 1, or give another "
                    "--results_dir to start from INIT_CHECKPOINT."
                )
        starting = []
        for n in run_phases:  # a finished phase (a re-run of the same command) is not started again
            output = phase_output(paths["results_dir"], n)
            if checkpoint_step(output) == phases[n].steps:
                say(f"phase {n} is complete (checkpoint at step {phases[n].steps} in {output}): skipping it.")
                continue
            starting.append(n)
            if n == 2 and 1 in run_phases and init[2] == first_output:  # checked once phase 1 has run
                verify = [launch.python, "-m", "launch", "verify", init[2], str(phases[1].steps), str(wait_s)]
                steps.append(Step(verify))
            steps.append(
                Step(
                    commands[n],
                    stop_file=os.path.join(output, STOP_FILE_NAME),
                    banner=f"phase {n}",
                    failure=f"phase {n} stopped with exit status {{status}}; fix the cause and re-run the same "
                    "command: each phase resumes from its latest checkpoint.",
                )
            )
        if starting:
            say("checking inputs:")
            first = starting[0]  # INIT_CHECKPOINT is where the first phase of this launcher starts
            check_inputs(
                paths, starting, v["do_eval"], init[first] if first == run_phases[0] else "", log=say
            )
            from common.files import ensure_writable_dir

            ensure_writable_dir(paths["results_dir"], what="results directory (RESULTS_DIR)")
        return steps

    return Plan([(f"phase {n}", commands[n]) for n in run_phases], notes, prepare, done="done")


ABOUT = (
    "BERT pretraining with LAMB: phase 1 (seq 128, 20 predictions) runs 90% of train_steps, then phase 2",
    "(seq 512, 80 predictions) the rest, rescaled by the ratio of the global batch sizes, starting from",
    "phase 1's final checkpoint. Re-running the same command skips a finished phase and resumes the other.",
)


def _launcher(which: str, about) -> Launcher:
    return Launcher(
        "run_pretraining_lamb",
        "run_pretraining.py",
        about,
        SETTINGS,
        PATHS,
        lambda launch: plan(launch, which),
        "num_gpus",
    )


BOTH = _launcher("both", ABOUT)
PHASE1 = _launcher(
    "1", ("Phase 1 alone (seq 128, 20 predictions, 90% of train_steps); INIT_CHECKPOINT is where it starts.",)
)
PHASE2 = _launcher(
    "2",
    (
        "Phase 2 alone (seq 512, 80 predictions), with the arguments phase 1 ran with: its step count",
        "follows from them. It starts from <results_dir>/phase_1's final checkpoint, or INIT_CHECKPOINT.",
    ),
)
