"""Optimizers (LAMB, AdamW, Google's AdamWeightDecay), learning-rate schedules, weight-decay rule.

Loss scaling (optimization.loss_scale) is imported from its module by training/; gradient
accumulation is a loop inside the compiled train step (training/train_step.py).

The names and the weight-decay rule import at once; the optimizers and schedules (TensorFlow)
on first use, so that `from optimization import OPTIMIZERS` stays cheap for flag definitions.
"""

import importlib

from optimization.factory import DECAY_POWER, FINE_TUNING_DECAY_POWER, OPTIMIZERS, create_optimizer
from optimization.weight_decay import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, weight_decay_mask

_LAZY = {
    "AdamW": "optimization.adamw",
    "AdamWeightDecay": "optimization.adamw",
    "DecoupledWeightDecayAdam": "optimization.adamw",
    "LAMB": "optimization.lamb",
    "WarmupPolynomialDecay": "optimization.schedules",
    "scaled_learning_rate": "optimization.schedules",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'optimization' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "DECAY_POWER",
    "DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY",
    "FINE_TUNING_DECAY_POWER",
    "OPTIMIZERS",
    "create_optimizer",
    "weight_decay_mask",
    *_LAZY,
]
