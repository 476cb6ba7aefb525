"""The command-line flags run_squad.py and run_classifier.py share (Google's and NVIDIA's names),
defined once: not an entry point itself. Each entry point adds its task's flags and turns the
parsed values into training.finetuning_job.FineTuningSettings with `settings_from_flags` and its
task (a training.tasks.TaskKind's) with `task_of`."""

from __future__ import annotations

import os

from common import cli
from training import tasks


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
    """The shared flags, with the task's own defaults for the few that differ (training.tasks'
    TaskKind.defaults: SQuAD 384, 5e-5, batch 32, 2 epochs; GLUE 128, 2e-5, 32, 3)."""
    from optimization import OPTIMIZERS
    from training.finetuning_job import FineTuningSettings

    flag = cli.Flags(
        fv,
        settings=FineTuningSettings,
        defaults={
            "max_seq_length": max_seq_length,
            "learning_rate": learning_rate,
            "train_batch_size": train_batch_size,
            "num_train_epochs": epochs,
        },
    )
    cli.define_job_flags(flag)
    flag(
        "init_checkpoint",
        "Starting weights: a pretraining output directory or checkpoint (ours, Google TF1, NVIDIA) "
        "or a Hugging Face directory; a fine-tuned one's head is loaded too.",
        str,
    )
    flag("bert_config_file", "bert_config.json (default: the one beside --init_checkpoint).", str)
    flag("vocab_file", "vocab.txt (default: the one beside --init_checkpoint).", str)
    flag("do_lower_case")
    flag("output_dir", output_dir_help, str)
    flag("max_seq_length", "Tokens per input sequence.")
    flag("train_batch_size", "Examples per worker per micro-batch.")
    for name in ("predict_batch_size", "num_train_epochs", "warmup_proportion", "decay_after_warmup"):
        flag(name)
    flag("optimizer_type", "Optimizer (Google's default).", OPTIMIZERS)
    for name in ("adam_epsilon", "do_train", "group_by_length"):
        flag(name)
    flag("do_eval", "Predict the labelled evaluation data and report the official metrics.")
    for name in ("do_predict", "eval_every_n_steps", "export_dir", "triton_repository"):
        flag(name)


def define_squad_flags(fv) -> None:
    """run_squad.py's task flags (Google's names and defaults); SquadTask.validate checks them."""
    flag = cli.Flags(fv)
    flag("train_file", "SQuAD JSON for training (train-v1.1.json).", str)
    flag("predict_file", "SQuAD JSON to predict (dev-v1.1.json).", str)
    flag("version_2_with_negative", "SQuAD 2.0: questions may have no answer.", bool, default=False)
    flag("doc_stride", "Tokens between the starts of a context's windows.", int, default=128)
    flag("max_query_length", "Question tokens kept.", int, default=64)
    flag("n_best_size", "Candidate answers kept per question (nbest_predictions.json).", int, default=20)
    flag("max_answer_length", "Longest answer, in tokens.", int, default=30)
    flag(
        "null_score_diff_threshold",
        "SQuAD 2.0: predict no answer when null score - best span score exceeds this.",
        float,
        default=0.0,
    )


def define_glue_flags(
    fv, task_help: str = "GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI."
) -> None:
    """run_classifier.py's task flags."""
    flag = cli.Flags(fv)
    flag("task_name", task_help, str)
    flag("data_dir", "The GLUE root (holding MRPC/ ...) or the task's own directory.", str)


def task_of(kind: tasks.TaskKind, F):
    """The task of `kind` from its flags (kind.options) as parsed."""
    return kind.create(**{name: F[name].value for name in kind.options})


def settings_from_flags(F):
    """FineTuningSettings from the parsed flags (NVIDIA's --amp and --horovod resolved)."""
    from training.distributed import launched_ranks
    from training.finetuning_job import FineTuningSettings

    return cli.job_settings(F, FineTuningSettings, os.environ, launched_ranks)


def entry_point(kind: tasks.TaskKind, define_task_flags, doc: str, prog: str):
    """The main() of a fine-tuning entry point (run_squad.py, run_classifier.py): the shared flags
    with the defaults of the task's `kind`, the task's flags (`define_task_flags`), then the
    fine-tuning job on its task."""

    def define_all(fv) -> None:
        define_flags(fv, **kind.defaults)
        define_task_flags(fv)

    def run(F) -> int:
        from training import job
        from training.tracking import MlflowTarget

        job.run(settings_from_flags(F), task_of(kind, F), tracking=MlflowTarget.from_environ(os.environ))
        return 0

    return cli.entry_point(define_all, run, doc, prog)
