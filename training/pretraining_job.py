"""The pretraining job: plain settings in, a trained and evaluated output directory out.

run_pretraining.py turns its flags into `PretrainingSettings` and calls `run`. In order:

1. cheap checks, before TensorFlow builds anything: values in range, the config and the vocab
   fit each other, every glob matches files, each worker's files hold records of this
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
import json
import os
import sys

from common.errors import UserError
from common.files import ensure_writable_dir, expand_globs, write_json

RESOLVED_CONFIG_NAME = "resolved_config.json"
OPTIMIZER_TYPES = ("lamb", "adamw", "adam_weight_decay")
# Polynomial decay power: 0.5 for LAMB, 1.0 (linear) for Adam (NVIDIA's recipes).
DECAY_POWER = {"lamb": 0.5, "adamw": 1.0, "adam_weight_decay": 1.0}


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
    """run_pretraining.py's flags as plain values (see its --help for each)."""

    bert_config_file: str
    output_dir: str
    input_files: str | None = None  # comma-separated globs
    eval_files: str | None = None
    vocab_file: str | None = None
    init_checkpoint: str | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    train_batch_size: int = 32  # per worker, per micro-batch
    eval_batch_size: int = 8
    learning_rate: float = 5e-5  # per worker: the peak is this x workers
    num_train_steps: int = 100000  # applied updates
    num_warmup_steps: int = 10000
    num_accumulation_steps: int = 1
    save_checkpoints_steps: int = 1000
    keep_checkpoints: int = 5
    optimizer_type: str = "lamb"
    precision: str = "fp32"
    use_xla: bool = True
    use_horovod: bool = False
    do_train: bool = True
    do_eval: bool = False
    max_eval_steps: int | None = 100
    seed: int = 12345
    log_every_n_steps: int = 10
    deterministic: bool = True
    shuffle_buffer: int = 10000


def validate(s: PretrainingSettings) -> None:
    """UserError naming the first flag whose value cannot work."""
    from training.precision import PRECISIONS

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
    positive = [
        "max_seq_length",
        "max_predictions_per_seq",
        "train_batch_size",
        "eval_batch_size",
        "num_accumulation_steps",
        "save_checkpoints_steps",
        "keep_checkpoints",
        "log_every_n_steps",
        "shuffle_buffer",
    ]
    if s.do_train:
        positive.append("num_train_steps")
    for name in positive:
        if getattr(s, name) < 1:
            raise UserError(f"--{name} must be at least 1 (got {getattr(s, name)}).")
    if s.max_eval_steps is not None and s.max_eval_steps < 1:
        raise UserError(f"--max_eval_steps must be at least 1 (got {s.max_eval_steps}).")
    if not s.learning_rate > 0:
        raise UserError(f"--learning_rate must be > 0 (got {s.learning_rate}).")
    if s.do_train and not 0 <= s.num_warmup_steps <= s.num_train_steps:
        raise UserError(
            f"--num_warmup_steps must be between 0 and --num_train_steps={s.num_train_steps} "
            f"(got {s.num_warmup_steps})."
        )
    if s.optimizer_type not in OPTIMIZER_TYPES:
        raise UserError(
            f"--optimizer_type must be one of {', '.join(OPTIMIZER_TYPES)} (got {s.optimizer_type!r})."
        )
    if s.precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)} (got {s.precision!r}).")
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


def resolve(
    s: PretrainingSettings,
    workers: int,
    *,
    resume_from: str | None,
    init_checkpoint_step: int | None,
    train_files=(),
    eval_files=(),
) -> dict:
    """The settings as they will run: every flag plus what follows from them."""
    from optimization import scaled_learning_rate

    global_batch = s.train_batch_size * s.num_accumulation_steps * workers
    resolved = dataclasses.asdict(s)
    resolved.update(
        {
            "workers": workers,
            "global_batch_size": global_batch,
            "effective_learning_rate": scaled_learning_rate(s.learning_rate, workers),
            "learning_rate_decay_power": DECAY_POWER[s.optimizer_type],
            "sequences_to_train": global_batch * s.num_train_steps if s.do_train else 0,
            "num_train_files": len(train_files),
            "num_eval_files": len(eval_files),
            "resume_from": resume_from,
            "init_checkpoint_step": init_checkpoint_step,
        }
    )
    if resume_from:
        resolved["init_checkpoint_ignored"] = bool(s.init_checkpoint)
    return resolved


def _print_resolved(resolved: dict, stream) -> None:
    print("Resolved pretraining settings:", file=stream)
    width = max(len(k) for k in resolved)
    for key in sorted(resolved):
        print(f"  {key:<{width}}  {json.dumps(resolved[key])}", file=stream)
    stream.flush()


def run(s: PretrainingSettings, stream=None) -> dict:
    """Runs the job; returns {"resolved", "model" (the BertPretrainer), "step", "train" (last
    metrics or None), "eval" (or None), "throughput"}. Problems the user can fix raise UserError
    before any model is built."""
    stream = stream if stream is not None else sys.stdout
    validate(s)
    import keras
    import tensorflow as tf

    from bert.checkpoints import global_step_of, load_weights
    from bert.pretraining import BertPretrainer
    from optimization import WarmupPolynomialDecay, create_optimizer, scaled_learning_rate
    from training import loop
    from training.checkpointing import Checkpointer, latest_checkpoint, write_model_files
    from training.distributed import Distributed
    from training.input_pipeline import naming_corrupt_files, pretraining_dataset, worker_files
    from training.metrics_log import MetricsLog
    from training.precision import configure_precision
    from training.train_step import PretrainingStep

    if s.deterministic:
        tf.config.experimental.enable_op_determinism()
    dist = Distributed(use_horovod=s.use_horovod)
    chief = dist.is_chief
    out = stream if chief else open(os.devnull, "w")

    # 1. Cheap checks: config, vocab, globs, records. No model yet.
    config = _load_config(s)
    train_files = expand_globs(s.input_files, "training files", source="--input_files") if s.do_train else []
    eval_files = expand_globs(s.eval_files, "evaluation files", source="--eval_files") if s.do_eval else []
    shapes = (s.max_seq_length, s.max_predictions_per_seq)
    train_data = eval_data = None
    if s.do_train:
        train_data = pretraining_dataset(
            train_files,
            s.train_batch_size,
            *shapes,
            is_training=True,
            num_workers=dist.size,
            worker_index=dist.rank,
            seed=s.seed,
            shuffle_buffer=s.shuffle_buffer,
            deterministic=True if s.deterministic else None,
        )
    if s.do_eval and chief:
        eval_data = pretraining_dataset(eval_files, s.eval_batch_size, *shapes, is_training=False)
    if chief:
        ensure_writable_dir(s.output_dir)
    resume_from = latest_checkpoint(s.output_dir)
    init_step = None
    if s.init_checkpoint and not resume_from:
        init_step = global_step_of(s.init_checkpoint)

    # 2. What will run.
    resolved = resolve(
        s,
        dist.size,
        resume_from=resume_from,
        init_checkpoint_step=init_step,
        train_files=train_files,
        eval_files=eval_files,
    )
    if chief:
        _print_resolved(resolved, out)
        write_json(os.path.join(s.output_dir, RESOLVED_CONFIG_NAME), resolved)
        write_model_files(config, s.vocab_file, s.output_dir)

    # 3. Model, optimizer, step; where to start.
    keras.utils.set_random_seed(s.seed + dist.rank)  # dropout differs per worker; weights come from rank 0
    model = BertPretrainer(config, dtype=configure_precision(s.precision))
    if resume_from:
        print(
            f"Resuming from {resume_from}"
            + (
                f" (--init_checkpoint={s.init_checkpoint} applies only to a new output_dir)."
                if s.init_checkpoint
                else "."
            ),
            file=out,
        )
    elif s.init_checkpoint:
        load_weights(model, s.init_checkpoint)
        print(
            f"Initialised every layer and both heads from {s.init_checkpoint}"
            + (
                f" (its step {init_step}); the optimizer and step start at 0."
                if init_step is not None
                else "."
            ),
            file=out,
        )
    peak = scaled_learning_rate(s.learning_rate, dist.size)
    if s.do_train:
        learning_rate = WarmupPolynomialDecay(
            peak, s.num_warmup_steps, s.num_train_steps, DECAY_POWER[s.optimizer_type]
        )
    else:
        learning_rate = peak
    optimizer = create_optimizer(s.optimizer_type, learning_rate)
    step = PretrainingStep(
        model, optimizer, accumulation_steps=s.num_accumulation_steps, distributed=dist, jit_compile=s.use_xla
    )
    iterator = iter(train_data) if train_data is not None else None
    checkpointer = Checkpointer(s.output_dir, step, iterator, keep=s.keep_checkpoints, distributed=dist)

    result = {"resolved": resolved, "model": model, "train": None, "eval": None, "throughput": None}
    log = None
    if s.do_train:
        checkpointer.remove_leftovers()
        start = loop.resume(checkpointer, step)
        log = MetricsLog(
            s.output_dir,
            total_steps=s.num_train_steps,
            start_step=start,
            sequences_per_update=resolved["global_batch_size"],
            log_every=s.log_every_n_steps,
            enabled=chief,
            stream=out,
        )
        if start >= s.num_train_steps:
            print(
                f"{resume_from} is already at step {start} of {s.num_train_steps}; nothing to train.",
                file=out,
            )
        mine = worker_files(train_files, dist.size, dist.rank)
        result["train"] = loop.train(
            step,
            naming_corrupt_files(iterator, mine),
            checkpointer,
            log,
            num_train_steps=s.num_train_steps,
            save_checkpoints_steps=s.save_checkpoints_steps,
        )
        result["throughput"] = log.throughput()
    elif resume_from:
        load_weights(model, resume_from)
    # Without training: the step of the weights evaluated (the output_dir's, else --init_checkpoint's).
    source = resume_from or s.init_checkpoint
    result["step"] = (
        int(optimizer.iterations) if s.do_train else (global_step_of(source) or 0 if source else 0)
    )

    # 4. Evaluation, rank 0 alone (the other workers are done).
    if eval_data is not None:
        results = loop.evaluate(
            step,
            eval_data,
            max_batches=s.max_eval_steps,
            output_dir=s.output_dir,
            global_step=result["step"],
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
        result["eval"] = results
    if out is not stream:
        out.close()
    return result
