"""Gradient accumulation: k micro-batches summed in float32, averaged, then one update."""

import tensorflow as tf


class GradientAccumulator:
    """float32 sums of the gradients of `variables`, and how many micro-batches they hold.

    The sums are plain variables, so they are checkpointable state like the optimizer slots;
    they are zero at every update boundary, which is where checkpoints are taken.
    """

    def __init__(self, variables):
        self.sums = [
            tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"accumulator_{i}")
            for i, v in enumerate(variables)
        ]
        self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name="accumulated_micro_batches")

    def add(self, gradients):
        for total, g in zip(self.sums, gradients):
            total.assign_add(tf.cast(tf.convert_to_tensor(g), tf.float32))
        self.count.assign_add(1)

    def mean(self):
        """The average micro-batch gradient (float32 tensors)."""
        n = tf.cast(tf.maximum(self.count, 1), tf.float32)
        return [total / n for total in self.sums]

    def reset(self):
        for total in self.sums:
            total.assign(tf.zeros_like(total))
        self.count.assign(0)

    @property
    def variables(self):
        return [*self.sums, self.count]
