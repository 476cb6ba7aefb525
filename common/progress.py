"""The one progress display: tqdm's bar with rate and ETA on a terminal, plain lines in logs.

On a TTY the bar redraws in place (tqdm). When the stream is not a terminal (CI logs, `| tee`,
a batch scheduler's output file) the same text tqdm would draw is printed as one plain line
every `log_interval` seconds, so logs stay readable instead of filling with carriage returns:

    sharding:  45%|#####     | 90.4M/200M [00:07<00:09, 12.3MB/s]

`Progress` is callable (`progress(n)` = `update(n)`), so library code takes a plain
`progress=` callback and never imports this module. `summary()` prints a stage's totals.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """Counts work done towards an optional `total` in `unit`s; cheap enough to call per document."""

    def __init__(
        self,
        desc: str,
        total: float | None = None,
        unit: str = "B",
        stream=None,
        is_tty: bool | None = None,
        log_interval: float = 30.0,
        enabled: bool = True,
    ):
        self.desc = desc
        self.total = total or None
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if is_tty is None:
            is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.is_tty = is_tty
        self.log_interval = log_interval
        self.enabled = enabled
        self.done = 0  # stays an int while the increments are ints, so counts print without ".0"
        self.start = time.monotonic()
        self._last_line = self.start
        self._closed = False
        self._scale = unit == "B"  # bytes read best as k/M/G; counts of things stay exact
        self._bar = None
        if enabled and is_tty:
            self._bar = tqdm(
                desc=desc,
                total=self.total,
                unit=unit,
                unit_scale=self._scale,
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.1,
                leave=True,
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, n: float = 1) -> None:
        self.update(n)

    def update(self, n: float = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled:
            now = time.monotonic()
            if now - self._last_line >= self.log_interval:
                self._last_line = now
                self._print_line(now)

    def line(self, now: float | None = None) -> str:
        """The current status as one line of text: done/total, rate, elapsed<remaining."""
        elapsed = max(1e-9, (now or time.monotonic()) - self.start)
        total = self.total if self.total and self.done <= self.total else None
        return tqdm.format_meter(
            self.done, total, elapsed, ncols=0, prefix=self.desc, unit=self.unit, unit_scale=self._scale
        )

    def _print_line(self, now: float) -> None:
        self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and self.done:
            self._print_line(time.monotonic())


def summary(stage: str, stats: dict, stream=None) -> str:
    """Prints and returns one line `[stage] done: key=value ...` (ints with thousands separators)."""

    def fmt(value):
        if isinstance(value, bool):
            return str(value)
        if isinstance(value, int):
            return f"{value:,}"
        if isinstance(value, float):
            return f"{value:,.2f}"
        return str(value)

    text = f"[{stage}] done: " + "  ".join(f"{k}={fmt(v)}" for k, v in stats.items())
    print(text, file=stream if stream is not None else sys.stderr, flush=True)
    return text
