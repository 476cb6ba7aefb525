"""The pretraining objective: masked-LM cross-entropy per masked token + NSP cross-entropy per
sequence (Google's loss, bert.pretraining.pretraining_losses), normalised over the whole update."""

from __future__ import annotations

import tensorflow as tf

from bert.pretraining import pretraining_losses
from training.objective import Objective

# Shapes: B batch, P masked positions, V vocab.


class PretrainingObjective(Objective):
    """Sums for BertPretrainer outputs {mlm_logits [B, P, V], nsp_logits [B, 2]} and pretraining
    features (masked_lm_ids/weights [B, P], next_sentence_labels [B, 1]); packed rows: nsp_logits
    [B, M, 2], next_sentence_labels and next_sentence_weights [B, M]."""

    terms = {"mlm_loss": "masked_tokens", "nsp_loss": "sequences"}
    sums = ("mlm_loss", "nsp_loss", "mlm_correct", "nsp_correct")
    # Google's names in eval_results.json.
    result_names = {
        "mlm_accuracy": "masked_lm_accuracy",
        "mlm_loss": "masked_lm_loss",
        "nsp_accuracy": "next_sentence_accuracy",
        "nsp_loss": "next_sentence_loss",
    }

    def denominators(self, features):
        if "next_sentence_weights" in features:  # packed rows (training/packing.py)
            sequences = tf.reduce_sum(tf.cast(features["next_sentence_weights"], tf.float32))
        else:
            sequences = tf.cast(tf.size(features["next_sentence_labels"]), tf.float32)
        return {
            "masked_tokens": tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32)),
            "sequences": sequences,
        }

    def __call__(self, outputs, features):
        losses = pretraining_losses(outputs, features)
        predictions = tf.argmax(outputs["mlm_logits"], axis=-1, output_type=tf.int32)  # [B, P]
        weights = tf.cast(features["masked_lm_weights"], tf.float32)  # [B, P]
        hits = tf.cast(tf.equal(predictions, tf.cast(features["masked_lm_ids"], tf.int32)), tf.float32)
        nsp_logits = tf.reshape(outputs["nsp_logits"], [-1, 2])  # [B, 2] (packed: [B x M, 2])
        nsp_predictions = tf.argmax(nsp_logits, axis=-1, output_type=tf.int32)  # [B]
        nsp_labels = tf.cast(tf.reshape(features["next_sentence_labels"], [-1]), tf.int32)  # [B]
        nsp_hits = tf.cast(tf.equal(nsp_predictions, nsp_labels), tf.float32)
        if "next_sentence_weights" in features:
            nsp_hits *= tf.reshape(tf.cast(features["next_sentence_weights"], tf.float32), [-1])
        return {
            "mlm_loss": losses["mlm_loss_sum"],
            "nsp_loss": losses["nsp_loss_sum"],
            "mlm_correct": tf.reduce_sum(hits * weights),
            "nsp_correct": tf.reduce_sum(nsp_hits),
        }

    def metrics(self, totals):
        return {
            "mlm_accuracy": totals["mlm_correct"] / totals["masked_tokens"]
            if totals["masked_tokens"]
            else 0.0,
            "nsp_accuracy": totals["nsp_correct"] / totals["sequences"] if totals["sequences"] else 0.0,
        }
