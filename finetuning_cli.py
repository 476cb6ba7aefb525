"""The command-line flags run_squad.py and run_classifier.py share (Google's and NVIDIA's names),
defined once: not an entry point itself. Each entry point adds its task's flags and turns the
parsed values into training.finetuning_job.FineTuningSettings with `settings_from_flags`."""

from __future__ import annotations

import dataclasses
import os

from common import cli


def define_flags(
    fv,
    *,
    max_seq_length: int,
    learning_rate: float,
    train_batch_size: int,
    epochs: float,
    output_dir_help: str = "Checkpoints, log.jsonl, TensorBoard events, predictions and eval_results.json; "
    "a run continues from the latest checkpoint here.",
) -> None:
    """The shared flags, with the task's own defaults for the few that differ (SQuAD: 384, 5e-5,
    batch 32, 2 epochs; GLUE: 128, 2e-5, 32, 3)."""
    from absl import flags

    from training.finetuning_job import FineTuningSettings
    from training.precision import PRECISIONS
    from training.pretraining_job import OPTIMIZER_TYPES

    d = {
        f.name: f.default
        for f in FineTuningSettings.__dataclass_fields__.values()
        if f.default is not dataclasses.MISSING
    }
    d.update(
        max_seq_length=max_seq_length,
        learning_rate=learning_rate,
        train_batch_size=train_batch_size,
        num_train_epochs=epochs,
    )

    def string(name, help_text):
        flags.DEFINE_string(name, d.get(name), help_text, flag_values=fv)

    def integer(name, help_text):
        flags.DEFINE_integer(name, d[name], help_text, flag_values=fv)

    def number(name, help_text):
        flags.DEFINE_float(name, d[name], help_text, flag_values=fv)

    def boolean(name, help_text):
        flags.DEFINE_bool(name, d[name], help_text, flag_values=fv)

    string(
        "init_checkpoint",
        "Starting weights: a pretraining output directory or checkpoint (ours, Google TF1, NVIDIA) "
        "or a Hugging Face directory; a fine-tuned one's head is loaded too.",
    )
    string("bert_config_file", "bert_config.json (default: the one beside --init_checkpoint).")
    string("vocab_file", "vocab.txt (default: the one beside --init_checkpoint).")
    boolean("do_lower_case", "Lower-case and strip accents (uncased models).")
    string("output_dir", output_dir_help)
    integer("max_seq_length", "Tokens per input sequence.")
    integer("train_batch_size", "Examples per worker per micro-batch.")
    integer("predict_batch_size", "Examples per prediction batch.")
    number("learning_rate", "Peak learning rate PER WORKER; the effective peak is this times the workers.")
    number("num_train_epochs", "Epochs over the training features.")
    number("warmup_proportion", "Share of the updates spent in linear warmup (then linear decay to 0).")
    integer("num_accumulation_steps", "Micro-batches per update (gradient accumulation).")
    flags.DEFINE_enum(
        "optimizer_type",
        d["optimizer_type"],
        list(OPTIMIZER_TYPES),
        "Optimizer (Google's default).",
        flag_values=fv,
    )
    flags.DEFINE_enum(
        "precision",
        None,
        list(PRECISIONS),
        f"fp32, tf32, fp16 or bf16; default {d['precision']}.",
        flag_values=fv,
    )
    flags.DEFINE_bool("amp", False, "NVIDIA's name for --precision=fp16.", flag_values=fv)
    boolean("use_xla", "Compile the train and prediction steps with XLA.")
    flags.DEFINE_bool(
        "use_horovod",
        None,
        "Sum gradients across Horovod workers; default: on under horovodrun/mpirun with more than one rank.",
        flag_values=fv,
    )
    flags.DEFINE_alias("horovod", "use_horovod", flag_values=fv)
    boolean("do_train", "Fine-tune.")
    boolean("do_eval", "Predict the labelled evaluation data and report the official metrics.")
    boolean("do_predict", "Predict the test data and write the prediction / submission files.")
    integer("save_checkpoints_steps", "Write a checkpoint every this many updates (and at the end).")
    integer("keep_checkpoints", "How many of the newest checkpoints to keep.")
    integer(
        "log_every_n_steps",
        "Log and print every this many updates; the host reads the device only at these steps "
        "and at checkpoints, so updates queue without a wait in between.",
    )
    integer(
        "eval_every_n_steps",
        "With --do_train --do_eval: also score the dev set every this many updates (log.jsonl, "
        "TensorBoard); 0: only after training.",
    )
    integer("seed", "Seed of the head's initialisation, dropout and input shuffling.")
    boolean("deterministic", "TF op determinism (exact resume); turn off for speed on GPUs.")
    string(
        "export_dir",
        "Write a SavedModel here (serving_default: input_ids, input_mask, segment_ids -> logits) "
        "after training, or from --output_dir's latest checkpoint without --do_train.",
    )
    string("triton_repository", "Also write a Triton model repository here (needs --export_dir).")


SQUAD_FLAGS = (
    "train_file",
    "predict_file",
    "version_2_with_negative",
    "doc_stride",
    "max_query_length",
    "n_best_size",
    "max_answer_length",
    "null_score_diff_threshold",
)
GLUE_FLAGS = ("task_name", "data_dir")


def define_squad_flags(fv) -> None:
    """run_squad.py's task flags (Google's names and defaults)."""
    from absl import flags

    flags.DEFINE_string("train_file", None, "SQuAD JSON for training (train-v1.1.json).", flag_values=fv)
    flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (dev-v1.1.json).", flag_values=fv)
    flags.DEFINE_bool(
        "version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.", flag_values=fv
    )
    flags.DEFINE_integer(
        "doc_stride", 128, "Tokens between the starts of a context's windows.", flag_values=fv
    )
    flags.DEFINE_integer("max_query_length", 64, "Question tokens kept.", flag_values=fv)
    flags.DEFINE_integer(
        "n_best_size", 20, "Candidate answers kept per question (nbest_predictions.json).", flag_values=fv
    )
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.", flag_values=fv)
    flags.DEFINE_float(
        "null_score_diff_threshold",
        0.0,
        "SQuAD 2.0: predict no answer when null score - best span score exceeds this.",
        flag_values=fv,
    )


def squad_task(F):
    """training.squad_task.SquadTask from the SQuAD flags."""
    from training.squad_task import SquadTask

    return SquadTask(**{name: F[name].value for name in SQUAD_FLAGS})


def define_glue_flags(
    fv, task_help: str = "GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI."
) -> None:
    """run_classifier.py's task flags."""
    from absl import flags

    flags.DEFINE_string("task_name", None, task_help, flag_values=fv)
    flags.DEFINE_string(
        "data_dir", None, "The GLUE root (holding MRPC/ ...) or the task's own directory.", flag_values=fv
    )


def glue_task(F):
    """training.glue_task.GlueTask from the GLUE flags."""
    from training.glue_task import GlueTask

    return GlueTask(task_name=F.task_name, data_dir=F.data_dir)


def settings_from_flags(F):
    """FineTuningSettings from the parsed flags (NVIDIA's --amp and --horovod resolved)."""
    from training.distributed import launched_ranks
    from training.finetuning_job import FineTuningSettings

    fields = FineTuningSettings.__dataclass_fields__
    precision, use_horovod = cli.precision_and_horovod(
        F, os.environ, launched_ranks, fields["precision"].default
    )
    values = {name: F[name].value for name in fields if name in F}
    values.update(precision=precision, use_horovod=use_horovod)
    return FineTuningSettings(**values)
