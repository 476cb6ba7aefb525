"""Fine-tuning objectives: SQuAD spans, GLUE classification and STS-B regression.

Each loss term is a sum over the micro-batch's examples divided by the example count of the
whole update (training/objective.py), so a fine-tuning update is the update of one big batch
however it is split. The losses are Google's: run_squad averages the start and end
cross-entropies, run_classifier takes the cross-entropy of the label; the regression head (no
Google original) takes the squared error of the score, as Hugging Face's STS-B head does.
"""

from __future__ import annotations

import tensorflow as tf

from training.objective import Objective

# Shapes: B batch, S sequence (as in bert/); classes are written out.


def _examples(features, key):
    return {"examples": tf.cast(tf.size(features[key]), tf.float32)}


def _cross_entropy_sum(logits, labels):
    """logits float32 [B, classes], labels int [B] -> summed cross-entropy (scalar)."""
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _hits(logits, labels):
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
    return tf.reduce_sum(
        tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    )


class SpanObjective(Objective):
    """BertSpanModel outputs {start_logits, end_logits [B, S]} against start_positions and
    end_positions [B] (0, the [CLS], for no answer in the window)."""

    terms = {"span_loss": "examples"}
    sums = ("span_loss", "start_correct", "end_correct")

    def denominators(self, features):
        return _examples(features, "start_positions")

    def __call__(self, outputs, features):
        start = _cross_entropy_sum(outputs["start_logits"], features["start_positions"])
        end = _cross_entropy_sum(outputs["end_logits"], features["end_positions"])
        return {
            "span_loss": (start + end) / 2.0,
            "start_correct": _hits(outputs["start_logits"], features["start_positions"]),
            "end_correct": _hits(outputs["end_logits"], features["end_positions"]),
        }

    def metrics(self, totals):
        n = totals["examples"]
        return {
            "start_accuracy": totals["start_correct"] / n if n else 0.0,
            "end_accuracy": totals["end_correct"] / n if n else 0.0,
        }


class ClassificationObjective(Objective):
    """BertClassifier outputs {logits [B, classes]} against label_ids int [B]."""

    terms = {"classification_loss": "examples"}
    sums = ("classification_loss", "correct")

    def denominators(self, features):
        return _examples(features, "label_ids")

    def __call__(self, outputs, features):
        return {
            "classification_loss": _cross_entropy_sum(outputs["logits"], features["label_ids"]),
            "correct": _hits(outputs["logits"], features["label_ids"]),
        }

    def metrics(self, totals):
        return {"accuracy": totals["correct"] / totals["examples"] if totals["examples"] else 0.0}


class RegressionObjective(Objective):
    """BertClassifier(num_classes=1) outputs {logits [B, 1]} against float label_ids [B]."""

    terms = {"regression_loss": "examples"}
    sums = ("regression_loss",)

    def denominators(self, features):
        return _examples(features, "label_ids")

    def __call__(self, outputs, features):
        scores = tf.reshape(outputs["logits"], [-1])  # [B]
        labels = tf.cast(tf.reshape(features["label_ids"], [-1]), tf.float32)
        return {"regression_loss": tf.reduce_sum(tf.square(scores - labels))}
