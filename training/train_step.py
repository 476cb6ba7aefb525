"""The project's one pretraining step: XLA-compiled micro-batch gradients, float32 accumulation,
a Horovod average across workers, then one optimizer update (skipped on fp16 overflow).

One update consumes exactly `accumulation_steps` micro-batches; nothing is applied before the
first k micro-batches are in (NVIDIA's TF2 loop applied an extra update at the start of each
host loop). The learning-rate schedule reads `optimizer.iterations`, which only advances when an
update is applied, so skipped fp16 steps do not advance it.
"""

from __future__ import annotations

import tensorflow as tf

from bert.pretraining import pretraining_losses
from optimization.accumulation import GradientAccumulator
from optimization.loss_scale import DynamicLossScale
from training.distributed import Distributed

# Shapes: B batch, P masked positions, V vocab.


def masked_lm_counts(outputs, features):
    """Correct and total weighted masked-LM predictions, and NSP correct/total (float32 scalars)."""
    predictions = tf.argmax(outputs["mlm_logits"], axis=-1, output_type=tf.int32)        # [B, P]
    weights = tf.cast(features["masked_lm_weights"], tf.float32)                           # [B, P]
    hits = tf.cast(tf.equal(predictions, tf.cast(features["masked_lm_ids"], tf.int32)), tf.float32)
    nsp_predictions = tf.argmax(outputs["nsp_logits"], axis=-1, output_type=tf.int32)     # [B]
    nsp_labels = tf.cast(tf.reshape(features["next_sentence_labels"], [-1]), tf.int32)
    return {
        "mlm_correct": tf.reduce_sum(hits * weights),
        "mlm_total": tf.reduce_sum(weights),
        "nsp_correct": tf.reduce_sum(tf.cast(tf.equal(nsp_predictions, nsp_labels), tf.float32)),
        "nsp_total": tf.cast(tf.size(nsp_labels), tf.float32),
    }


def _sum_metrics(function, batches, limit=None):
    """Runs `function` on up to `limit` batches; returns the float sums of its outputs and the count.

    Sums stay device tensors until the end: a float() per micro-batch would stall the GPU.
    """
    sums = {}
    count = 0
    for features in batches:
        for name, value in function(features).items():
            sums[name] = sums[name] + value if name in sums else value
        count += 1
        if count == limit:
            break
    return {name: float(value) for name, value in sums.items()}, count


class PretrainingStep:
    """Owns the compiled functions and the state that lives between micro-batches.

    model: a BertPretrainer (its dtype policy decides precision; mixed_float16 turns on dynamic
    loss scaling). optimizer: any Keras optimizer from optimization.create_optimizer.
    """

    def __init__(self, model, optimizer, *, accumulation_steps: int = 1,
                 distributed: Distributed | None = None, jit_compile: bool = True,
                 loss_scale: DynamicLossScale | None = None):
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1 (got {accumulation_steps}).")
        self.model = model
        self.optimizer = optimizer
        self.accumulation_steps = accumulation_steps
        self.distributed = distributed or Distributed(use_horovod=False)
        self.variables = list(model.trainable_variables)
        optimizer.build(self.variables)
        self.accumulator = GradientAccumulator(self.variables)
        if loss_scale is None:
            loss_scale = DynamicLossScale(enabled=model.dtype_policy.name == "mixed_float16")
        self.loss_scale = loss_scale
        self._micro_step = tf.function(self._compute_and_accumulate, jit_compile=jit_compile)
        self._update = tf.function(self._apply_update, jit_compile=jit_compile)
        # Horovod's allreduce is not an XLA op (its XLA kernels do not build against TF 2.21), so
        # the cross-worker average runs in its own, uncompiled graph between the two XLA parts.
        self._average = tf.function(self.distributed.average)
        self._evaluate = tf.function(self._evaluate_batch, jit_compile=jit_compile)
        # Workers start from rank 0's weights and optimizer state.
        self.distributed.broadcast_variables([*model.weights, *optimizer.variables])

    def _compute_and_accumulate(self, features):
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            losses = pretraining_losses(outputs, features)
            scaled = self.loss_scale.scale_loss(losses["loss"])
        self.accumulator.add(tape.gradient(scaled, self.variables))
        return {**losses, **masked_lm_counts(outputs, features)}

    def _apply_update(self, gradients):
        gradients = self.loss_scale.unscale(gradients)
        finite = self.loss_scale.all_finite(gradients)

        def apply():
            self.optimizer.apply(gradients, self.variables)
            return tf.constant(True)

        applied = tf.cond(finite, apply, lambda: tf.constant(False))
        self.loss_scale.update(finite)
        self.accumulator.reset()
        return applied

    def __call__(self, micro_batches) -> dict:
        """Runs one update over `accumulation_steps` micro-batches (an iterable of feature dicts).

        Returns float metrics averaged over the micro-batches (loss, mlm_loss, nsp_loss,
        mlm_accuracy, nsp_accuracy), `applied` (False for a skipped fp16 step) and `loss_scale`.
        """
        sums, count = _sum_metrics(self._micro_step, micro_batches, limit=self.accumulation_steps)
        if count != self.accumulation_steps:
            raise ValueError(f"the input ran out after {count} of {self.accumulation_steps} "
                             "micro-batches of an update.")
        gradients = self.accumulator.mean()
        if self.distributed.size > 1:
            gradients = self._average(gradients)
        applied = bool(self._update(gradients))
        return {
            "loss": sums["loss"] / count,
            "mlm_loss": sums["mlm_loss"] / count,
            "nsp_loss": sums["nsp_loss"] / count,
            "mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_total"], 1.0),
            "nsp_accuracy": sums["nsp_correct"] / max(sums["nsp_total"], 1.0),
            "applied": applied,
            "loss_scale": float(self.loss_scale.scale.numpy()),
        }

    def _evaluate_batch(self, features):
        outputs = self.model(features, training=False)
        losses = pretraining_losses(outputs, features)
        return {**losses, **masked_lm_counts(outputs, features)}

    def evaluate(self, batches) -> dict:
        """Masked-LM and NSP accuracy and mean losses over an iterable of feature dicts."""
        sums, count = _sum_metrics(self._evaluate, batches)
        if count == 0:
            raise ValueError("evaluation received no batches.")
        return {
            "loss": sums["loss"] / count,
            "mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_total"], 1.0),
            "nsp_accuracy": sums["nsp_correct"] / max(sums["nsp_total"], 1.0),
            "batches": count,
        }

    @property
    def state_variables(self):
        """Everything besides the model weights that an exact resume needs."""
        return [*self.optimizer.variables, *self.accumulator.variables, *self.loss_scale.variables]
