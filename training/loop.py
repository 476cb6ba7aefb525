"""The project's one training loop: queue updates, read them, save; nothing else.

    step = TrainStep(model, optimizer, objective, ...)      # the task's objective plugs in here
    checkpointer = Checkpointer(output_dir, step, position, keep=..., distributed=...)
    start = resume(checkpointer, step)                      # 0, or the latest checkpoint's step
    log = MetricsLog(output_dir, total_steps=..., start_step=start, ...)
    train(step, iterator, checkpointer, num_train_steps=..., save_checkpoints_steps=...,
          safeguards=[StopRequests(...), Watchdog(...), ..., log])
    results = evaluate(step, batches, output_dir=..., global_step=...)

Steps count applied updates (optimizer.iterations): a skipped fp16 update is retried on the next
micro-batches and counts nothing. A checkpoint is written every `save_checkpoints_steps`, at the
last step, and when a safeguard asks for one at a read boundary (training/save_clock.py). An update
whose loss or gradients are not finite stops the run when the loss is not scaled (fp32, bf16), and
in fp16 when even a loss scale of 1 overflows: the update was not applied and nothing is saved, so
the last checkpoint holds the last good weights; unless a safeguard rolls the run back
(training/rollback.py). What surrounds the updates (log, preemption, watchdog, rollback, periodic
evaluation) plugs in through training/safeguard.py's protocol; the loop knows nothing else of it.
"""

from __future__ import annotations

import os
import time

from common.errors import UserError
from common.files import write_json
from training.safeguard import Divergence, Run, TrainingDivergedError  # noqa: F401 (loop's error)

EVAL_RESULTS_NAME = "eval_results.json"


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


def _next_read(current: int, first: bool, every: tuple[int, ...], last: int) -> int:
    """The step at which the loop next reads the device: the first update of a process alone
    until one is applied (it compiles, so its time is not a steady update's), else the next
    multiple of any period in `every` (checkpoints, and what the safeguards ask for), or the last
    step if that comes first."""
    if first:
        return current + 1
    return min([last, *((current // n + 1) * n for n in every)])


def train(
    step,
    micro_batches,
    checkpointer,
    *,
    num_train_steps: int,
    save_checkpoints_steps: int,
    safeguards=(),
) -> dict | None:
    """Runs updates from optimizer.iterations to `num_train_steps`; returns the last metrics
    (None when there was nothing left to do). `safeguards`: training.safeguard.Safeguard objects,
    called at each moment of the run in this order.

    micro_batches: an iterator of feature dicts (this worker's input, counted by the
    checkpointer's training.data_order.Position, whose count the checkpoints keep). Every worker
    runs this function; only rank 0 writes the checkpoint files.

    The host does not wait for each update: it queues updates (TrainStep.dispatch) up to the next
    step that saves, ends or a safeguard's `every` reaches, then reads them all at once
    (TrainStep.read). Updates are queued only up to that step counting every queued update as
    applied, so the count never passes it; a skipped fp16 update leaves it short, and the loop
    queues and reads again until the step is reached exactly. An update that is not finite is
    found at the read: the updates queued after it may have changed the weights in memory, but
    nothing past the last checkpoint is saved, and the error names the update's step.
    """
    if save_checkpoints_steps < 1:
        raise ValueError(f"save_checkpoints_steps must be >= 1 (got {save_checkpoints_steps}).")
    run = Run(step, checkpointer, micro_batches, num_train_steps, save_checkpoints_steps)
    started = []
    try:
        for guard in safeguards:
            guard.start(run)
            started.append(guard)
        return _updates(run, safeguards)
    except Exception as error:
        for guard in safeguards:
            replaced = guard.error(run, error)
            if replaced is not None:
                raise replaced from None
        raise
    finally:
        for guard in reversed(started):
            guard.end(run)


def _updates(run: Run, safeguards) -> dict | None:
    """train's loop (see there): queue, read, save; returns the last metrics."""
    periods = (run.save_every, *(guard.every for guard in safeguards if guard.every))
    metrics = None
    while run.current < run.last:
        target = _next_read(run.current, run.current == run.start, periods, run.last)
        started, compiling = time.perf_counter(), run.step.compile_seconds
        queued, ends, stopper = [], [], None
        while len(queued) < target - run.current:
            stopper = next((g for g in safeguards if g.before_update(run, run.current + len(queued))), None)
            if stopper is not None:
                break
            queued.append(run.step.dispatch(run.micro_batches))
            ends.append(run.checkpointer.position.sequences if run.checkpointer.position else 0)
        results = run.step.read(queued) if queued else []
        # Programs compiled for a new shape (binned input) are reported, not counted as training.
        compiling = run.step.compile_seconds - compiling
        applied = max(sum(r["applied"] for r in results), 1)
        seconds = max(time.perf_counter() - started - compiling, 0.0) / applied
        restarted = False
        for metrics, end in zip(results, ends):
            restarted = _read(run, safeguards, metrics, end, seconds)
            if restarted:
                break  # the updates queued after it are dropped with the weights they changed
        if stopper is not None:
            raise stopper.stopping(run)
        if run.current < target or restarted:
            continue  # skipped fp16 updates left it short (queue the missing ones), or rolled back
        # Every worker evaluates this alike (a safeguard that asks answers alike on each).
        saved = run.current % run.save_every == 0 or run.current == run.last
        saved = saved or any(guard.save_due(run) for guard in safeguards)
        if saved:
            run.checkpointer.save(run.current)
        for guard in safeguards:
            guard.after_boundary(run, saved)
    return metrics


def _read(run: Run, safeguards, metrics: dict, end: int, seconds: float) -> bool:
    """One read update's metrics (`end`: the data position after it) to the run and the
    safeguards; True when it diverged and a safeguard rolled the run back."""
    why = None if metrics["applied"] else _divergence(metrics, run.scale_before)
    if why is not None:
        divergence = Divergence(run.current + 1, why, metrics["loss"], end)
        if not any(guard.diverged(run, divergence) for guard in safeguards):
            raise divergence.error(run.checkpointer)
        return True
    run.scale_before = metrics["loss_scale"]
    if metrics["applied"]:
        run.current += 1
        for guard in safeguards:
            guard.after_update(run, metrics, seconds)
    return False


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
