"""The contract between the one training job (training/job.py) and what it trains.

`job.run(settings, task)` owns every step that is the same for each task: the settings checks
every job shares, the output directory, the checkpoint to continue, the update and its data
position, the resolved report, the model's dtype and seeds, the TrainStep, training with
checkpoints and the safeguards every run has (the log, preemption, the watchdog, the save clock).
A task supplies what differs, by overriding these hooks; each has a default, so a task writes only
what it has:

    class MyTask(Task):
        title = "my task"                                   # "Resolved my task settings:"
        objective = MyObjective()                           # training/objective.py
        @abc.abstractmethod
    def model_files(self, s, resume_from): ...          # (BertConfig, vocab file or None)
        @abc.abstractmethod
    def prepare(self, s, plan, dist, out): ...          # Prepared(data, steps, warmup, resolved)
        @abc.abstractmethod
    def build_model(self, config, dtype): ...           # a Keras model of the objective's outputs
        @abc.abstractmethod
    def training_batches(self, s, plan, dist, start): ...  # this worker's micro-batches, from
                                                            # sequence `start` of the data order
    and, where the defaults do not fit: validate_settings, inputs, update, initialise, resumed,
    safeguards, finish.

In the order job.run calls them:

    validate_settings(s)                        cheap checks, before TensorFlow builds anything
    inputs(s); model_files(s, resume_from)      the pre-flight: what every worker must see
    model_files(s, resume_from)                 the config and vocab (checked to fit each other)
    update(s, workers)                          the update the flags ask for (training.update.Update)
    prepare(s, plan, dist, out)                 data, steps and warmup, packed row counts, the
                                                task's resolved keys
    build_model(config, dtype); initialise(model, s, plan, out)
    training: training_batches(s, plan, dist, plan.start_sequence), resumed(plan, start, out),
              safeguards(s, plan, step, log, out) (the task's own, training/safeguard.py)
    or without --do_train and with a checkpoint: resumed(plan, its step, out) once it is loaded
    finish(s, plan, step, result, log, out)     evaluate, predict, export: the task's results

tests/test_task.py drives job.run end to end with a toy task that pins this contract.
"""

from __future__ import annotations

import abc
import dataclasses


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a task's `prepare` found: its data (kept as plan.data), the updates to train for and
    their warmup, its own resolved settings (added to the job's shared ones) and the row counts
    a packed micro-batch of its data may have (training/packing.py; () unpacked): the train step
    runs a program per row count."""

    data: object
    steps: int
    warmup: int
    resolved: dict = dataclasses.field(default_factory=dict)
    row_counts: tuple[int, ...] = ()


class Task(abc.ABC):
    """A task of training.job.run (see the module docstring). Subclasses set `title` and
    `objective` and implement `model_files`, `prepare`, `build_model` and `training_batches` (a
    task without them cannot be made)."""

    title = "training"  # the resolved report's heading
    objective = None  # a training.objective.Objective

    def validate_settings(self, s) -> None:
        """UserError naming the first flag whose value cannot work; the shared checks by default."""
        from training.job import validate_settings

        validate_settings(s)

    def inputs(self, s) -> list[tuple[str, str]]:
        """("--flag", value) of the task's own files every worker reads (globs, comma-separated
        lists, directories too), for training/preflight.py, which adds the model files and
        --init_checkpoint; none by default."""
        return []

    @abc.abstractmethod
    def model_files(self, s, resume_from: str | None):
        """(BertConfig, vocab file or None) of the run; `resume_from` is the output directory's
        latest checkpoint, for tasks whose model files may lie beside it."""

    def update(self, s, workers: int):
        """The update `s` asks for on `workers` workers (training.update.Update with the optimizer's own
        schedule); a task with another schedule overrides it."""
        from training.update import Update

        return Update(
            s.train_batch_size, s.num_accumulation_steps, s.learning_rate, workers, s.optimizer_type
        )

    @abc.abstractmethod
    def prepare(self, s, plan, dist, out) -> Prepared:
        """The task's data for `plan` (a job.Plan: config, update, start_sequence, resume_from
        are set), the steps to train and the task's resolved settings."""

    @abc.abstractmethod
    def build_model(self, config, dtype):
        """The Keras model whose outputs the objective reads, in the dtype policy `dtype`."""

    def initialise(self, model, s, plan, out) -> None:
        """Weights from --init_checkpoint in a new output directory; by default none (random)."""

    @abc.abstractmethod
    def training_batches(self, s, plan, dist, start: int):
        """An iterator over this worker's micro-batches from sequence `start` of the data order
        (plan.start_sequence; after a divergence rollback, past the window it skipped)."""

    def resumed(self, plan, start: int, out) -> None:
        """Called once the job knows the step the weights continue from: in training, once the
        output directory's latest checkpoint is restored (`start` 0 in a new one); without
        --do_train (plan.steps 0), only when it has one, once its weights are loaded."""

    def safeguards(self, s, plan, step, log, out) -> list:
        """The task's own training.safeguard.Safeguard objects for training (a divergence rollback,
        an evaluation during training), after the job's; none by default. `log`: the run's
        training.metrics_log.MetricsLog."""
        return []

    def finish(self, s, plan, step, result: dict, log, out) -> None:
        """After training (every worker): evaluation, predictions, exports: the task's own keys
        of job.run's result, set on every worker."""
