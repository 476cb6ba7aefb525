"""One update as a job's settings define it (`Update`): the batch per worker and micro-batch,
the micro-batches, the workers, the learning rate per worker, the optimizer and its schedule; the
global batch and the effective peak learning rate are derived here and nowhere else. A run that
continues a checkpoint keeps that run's global batch (`continue_update`).

    update = Update(batch_size, accumulation_steps, learning_rate, workers, optimizer_type)
    update, start = continue_update(update, latest_checkpoint(output_dir), out)
    step = update.build(model, objective, warmup_steps=..., train_steps=..., distributed=dist, ...)
"""

from __future__ import annotations

import dataclasses

from common.errors import UserError


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
    decay_from_warmup: bool = False  # decay counted from the end of warmup, not step 0 (Google's)
    epsilon: float | None = None  # None: the optimizer's (1e-6, Google's and NVIDIA's)

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
        """Warmup to the peak, then polynomial decay to 0 at `train_steps`, counted from step 0
        (Google's) or from the end of warmup (decay_from_warmup); train_steps 0 (no training: the
        optimizer only restores or evaluates) gives the constant peak."""
        from optimization import WarmupPolynomialDecay

        if not train_steps:
            return self.peak_learning_rate
        return WarmupPolynomialDecay(
            self.peak_learning_rate,
            warmup_steps,
            train_steps,
            self.power,
            decay_from_warmup=self.decay_from_warmup,
        )

    def optimizer(self, warmup_steps: int, train_steps: int):
        """The optimizer of this update, on its learning-rate schedule."""
        from optimization import create_optimizer

        options = {} if self.epsilon is None else {"epsilon": self.epsilon}
        return create_optimizer(
            self.optimizer_type, self.learning_rate_schedule(warmup_steps, train_steps), **options
        )

    def build(
        self,
        model,
        objective,
        *,
        warmup_steps: int,
        train_steps: int,
        distributed,
        jit_compile: bool,
        bin_lengths: tuple[int, ...] = (),
        row_counts: tuple[int, ...] = (),
        trace_ahead: bool = False,
    ):
        """The TrainStep (training/train_step.py) of `model` and `objective` with this update's
        optimizer and schedule; `bin_lengths`, `row_counts` and `trace_ahead` as TrainStep takes
        them."""
        from training.train_step import TrainStep

        return TrainStep(
            model,
            self.optimizer(warmup_steps, train_steps),
            objective,
            accumulation_steps=self.accumulation_steps,
            distributed=distributed,
            jit_compile=jit_compile,
            bin_lengths=bin_lengths,
            row_counts=row_counts,
            trace_ahead=trace_ahead,
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
