"""The project's one training loop: updates until the step count, checkpoints, logs, stops.

    step = TrainStep(model, optimizer, objective, ...)      # the task's objective plugs in here
    checkpointer = Checkpointer(output_dir, step, position, keep=..., distributed=...)
    start = resume(checkpointer, step)                      # 0, or the latest checkpoint's step
    log = MetricsLog(output_dir, total_steps=..., start_step=start, ...)
    train(step, iterator, checkpointer, log, num_train_steps=..., save_checkpoints_steps=...)
    results = evaluate(step, batches, output_dir=..., global_step=...)

Steps count applied updates (optimizer.iterations): a skipped fp16 update is retried on the next
micro-batches and counts nothing. A checkpoint is written every `save_checkpoints_steps`, at the
last step, and, with `save_checkpoints_minutes`, at the first step the host reads (a logging step)
once that many minutes passed since the last checkpoint or the start, by worker 0's clock, so
every worker saves at the same update. An update whose loss or gradients are not finite stops the run when the loss is
not scaled (fp32, bf16), and in fp16 when even a loss scale of 1 overflows: the update was not
applied and nothing is saved, so the last checkpoint holds the last good weights. With a
training.rollback.Rollback (--on_divergence=rollback) every worker instead goes back to that
checkpoint, skips the data that led to the divergence and trains on, until --max_rollbacks.
"""

from __future__ import annotations

import os
import time

from common.errors import Preempted, UserError
from common.files import write_json

EVAL_RESULTS_NAME = "eval_results.json"


class TrainingDivergedError(UserError):
    """The loss or the gradients are no longer finite; the message names the step and the last
    good checkpoint."""


def resume(checkpointer, step) -> int:
    """Restores the latest checkpoint of the output directory (if any), re-broadcasts rank 0's
    state, and returns the step to continue from (0 for a fresh run)."""
    from training.checkpointing import checkpoint_step

    latest = checkpointer.latest()
    mine = checkpoint_step(latest) if latest else 0
    distributed = checkpointer.distributed
    chief = int(distributed.broadcast_value(mine))
    if mine != chief:
        raise UserError(
            f"Worker {distributed.rank} finds the checkpoint of step {mine} in "
            f"{checkpointer.output_dir} but worker 0 finds step {chief}: every worker must "
            "see the same --output_dir (a shared file system)."
        )
    if latest is None:
        return 0
    start = checkpointer.restore(latest)
    step.broadcast()
    return start


def _divergence(metrics: dict, scale_before: float) -> str | None:
    """Why an update that was not applied means the run diverged, or None for fp16's normal
    skip (the loss scale halves and the update is retried)."""
    if not metrics["loss_scale_enabled"]:
        return "The loss is not finite"
    if scale_before <= 1.0:
        return "The float16 gradients overflow even with a loss scale of 1"
    return None


def _diverged(
    checkpointer, at_step: int, metrics: dict, why: str, refusal: str | None = None
) -> TrainingDivergedError:
    latest = checkpointer.latest()
    good = f"the last good checkpoint is {latest}" if latest else "no checkpoint was written yet"
    instead = f"; it is not rolled back: {refusal}" if refusal and latest else ""
    return TrainingDivergedError(
        f"{why} at step {at_step} (loss {metrics['loss']}){instead}; the update was not applied and "
        f"{good}: lower --learning_rate or raise --num_warmup_steps, then re-run from there."
    )


def _preempted(checkpointer, stop, start: int, current: int) -> Preempted:
    """Saves the step reached (unless the latest checkpoint already holds it) and says so."""
    latest = checkpointer.latest()
    if current > start and not (latest and latest.endswith(f"ckpt-{current}")):
        checkpointer.save(current)
        latest = checkpointer.latest()
    where = f"{latest} holds step {current}" if latest else "no checkpoint was written (no update yet)"
    gone = stop.launcher_gone()
    why = f"because {gone}," if gone else f"for a preemption notice ({stop.reason()})"
    return Preempted(
        f"Stopped {why} at step {current}: {where}; re-running the same command continues from there."
    )


class _SaveClock:
    """Whether a checkpoint is due by the clock: `minutes` (None: never) passed since the last
    checkpoint, or since the loop started, on worker 0's clock (its answer broadcast, so every
    worker saves at the same update). Every worker asks at the same update boundaries."""

    now = staticmethod(time.monotonic)  # seconds

    def __init__(self, minutes: float | None, distributed):
        self.seconds = None if minutes is None else minutes * 60.0
        self.distributed = distributed
        self.since = self.now()

    def due(self) -> bool:
        if self.seconds is None:
            return False
        mine = self.now() - self.since >= self.seconds
        if self.distributed is None or self.distributed.size == 1:
            return mine
        return bool(int(self.distributed.broadcast_value(int(mine))))

    def saved(self) -> None:
        self.since = self.now()


def _next_read(current: int, first: bool, every: tuple[int, ...], last: int) -> int:
    """The step at which the loop next reads the device: the first update of a process alone
    until one is applied (it compiles, so its time is not a steady update's), else the next
    multiple of any period in `every` (logging, checkpoints, the periodic callback), or the last
    step if that comes first."""
    if first:
        return current + 1
    return min([last, *((current // n + 1) * n for n in every)])


def train(
    step,
    micro_batches,
    checkpointer,
    log,
    *,
    num_train_steps: int,
    save_checkpoints_steps: int,
    save_checkpoints_minutes: float | None = None,
    periodic=None,
    stop=None,
    watchdog=None,
    rollback=None,
) -> dict | None:
    """Runs updates from optimizer.iterations to `num_train_steps`; returns the last metrics
    (None when there was nothing left to do).

    save_checkpoints_minutes: also save at the first read boundary (a step that logs, saves or
    calls `periodic`) once this many minutes passed since the last checkpoint (None: steps only).

    periodic: (n, callback): callback(step) runs on every worker after each step that is a
    multiple of n (and after its checkpoint); fine-tuning's periodic dev evaluation hangs here.

    stop: training.preemption.StopRequests (or None). Asked before each update; once any worker
    has a preemption notice, every worker stops queueing at that same update, the queued updates
    are read, a checkpoint is written at the step reached, and Preempted is raised.

    watchdog: training.watchdog.Watchdog (or None): beaten at each update boundary; a worker lost
    to Horovod (its shutdown error) becomes the watchdog's WorkersLost sentence.

    rollback: training.rollback.Rollback (or None: a divergence stops the run). A diverged update
    rolls every worker back to the newest checkpoint, past the data that led to it, unless the
    rollback refuses (no checkpoint yet, --max_rollbacks reached): then the run stops.

    micro_batches: an iterator of feature dicts (this worker's input, counted by the
    checkpointer's training.data_order.Position, whose count the checkpoints keep). Every worker runs this function; only rank 0 writes the checkpoint
    files and the log (`log` is disabled elsewhere).

    The host does not wait for each update: it queues updates (TrainStep.dispatch) up to the next
    step that logs, saves, calls `periodic` or ends, then reads them all at once
    (TrainStep.read). Updates are queued only up to that step counting every queued update as
    applied, so the count never passes it; a skipped fp16 update leaves it short, and the loop
    queues and reads again until the step is reached exactly. An update that is not finite is
    found at the read: the updates queued after it may have changed the weights in memory, but
    nothing past the last checkpoint is saved, and the error names the update's step.
    """
    if save_checkpoints_steps < 1:
        raise ValueError(f"save_checkpoints_steps must be >= 1 (got {save_checkpoints_steps}).")
    if save_checkpoints_minutes is not None and not save_checkpoints_minutes > 0:
        raise ValueError(f"save_checkpoints_minutes must be > 0 (got {save_checkpoints_minutes}).")
    try:
        return _updates(
            step,
            micro_batches,
            checkpointer,
            log,
            num_train_steps,
            (save_checkpoints_steps, _SaveClock(save_checkpoints_minutes, checkpointer.distributed)),
            periodic,
            (stop, watchdog, rollback),
        )
    except Exception as error:
        from training.watchdog import is_horovod_shutdown

        if watchdog is not None and is_horovod_shutdown(error):
            raise watchdog.lost("Horovod shut down: a worker exited or its connection broke") from None
        raise
    finally:
        log.close()


def _updates(step, micro_batches, checkpointer, log, num_train_steps, saving, periodic, guards):
    """train's loop (see there); returns the last metrics. `saving`: (save_checkpoints_steps,
    the _SaveClock); `guards`: (stop, watchdog, rollback)."""
    save_checkpoints_steps, clock = saving
    stop, watchdog, rollback = guards
    every = (log.log_every, save_checkpoints_steps) + ((periodic[0],) if periodic else ())
    current = start = int(step.optimizer.iterations)
    metrics = None
    scale_before = float(step.loss_scale.scale.numpy())
    while current < num_train_steps:
        target = _next_read(current, current == start, every, num_train_steps)
        started, compiling = time.perf_counter(), step.compile_seconds
        dispatched, ends, stopping = [], [], False
        while len(dispatched) < target - current:
            if stop is not None and stop.stop_now():
                stopping = True
                break
            if watchdog is not None:  # every worker got here: they just agreed on the flag
                watchdog.beat(current + len(dispatched))
            dispatched.append(step.dispatch(micro_batches))
            ends.append(checkpointer.position.sequences if checkpointer.position else 0)
        results = step.read(dispatched) if dispatched else []
        applied = sum(r["applied"] for r in results)
        # Programs compiled for a new shape (binned input) are reported, not counted as training.
        compiling = step.compile_seconds - compiling
        seconds = max(time.perf_counter() - started - compiling, 0.0) / max(applied, 1)
        log.record_compiled(step.compiled, step.traced_ahead)
        rolled_back = False
        for metrics, end in zip(results, ends):
            why = None if metrics["applied"] else _divergence(metrics, scale_before)
            if why is not None:
                refusal = rollback.refusal(checkpointer.latest()) if rollback else None
                if rollback is None or refusal is not None:
                    raise _diverged(checkpointer, current + 1, metrics, why, refusal)
                # The updates queued after this one are dropped with the weights they changed.
                micro_batches, current = rollback(
                    checkpointer,
                    step,
                    log,
                    diverged_step=current + 1,
                    why=why,
                    loss=metrics["loss"],
                    window_end=end,
                )
                scale_before, rolled_back = float(step.loss_scale.scale.numpy()), True
                break
            scale_before = metrics["loss_scale"]
            if metrics["applied"]:
                current += 1
                log.record(current, metrics, seconds)
        if stopping:
            raise _preempted(checkpointer, stop, start, current)
        if current < target or rolled_back:
            continue  # skipped fp16 updates left it short (queue the missing ones), or rolled back
        # Every worker evaluates this alike (the clock's answer is worker 0's).
        if current % save_checkpoints_steps == 0 or current == num_train_steps or clock.due():
            checkpointer.save(current)
            clock.saved()
        if periodic is not None and current % periodic[0] == 0:
            periodic[1](current)
    return metrics


def evaluate(
    step,
    batches,
    *,
    max_batches: int | None = None,
    output_dir: str | None = None,
    global_step: int = 0,
    log=None,
) -> dict:
    """The objective's metrics over `batches` (at most `max_batches`), under the objective's
    result names (Google's for pretraining), with global_step; written to
    <output_dir>/eval_results.json when output_dir is given. Runs on the calling worker alone."""
    results = step.evaluate(iter(batches), max_batches=max_batches)
    names = step.objective.result_names
    named = {names.get(k, k): v for k, v in results.items()}
    named["global_step"] = global_step
    if output_dir is not None:
        write_json(os.path.join(output_dir, EVAL_RESULTS_NAME), named)
    if log is not None:
        log.record_eval(global_step, named)
    return named
