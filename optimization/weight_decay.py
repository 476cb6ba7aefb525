"""Which variables get weight decay: a path is decayed unless a pattern is found in it.

The rule is Google's (`re.search(pattern, name)` for each pattern of exclude_from_weight_decay),
applied to Keras variable paths such as `layer_0/attention_output_LayerNorm/gamma` or
`cls_predictions/output_bias`. With the default patterns every LayerNorm gamma/beta and every
bias is excluded; kernels, embedding tables and cls_seq_relationship/output_weights are decayed.

A pattern that matches no variable is an error rather than a silent no-op: a renamed layer would
otherwise quietly start decaying its LayerNorm parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

# Google's list spells LayerNorm twice: "LayerNorm" for TF1 names (and ours), "layer_norm" for
# Keras-style names. A model uses one spelling, so either one matching is enough for both.
_SPELLINGS_OF_ONE_CONCEPT = (frozenset({"LayerNorm", "layer_norm"}),)


def variable_path(variable) -> str:
    """The name the rule matches: a Keras variable's `path`, else a tf.Variable's name without ':0'."""
    path = getattr(variable, "path", None)
    if path is None:
        path = re.sub(r":\d+$", "", variable.name)
    return path


def is_excluded(path: str, patterns: Iterable[str]) -> bool:
    """True when any pattern is found (re.search) in path."""
    return any(re.search(pattern, path) is not None for pattern in patterns)


def weight_decay_mask(paths: Sequence[str], patterns: Sequence[str]) -> list[bool]:
    """[decayed?] for each path; raises ValueError naming any pattern that matches no path."""
    patterns = tuple(patterns)
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"exclude_from_weight_decay holds {pattern!r}; patterns are strings.")
        re.compile(pattern)
    matched = {p for p in patterns if any(re.search(p, path) for path in paths)}
    for spellings in _SPELLINGS_OF_ONE_CONCEPT:
        if matched & spellings:
            matched |= spellings
    unmatched = [p for p in patterns if p not in matched]
    if unmatched:
        examples = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
        raise ValueError(
            f"exclude_from_weight_decay pattern(s) {', '.join(repr(p) for p in unmatched)} match no "
            f"variable path ({len(paths)} variables, e.g. {examples}); fix or remove the pattern."
        )
    return [not is_excluded(path, patterns) for path in paths]
