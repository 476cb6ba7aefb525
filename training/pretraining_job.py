"""The pretraining job: plain settings in, a trained and evaluated output directory out.

run_pretraining.py turns its flags into `PretrainingSettings` and calls `run`. In order:

1. cheap checks, before TensorFlow builds anything: values of their kind (common/kinds.py), the
   config and the vocab fit each other, every glob matches files, each worker's files hold records of this
   max_seq_length / max_predictions_per_seq;
2. the resolved settings (workers, global batch, effective learning rate, where the run starts)
   are printed and written to <output_dir>/resolved_config.json;
3. the model starts from the latest checkpoint of output_dir when there is one (an exact
   resume: --init_checkpoint is then ignored), else from --init_checkpoint's weights, both heads
   included (phase 2 from phase 1's directory: a fresh optimizer and step), else at random;
4. training.loop trains, checkpoints and logs; rank 0 evaluates on --eval_files at the end.

Exact resume needs TF op determinism (`deterministic`, on by default) and the same seed: the
same command then ends with the same weights whether or not it was interrupted.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from common.cli import check_settings, setting
from common.errors import UserError
from common.files import ensure_writable_dir, expand_globs
from optimization import DECAY_POWER, OPTIMIZERS
from training import job


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
    """run_pretraining.py's flags as plain values (see its --help for each); a field's kind
    (common/kinds.py) is checked by `validate` and by the flag's validator alike."""

    bert_config_file: str
    output_dir: str
    input_files: str | None = None  # comma-separated globs
    eval_files: str | None = None
    vocab_file: str | None = None
    init_checkpoint: str | None = None
    max_seq_length: int = setting("count", 128)
    max_predictions_per_seq: int = setting("count", 20)
    train_batch_size: int = setting("count", 32)  # per worker, per micro-batch
    eval_batch_size: int = setting("count", 8)
    learning_rate: float = setting("rate", 5e-5)  # per worker: the peak is this x workers
    num_train_steps: int = setting("count", 100000)  # applied updates
    num_warmup_steps: int = setting("steps", 10000)
    num_accumulation_steps: int = setting("count", 1)
    save_checkpoints_steps: int = setting("count", 1000)
    keep_checkpoints: int = setting("count", 5)
    optimizer_type: str = "lamb"
    precision: str = setting("precision", "fp32")
    use_xla: bool = setting("bool", True)
    use_horovod: bool = setting("bool", False)
    do_train: bool = setting("bool", True)
    do_eval: bool = setting("bool", False)
    max_eval_steps: int | None = setting("count", 100)  # None: the whole evaluation set
    seed: int = 12345
    log_every_n_steps: int = setting("count", 10)
    deterministic: bool = setting("bool", True)
    shuffle_buffer: int = setting("count", 10000)  # the data order's shuffle window
    worker_timeout_seconds: int = setting("count", 300)  # training/watchdog.py


def validate(s: PretrainingSettings) -> None:
    """UserError naming the first flag whose value cannot work."""
    if not s.do_train and not s.do_eval:
        raise UserError("Nothing to do: pass --do_train and/or --do_eval.")
    if not s.output_dir:
        raise UserError("--output_dir is required.")
    if not s.bert_config_file:
        raise UserError("--bert_config_file is required.")
    if s.do_train and not s.input_files:
        raise UserError("--input_files is required with --do_train.")
    if s.do_eval and not s.eval_files:
        raise UserError("--eval_files is required with --do_eval.")
    check_settings(s)
    if s.do_train and not s.num_warmup_steps <= s.num_train_steps:
        raise UserError(
            f"--num_warmup_steps must be between 0 and --num_train_steps={s.num_train_steps} "
            f"(got {s.num_warmup_steps})."
        )
    if s.optimizer_type not in OPTIMIZERS:
        raise UserError(
            f"--optimizer_type must be one of {', '.join(OPTIMIZERS)} (got {s.optimizer_type!r})."
        )
    if s.max_predictions_per_seq > s.max_seq_length:
        raise UserError(
            f"--max_predictions_per_seq={s.max_predictions_per_seq} exceeds "
            f"--max_seq_length={s.max_seq_length}."
        )


def _load_config(s: PretrainingSettings):
    from bert.checkpoints import check_vocab_size
    from bert.config import read_config_file
    from bert.tokenization import load_vocab

    config = read_config_file(s.bert_config_file)
    if s.vocab_file:
        check_vocab_size(config, len(load_vocab(s.vocab_file)), s.vocab_file)
    if s.max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={s.max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of {s.bert_config_file}."
        )
    return config


def update_of(s: PretrainingSettings, workers: int) -> job.Update:
    """The update `s` asks for on `workers` workers."""
    return job.Update(
        s.train_batch_size, s.num_accumulation_steps, s.learning_rate, workers, s.optimizer_type
    )


def resolve(
    s: PretrainingSettings,
    update: job.Update,
    *,
    resume_from: str | None,
    init_checkpoint_step: int | None,
    train_files=(),
    eval_files=(),
    start_sequence: int = 0,
) -> dict:
    """The settings as they will run: every flag plus what follows from them (`update`: the
    update on this run's workers, continuing resume_from's when there is one)."""
    resolved = dataclasses.asdict(s)
    resolved.update(
        {
            **update.describe(),
            "learning_rate_decay_power": DECAY_POWER[s.optimizer_type],
            "sequences_to_train": update.global_batch_size * s.num_train_steps if s.do_train else 0,
            "num_train_files": len(train_files),
            "num_eval_files": len(eval_files),
            "resume_from": resume_from,
            "start_sequence": start_sequence,
            "init_checkpoint_step": init_checkpoint_step,
        }
    )
    if resume_from:
        resolved["init_checkpoint_ignored"] = bool(s.init_checkpoint)
    return resolved


@dataclasses.dataclass
class _Plan:
    """What the cheap checks found: the job before any model exists."""

    config: object  # BertConfig
    update: job.Update
    train_files: list
    train_data: object  # this worker's tf.data.Dataset, or None without --do_train
    start_sequence: int  # of the data order, where train_data starts
    eval_data: object  # rank 0's, or None
    resume_from: str | None
    init_step: int | None
    resolved: dict


def _record_counts(files: list, dist, out) -> list[int]:
    """The record count of every training file (the data order needs them): each worker finds
    those of every size-th file (from the TFRecord stage's manifest, else by counting), and the
    workers add them up."""
    import numpy as np

    from common.progress import Progress
    from training.input_pipeline import record_counts

    share = list(range(dist.rank, len(files), dist.size))
    found = record_counts(
        [files[i] for i in share],
        counting=lambda total: Progress(
            "counting training records", total, stream=out, enabled=dist.is_chief
        ),
    )
    counts = np.zeros(len(files), np.int64)
    counts[share] = found
    if dist.size > 1:
        import tensorflow as tf

        counts = dist.sum([tf.constant(counts)])[0].numpy()
    return [int(c) for c in counts]


def _plan(s: PretrainingSettings, dist, out) -> _Plan:
    """Steps 1 and 2: config, vocab, globs, records, the checkpoint to continue (its global batch
    and data position); then the resolved settings reported."""
    from bert.checkpoints import global_step_of
    from training.checkpointing import latest_checkpoint, write_model_files
    from training.input_pipeline import evaluation_dataset, training_dataset

    config = _load_config(s)
    train_files = expand_globs(s.input_files, "training files", source="--input_files") if s.do_train else []
    eval_files = expand_globs(s.eval_files, "evaluation files", source="--eval_files") if s.do_eval else []
    shapes = (s.max_seq_length, s.max_predictions_per_seq)
    if dist.is_chief:
        ensure_writable_dir(s.output_dir)
    resume_from = latest_checkpoint(s.output_dir)
    update, start = update_of(s, dist.size), 0
    if s.do_train:
        update, start = job.continue_update(update, resume_from, out)
    train_data = eval_data = None
    if s.do_train:
        train_data = training_dataset(
            train_files,
            s.train_batch_size,
            *shapes,
            num_workers=dist.size,
            worker_index=dist.rank,
            start=start,
            seed=s.seed,
            window=s.shuffle_buffer,
            count=lambda files: _record_counts(files, dist, out),
        )
    if s.do_eval and dist.is_chief:
        eval_data = evaluation_dataset(eval_files, s.eval_batch_size, *shapes)
    init_step = global_step_of(s.init_checkpoint) if s.init_checkpoint and not resume_from else None
    resolved = resolve(
        s,
        update,
        resume_from=resume_from,
        init_checkpoint_step=init_step,
        train_files=train_files,
        eval_files=eval_files,
        start_sequence=start,
    )
    if dist.is_chief:
        job.report("pretraining", resolved, out, os.path.join(s.output_dir, job.RESOLVED_CONFIG_NAME))
        write_model_files(config, s.vocab_file, s.output_dir)
    return _Plan(config, update, train_files, train_data, start, eval_data, resume_from, init_step, resolved)


def _build_step(s: PretrainingSettings, plan: _Plan, dist, out):
    """Step 3: the model (from --init_checkpoint in a new output_dir) and its train step."""
    from bert.checkpoints import load_weights
    from bert.pretraining import BertPretrainer
    from training.pretraining_objective import PretrainingObjective

    model = job.build_model(
        lambda dtype: BertPretrainer(plan.config, dtype=dtype),
        seed=s.seed,
        precision=s.precision,
        rank=dist.rank,
    )
    if plan.resume_from:
        where = (
            f" (--init_checkpoint={s.init_checkpoint} applies only to a new output_dir)."
            if s.init_checkpoint
            else "."
        )
        print(f"Resuming from {plan.resume_from}{where}", file=out)
    elif s.init_checkpoint:
        load_weights(model, s.init_checkpoint)
        print(
            f"Initialised every layer and both heads from {s.init_checkpoint}"
            + (
                f" (its step {plan.init_step}); the optimizer and step start at 0."
                if plan.init_step is not None
                else "."
            ),
            file=out,
        )
    return plan.update.build(
        model,
        PretrainingObjective(),
        warmup_steps=s.num_warmup_steps,
        train_steps=s.num_train_steps if s.do_train else 0,
        distributed=dist,
        jit_compile=s.use_xla,
    )


def _train(s: PretrainingSettings, plan: _Plan, step, out):
    """Step 4: training from where output_dir's checkpoints left off; (last metrics, the log)."""
    from training.data_order import Position
    from training.input_pipeline import naming_corrupt_files

    position = Position(plan.start_sequence, s.train_batch_size, step.distributed.size)
    training = job.resume_training(
        step,
        position,
        plan.update,
        output_dir=s.output_dir,
        train_steps=s.num_train_steps,
        keep=s.keep_checkpoints,
        log_every=s.log_every_n_steps,
        worker_timeout_s=s.worker_timeout_seconds,
        stream=out,
    )
    if training.start >= s.num_train_steps:
        print(
            f"{plan.resume_from} is already at step {training.start} of {s.num_train_steps}; nothing to train.",
            file=out,
        )
    metrics = training.run(
        step,
        naming_corrupt_files(iter(plan.train_data), plan.train_files),
        num_train_steps=s.num_train_steps,
        save_checkpoints_steps=s.save_checkpoints_steps,
    )
    log = training.log
    return metrics, log


def _evaluate(s: PretrainingSettings, plan: _Plan, step, global_step: int, log, out) -> dict:
    """Step 5, rank 0 alone (the other workers are done): eval_results.json, printed."""
    from training import loop

    results = loop.evaluate(
        step,
        plan.eval_data,
        max_batches=s.max_eval_steps,
        output_dir=s.output_dir,
        global_step=global_step,
        log=log,
    )
    print(
        "Evaluation: "
        + "  ".join(
            f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in sorted(results.items())
        ),
        file=out,
        flush=True,
    )
    return results


def run(s: PretrainingSettings, stream=None) -> dict:
    """Runs the job; returns {"resolved", "model" (the BertPretrainer), "step", "train" (last
    metrics or None), "eval" (or None), "throughput"}. Problems the user can fix raise UserError
    before any model is built."""
    validate(s)
    stream = stream if stream is not None else sys.stdout
    with job.worker(s.use_horovod, s.deterministic, stream) as (dist, out):
        plan = _plan(s, dist, out)
        step = _build_step(s, plan, dist, out)
        result = {
            "resolved": plan.resolved,
            "model": step.model,
            "train": None,
            "eval": None,
            "throughput": None,
        }
        log = None
        if s.do_train:
            result["train"], log = _train(s, plan, step, out)
            result["throughput"] = log.throughput()
        elif plan.resume_from:
            from bert.checkpoints import load_weights

            load_weights(step.model, plan.resume_from)
        # Without training: the step of the weights evaluated (the output_dir's, else --init_checkpoint's).
        result["step"] = job.weights_step(step, s.do_train, plan.resume_from or s.init_checkpoint)
        if plan.eval_data is not None:
            result["eval"] = _evaluate(s, plan, step, result["step"], log, out)
    return result
