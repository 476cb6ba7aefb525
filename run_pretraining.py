r"""BERT pretraining (masked LM + next sentence prediction) on TFRecords, one process per worker.

    python run_pretraining.py --bert_config_file=configs/bert_base.json --vocab_file=vocab.txt \
        --input_files='data/phase1/training/*' --output_dir=results/phase_1 \
        --max_seq_length=128 --max_predictions_per_seq=20 --train_batch_size=64 \
        --num_accumulation_steps=128 --learning_rate=7.5e-4 --num_train_steps=7038 \
        --num_warmup_steps=2000 --optimizer_type=lamb --precision=fp16 --use_xla

    horovodrun -np 8 python run_pretraining.py ...      # Horovod turns itself on under a launcher

--train_batch_size is per worker and per micro-batch: one update sees train_batch_size x
num_accumulation_steps x workers sequences. --learning_rate is per worker: the peak is it times
the worker count. Steps, warmup and checkpoint intervals count applied updates. Re-running the
same command with the same --output_dir continues from its latest checkpoint and ends with the
weights an uninterrupted run ends with. NVIDIA's TF1 names --horovod, --amp, --input_files_dir and
--eval_files_dir are accepted.
"""

from __future__ import annotations

import os
import sys

from common import cli
from common.errors import UserError

PROG = "run_pretraining"


def define_flags(fv) -> None:
    from optimization import OPTIMIZERS
    from training.pretraining_job import PretrainingSettings

    flag = cli.Flags(fv, settings=PretrainingSettings)
    cli.define_job_flags(flag)
    flag("bert_config_file", "bert_config.json (or a Hugging Face config.json) of the model.", str)
    flag("vocab_file", "vocab.txt; its size is checked against the config's vocab_size.", str)
    flag("input_files", "Training TFRecords: comma-separated files or globs.", str)
    flag("eval_files", "Evaluation TFRecords: comma-separated files or globs.", str)
    flag("input_files_dir", "NVIDIA's name: a directory whose files are the training TFRecords.", str)
    flag("eval_files_dir", "NVIDIA's name: a directory whose files are the evaluation TFRecords.", str)
    flag(
        "output_dir",
        "Checkpoints, log.jsonl, TensorBoard events, resolved_config.json, "
        "eval_results.json. A run continues from the latest checkpoint here.",
        str,
    )
    flag(
        "init_checkpoint",
        "Starting weights for a new run (Google TF1, this trainer's output "
        "directory or checkpoint, or Hugging Face), MLM and NSP heads included; "
        "ignored when output_dir already holds a checkpoint.",
        str,
    )
    flag("max_seq_length", "Tokens per sequence; must match the TFRecords.")
    flag("max_predictions_per_seq")
    flag("masked_lm_prob")
    flag("train_batch_size", "Sequences per worker per micro-batch.")
    for name in ("eval_batch_size", "num_train_steps", "num_warmup_steps"):
        flag(name)
    flag("optimizer_type", "LAMB (pretraining), AdamW, or Google's AdamWeightDecay.", OPTIMIZERS)
    flag("do_train", "Train.")
    flag("do_eval", "Evaluate on --eval_files at the end (rank 0): eval_results.json.")
    flag("max_eval_steps")
    flag("shuffle_buffer")
    flag("packing")
    for name in ("on_divergence", "rollback_skip_updates", "max_rollbacks"):
        flag(name)


def _files(flag_values, name: str) -> str | None:
    """--input_files, or NVIDIA's --input_files_dir (every file in the directory); not both."""
    files, directory = flag_values[name].value, flag_values[f"{name}_dir"].value
    if files and directory:
        raise UserError(f"Give --{name} or --{name}_dir, not both.")
    if directory:
        if not os.path.isdir(directory):
            raise UserError(f"--{name}_dir {directory!r} is not a directory.")
        return os.path.join(directory, "*")
    return files


def settings_from_flags(F):
    from training.distributed import launched_ranks
    from training.pretraining_job import PretrainingSettings

    return cli.job_settings(
        F,
        PretrainingSettings,
        os.environ,
        launched_ranks,
        input_files=_files(F, "input_files"),
        eval_files=_files(F, "eval_files"),
    )


def run(F) -> int:
    from training import job
    from training.pretraining_job import PretrainingTask
    from training.tracking import MlflowTarget

    job.run(settings_from_flags(F), PretrainingTask(), tracking=MlflowTarget.from_environ(os.environ))
    return 0


main = cli.entry_point(define_flags, run, __doc__, PROG)


if __name__ == "__main__":
    sys.exit(main())
