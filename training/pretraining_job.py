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
import functools

from common.cli import setting
from common.errors import UserError
from common.files import expand_globs
from data.pretraining import schema
from training import job
from training.rollback import POLICIES
from training.task import Prepared, Task


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingSettings(job.JobSettings):
    """run_pretraining.py's flags as plain values (see its --help for each): the shared ones
    (job.JobSettings) and pretraining's own."""

    bert_config_file: str
    input_files: str | None = None  # comma-separated globs
    eval_files: str | None = None
    max_predictions_per_seq: int = setting(
        "count",
        20,
        "Masked positions per sequence; must match masked TFRecords (unmasked ones are masked up to it).",
    )
    # Unmasked (dynamic) records only; None: Google's rate. Static records carry their masks.
    masked_lm_prob: float | None = setting(
        "proportion",
        None,
        "Unmasked TFRecords (prepared with --masking=dynamic) only: the fraction of tokens masked "
        "as they are read (default 0.15, Google's).",
    )
    eval_batch_size: int = setting("count", 8, "Sequences per evaluation batch.")
    num_train_steps: int = setting(
        "count", 100000, "Applied updates to train for (skipped fp16 updates do not count)."
    )
    num_warmup_steps: int = setting(
        "steps",
        10000,
        "Updates of linear warmup; then polynomial decay to 0 (power 0.5 for LAMB, 1 for Adam), "
        "counted from update 0.",
    )
    # None: the whole evaluation set
    max_eval_steps: int | None = setting("count", 100, "Evaluation batches at most.")
    packing: bool = setting(
        "bool",
        False,
        "Pack each update's sequences into rows of --max_seq_length (each attending to itself "
        "only): the same sequences per update, less padding computed. With --bin_size > 0 each "
        "packed micro-batch is also cut to the bin of its fullest row.",
    )
    on_divergence: str = setting(
        POLICIES,
        "stop",
        "What an update whose loss or gradients are not finite does (in fp16: once even a loss "
        "scale of 1 overflows): stop (the run ends with a sentence naming the last good "
        "checkpoint) or rollback (every worker restores the newest checkpoint, skips the data "
        "that led to the divergence and trains on; see docs/reliability.md).",
    )
    rollback_skip_updates: int = setting(
        "steps",
        0,
        "--on_divergence=rollback: updates' worth of data skipped past the diverged update (the "
        "data since the checkpoint through the diverged update is always skipped).",
    )
    max_rollbacks: int = setting(
        "steps",
        3,
        "--on_divergence=rollback: rollbacks a run (its --output_dir) may make; the next "
        "divergence stops it.",
    )
    shuffle_buffer: int = setting(  # the data order's shuffle window
        "count",
        10000,
        "Consecutive records shuffled together (a window of the data order, the same for every "
        "worker count; see docs/cluster.md, 'Changing the GPU count').",
    )


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


def _check_masking(s: PretrainingSettings, layout, files) -> None:
    """--masked_lm_prob applies to unmasked records only: refused on masked ones, whose masks were
    drawn when they were written."""
    if s.masked_lm_prob is not None and layout.masking == schema.STATIC:
        raise UserError(
            f"--masked_lm_prob applies to unmasked records (--masking=dynamic), but {files[0]} holds "
            "masked ones: their masks were drawn when they were written; drop the flag."
        )


@dataclasses.dataclass(frozen=True)
class PretrainingData:
    """Pretraining's plan.data: this worker's training records from the data order's start,
    rank 0's evaluation records."""

    train_files: list
    train: object  # this worker's tf.data.Dataset from plan.start_sequence, or None without --do_train
    eval: object  # rank 0's, or None
    init_step: int | None  # of --init_checkpoint, for a new output_dir
    train_from: object = None  # start -> this worker's tf.data.Dataset from sequence `start`


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


class PretrainingTask(Task):
    """Pretraining (masked LM + next sentence prediction on TFRecords) for training.job.run."""

    title = "pretraining"

    def validate_settings(self, s: PretrainingSettings) -> None:
        validate(s)

    def inputs(self, s: PretrainingSettings) -> list[tuple[str, str]]:
        data = [("--input_files", s.input_files if s.do_train else None)]
        data.append(("--eval_files", s.eval_files if s.do_eval else None))
        return [(flag, value) for flag, value in data if value]

    @property
    def objective(self):
        from training.pretraining_objective import PretrainingObjective

        return PretrainingObjective()

    def model_files(self, s: PretrainingSettings, resume_from):
        from bert.config import read_config_file

        config = read_config_file(s.bert_config_file)
        job.check_model_files(config, s.vocab_file, s.max_seq_length, s.bert_config_file)
        return config, s.vocab_file

    def prepare(self, s: PretrainingSettings, plan: job.Plan, dist, out) -> Prepared:
        """Every glob matches files, each worker's files hold records of this max_seq_length /
        max_predictions_per_seq and of one layout; this worker's training data from the plan's
        start, rank 0's evaluation data; with --packing, the row counts of its packed micro-batches."""
        from bert.checkpoints import global_step_of
        from data.pretraining.masking import MASKED_LM_PROB
        from data.pretraining.schema import check_files
        from training.input_pipeline import evaluation_dataset, training_dataset
        from training.packing import row_counts

        train_files = (
            expand_globs(s.input_files, "training files", source="--input_files") if s.do_train else []
        )
        eval_files = (
            expand_globs(s.eval_files, "evaluation files", source="--eval_files") if s.do_eval else []
        )
        shapes = (s.max_seq_length, s.max_predictions_per_seq)
        masked_lm_prob = MASKED_LM_PROB if s.masked_lm_prob is None else s.masked_lm_prob  # Google's
        train_data = train_from = eval_data = layout = None
        if s.do_train:
            layout = check_files(train_files, *shapes)
            _check_masking(s, layout, train_files)
            counts = []

            def count(files):  # once: a rollback's input, from another start, reuses them
                if not counts:
                    counts.extend(_record_counts(files, dist, out))
                return counts

            train_from = functools.partial(
                training_dataset,
                train_files,
                s.train_batch_size,
                *shapes,
                num_workers=dist.size,
                worker_index=dist.rank,
                seed=s.seed,
                window=s.shuffle_buffer,
                count=count,
                accumulation=plan.update.accumulation_steps,
                bin_size=plan.bin_size,
                masked_lm_prob=masked_lm_prob,
                layout=layout,
                packing=s.packing,
            )
            train_data = train_from(start=plan.start_sequence)
        if s.do_eval and dist.is_chief:
            eval_layout = check_files(eval_files, *shapes)
            if not s.do_train:
                _check_masking(s, eval_layout, eval_files)
            eval_data = evaluation_dataset(
                eval_files,
                s.eval_batch_size,
                *shapes,
                bin_size=plan.bin_size,
                max_batches=s.max_eval_steps,
                masked_lm_prob=masked_lm_prob,
                seed=s.seed,
                layout=eval_layout,
            )
        init_step = global_step_of(s.init_checkpoint) if s.init_checkpoint and not plan.resume_from else None
        resolved = {
            "learning_rate_decay_power": plan.update.power,
            "sequences_to_train": plan.update.global_batch_size * s.num_train_steps if s.do_train else 0,
            "num_train_files": len(train_files),
            "num_eval_files": len(eval_files),
            "init_checkpoint_step": init_step,
        }
        if layout is not None:
            resolved["masking"] = layout.describe()
            resolved["masked_lm_prob"] = masked_lm_prob if layout.masking == schema.DYNAMIC else None
        if plan.resume_from:
            resolved["init_checkpoint_ignored"] = bool(s.init_checkpoint)
        return Prepared(
            PretrainingData(train_files, train_data, eval_data, init_step, train_from),
            steps=s.num_train_steps if s.do_train else 0,
            warmup=s.num_warmup_steps,
            resolved=resolved,
            row_counts=row_counts(s.train_batch_size) if s.packing else (),
        )

    def build_model(self, config, dtype):
        from bert.pretraining import BertPretrainer

        return BertPretrainer(config, dtype=dtype)

    def initialise(self, model, s: PretrainingSettings, plan: job.Plan, out) -> None:
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
            init_step = plan.data.init_step
            print(
                f"Initialised every layer and both heads from {s.init_checkpoint}"
                + (
                    f" (its step {init_step}); the optimizer and step start at 0."
                    if init_step is not None
                    else "."
                ),
                file=out,
            )

    def training_batches(self, s: PretrainingSettings, plan: job.Plan, dist, start: int):
        from training.input_pipeline import naming_corrupt_files

        data = plan.data.train if start == plan.start_sequence else plan.data.train_from(start=start)
        return naming_corrupt_files(iter(data), plan.data.train_files)

    def safeguards(self, s: PretrainingSettings, plan: job.Plan, step, log, out) -> list:
        """--on_divergence=rollback: training.rollback.Rollback."""
        if s.on_divergence != "rollback":
            return []
        from training.rollback import Rollback

        dist = step.distributed
        return [
            Rollback(
                s.output_dir,
                lambda start: self.training_batches(s, plan, dist, start),
                global_batch=plan.update.global_batch_size,
                skip_updates=s.rollback_skip_updates,
                max_rollbacks=s.max_rollbacks,
                distributed=dist,
                log=log,
            )
        ]

    def resumed(self, plan: job.Plan, start: int, out) -> None:
        if 0 < plan.steps <= start:  # plan.steps 0: no training, weights loaded for --do_eval
            print(
                f"{plan.resume_from} is already at step {start} of {plan.steps}; nothing to train.", file=out
            )

    def finish(self, s: PretrainingSettings, plan: job.Plan, step, result: dict, log, out) -> None:
        """Rank 0 alone (the other workers are done): --eval_files' metrics, eval_results.json."""
        result["eval"] = None
        if plan.data.eval is None:
            return
        from training import loop

        results = loop.evaluate(
            step,
            plan.data.eval,
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
