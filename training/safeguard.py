"""The one seam between the training loop and what surrounds its updates.

training/loop.py queues updates, reads them in batches and saves; everything else a long run needs
(the metrics log, preemption notices, the lost-worker watchdog, checkpoints by the clock,
divergence rollback, periodic evaluation) is a Safeguard the job hands it in a list. The loop calls
each safeguard at the moments of a run, in the list's order (`end` in reverse):

    start(run)                          before the first update is queued
    before_update(run, step) -> bool    before each update is queued (`step`: its number once
                                        applied); True stops queueing here: the queued updates are
                                        read, then the loop raises stopping(run)
    after_update(run, metrics, seconds) each applied update, once read (run.current is its step)
    diverged(run, divergence) -> bool   an update that was not applied and cannot be retried; True
                                        when the safeguard rolled the run back (run.restart);
                                        else the loop stops with TrainingDivergedError
    save_due(run) -> bool               at a read boundary whose step the cadence does not save:
                                        True saves a checkpoint now
    after_boundary(run, saved)          after each read boundary's checkpoint (saved: one was written)
    error(run, error) -> Exception      an error from the loop; a returned exception replaces it
    end(run)                            always, last

`every` (updates, or None) asks the loop to read the device at multiples of it, as the log and a
periodic evaluation need. A safeguard that talks to the other workers (an agreement, a broadcast)
does so in a hook every worker reaches at the same update, and answers alike on each of them.
"""

from __future__ import annotations

import dataclasses

from common.errors import UserError


class TrainingDivergedError(UserError):
    """The loss or the gradients are no longer finite; the message names the step and the last
    good checkpoint."""


@dataclasses.dataclass(frozen=True)
class Divergence:
    """An update that was not applied and cannot be retried."""

    step: int  # the update's number, had it been applied
    why: str  # "The loss is not finite", ...
    loss: object
    window_end: int  # the data position after the update (training.data_order.Position)

    def error(self, checkpointer, refusal: str | None = None) -> TrainingDivergedError:
        """The run's end; `refusal`: why a rollback could not help (when one was asked for)."""
        latest = checkpointer.latest()
        good = f"the last good checkpoint is {latest}" if latest else "no checkpoint was written yet"
        instead = f"; it is not rolled back: {refusal}" if refusal and latest else ""
        return TrainingDivergedError(
            f"{self.why} at step {self.step} (loss {self.loss}){instead}; the update was not applied "
            f"and {good}: lower --learning_rate or raise --num_warmup_steps, then re-run from there."
        )


@dataclasses.dataclass
class Run:
    """What the safeguards see of a run in progress (the loop keeps it current)."""

    step: object  # training.train_step.TrainStep
    checkpointer: object  # training.checkpointing.Checkpointer
    micro_batches: object  # this worker's input, counted by checkpointer.position
    last: int  # num_train_steps
    save_every: int  # save_checkpoints_steps
    start: int = 0  # the step this process started from
    current: int = 0  # applied updates (optimizer.iterations as of the last read)
    scale_before: float = 1.0  # the loss scale the next read update ran with

    def __post_init__(self):
        self.start = self.current = int(self.step.optimizer.iterations)
        self.scale_before = float(self.step.loss_scale.scale.numpy())

    def restart(self, micro_batches, step: int) -> None:
        """The run goes on from `step` with `micro_batches` (a rollback restored a checkpoint)."""
        self.micro_batches, self.current = micro_batches, step
        self.scale_before = float(self.step.loss_scale.scale.numpy())


class Safeguard:
    """One concern around the updates (see the module docstring); every hook does nothing by
    default, so a safeguard writes only the moments it acts at."""

    every: int | None = None

    def start(self, run: Run) -> None:
        pass

    def before_update(self, run: Run, step: int) -> bool:
        return False

    def stopping(self, run: Run) -> BaseException:
        raise NotImplementedError(f"{type(self).__name__} stopped the run but says nothing of it")

    def after_update(self, run: Run, metrics: dict, seconds: float) -> None:
        pass

    def diverged(self, run: Run, divergence: Divergence) -> bool:
        return False

    def save_due(self, run: Run) -> bool:
        return False

    def after_boundary(self, run: Run, saved: bool) -> None:
        pass

    def error(self, run: Run, error: Exception) -> Exception | None:
        return None

    def end(self, run: Run) -> None:
        pass
