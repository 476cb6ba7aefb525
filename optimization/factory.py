"""The optimizers by name, the decay power of each one's schedule, and create_optimizer: the one
place training/, the entry points and their flags get an optimizer (or its name) from.

This module imports no TensorFlow until an optimizer is built, so the entry points can define
--optimizer_type and check settings before paying for the import.
"""

from __future__ import annotations

# The name users pass (--optimizer_type) -> the class optimization/ exports under that name.
OPTIMIZERS = {"lamb": "LAMB", "adamw": "AdamW", "adam_weight_decay": "AdamWeightDecay"}
# Pretraining's polynomial decay after warmup: 0.5 for LAMB, 1.0 (linear) for Adam (NVIDIA's recipes).
DECAY_POWER = {"lamb": 0.5, "adamw": 1.0, "adam_weight_decay": 1.0}
# Fine-tuning decays linearly whatever the optimizer (Google's and NVIDIA's run_squad/run_classifier).
FINE_TUNING_DECAY_POWER = 1.0


def create_optimizer(name: str, learning_rate, **kwargs):
    """A Keras optimizer: "lamb" (pretraining), "adam_weight_decay" (Google's fine-tuning Adam,
    no bias correction) or "adamw" (bias-corrected, decoupled decay).

    learning_rate: a float or a LearningRateSchedule (e.g. WarmupPolynomialDecay), which is read
    at `optimizer.iterations`: the number of updates applied so far. `apply()` increments it after
    each update, so a train step that skips `apply()` (non-finite fp16 gradients) advances neither
    the count nor the schedule. Keyword arguments go to the optimizer's constructor, whose defaults
    are BERT's (optimization/adamw.py: weight_decay 0.01, betas 0.9/0.999, epsilon 1e-6, the
    LayerNorm/bias exclusions, clip_global_norm 1.0; None turns the clipping off; LAMB adds
    trust_ratio_for_excluded).
    Call `optimizer.build(model.trainable_variables)` eagerly before an XLA train step: it creates
    the float32 slots and checks every exclusion pattern matches some variable path.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}.")
    import optimization

    return getattr(optimization, OPTIMIZERS[name])(learning_rate, **kwargs)
