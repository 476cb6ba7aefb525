"""BERT with a fine-tuning head: a span head for SQuAD, a classifier (or regression) head for GLUE.

Both take the encoder's inputs {input_ids, input_mask, segment_ids} [B, S] (other keys of the
features dict, such as labels, are ignored) and return a dict of float32 logits. Their heads are
saved under Google's names (bert.checkpoints.model_variables): cls/squad/output_weights|bias for
the span head, output_weights|bias for the classifier, as Google's run_squad / run_classifier.
"""

import keras

from bert.encoder import BertEncoder, EncoderTaskModel
from bert.heads import ClassifierHead, SpanHead

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


@keras.saving.register_keras_serializable(package="bert")
class BertSpanModel(EncoderTaskModel):
    """Encoder + span head. Outputs start_logits and end_logits, float32 [B, S]."""

    def __init__(self, config, dtype="float32", encoder: BertEncoder | None = None, **kwargs):
        kwargs.setdefault("name", "bert_span_model")
        super().__init__(config, dtype=dtype, encoder=encoder, **kwargs)
        # The span head reads sequence_output only: the pooler gets no gradient, and Google's
        # optimizer skips it (its None gradient). Frozen, it stays out of the optimizer and
        # keeps its pretrained values in the checkpoint.
        self.encoder.pooler.trainable = False
        self.span = SpanHead(self.config, name="cls_squad", dtype=self.dtype_policy)
        self.span.build(None)
        self.built = True

    def call(self, inputs, training=False):
        return self.span(self.encoder(inputs, training=training)["sequence_output"])


@keras.saving.register_keras_serializable(package="bert")
class BertClassifier(EncoderTaskModel):
    """Encoder + dropout + classifier over the pooled [CLS] output. Outputs logits, float32
    [B, num_classes]; with num_classes=1, a regression score per example (STS-B)."""

    def __init__(
        self, config, num_classes: int, dtype="float32", encoder: BertEncoder | None = None, **kwargs
    ):
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(config, dtype=dtype, encoder=encoder, **kwargs)
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1 (got {num_classes}).")
        self.num_classes = num_classes
        self.classifier = ClassifierHead(self.config, num_classes, name="classifier", dtype=self.dtype_policy)
        self.classifier.build(None)
        self.built = True

    def call(self, inputs, training=False):
        pooled = self.encoder(inputs, training=training)["pooled_output"]  # [B, D]
        return {"logits": self.classifier(pooled, training=training)}  # [B, num_classes]

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}
