"""The one training job: `run(settings, task)` drives pretraining (training/pretraining_job.py's
PretrainingTask) and fine-tuning (SquadTask, GlueTask on training/finetuning_job.py's
FineTuningTask) alike, from the settings every job shares (`JobSettings`) to a trained, evaluated
output directory. A task is a training.task.Task: job.run owns every step that is the same for each
task and calls the task's hooks for what differs (training/task.py lists them in order):

    result = job.run(settings, task)   # task.validate_settings, then in one worker:
      preflight.check_task(settings, task, dist, out, joining)  # every worker sees what it needs
      plan = job.plan(settings, task, dist, out)  # model files, output dir, update, data, report
      step = the model (task.build_model, task.initialise) and its TrainStep (task.objective)
      training from the latest checkpoint: task.training_batches, task.resumed, and loop.train
                  with the run's safeguards (training/safeguard.py) and the task's (task.safeguards);
                  without training, the latest checkpoint's weights (task.resumed)
      task.finish(...)                            # evaluate, predict, export

bench/pretrain_throughput.py builds its step with the same pieces (`worker`, `build_model`, the
task's training.update.Update). `out` is the caller's stream on rank 0 and a sink on the other
ranks: a job reports once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys

from common.cli import check_settings, setting
from common.errors import Preempted, UserError
from common.files import ensure_writable_dir, write_json
from training.compile_cache import persistent_cache_in_use
from training.length_bins import DEFAULT_BIN_SIZE, bin_lengths, bin_size_refusal, resolved_bin_size
from training.rollback import past_rollbacks
from training.update import Update, continue_update

RESOLVED_CONFIG_NAME = "resolved_config.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSettings:
    """The settings every training job shares (run_pretraining.py's, run_squad.py's and
    run_classifier.py's flags of the same names); PretrainingSettings and FineTuningSettings add
    their own and change a few defaults. Each field is declared once (common.cli.setting): its
    kind (common/kinds.py), checked by `validate_settings` and by the flag's validator alike, its
    default and its flag's help text, which launch/ settings of the same meaning read too."""

    output_dir: str
    init_checkpoint: str | None = None
    bert_config_file: str | None = None
    vocab_file: str | None = None
    max_seq_length: int = setting("count", 128)
    bin_size: int | None = setting(
        "steps",
        None,
        "Pad each micro-batch only to the next multiple of this many tokens past its longest "
        "sequence, the sequences of an update sorted by length (training, evaluation and prediction "
        "alike); 0 pads to --max_seq_length, as does a bin that long or longer.",
        none_means=DEFAULT_BIN_SIZE,
    )
    train_batch_size: int = setting("count", 32)  # per worker, per micro-batch
    learning_rate: float = setting(
        "rate",
        5e-5,
        "Peak learning rate PER WORKER; the effective peak is this times the number of workers.",
    )
    num_accumulation_steps: int = setting("count", 1, "Micro-batches per update (gradient accumulation).")
    optimizer_type: str = "lamb"
    precision: str = setting(
        "precision",
        "fp32",
        "fp32 (TF32 off), tf32, fp16 (loss scaling, fp16 allreduce) or bf16; --amp means fp16.",
    )
    use_xla: bool = setting("bool", True, "Compile the training, evaluation and prediction steps with XLA.")
    trace_ahead: bool | None = setting(
        "bool",
        None,
        "With XLA: before the first update, trace every program an update may run for every bin "
        "length (seconds each), so that each is named as in every other run and TensorFlow's "
        "persistent XLA cache (TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR) serves a "
        "resumed run without compiling again; default: on when that cache is in use.",
    )
    use_horovod: bool = setting(
        "bool",
        False,
        "Sum gradients across Horovod workers; default: on when started by horovodrun/mpirun/srun "
        "with more than one rank.",
    )
    do_train: bool = setting("bool", True)
    do_eval: bool = setting("bool", False)
    save_checkpoints_steps: int = setting(
        "count", 1000, "Write a checkpoint every this many updates (and at the end)."
    )
    save_checkpoints_minutes: float | None = setting(
        "positive",
        None,
        "Also write a checkpoint once this many minutes passed since the last one, at the next "
        "step that logs (worker 0's clock: every worker saves at the same update); default: by "
        "steps only.",
    )
    keep_checkpoints: int = setting("count", 5, "How many of the newest checkpoints to keep.")
    log_every_n_steps: int = setting(
        "count",
        10,
        "Log and print every this many updates; the host reads the device only at these steps and "
        "at checkpoints, so updates queue without a wait in between.",
    )
    seed: int = setting(int, 12345, "Seed of initialisation, dropout and input shuffling.")
    deterministic: bool = setting(
        "bool",
        True,
        "TF op determinism: an interrupted and resumed run ends bit-identical to an uninterrupted "
        "one (turn off for speed on GPUs).",
    )
    worker_timeout_seconds: int = setting(  # training/watchdog.py
        "count",
        300,
        "With several workers: a worker that sees no update for this long (a worker died, froze or "
        "lost the network) names the silent workers and the last checkpoint and stops; above the "
        "longest update and checkpoint save.",
    )


def validate_settings(s: JobSettings) -> None:
    """UserError naming the first shared flag whose value cannot work (the tasks check theirs)."""
    from optimization import OPTIMIZERS

    if not s.output_dir:
        raise UserError("--output_dir is required.")
    check_settings(s)
    refused = bin_size_refusal(s.bin_size, s.max_seq_length)
    if refused:
        raise UserError(refused)
    if s.optimizer_type not in OPTIMIZERS:
        raise UserError(
            f"--optimizer_type must be one of {', '.join(OPTIMIZERS)} (got {s.optimizer_type!r})."
        )


@dataclasses.dataclass(kw_only=True)
class Plan:
    """The job before any model exists: what `plan` found, the task's data among it."""

    config: object  # BertConfig
    vocab_file: str | None
    update: "Update"
    start_sequence: int  # of the data order, where training continues
    resume_from: str | None  # the output directory's latest checkpoint
    restored_sequence: int = 0  # resume_from's data position (start_sequence unless a rollback skipped)
    bin_size: int = 0  # --bin_size as the job runs it (training.length_bins.resolved_bin_size)
    trace_ahead: bool = False  # --trace_ahead as the job runs it
    steps: int = 0  # updates to train for (0 without --do_train)
    warmup: int = 0
    data: object = None  # the task's (training.task.Prepared.data)
    row_counts: tuple = ()  # the task's (training.task.Prepared.row_counts)
    resolved: dict = dataclasses.field(default_factory=dict)


def run(s: JobSettings, task, stream=None, tracking=None) -> dict:
    """Runs `task` (a training.task.Task; see the module docstring) with settings `s`; returns
    {"resolved", "model", "step" (of the weights it ends with), "train" (last metrics or None),
    "throughput" (or None)} plus the task's own results. Problems the user can fix raise
    UserError before any model is built. tracking: a training.tracking.MlflowTarget (or None):
    rank 0 also logs the resolved settings, the training metrics and the evaluations there."""
    from training.distributed import expected_world
    from training.launcher_watch import LauncherWatch, log_path
    from training.preflight import Joining, check_task

    task.validate_settings(s)
    with LauncherWatch(log_path(s.output_dir)) as launcher:
        # sys.stdout as the watch leaves it: it survives the launcher's exit (into the log file).
        stream = stream if stream is not None else sys.stdout
        world, rank = expected_world(s.use_horovod)
        # Watched from before Horovod starts: its init waits for every rank.
        joining = Joining(s.output_dir, s.worker_timeout_seconds, rank, world)
        with joining, worker(s.use_horovod, s.deterministic, stream) as (dist, out):
            check_task(s, task, dist, out, joining)
            p = plan(s, task, dist, out)
            tracker = None
            if dist.is_chief and tracking is not None:
                from training.tracking import open_tracker

                tracker = open_tracker(tracking, out)
            status = "FAILED"
            try:
                if tracker is not None:
                    tracker.params(p.resolved)
                result = _run_planned(s, task, p, dist, out, tracker, launcher)
                status = "FINISHED"
            except Preempted:
                status = "KILLED"  # the same command continues it (in a new MLflow run of its own)
                raise
            finally:
                if tracker is not None:
                    tracker.close(status)
    return result


def _run_planned(s: JobSettings, task, p: Plan, dist, out, tracker, launcher) -> dict:
    """run's steps once planned: the model and its step, training, the task's finish; the final
    evaluation (the eval_results.json this run wrote) to the tracker. launcher: the
    training.launcher_watch.LauncherWatch whose report stops training like a notice."""
    step = _build_step(s, task, p, dist, out)
    result = {"resolved": p.resolved, "model": step.model, "train": None, "throughput": None}
    log = None
    if s.do_train:
        result["train"], log = _train(s, task, p, step, out, tracker, launcher)
        result["throughput"] = log.throughput()
        result["step"] = int(step.optimizer.iterations)
    else:  # the step of the weights: the output_dir's, loaded here, else --init_checkpoint's
        from bert.checkpoints import global_step_of, load_weights

        source = p.resume_from or s.init_checkpoint
        if p.resume_from:
            load_weights(step.model, p.resume_from)
        result["step"] = (global_step_of(source) or 0) if source else 0
        if p.resume_from:
            task.resumed(p, result["step"], out)
    from training.loop import EVAL_RESULTS_NAME

    results_path = os.path.join(s.output_dir, EVAL_RESULTS_NAME)
    before = _modified(results_path) if tracker is not None else None
    task.finish(s, p, step, result, log, out)
    if tracker is not None and _modified(results_path) != before:
        with open(results_path, encoding="utf-8") as f:
            tracker.metrics(result["step"], json.load(f))
    return result


def _modified(path: str):
    """The file's (inode, modification time in ns), or None while it does not exist."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def plan(s: JobSettings, task, dist, out) -> Plan:
    """The steps every task's run takes before a model exists, in order: the checkpoint to
    continue, the model files (task.model_files), the output directory, the update (task.update,
    continuing the checkpoint's global batch and data position), the task's data
    (task.prepare); then the resolved settings printed and written to resolved_config.json (a
    run without --do_train keeps the training run's record there) with the model files beside
    them."""
    from training.checkpointing import latest_checkpoint, write_model_files

    resume_from = latest_checkpoint(s.output_dir)
    config, vocab_file = task.model_files(s, resume_from)
    if dist.is_chief:
        ensure_writable_dir(s.output_dir)
    update, start = task.update(s, dist.size), 0
    if s.do_train:
        update, start = continue_update(update, resume_from, out)
    restored, start = start, past_rollbacks(s.output_dir, resume_from, start, out)
    p = Plan(
        config=config,
        vocab_file=vocab_file,
        update=update,
        start_sequence=start,
        resume_from=resume_from,
        restored_sequence=restored,
        bin_size=resolved_bin_size(s.bin_size, s.max_seq_length),
        # Only with XLA; None: on when TF_XLA_FLAGS keeps a persistent cache (training/compile_cache.py).
        trace_ahead=s.use_xla
        and (persistent_cache_in_use(os.environ) if s.trace_ahead is None else s.trace_ahead),
    )
    prepared = task.prepare(s, p, dist, out)
    p.data, p.steps, p.warmup = prepared.data, prepared.steps, prepared.warmup
    p.row_counts = prepared.row_counts
    p.resolved = {
        **dataclasses.asdict(s),
        "vocab_file": vocab_file,
        **update.describe(),
        "bin_size": p.bin_size,
        "trace_ahead": p.trace_ahead,
        "resume_from": resume_from,
        "start_sequence": start,
        **prepared.resolved,
    }
    if dist.is_chief:
        path = os.path.join(s.output_dir, RESOLVED_CONFIG_NAME)
        report(task.title, p.resolved, out, path if s.do_train or not os.path.exists(path) else None)
        write_model_files(config, vocab_file, s.output_dir)
    return p


def check_model_files(config, vocab_file: str | None, max_seq_length: int, config_source: str) -> None:
    """UserError (or BertError) when the vocab does not fit the config's embedding table, or
    --max_seq_length exceeds its position table."""
    from bert.checkpoints import check_vocab_size
    from bert.tokenization import load_vocab

    if vocab_file:
        check_vocab_size(config, len(load_vocab(vocab_file)), vocab_file)
    if max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings} ({config_source})."
        )


def _build_step(s: JobSettings, task, plan: Plan, dist, out):
    """The model (from --init_checkpoint in a new output_dir, as the task loads it) and its step."""
    model = build_model(
        lambda dtype: task.build_model(plan.config, dtype), seed=s.seed, precision=s.precision, rank=dist.rank
    )
    task.initialise(model, s, plan, out)
    return plan.update.build(
        model,
        task.objective,
        warmup_steps=plan.warmup,
        train_steps=plan.steps,
        distributed=dist,
        jit_compile=s.use_xla,
        # Packed micro-batches differ in row count too: a program per (bin length, row count).
        bin_lengths=bin_lengths(plan.bin_size, s.max_seq_length),
        row_counts=plan.row_counts,
        trace_ahead=plan.trace_ahead,
    )


def _train(s: JobSettings, task, plan: Plan, step, out, tracker=None, launcher=None):
    """Training from where output_dir's checkpoints left off, with every safeguard of the run
    (training/safeguard.py): the log, preemption notices (the launcher gone is one too), the
    watchdog against lost workers, the task's own; (last metrics, the log). tracker: the log's
    training.tracking.MlflowTracker (or None); launcher: the run's LauncherWatch (or None)."""
    from training import loop
    from training.checkpointing import Checkpointer
    from training.data_order import Position
    from training.metrics_log import MetricsLog
    from training.preemption import StopRequests
    from training.save_clock import SaveClock
    from training.watchdog import Watchdog

    dist = step.distributed
    batches = task.training_batches(s, plan, dist, plan.start_sequence)
    position = Position(plan.start_sequence, s.train_batch_size, dist.size, restored=plan.restored_sequence)
    checkpointer = Checkpointer(
        s.output_dir, step, position, update=plan.update, keep=s.keep_checkpoints, distributed=dist
    )
    checkpointer.remove_leftovers()
    preemption = StopRequests(s.output_dir, dist, launcher)
    if dist.is_chief:
        preemption.clear_stale_file()  # before loop.resume, the workers' first agreement
    start = loop.resume(checkpointer, step)
    log = MetricsLog(
        s.output_dir,
        total_steps=plan.steps,
        start_step=start,
        sequences_per_update=plan.update.global_batch_size,
        log_every=s.log_every_n_steps,
        enabled=dist.is_chief,
        stream=out,
        tracker=tracker,
    )
    watchdog = Watchdog(s.output_dir, dist, s.worker_timeout_seconds, checkpointer.latest)
    task.resumed(plan, start, out)
    safeguards = [
        preemption,
        watchdog,
        *task.safeguards(s, plan, step, log, out),
        *([SaveClock(s.save_checkpoints_minutes, dist)] if s.save_checkpoints_minutes else []),
        log,
    ]
    metrics = loop.train(
        step,
        position.counted(batches),
        checkpointer,
        num_train_steps=plan.steps,
        save_checkpoints_steps=s.save_checkpoints_steps,
        safeguards=safeguards,
    )
    return metrics, log


@contextlib.contextmanager
def worker(use_horovod: bool, deterministic: bool, stream):
    """(Distributed, out) for one job. Exact resume needs TF op determinism, set here before any
    op runs when `deterministic`."""
    import tensorflow as tf

    from training.distributed import Distributed

    if deterministic:
        tf.config.experimental.enable_op_determinism()
    dist = Distributed(use_horovod=use_horovod)
    if dist.is_chief:
        yield dist, stream
        return
    with open(os.devnull, "w") as sink:
        yield dist, sink


def build_model(build, *, seed: int, precision: str, rank: int):
    """`build(dtype_policy)` for --precision, with the Keras seeds set per rank: dropout differs
    per worker, while the weights every worker trains come from rank 0 (TrainStep broadcasts)."""
    import keras

    from training.precision import configure_precision

    keras.utils.set_random_seed(seed + rank)
    return build(configure_precision(precision))


def report(title: str, resolved: dict, stream, path: str | None) -> None:
    """Prints `resolved` under "Resolved {title} settings:" (sorted keys, JSON values) and writes
    it to `path` (None: printed only)."""
    print(f"Resolved {title} settings:", file=stream)
    width = max(len(k) for k in resolved)
    for key in sorted(resolved):
        print(f"  {key:<{width}}  {json.dumps(resolved[key])}", file=stream)
    stream.flush()
    if path:
        write_json(path, resolved)
