"""The skeleton every training job shares: training/pretraining_job.py, training/finetuning_job.py
and bench/pretrain_throughput.py take their worker, update, model and report from here, so each
is built one way.

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

from common.errors import UserError
from common.files import write_json

RESOLVED_CONFIG_NAME = "resolved_config.json"


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
        """Warmup to the peak, then polynomial decay to 0 at `train_steps`; train_steps 0 (no
        training: the optimizer only restores or evaluates) gives the constant peak."""
        from optimization import WarmupPolynomialDecay

        if not train_steps:
            return self.peak_learning_rate
        return WarmupPolynomialDecay(self.peak_learning_rate, warmup_steps, train_steps, self.power)

    def build(self, model, objective, *, warmup_steps: int, train_steps: int, distributed, jit_compile: bool):
        """The TrainStep (training/train_step.py) of `model` and `objective` with this update's
        optimizer and schedule."""
        from optimization import create_optimizer
        from training.train_step import TrainStep

        optimizer = create_optimizer(
            self.optimizer_type, self.learning_rate_schedule(warmup_steps, train_steps)
        )
        return TrainStep(
            model,
            optimizer,
            objective,
            accumulation_steps=self.accumulation_steps,
            distributed=distributed,
            jit_compile=jit_compile,
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

    def run(self, step, micro_batches, *, num_train_steps: int, save_checkpoints_steps: int, periodic=None):
        """loop.train over this worker's `micro_batches` (from the position's start) with the
        preemption notices and the watchdog in force; the last metrics."""
        from training import loop

        with self.stop, self.watchdog:
            return loop.train(
                step,
                self.position.counted(micro_batches),
                self.checkpointer,
                self.log,
                num_train_steps=num_train_steps,
                save_checkpoints_steps=save_checkpoints_steps,
                periodic=periodic,
                stop=self.stop,
                watchdog=self.watchdog,
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
) -> Training:
    """The Training of a run: leftovers of an interrupted save removed, the latest checkpoint of
    output_dir restored (weights, optimizer; `position`, a training.data_order.Position, started
    where it says), the log counting from there,
    the preemption notices to watch (a STOP file an earlier run left is cleared first) and the
    watchdog against lost workers."""
    from training import loop
    from training.checkpointing import Checkpointer
    from training.metrics_log import MetricsLog
    from training.preemption import StopRequests
    from training.watchdog import Watchdog

    checkpointer = Checkpointer(
        output_dir, step, position, update=update, keep=keep, distributed=step.distributed
    )
    checkpointer.remove_leftovers()
    stop = StopRequests(output_dir, step.distributed)
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
