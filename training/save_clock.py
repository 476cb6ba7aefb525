"""Checkpoints by the clock (--save_checkpoints_minutes), a safeguard of the loop: once that many
minutes passed since the last checkpoint (or since training started), a checkpoint at the next read
boundary (a step that logs), by worker 0's clock: its answer is broadcast, so every worker saves at
the same update whatever the hosts' clocks say."""

from __future__ import annotations

import time

from training.safeguard import Safeguard


class SaveClock(Safeguard):
    """minutes: > 0; distributed: training.distributed.Distributed (None: one worker)."""

    now = staticmethod(time.monotonic)  # seconds

    def __init__(self, minutes: float, distributed=None):
        if not minutes > 0:
            raise ValueError(f"save_checkpoints_minutes must be > 0 (got {minutes}).")
        self.seconds = minutes * 60.0
        self.distributed = distributed
        self.since = self.now()

    def start(self, run) -> None:
        self.since = self.now()

    def save_due(self, run) -> bool:
        mine = self.now() - self.since >= self.seconds
        if self.distributed is None or self.distributed.size == 1:
            return mine
        return bool(int(self.distributed.broadcast_value(int(mine))))

    def after_boundary(self, run, saved: bool) -> None:
        if saved:
            self.since = self.now()
