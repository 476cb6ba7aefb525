"""The search space of a fine-tuning hyperparameter study: which fine-tuning flags a trial may
draw (learning rate, batch size, epochs, warmup, seed) and how: a list of choices, a
[low, high] range (log-uniform when `log`), or one fixed value.

    learning_rate: {low: 1.0e-5, high: 1.0e-4, log: true}     # a YAML/JSON space file
    train_batch_size: [16, 32]
    seed: 7

The space comes from DEFAULT_SPACE, or a file, with flags' entries on top (build_space); every
bad entry is a UserError naming where it came from."""

from __future__ import annotations

import dataclasses
import os
import re

from common.errors import UserError

# The fine-tuning flags a trial may draw, with their types.
PARAMETERS = {
    "learning_rate": float,
    "train_batch_size": int,
    "num_train_epochs": float,
    "warmup_proportion": float,
    "seed": int,
}
# Google's BERT paper's fine-tuning grid, as ranges: what a space leaves out.
DEFAULT_SPACE = {
    "learning_rate": {"low": 1e-5, "high": 1e-4, "log": True},
    "train_batch_size": [16, 32],
    "num_train_epochs": [2, 3, 4],
}


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One parameter: a list of choices, a [low, high] range (log-uniform when `log`), or one
    fixed value (choices of one)."""

    name: str
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    log: bool = False

    def suggest(self, trial):
        if len(self.choices) == 1:
            return self.choices[0]
        if self.choices:
            return trial.suggest_categorical(self.name, list(self.choices))
        if PARAMETERS[self.name] is int:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def describe(self) -> str:
        if self.choices:
            return ", ".join(str(c) for c in self.choices)
        return f"{self.low:g} .. {self.high:g}{' (log-uniform)' if self.log else ''}"


def _value(name: str, value, source: str):
    kind = PARAMETERS[name]
    if isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as a string
        try:
            value = float(value) if re.search(r"[.eE]", value) else int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{source}: {name} must be a number (got {value!r}).")
    if kind is int and float(value) != int(value):
        raise UserError(f"{source}: {name} must be a whole number (got {value!r}).")
    value = kind(value)
    positive = name != "seed" and name != "warmup_proportion"
    if (positive and not value > 0) or value < 0:
        raise UserError(f"{source}: {name} must be {'> 0' if positive else '>= 0'} (got {value!r}).")
    if name == "warmup_proportion" and value > 1:
        raise UserError(f"{source}: warmup_proportion must lie in [0, 1] (got {value!r}).")
    return value


def parse_dimension(name: str, spec, source: str) -> Dimension:
    """A Dimension from a space entry: [choices], {low, high, log}, or one value."""
    if name not in PARAMETERS:
        raise UserError(f"{source}: unknown parameter {name!r}; the space may hold {', '.join(PARAMETERS)}.")
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise UserError(f"{source}: {name} has an empty list of choices.")
        values = tuple(dict.fromkeys(_value(name, v, source) for v in spec))
        return Dimension(name, choices=values)
    if isinstance(spec, dict):
        unknown = set(spec) - {"low", "high", "log"}
        if unknown or not {"low", "high"} <= set(spec):
            raise UserError(
                f"{source}: {name} must be a list, a value or {{low, high[, log]}} (got {spec!r})."
            )
        low, high = _value(name, spec["low"], source), _value(name, spec["high"], source)
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise UserError(f"{source}: {name}'s log must be true or false (got {log!r}).")
        if low > high:
            raise UserError(f"{source}: {name}'s range is inverted (low {low:g} > high {high:g}).")
        if low == high:
            raise UserError(
                f"{source}: {name}'s range is empty (low = high = {low:g}); give one value instead."
            )
        if log and low <= 0:
            raise UserError(f"{source}: {name}'s log-uniform range needs low > 0 (got {low:g}).")
        return Dimension(name, low=low, high=high, log=log)
    return Dimension(name, choices=(_value(name, spec, source),))


def read_space_file(path: str) -> dict:
    """The entries of a search-space file (YAML, or JSON, which YAML reads too)."""
    import yaml

    if not os.path.isfile(path):
        raise UserError(f"--search_space {path} does not exist.")
    try:
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise UserError(f"--search_space {path}{line} is not valid YAML/JSON ({getattr(e, 'problem', e)}).")
    if not isinstance(spec, dict) or not spec:
        raise UserError(f"--search_space {path} must map parameter names to choices or ranges.")
    return spec


def build_space(
    file_spec: dict | None, overrides: dict[str, tuple], file_source: str = "--search_space"
) -> dict[str, Dimension]:
    """The space: DEFAULT_SPACE, replaced by the file's entries when a file is given, then each
    override (name: (spec, where it came from)) on top."""
    entries = {name: (spec, "the default space") for name, spec in DEFAULT_SPACE.items()}
    if file_spec is not None:
        entries = {name: (spec, file_source) for name, spec in file_spec.items()}
    entries.update(overrides)
    return {name: parse_dimension(name, spec, source) for name, (spec, source) in entries.items()}


def parse_range(text: str, flag: str, log: bool) -> dict:
    """'LOW,HIGH' from a flag as a range spec."""
    parts = [p.strip() for p in text.split(",")]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise UserError(f"--{flag} must be LOW,HIGH (two numbers; got {text!r}).") from None
    return {"low": low, "high": high, "log": log}


def parse_choices(text: str, flag: str) -> list:
    """'A,B,C' from a flag as a list of numbers."""
    try:
        return [
            float(p) if re.search(r"[.eE]", p) else int(p) for p in (p.strip() for p in text.split(",")) if p
        ]
    except ValueError:
        raise UserError(f"--{flag} must be comma-separated numbers (got {text!r}).") from None
