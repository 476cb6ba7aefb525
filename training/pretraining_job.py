"""Pretraining as a task of the one training job: plain settings in, a trained and evaluated
output directory out.

run_pretraining.py turns its flags into `PretrainingSettings` and calls
`training.job.run(settings, PretrainingTask())`. In order:

1. cheap checks, before TensorFlow builds anything: values of their kind (common/kinds.py), the
   config and the vocab fit each other, every glob matches files, each worker's files hold records of this
   max_seq_length / max_predictions_per_seq, of one layout (masked, or unmasked: masked as read);
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

from common.cli import setting
from common.errors import UserError
from common.files import ensure_writable_dir, expand_globs
from data.pretraining import schema
from optimization import DECAY_POWER
from training import job


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingSettings(job.JobSettings):
    """run_pretraining.py's flags as plain values (see its --help for each): the shared ones
    (job.JobSettings) and pretraining's own."""

    bert_config_file: str
    input_files: str | None = None  # comma-separated globs
    eval_files: str | None = None
    max_predictions_per_seq: int = setting("count", 20)
    # Unmasked (dynamic) records only; None: Google's rate. Static records carry their masks.
    masked_lm_prob: float | None = setting("proportion", None)
    eval_batch_size: int = setting("count", 8)
    num_train_steps: int = setting("count", 100000)  # applied updates
    num_warmup_steps: int = setting("steps", 10000)
    max_eval_steps: int | None = setting("count", 100)  # None: the whole evaluation set
    shuffle_buffer: int = setting("count", 10000)  # the data order's shuffle window


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
    job.validate_settings(s)
    if s.do_train and not s.num_warmup_steps <= s.num_train_steps:
        raise UserError(
            f"--num_warmup_steps must be between 0 and --num_train_steps={s.num_train_steps} "
            f"(got {s.num_warmup_steps})."
        )
    if s.max_predictions_per_seq > s.max_seq_length:
        raise UserError(
            f"--max_predictions_per_seq={s.max_predictions_per_seq} exceeds "
            f"--max_seq_length={s.max_seq_length}."
        )


def masked_lm_prob_of(s: PretrainingSettings) -> float:
    """--masked_lm_prob, or Google's 0.15."""
    from training.masking import MASKED_LM_PROB

    return MASKED_LM_PROB if s.masked_lm_prob is None else s.masked_lm_prob


def _check_masking(s: PretrainingSettings, layout, files) -> None:
    """--masked_lm_prob applies to unmasked records only: refused on masked ones, whose masks were
    drawn when they were written."""
    if s.masked_lm_prob is not None and layout.masking == schema.STATIC:
        raise UserError(
            f"--masked_lm_prob applies to unmasked records (--masking=dynamic), but {files[0]} holds "
            "masked ones: their masks were drawn when they were written; drop the flag."
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
    layout=None,
) -> dict:
    """The settings as they will run: every flag plus what follows from them (`update`: the
    update on this run's workers, continuing resume_from's when there is one; `layout`: the
    training records', data/pretraining/schema.py)."""
    resolved = dataclasses.asdict(s)
    if layout is not None:
        resolved["masking"] = layout.describe()
        resolved["masked_lm_prob"] = masked_lm_prob_of(s) if layout.masking == schema.DYNAMIC else None
    resolved.update(
        {
            **update.describe(),
            "learning_rate_decay_power": DECAY_POWER[s.optimizer_type],
            "sequences_to_train": update.global_batch_size * s.num_train_steps if s.do_train else 0,
            "num_train_files": len(train_files),
            "num_eval_files": len(eval_files),
            "bin_size": job.bin_size_of(s),
            "resume_from": resume_from,
            "start_sequence": start_sequence,
            "init_checkpoint_step": init_checkpoint_step,
        }
    )
    if resume_from:
        resolved["init_checkpoint_ignored"] = bool(s.init_checkpoint)
    return resolved


@dataclasses.dataclass(kw_only=True)
class PretrainingPlan(job.Plan):
    """The job's plan with pretraining's data: this worker's training records from the data
    order's start, rank 0's evaluation records."""

    train_files: list
    train_data: object  # this worker's tf.data.Dataset, or None without --do_train
    eval_data: object  # rank 0's, or None
    init_step: int | None  # of --init_checkpoint, for a new output_dir


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


def _plan(s: PretrainingSettings, dist, out) -> PretrainingPlan:
    """Steps 1 and 2: config, vocab, globs, records, the checkpoint to continue (its global batch
    and data position); then the resolved settings reported."""
    from bert.checkpoints import global_step_of
    from training.checkpointing import latest_checkpoint, write_model_files
    from training.input_pipeline import check_files, evaluation_dataset, training_dataset

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
    train_data = eval_data = layout = None
    if s.do_train:
        layout = check_files(train_files, *shapes)
        _check_masking(s, layout, train_files)
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
            accumulation=update.accumulation_steps,
            bin_size=job.bin_size_of(s),
            masked_lm_prob=masked_lm_prob_of(s),
            layout=layout,
        )
    if s.do_eval and dist.is_chief:
        eval_layout = check_files(eval_files, *shapes)
        if not s.do_train:
            _check_masking(s, eval_layout, eval_files)
        eval_data = evaluation_dataset(
            eval_files,
            s.eval_batch_size,
            *shapes,
            bin_size=job.bin_size_of(s),
            max_batches=s.max_eval_steps,
            masked_lm_prob=masked_lm_prob_of(s),
            seed=s.seed,
            layout=eval_layout,
        )
    init_step = global_step_of(s.init_checkpoint) if s.init_checkpoint and not resume_from else None
    resolved = resolve(
        s,
        update,
        resume_from=resume_from,
        init_checkpoint_step=init_step,
        train_files=train_files,
        eval_files=eval_files,
        start_sequence=start,
        layout=layout,
    )
    if dist.is_chief:
        job.report("pretraining", resolved, out, os.path.join(s.output_dir, job.RESOLVED_CONFIG_NAME))
        write_model_files(config, s.vocab_file, s.output_dir)
    return PretrainingPlan(
        config=config,
        update=update,
        start_sequence=start,
        steps=s.num_train_steps if s.do_train else 0,
        warmup=s.num_warmup_steps,
        resume_from=resume_from,
        resolved=resolved,
        train_files=train_files,
        train_data=train_data,
        eval_data=eval_data,
        init_step=init_step,
    )


class PretrainingTask:
    """Pretraining (masked LM + next sentence prediction on TFRecords) for training.job.run."""

    def validate_settings(self, s: PretrainingSettings) -> None:
        validate(s)

    def plan(self, s: PretrainingSettings, dist, out) -> PretrainingPlan:
        return _plan(s, dist, out)

    @property
    def objective(self):
        from training.pretraining_objective import PretrainingObjective

        return PretrainingObjective()

    def build_model(self, config, dtype):
        from bert.pretraining import BertPretrainer

        return BertPretrainer(config, dtype=dtype)

    def initialise(self, model, s: PretrainingSettings, plan: PretrainingPlan, out) -> None:
        """Every layer and both heads from --init_checkpoint in a new output_dir."""
        from bert.checkpoints import load_weights

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

    def training_batches(self, s: PretrainingSettings, plan: PretrainingPlan, dist):
        from training.input_pipeline import naming_corrupt_files

        return naming_corrupt_files(iter(plan.train_data), plan.train_files)

    def resumed(self, plan: PretrainingPlan, start: int, out) -> None:
        if start >= plan.steps:
            print(
                f"{plan.resume_from} is already at step {start} of {plan.steps}; nothing to train.", file=out
            )

    def periodic(self, s, plan, step, log, out):
        return None

    def loaded(self, plan: PretrainingPlan, out) -> None:
        pass

    def result_fields(self) -> dict:
        return {"eval": None}

    def finish(self, s: PretrainingSettings, plan: PretrainingPlan, step, result: dict, log, out) -> None:
        """Rank 0 alone (the other workers are done): --eval_files' metrics, eval_results.json."""
        if plan.eval_data is None:
            return
        from training import loop

        results = loop.evaluate(
            step,
            plan.eval_data,
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
