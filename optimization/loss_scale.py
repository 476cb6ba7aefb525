"""Dynamic loss scaling for float16 training.

float16 gradients underflow below 6e-8, so the loss is multiplied by a large scale before the
backward pass and the gradients divided by it after. The scale starts at 2^15, halves whenever
a step produces a non-finite gradient (that step is skipped, weights and slots untouched), and
doubles after `growth_interval` consecutive clean steps. bfloat16 has float32's exponent range
and needs none of this: use `enabled=False`, which makes every method an identity.
"""

import tensorflow as tf


class DynamicLossScale:
    def __init__(self, enabled=True, initial_scale=2.0**15, growth_interval=2000, factor=2.0):
        self.enabled = enabled
        self.growth_interval = growth_interval
        self.factor = factor
        self.scale = tf.Variable(
            initial_scale if enabled else 1.0, dtype=tf.float32, trainable=False, name="loss_scale"
        )
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="good_steps")
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")

    def scale_loss(self, loss):
        return loss * self.scale if self.enabled else loss

    def unscale(self, gradients):
        if not self.enabled:
            return list(gradients)
        inverse = 1.0 / self.scale
        return [g * inverse for g in gradients]

    def all_finite(self, gradients):
        """True unless loss scaling is on and some gradient holds an inf or a NaN."""
        if not self.enabled:
            return tf.constant(True)
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients])

    def update(self, finite):
        """Moves the scale after a step whose gradients were `finite` (a bool tensor)."""
        if not self.enabled:
            return
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.growth_interval)
        self.scale.assign(
            tf.where(
                finite,
                tf.where(grow, self.scale * self.factor, self.scale),
                tf.maximum(self.scale / self.factor, 1.0),
            )
        )
        self.good_steps.assign(
            tf.where(
                finite,
                tf.where(grow, tf.constant(0, tf.int64), self.good_steps + 1),
                tf.constant(0, tf.int64),
            )
        )
        self.skipped_steps.assign_add(tf.where(finite, tf.constant(0, tf.int64), tf.constant(1, tf.int64)))

    @property
    def variables(self):
        return [self.scale, self.good_steps, self.skipped_steps]
