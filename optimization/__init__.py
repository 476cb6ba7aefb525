"""Optimizers (LAMB, AdamW, Google's AdamWeightDecay), learning-rate schedules, weight-decay rule.

Loss scaling (optimization.loss_scale) is imported from its module by training/; gradient
accumulation is a loop inside the compiled train step (training/train_step.py).
"""

from optimization.adamw import AdamW, AdamWeightDecay, DecoupledWeightDecayAdam
from optimization.factory import OPTIMIZERS, create_optimizer
from optimization.lamb import LAMB
from optimization.schedules import WarmupPolynomialDecay, scaled_learning_rate
from optimization.weight_decay import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, weight_decay_mask

__all__ = [
    "DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY",
    "LAMB",
    "OPTIMIZERS",
    "AdamW",
    "AdamWeightDecay",
    "DecoupledWeightDecayAdam",
    "WarmupPolynomialDecay",
    "create_optimizer",
    "scaled_learning_rate",
    "weight_decay_mask",
]
