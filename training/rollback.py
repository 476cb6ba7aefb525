"""Rolling back past a divergence (--on_divergence=rollback), by itself and exactly resumable.

When an update's loss or gradients are not finite (what training/loop.py otherwise stops on: fp32
and bf16 at once, fp16 only when even a loss scale of 1 overflows), every worker, at the same
update:

1. takes the newest intact checkpoint of the output directory: step c, data position q;
2. skips the window of the data order that led to the divergence: from where the input was at c
   through the diverged update, and `skip_updates` updates (global batches) more;
3. restores the checkpoint (weights, optimizer, loss scale, dropout seeds), continues the input
   after the window, and trains on from step c. The learning-rate schedule repeats c + 1, ...

The rollback is part of the run's state. Rank 0 records it in <output_dir>/rollbacks.json (the
whole list, written through a temporary) before anything is restored, and a run that continues
checkpoint c at position q takes its input from where the newest record for (c, q) says
(`resume_position`). A run killed after a rollback so ends where an uninterrupted one ends, on any
worker count; the next checkpoint holds the position past the window, and needs no record.

After `max_rollbacks` rollbacks recorded in the output directory, the next divergence stops the
run with one sentence (training.safeguard.TrainingDivergedError, exit status 2). Each rollback is a printed
sentence, a {"step": c, "rollback": {...}} line of log.jsonl (the undone updates' lines removed, as
a resumed run removes them) and TensorBoard scalars rollback/... at the diverged step.
"""

from __future__ import annotations

import json
import os

from common.errors import UserError
from common.files import write_json
from training.safeguard import Safeguard

ROLLBACKS_NAME = "rollbacks.json"
POLICIES = ("stop", "rollback")  # --on_divergence


def read_rollbacks(output_dir: str) -> list[dict]:
    """The rollbacks recorded in `output_dir`, oldest first ([] when none)."""
    path = os.path.join(output_dir, ROLLBACKS_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except FileNotFoundError:
        return []
    except ValueError as error:
        raise UserError(
            f"{path} is not valid JSON ({error}): it records where this run's rollbacks skipped the "
            "data order; restore it from a backup, or continue in a new --output_dir."
        ) from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path} must hold a JSON list of rollback records; it was changed by hand.")
    return records


def resume_position(output_dir: str, step: int, sequences: int) -> tuple[int, dict | None]:
    """(where the input continues from the checkpoint of `step` at data position `sequences`,
    the rollback record that says so): past the window the newest rollback to that checkpoint
    skipped, else (sequences, None)."""
    for record in reversed(read_rollbacks(output_dir)):
        if record["step"] == step and record["sequences"] == sequences:
            return int(record["resume_sequences"]), record
    return sequences, None


def past_rollbacks(output_dir: str, resume_from: str | None, sequences: int, stream) -> int:
    """Where the input continues from checkpoint `resume_from` at data position `sequences`: past
    the window a divergence rollback to it skipped (training/rollback.py; a sentence on `stream`),
    else `sequences`."""
    if not resume_from:
        return sequences
    from training.checkpointing import checkpoint_step

    start, record = resume_position(output_dir, checkpoint_step(resume_from), sequences)
    if record is not None:
        print(
            f"{resume_from} is where a divergence at step {record['diverged_step']} was rolled back "
            f"to ({ROLLBACKS_NAME}): the input continues at sequence {start}, past the skipped window.",
            file=stream,
        )
    return start


class Rollback(Safeguard):
    """The loop's safeguard for --on_divergence=rollback.

    batches_from: start -> this worker's micro-batches of the data order from sequence `start`
    (the task's training_batches). global_batch: sequences per update (B x k x W).
    skip_updates: updates skipped past the diverged one. max_rollbacks: rollbacks the output
    directory may record; one more divergence stops the run. log: the run's
    training.metrics_log.MetricsLog, which records and prints each rollback on rank 0."""

    def __init__(
        self,
        output_dir: str,
        batches_from,
        *,
        global_batch: int,
        skip_updates: int,
        max_rollbacks: int,
        distributed,
        log,
    ):
        self.output_dir = output_dir
        self.batches_from = batches_from
        self.global_batch = global_batch
        self.skip_updates = skip_updates
        self.max_rollbacks = max_rollbacks
        self.distributed = distributed
        self.log = log
        # Read by every worker before training, so each decides alike without another collective.
        self.done = len(read_rollbacks(output_dir))

    def refusal(self, latest: str | None) -> str | None:
        """Why the run must stop instead (appended to the divergence's sentence), or None."""
        if latest is None:
            return "no checkpoint was written yet to roll back to"
        if self.done >= self.max_rollbacks:
            return (
                f"{self.done} rollback(s) already (--max_rollbacks={self.max_rollbacks}, listed in "
                f"{os.path.join(self.output_dir, ROLLBACKS_NAME)})"
            )
        return None

    def diverged(self, run, divergence) -> bool:
        """Rolls the run back to its checkpointer's latest checkpoint, its input past the window
        (divergence.window_end: the data position after the diverged update); raises the
        divergence's error when refusal() says it may not."""
        from training.checkpointing import read_run_state

        checkpointer = run.checkpointer
        latest = checkpointer.latest()
        refusal = self.refusal(latest)
        if refusal is not None:
            raise divergence.error(checkpointer, refusal)
        state = read_run_state(latest)
        window_start, _ = resume_position(self.output_dir, state.step, state.sequences)
        resume = divergence.window_end + self.skip_updates * self.global_batch
        why, diverged_step, loss = divergence.why, divergence.step, divergence.loss
        record = {
            "checkpoint": os.path.basename(latest),
            "step": state.step,
            "sequences": state.sequences,
            "resume_sequences": resume,
            "skipped": [window_start, resume],
            "diverged_step": diverged_step,
            "updates_undone": diverged_step - 1 - state.step,
            "why": why,
            "loss": str(loss),
        }
        if self.distributed.is_chief:
            write_json(
                os.path.join(self.output_dir, ROLLBACKS_NAME), [*read_rollbacks(self.output_dir), record]
            )
        checkpointer.position = checkpointer.position.skipped_to(resume, restored=state.sequences)
        restored = checkpointer.restore(latest)
        run.step.broadcast()
        self.done += 1
        self.log.record_rollback(
            record,
            f"Rolled back: {why[:1].lower()}{why[1:]} at step {diverged_step} (loss {loss}); restored "
            f"{latest} ({record['updates_undone']} update(s) undone) and skipped sequences "
            f"{window_start} to {resume} of the data order (through the diverged update, and "
            f"--rollback_skip_updates={self.skip_updates} more); rollback {self.done} of at most "
            f"{self.max_rollbacks}, recorded in {os.path.join(self.output_dir, ROLLBACKS_NAME)}.",
        )
        run.restart(checkpointer.position.counted(self.batches_from(resume)), restored)
        return True
