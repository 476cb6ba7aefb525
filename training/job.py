"""The one training job: `run(settings, task)` drives pretraining (training/pretraining_job.py's
PretrainingTask) and fine-tuning (SquadTask, GlueTask on training/finetuning_job.py's
FineTuningTask) alike, from the settings every job shares (`JobSettings`) to a trained, evaluated
output directory. A task is a training.task.Task: job.run owns every step that is the same for each
task and calls the task's hooks for what differs (training/task.py lists them in order):

    result = job.run(settings, task)   # task.validate_settings, then in one worker:
      job.preflight(settings, task, dist, out, joining)  # every worker sees what it needs
      plan = job.plan(settings, task, dist, out)  # model files, output dir, update, data, report
      step = the model (task.build_model, task.initialise) and its TrainStep (task.objective)
      training from the latest checkpoint (task.training_batches, task.resumed, task.periodic)
      task.finish(...)                            # evaluate, predict, export

The pieces below are also what bench/pretrain_throughput.py builds its step with:

    with job.worker(use_horovod, deterministic, stream) as (dist, out):
        update = job.Update(batch_size, accumulation_steps, learning_rate, dist.size, optimizer_type)
        update, start = job.continue_update(update, latest_checkpoint(output_dir), out)
        update.global_batch_size, update.peak_learning_rate   # B x k x W and lr x W, here alone
        job.report("pretraining", {**update.describe(), ...}, out, path)  # print, resolved_config.json
        model = job.build_model(lambda dtype: ..., seed=..., precision=..., rank=dist.rank)
        step = update.build(model, objective, warmup_steps=..., train_steps=..., distributed=dist, ...)
        position = data_order.Position(start, batch_size, dist.size)   # the input starts at `start`
        training = job.resume_training(step, position, update, ...)
        training.run(step, batches, num_train_steps=..., save_checkpoints_steps=...)

`out` is the caller's stream on rank 0 and a sink on the other ranks: a job reports once.
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
from training.length_bins import DEFAULT_BIN_SIZE, bin_lengths, bin_size_refusal

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
    steps: int = 0  # updates to train for (0 without --do_train)
    warmup: int = 0
    data: object = None  # the task's (training.task.Prepared.data)
    resolved: dict = dataclasses.field(default_factory=dict)


def run(s: JobSettings, task, stream=None, tracking=None) -> dict:
    """Runs `task` (a training.task.Task; see the module docstring) with settings `s`; returns
    {"resolved", "model", "step" (of the weights it ends with), "train" (last metrics or None),
    "throughput" (or None)} plus the task's own results. Problems the user can fix raise
    UserError before any model is built. tracking: a training.tracking.MlflowTarget (or None):
    rank 0 also logs the resolved settings, the training metrics and the evaluations there."""
    from training.launcher_watch import LauncherWatch, log_path

    task.validate_settings(s)
    with LauncherWatch(log_path(s.output_dir)) as launcher:
        return _run_watched(s, task, stream, tracking, launcher)


def _run_watched(s: JobSettings, task, stream, tracking, launcher) -> dict:
    """run's body while `launcher` (a training.launcher_watch.LauncherWatch) is watched."""
    from training.distributed import expected_world
    from training.preflight import Joining

    stream = stream if stream is not None else sys.stdout
    world, rank = expected_world(s.use_horovod)
    # Watched from before Horovod starts: its init waits for every rank.
    joining = Joining(s.output_dir, s.worker_timeout_seconds, rank, world)
    with joining, worker(s.use_horovod, s.deterministic, stream) as (dist, out):
        preflight(s, task, dist, out, joining)
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
    result.update(task.result_fields())
    log = None
    if s.do_train:
        result["train"], log = _train(s, task, p, step, out, tracker, launcher)
        result["throughput"] = log.throughput()
    elif p.resume_from:
        from bert.checkpoints import load_weights

        load_weights(step.model, p.resume_from)
        task.loaded(p, out)
    # Without training: the step of the weights (the output_dir's, else --init_checkpoint's).
    result["step"] = weights_step(step, s.do_train, p.resume_from or s.init_checkpoint)
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


def preflight(s: JobSettings, task, dist, out, joining) -> None:
    """training/preflight.py's checks on every worker before anything is built (within
    --worker_timeout_seconds of the start, `joining` watching): the task's inputs, the output
    directory, room for two checkpoints of the task's model, GPUs."""
    from training import preflight as checks
    from training.checkpointing import latest_checkpoint
    from training.distributed import visible_gpus

    def checkpoint_size() -> int | None:
        try:
            resume_from = latest_checkpoint(s.output_dir) if os.path.isdir(s.output_dir) else None
            return checks.checkpoint_bytes(task.model_files(s, resume_from)[0])
        except UserError:
            return None  # plan names what is wrong, on every worker alike

    checks.check(
        dist,
        joining,
        inputs=task.inputs(s),
        output_dir=s.output_dir,
        checkpoint_size=checkpoint_size,
        gpus=visible_gpus(),
        stream=out,
    )


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
    )
    prepared = task.prepare(s, p, dist, out)
    p.data, p.steps, p.warmup = prepared.data, prepared.steps, prepared.warmup
    p.resolved = {
        **dataclasses.asdict(s),
        "vocab_file": vocab_file,
        **update.describe(),
        "bin_size": bin_size_of(s),
        "trace_ahead": trace_ahead_of(s),
        "resume_from": resume_from,
        "start_sequence": start,
        **prepared.resolved,
    }
    if dist.is_chief:
        path = os.path.join(s.output_dir, RESOLVED_CONFIG_NAME)
        report(task.title, p.resolved, out, path if s.do_train or not os.path.exists(path) else None)
        write_model_files(config, vocab_file, s.output_dir)
    return p


def past_rollbacks(output_dir: str, resume_from: str | None, sequences: int, stream) -> int:
    """Where the input continues from checkpoint `resume_from` at data position `sequences`: past
    the window a divergence rollback to it skipped (training/rollback.py; a sentence on `stream`),
    else `sequences`."""
    if not resume_from:
        return sequences
    from training.checkpointing import checkpoint_step
    from training.rollback import ROLLBACKS_NAME, resume_position

    start, record = resume_position(output_dir, checkpoint_step(resume_from), sequences)
    if record is not None:
        print(
            f"{resume_from} is where a divergence at step {record['diverged_step']} was rolled back "
            f"to ({ROLLBACKS_NAME}): the input continues at sequence {start}, past the skipped window.",
            file=stream,
        )
    return start


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
        bin_lengths=bin_lengths(bin_size_of(s), s.max_seq_length),
        row_counts=task.row_counts(s),
        trace_ahead=trace_ahead_of(s),
    )


def bin_size_of(s: JobSettings) -> int:
    """--bin_size as the job runs it (training.length_bins.resolved_bin_size)."""
    from training.length_bins import resolved_bin_size

    return resolved_bin_size(s.bin_size, s.max_seq_length)


def trace_ahead_of(s: JobSettings) -> bool:
    """--trace_ahead as the job runs it: only with XLA; None means on when TF_XLA_FLAGS keeps a
    persistent cache (training/compile_cache.py)."""
    return s.use_xla and (persistent_cache_in_use(os.environ) if s.trace_ahead is None else s.trace_ahead)


def _train(s: JobSettings, task, plan: Plan, step, out, tracker=None, launcher=None):
    """Training from where output_dir's checkpoints left off; (last metrics, the log)."""
    from training.data_order import Position

    dist = step.distributed
    batches = task.training_batches(s, plan, dist, plan.start_sequence)
    training = resume_training(
        step,
        Position(plan.start_sequence, s.train_batch_size, dist.size, restored=plan.restored_sequence),
        plan.update,
        output_dir=s.output_dir,
        train_steps=plan.steps,
        keep=s.keep_checkpoints,
        log_every=s.log_every_n_steps,
        worker_timeout_s=s.worker_timeout_seconds,
        stream=out,
        tracker=tracker,
        launcher=launcher,
    )
    task.resumed(plan, training.start, out)
    rollback, policy = None, task.rollback(s)
    if policy is not None:
        from training.rollback import Rollback

        skip_updates, max_rollbacks = policy
        rollback = Rollback(
            s.output_dir,
            lambda start: task.training_batches(s, plan, dist, start),
            global_batch=plan.update.global_batch_size,
            skip_updates=skip_updates,
            max_rollbacks=max_rollbacks,
            distributed=dist,
        )
    metrics = training.run(
        step,
        batches,
        num_train_steps=plan.steps,
        save_checkpoints_steps=s.save_checkpoints_steps,
        save_checkpoints_minutes=s.save_checkpoints_minutes,
        periodic=task.periodic(s, plan, step, training.log, out),
        rollback=rollback,
    )
    return metrics, training.log


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


@dataclasses.dataclass(frozen=True)
class Update:
    """One update as a job's settings define it: `batch_size` sequences per worker per
    micro-batch, `accumulation_steps` micro-batches, `workers` workers; `learning_rate` per worker
    (NVIDIA's launchers' convention) and the optimizer by name. The worker count multiplies the
    batch and the learning rate here and nowhere else.

    A run that continues a checkpoint written by another worker count keeps that run's global
    batch and peak rate (`continuing`): accumulation is re-derived, and `learning_rate_workers`
    says which worker count the rate was scaled for."""

    batch_size: int
    accumulation_steps: int
    learning_rate: float
    workers: int
    optimizer_type: str
    decay_power: float | None = None  # None: the optimizer's (optimization.DECAY_POWER)
    learning_rate_workers: int | None = None  # None: workers
    decay_from_warmup: bool = False  # decay counted from the end of warmup, not step 0 (Google's)
    epsilon: float | None = None  # None: the optimizer's (1e-6, Google's and NVIDIA's)

    @property
    def scaled_for_workers(self) -> int:
        return self.workers if self.learning_rate_workers is None else self.learning_rate_workers

    @property
    def global_batch_size(self) -> int:
        """Sequences one applied update sees, across micro-batches and workers."""
        return self.batch_size * self.accumulation_steps * self.workers

    @property
    def peak_learning_rate(self) -> float:
        from optimization import scaled_learning_rate

        return scaled_learning_rate(self.learning_rate, self.scaled_for_workers)

    @property
    def power(self) -> float:
        from optimization import DECAY_POWER

        return DECAY_POWER[self.optimizer_type] if self.decay_power is None else self.decay_power

    def describe(self) -> dict:
        """The resolved settings that follow from the update."""
        return {
            "workers": self.workers,
            "num_accumulation_steps": self.accumulation_steps,
            "global_batch_size": self.global_batch_size,
            "effective_learning_rate": self.peak_learning_rate,
        }

    def continuing(self, state) -> "Update":
        """This update made to continue the run of checkpoint `state` (a
        training.checkpointing.RunState): that run's global batch, with as many micro-batches as
        this run's workers and batch size need, and its learning-rate scaling. A UserError names
        the numbers when whole micro-batches cannot make the global batch."""
        if state.global_batch_size is None:
            return self
        total, per_micro_batch = state.global_batch_size, self.batch_size * self.workers
        if total % per_micro_batch:
            hint = (
                f"use a --train_batch_size that divides {total // self.workers}"
                if total % self.workers == 0
                else f"use a worker count that divides {total} (such as its {state.workers})"
            )
            raise UserError(
                f"{state.prefix} was trained with a global batch of {total} sequences on "
                f"{state.workers} worker(s); {self.workers} worker(s) x --train_batch_size="
                f"{self.batch_size} cannot make it with whole micro-batches: {hint}."
            )
        scaled_for = state.learning_rate_workers or state.workers
        return dataclasses.replace(
            self,
            accumulation_steps=total // per_micro_batch,
            learning_rate_workers=None if scaled_for == self.workers else scaled_for,
        )

    def learning_rate_schedule(self, warmup_steps: int, train_steps: int):
        """Warmup to the peak, then polynomial decay to 0 at `train_steps`, counted from step 0
        (Google's) or from the end of warmup (decay_from_warmup); train_steps 0 (no training: the
        optimizer only restores or evaluates) gives the constant peak."""
        from optimization import WarmupPolynomialDecay

        if not train_steps:
            return self.peak_learning_rate
        return WarmupPolynomialDecay(
            self.peak_learning_rate,
            warmup_steps,
            train_steps,
            self.power,
            decay_from_warmup=self.decay_from_warmup,
        )

    def optimizer(self, warmup_steps: int, train_steps: int):
        """The optimizer of this update, on its learning-rate schedule."""
        from optimization import create_optimizer

        options = {} if self.epsilon is None else {"epsilon": self.epsilon}
        return create_optimizer(
            self.optimizer_type, self.learning_rate_schedule(warmup_steps, train_steps), **options
        )

    def build(
        self,
        model,
        objective,
        *,
        warmup_steps: int,
        train_steps: int,
        distributed,
        jit_compile: bool,
        bin_lengths: tuple[int, ...] = (),
        row_counts: tuple[int, ...] = (),
        trace_ahead: bool = False,
    ):
        """The TrainStep (training/train_step.py) of `model` and `objective` with this update's
        optimizer and schedule; `bin_lengths`, `row_counts` and `trace_ahead` as TrainStep takes
        them."""
        from training.train_step import TrainStep

        return TrainStep(
            model,
            self.optimizer(warmup_steps, train_steps),
            objective,
            accumulation_steps=self.accumulation_steps,
            distributed=distributed,
            jit_compile=jit_compile,
            bin_lengths=bin_lengths,
            row_counts=row_counts,
            trace_ahead=trace_ahead,
        )


def continue_update(update: Update, resume_from: str | None, stream) -> tuple[Update, int]:
    """(the update, the sequences of the data order consumed) of a run that continues checkpoint
    `resume_from` (Update.continuing; a sentence on `stream` when it differs from the flags'), or
    (update, 0) for a new run."""
    if not resume_from:
        return update, 0
    from training.checkpointing import read_run_state

    state = read_run_state(resume_from)
    continued = update.continuing(state)
    if continued != update:
        print(
            f"{resume_from} was written by {state.workers} worker(s) with a global batch of "
            f"{continued.global_batch_size}: {continued.workers} worker(s) x {continued.batch_size} "
            f"sequences x {continued.accumulation_steps} micro-batch(es) per update keep it, and the "
            f"peak learning rate stays {continued.peak_learning_rate:g} (--learning_rate x "
            f"{continued.scaled_for_workers}).",
            file=stream,
        )
    return continued, state.sequences


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


@dataclasses.dataclass
class Training:
    """What drives a training run once its step is built (see resume_training)."""

    checkpointer: object  # training.checkpointing.Checkpointer
    position: object  # training.data_order.Position
    start: int  # the step it continues from
    log: object  # training.metrics_log.MetricsLog
    stop: object  # training.preemption.StopRequests
    watchdog: object  # training.watchdog.Watchdog

    def run(
        self,
        step,
        micro_batches,
        *,
        num_train_steps: int,
        save_checkpoints_steps: int,
        save_checkpoints_minutes: float | None = None,
        periodic=None,
        rollback=None,
    ):
        """loop.train over this worker's `micro_batches` (from the position's start) with the
        preemption notices and the watchdog in force, and `rollback` (a
        training.rollback.Rollback, or None) for a divergence; the last metrics."""
        from training import loop

        with self.stop, self.watchdog:
            return loop.train(
                step,
                self.position.counted(micro_batches),
                self.checkpointer,
                self.log,
                num_train_steps=num_train_steps,
                save_checkpoints_steps=save_checkpoints_steps,
                save_checkpoints_minutes=save_checkpoints_minutes,
                periodic=periodic,
                stop=self.stop,
                watchdog=self.watchdog,
                rollback=rollback,
            )


def resume_training(
    step,
    position,
    update: Update,
    *,
    output_dir: str,
    train_steps: int,
    keep: int,
    log_every: int,
    worker_timeout_s: float,
    stream,
    tracker=None,
    launcher=None,
) -> Training:
    """The Training of a run: leftovers of an interrupted save removed, the latest checkpoint of
    output_dir restored (weights, optimizer; `position`, a training.data_order.Position, started
    where it says), the log counting from there,
    the preemption notices to watch (a STOP file an earlier run left is cleared first; the
    worker's launcher gone is one too) and the watchdog against lost workers. tracker: the log's
    training.tracking.MlflowTracker (or None); launcher: the run's
    training.launcher_watch.LauncherWatch, whose report is a notice (or None)."""
    from training import loop
    from training.checkpointing import Checkpointer
    from training.metrics_log import MetricsLog
    from training.preemption import StopRequests
    from training.watchdog import Watchdog

    checkpointer = Checkpointer(
        output_dir, step, position, update=update, keep=keep, distributed=step.distributed
    )
    checkpointer.remove_leftovers()
    stop = StopRequests(output_dir, step.distributed, launcher)
    if step.distributed.is_chief:
        stop.clear_stale_file()  # before loop.resume, the workers' first agreement
    start = loop.resume(checkpointer, step)
    log = MetricsLog(
        output_dir,
        total_steps=train_steps,
        start_step=start,
        sequences_per_update=update.global_batch_size,
        log_every=log_every,
        enabled=step.distributed.is_chief,
        stream=stream,
        tracker=tracker,
    )
    watchdog = Watchdog(output_dir, step.distributed, worker_timeout_s, checkpointer.latest)
    return Training(checkpointer, position, start, log, stop, watchdog)


def weights_step(step, trained: bool, source: str | None) -> int:
    """The update count of the weights `step` holds: the optimizer's after training, else that of
    the checkpoint they were loaded from (0 for none)."""
    if trained:
        return int(step.optimizer.iterations)
    from bert.checkpoints import global_step_of

    return (global_step_of(source) or 0) if source else 0
