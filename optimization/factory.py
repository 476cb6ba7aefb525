"""create_optimizer: the one place training/ and the run_*.py entry points get an optimizer from."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from optimization.adamw import AdamW, AdamWeightDecay
from optimization.lamb import LAMB
from optimization.weight_decay import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY

OPTIMIZERS = {"lamb": LAMB, "adamw": AdamW, "adam_weight_decay": AdamWeightDecay}


def create_optimizer(
    name: str,
    learning_rate,
    *,
    weight_decay: float = 0.01,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-6,
    exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
    clip_global_norm: float | None = 1.0,
    **kwargs,
) -> keras.optimizers.Optimizer:
    """A Keras optimizer: "lamb" (pretraining), "adam_weight_decay" (Google's fine-tuning Adam,
    no bias correction) or "adamw" (bias-corrected, decoupled decay).

    learning_rate: a float or a LearningRateSchedule (e.g. WarmupPolynomialDecay), which is read
    at `optimizer.iterations`: the number of updates applied so far. `apply()` increments it after
    each update, so a train step that skips `apply()` (non-finite fp16 gradients) advances neither
    the count nor the schedule. clip_global_norm=None turns the global-norm clipping off. Extra
    keyword arguments go to the optimizer (LAMB: trust_ratio_for_excluded; any: name).
    Call `optimizer.build(model.trainable_variables)` eagerly before an XLA train step: it creates
    the float32 slots and checks every exclusion pattern matches some variable path.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}.")
    return OPTIMIZERS[name](
        learning_rate,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        exclude_from_weight_decay=exclude_from_weight_decay,
        clip_global_norm=clip_global_norm,
        **kwargs,
    )
