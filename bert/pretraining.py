"""BERT with its pretraining heads, and the pretraining loss."""

import keras
from keras import ops

from bert.encoder import BertEncoder, EncoderTaskModel
from bert.heads import MaskedLMHead, NextSentenceHead

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


@keras.saving.register_keras_serializable(package="bert")
class BertPretrainer(EncoderTaskModel):
    """Encoder + MLM + NSP heads; the MLM head scores against the encoder's word embeddings.

    Inputs: input_ids, input_mask, segment_ids [B, S] and masked_lm_positions [B, P] (int);
    packed rows (training/packing.py) add position_ids, sequence_ids [B, S] and cls_positions
    [B, M] (BertEncoder).
    Outputs: mlm_logits [B, P, V] and nsp_logits [B, 2] ([B, M, 2] packed), both float32.
    """

    def __init__(self, config, dtype="float32", encoder: BertEncoder | None = None, **kwargs):
        kwargs.setdefault("name", "bert_pretrainer")
        super().__init__(config, dtype=dtype, encoder=encoder, **kwargs)
        config, policy = self.config, self.dtype_policy
        self.masked_lm = MaskedLMHead(
            config, self.encoder.embeddings.word_embeddings, name="cls_predictions", dtype=policy
        )
        self.next_sentence = NextSentenceHead(config, name="cls_seq_relationship", dtype=policy)
        self.masked_lm.build(None)
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(inputs, training=training)
        return {
            "mlm_logits": self.masked_lm(outputs["sequence_output"], inputs["masked_lm_positions"]),
            "nsp_logits": self.next_sentence(outputs["pooled_output"]),
        }


def pretraining_losses(outputs, features):
    """Google's pretraining loss: weighted mean MLM cross-entropy + mean NSP cross-entropy.

    features holds masked_lm_ids [B, P], masked_lm_weights [B, P] float and
    next_sentence_labels [B, 1] (packed rows: [B, M], with next_sentence_weights [B, M], 1 for
    each sequence of a row). Returns float32 scalars: loss, mlm_loss, nsp_loss (this batch's
    means) and the sums they are made of, mlm_loss_sum over masked_tokens (the weights' sum) and
    nsp_loss_sum over sequences, so a trainer can normalise by counts over many micro-batches and
    workers instead of averaging per-batch means.
    """
    mlm_logits = outputs["mlm_logits"]  # [B, P, V]
    labels = ops.cast(features["masked_lm_ids"], "int32")  # [B, P]
    weights = ops.cast(features["masked_lm_weights"], "float32")  # [B, P]
    log_probs = ops.log_softmax(mlm_logits, axis=-1)  # [B, P, V]
    label_log_probs = ops.squeeze(ops.take_along_axis(log_probs, labels[:, :, None], axis=-1), -1)  # [B, P]
    mlm_loss_sum = -ops.sum(label_log_probs * weights)
    masked_tokens = ops.sum(weights)
    mlm_loss = mlm_loss_sum / (masked_tokens + 1e-5)

    nsp_labels = ops.cast(
        ops.reshape(features["next_sentence_labels"], (-1,)), "int32"
    )  # [B] (packed [B x M])
    nsp_log_probs = ops.log_softmax(ops.reshape(outputs["nsp_logits"], (-1, 2)), axis=-1)  # [B, 2]
    label_nsp = ops.squeeze(ops.take_along_axis(nsp_log_probs, nsp_labels[:, None], axis=-1), -1)  # [B]
    if "next_sentence_weights" in features:
        nsp_weights = ops.cast(ops.reshape(features["next_sentence_weights"], (-1,)), "float32")
        nsp_loss_sum = -ops.sum(label_nsp * nsp_weights)
        sequences = ops.sum(nsp_weights)
    else:
        nsp_loss_sum = -ops.sum(label_nsp)
        sequences = ops.cast(ops.size(nsp_labels), "float32")
    nsp_loss = nsp_loss_sum / ops.maximum(sequences, 1.0)
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "nsp_loss": nsp_loss,
        "mlm_loss_sum": mlm_loss_sum,
        "masked_tokens": masked_tokens,
        "nsp_loss_sum": nsp_loss_sum,
        "sequences": sequences,
    }
