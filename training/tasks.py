"""The fine-tuning tasks, one entry each: what the entry points (finetuning_cli.py), the tuner
(tuning/search.py, run_tune.py) and the launchers (launch/) need to know of a task by its name,
without importing TensorFlow:

    kind = tasks.find("SQuAD2")            # a TaskKind: SQUAD; "MRPC" gives GLUE
    kind.entry_point                       # "run_squad.py"
    kind.metrics("SQuAD2")                 # the official dev metrics, the default first
    kind.create(**options)                 # the training.task.Task (imports its module)

A new fine-tuning task is one TaskKind here, its Task subclass, and its entry point.
"""

from __future__ import annotations

import dataclasses
import importlib

from common.errors import UserError

# The names --task_name accepts for SQuAD, and the version each means.
SQUAD_VERSIONS = {"squad": "1.1", "squad1": "1.1", "squad1.1": "1.1", "squad2": "2.0", "squad2.0": "2.0"}
# The keys data/squad_metrics.evaluate returns, by version (the first is the one to maximise).
SQUAD_METRICS = {
    "1.1": ("f1", "exact_match"),
    "2.0": ("f1", "exact", "best_f1", "best_exact", "HasAns_f1", "HasAns_exact", "NoAns_f1", "NoAns_exact"),
}


def squad_version(task_name: str, version_2_with_negative: bool = False) -> str | None:
    """ "1.1" or "2.0" for a SQuAD --task_name (SQuAD 2.0 also with --version_2_with_negative);
    None for any other name."""
    version = SQUAD_VERSIONS.get(task_name.strip().lower())
    if version is None:
        return None
    return "2.0" if version_2_with_negative else version


def _glue_metrics(task_name: str, version_2_with_negative: bool = False) -> tuple[str, ...]:
    from data.glue import get_task

    return tuple(get_task(task_name).metrics)


def _squad_metrics(task_name: str, version_2_with_negative: bool = False) -> tuple[str, ...]:
    return SQUAD_METRICS[squad_version(task_name, version_2_with_negative)]


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One kind of fine-tuning task. `options` are its own flags, the keyword arguments of its
    Task class; `defaults` the shared flags whose default it changes."""

    name: str
    entry_point: str  # the root script, relative to the repository
    task_class: str  # "module:Class", imported by `create`
    options: tuple[str, ...]
    defaults: dict
    _metrics: object  # (task_name, version_2_with_negative) -> metric names

    def metrics(self, task_name: str, version_2_with_negative: bool = False) -> tuple[str, ...]:
        """The official dev metrics of --task_name, the one to maximise first."""
        return self._metrics(task_name, version_2_with_negative)

    def create(self, **options):
        """The training.task.Task of this kind with its `options`."""
        module, name = self.task_class.split(":")
        return getattr(importlib.import_module(module), name)(**options)


SQUAD = TaskKind(
    name="squad",
    entry_point="run_squad.py",
    task_class="training.squad_task:SquadTask",
    options=(
        "train_file",
        "predict_file",
        "version_2_with_negative",
        "doc_stride",
        "max_query_length",
        "n_best_size",
        "max_answer_length",
        "null_score_diff_threshold",
    ),
    defaults={"max_seq_length": 384, "learning_rate": 5e-5, "train_batch_size": 32, "epochs": 2.0},
    _metrics=_squad_metrics,
)
GLUE = TaskKind(
    name="glue",
    entry_point="run_classifier.py",
    task_class="training.glue_task:GlueTask",
    options=("task_name", "data_dir"),
    defaults={"max_seq_length": 128, "learning_rate": 2e-5, "train_batch_size": 32, "epochs": 3.0},
    _metrics=_glue_metrics,
)
KINDS = (SQUAD, GLUE)


def find(task_name: str) -> TaskKind:
    """The kind of --task_name: SQuAD's names (SQUAD_VERSIONS) or a GLUE task; a UserError names
    the choices for any other."""
    if squad_version(task_name) is not None:
        return SQUAD
    from data.glue import TASKS, get_task

    try:
        get_task(task_name)
    except UserError:
        raise UserError(
            f"Unknown --task_name {task_name!r}; choose SQuAD or a GLUE task ({', '.join(TASKS)})."
        ) from None
    return GLUE
