"""The kinds of value a setting can hold, with their ranges: the one table that the launchers
(launch/) and the entry points' flags (common/cli.py) check against, so both layers accept the
same values and refuse the rest with the same rule.

    KINDS["rate"].parse("7.5e-4") -> 0.00075      (text from a shell, a preset or a flag)
    KINDS["rate"].accepts(2.0)    -> False        (a typed value: an absl flag, a dataclass)
    KINDS["rate"].rule            -> "a number in (0, 1]"

A learning rate is per worker and at most 1 in both layers; a count is an integer >= 1.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

# Decimal notation only: what a shell, a preset file and Python's float() agree on ("1e-4", ".5").
_NUMBER = re.compile(r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")
_INTEGER = re.compile(r"^[0-9]+$")
# Precisions the trainer builds (training/precision.py maps each to a Keras dtype policy).
PRECISIONS = ("fp16", "fp32", "tf32", "bf16")


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    rule: str  # what the value must be, for "NAME must be RULE, got 'VALUE'"
    accepts: Callable[[object], bool]  # a typed value
    text_to_value: Callable[[str], object]  # raises ValueError on text of the wrong form

    def parse(self, text: str):
        """The typed value of `text`; ValueError(rule) when it is not of this kind or out of range."""
        try:
            value = self.text_to_value(text)
        except (ValueError, TypeError):
            raise ValueError(self.rule) from None
        if not self.accepts(value):
            raise ValueError(self.rule)
        return value


def _integer(text: str) -> int:
    if not _INTEGER.match(text):
        raise ValueError(text)
    return int(text)


def _number(text: str) -> float:
    if not _NUMBER.match(text):
        raise ValueError(text)
    return float(text)


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


KINDS = {
    k.name: k
    for k in (
        Kind("count", "a positive integer", lambda v: isinstance(v, int) and v >= 1, _integer),
        Kind("steps", "an integer >= 0", lambda v: isinstance(v, int) and v >= 0, _integer),
        Kind("rate", "a number in (0, 1]", lambda v: _real(v) and 0.0 < v <= 1.0, _number),
        Kind("epochs", "a positive number", lambda v: _real(v) and v > 0.0, _number),
        Kind("positive", "a positive number", lambda v: _real(v) and v > 0.0, _number),  # seconds, MB
        Kind("proportion", "a number in [0, 1]", lambda v: _real(v) and 0.0 <= v <= 1.0, _number),
        # A part that leaves the rest non-empty: the documents held out for the test shards.
        Kind("fraction", "a number in [0, 1)", lambda v: _real(v) and 0.0 <= v < 1.0, _number),
        Kind("bool", "true or false", lambda v: isinstance(v, bool), _boolean),
        Kind("precision", f"one of {', '.join(PRECISIONS)}", lambda v: v in PRECISIONS, str),
    )
}
