"""Learning-rate schedules: linear warmup, then polynomial decay counted from step 0 (BERT's) or
from the end of warmup (Hugging Face's)."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Google's / NVIDIA's BERT schedule, evaluated at `step` = optimizer.iterations.

    With P = peak_learning_rate, W = warmup_steps, T = total_steps, E = end_learning_rate:

        lr(step) = P * step / W                                    for step < W
        lr(step) = (P - E) * (1 - min(step, T) / T) ** power + E   for step >= W

    This is Google's `polynomial_decay(init_lr, global_step, decay_steps=num_train_steps)`
    overridden by the warmup while global_step < num_warmup_steps: the decay is counted from
    step 0, not from the end of warmup, so at step W it drops from about P to
    P * (1 - W / T) ** power. Steps are 0-based applied-update counts: the first update uses
    lr(0) = 0 when W > 0, update n uses lr(n - 1), and lr(step) = E for step >= T.
    (NVIDIA's Adam pretraining rescales P by 1 / (1 - W / T) to remove the drop at W; for LAMB
    that rescaling is 1, so LAMB matches both.) Power 0.5 for LAMB, 1.0 for Adam.

    With decay_from_warmup=True the decay is counted from the end of warmup instead, as Hugging
    Face's get_linear_schedule_with_warmup (power 1) and get_polynomial_decay_schedule_with_warmup
    do: lr(step) = (P - E) * (1 - (min(step, T) - W) / (T - W)) ** power + E for step >= W, so the
    rate reaches P at step W. Over a short fine-tuning the two differ in the total: with
    W = 0.1 T and power 1, Google's linear rates add up to 0.91 of Hugging Face's (0.455 P T against 0.5 P T).
    """

    def __init__(
        self,
        peak_learning_rate: float,
        warmup_steps: int,
        total_steps: int,
        power: float,
        end_learning_rate: float = 0.0,
        decay_from_warmup: bool = False,
    ):
        if not peak_learning_rate > 0:
            raise ValueError(f"peak_learning_rate must be > 0 (got {peak_learning_rate}).")
        if int(total_steps) != total_steps or total_steps < 1:
            raise ValueError(f"total_steps must be an integer >= 1 (got {total_steps}).")
        if int(warmup_steps) != warmup_steps or not 0 <= warmup_steps <= total_steps:
            raise ValueError(
                f"warmup_steps must be an integer in [0, total_steps={total_steps}] (got {warmup_steps})."
            )
        if not power > 0:
            raise ValueError(f"power must be > 0 (got {power}).")
        if not 0 <= end_learning_rate <= peak_learning_rate:
            raise ValueError(
                f"end_learning_rate must be in [0, peak_learning_rate] (got {end_learning_rate})."
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.power = float(power)
        self.end_learning_rate = float(end_learning_rate)
        self.decay_from_warmup = bool(decay_from_warmup)

    def __call__(self, step):
        step = tf.cast(tf.convert_to_tensor(step), tf.int64)
        step_float = tf.cast(step, tf.float32)
        # 1 - min(step, T) / T, as an integer difference first: XLA rewrites x / T as x * (1 / T),
        # so 1 - T / T came out as 2e-8 on CPU and, with power 0.5, the rate at and after the
        # last step was 1.5e-4 * peak instead of 0.
        steps_left = tf.cast(self.total_steps - tf.minimum(step, self.total_steps), tf.float32)
        # Decay from the end of warmup: over T - W steps (W = T warms up to the end, never decays).
        decay_steps = (
            max(self.total_steps - self.warmup_steps, 1) if self.decay_from_warmup else self.total_steps
        )
        left = steps_left / float(decay_steps)
        decayed = (self.peak_learning_rate - self.end_learning_rate) * tf.pow(
            left, self.power
        ) + self.end_learning_rate
        if self.warmup_steps == 0:
            return decayed
        warmup = self.peak_learning_rate * (step_float / float(self.warmup_steps))  # Google's order
        return tf.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "power": self.power,
            "end_learning_rate": self.end_learning_rate,
            "decay_from_warmup": self.decay_from_warmup,
        }


def scaled_learning_rate(per_worker_lr: float, num_workers: int) -> float:
    """The peak learning rate for `num_workers` data-parallel workers: per_worker_lr * num_workers.

    The launchers (NVIDIA's habit, kept for users) take the learning rate per GPU; NVIDIA's
    run_pretraining.py multiplies it by hvd.size(). Each worker adds its own batch to the global
    batch, so the peak grows linearly with the global batch (the linear scaling rule). Printing
    this product as the effective learning rate keeps the rescaling visible, not magic.
    """
    if int(num_workers) != num_workers or num_workers < 1:
        raise ValueError(f"num_workers must be an integer >= 1 (got {num_workers}).")
    if not per_worker_lr > 0:
        raise ValueError(f"per_worker_lr must be > 0 (got {per_worker_lr}).")
    return float(per_worker_lr) * int(num_workers)
