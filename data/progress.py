"""Progress reporting for the data stages: a bar on a terminal, plain periodic lines otherwise.

On a TTY (stderr) the bar redraws in place at most ~10 times a second:

    sharding  [#########-----------]  45.2%  90.4/200.0 MB  12.3 MB/s  ETA 0:00:09

When stderr is not a terminal (CI logs, `| tee`), a plain line is printed every
`log_interval` seconds instead, so logs stay readable. `summary()` prints the end-of-stage
totals on one line.
"""

from __future__ import annotations

import sys
import time

_UNIT_SCALES = {"B": ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))}


def _format_amount(value: float, unit: str) -> str:
    for scale, name in _UNIT_SCALES.get(unit, ()):
        if value >= scale or scale == 1:
            return f"{value / scale:.1f} {name}"
    return f"{value:,.0f} {unit}".rstrip()


def _format_seconds(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Counts work done towards an optional `total`; `update(n)` is cheap enough to call per document."""

    def __init__(self, desc: str, total: float | None = None, unit: str = "B", stream=None,
                 is_tty: bool | None = None, log_interval: float = 30.0, width: int = 24,
                 enabled: bool = True):
        self.desc = desc
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if is_tty is None:
            is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.is_tty = is_tty
        self.log_interval = log_interval
        self.width = width
        self.enabled = enabled
        self.done = 0.0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, n: float = 1) -> None:
        # Callable, so a library function can take `progress=` as a plain callback.
        self.update(n)

    def update(self, n: float = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw >= (0.1 if self.is_tty else self.log_interval):
            self._last_draw = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The current status as text (what the bar or the periodic log line shows)."""
        elapsed = max(1e-9, (now or time.monotonic()) - self.start)
        rate = self.done / elapsed
        parts = [self.desc]
        if self.total:
            fraction = min(1.0, self.done / self.total)
            if self.is_tty:
                filled = int(round(fraction * self.width))
                parts.append("[" + "#" * filled + "-" * (self.width - filled) + "]")
            parts.append(f"{100 * fraction:5.1f}%")
            parts.append(f"{_format_amount(self.done, self.unit)}/{_format_amount(self.total, self.unit)}")
        else:
            parts.append(_format_amount(self.done, self.unit))
        parts.append(f"{_format_amount(rate, self.unit)}/s")
        if self.total and rate > 0:
            parts.append(f"ETA {_format_seconds((self.total - self.done) / rate)}")
        else:
            parts.append(f"elapsed {_format_seconds(elapsed)}")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        if self.is_tty:
            self.stream.write("\r" + self.line(now) + "\x1b[K")
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.enabled and (self.is_tty or self.done):
            self._draw(time.monotonic())
            if self.is_tty:
                self.stream.write("\n")
            self.stream.flush()


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
