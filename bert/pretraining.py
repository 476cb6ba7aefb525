"""BERT with its pretraining heads, and the pretraining loss."""

import keras
from keras import ops

from bert.config import BertConfig
from bert.encoder import BertEncoder
from bert.heads import MaskedLMHead, NextSentenceHead

# Shapes: B batch, S sequence, P max predictions per sequence, V vocab.


class BertPretrainer(keras.Model):
    """Encoder + MLM + NSP heads.

    Inputs: input_ids, input_mask, segment_ids [B, S] and masked_lm_positions [B, P] (int).
    Outputs: mlm_logits [B, P, V] and nsp_logits [B, 2], both float32.
    """

    def __init__(self, config: BertConfig, dtype="float32", encoder: BertEncoder | None = None,
                 **kwargs):
        kwargs.setdefault("name", "bert_pretrainer")
        super().__init__(dtype=dtype, **kwargs)
        self.config = config
        self.encoder = encoder if encoder is not None else BertEncoder(config, dtype=dtype)
        policy = self.dtype_policy
        self.masked_lm = MaskedLMHead(config, self.encoder.embeddings.word_embeddings,
                                      name="cls_predictions", dtype=policy)
        self.next_sentence = NextSentenceHead(config, name="cls_seq_relationship", dtype=policy)
        self.masked_lm.build(None)
        self.built = True

    def call(self, inputs, training=False):
        outputs = self.encoder(inputs, training=training)
        return {
            "mlm_logits": self.masked_lm(outputs["sequence_output"], inputs["masked_lm_positions"]),
            "nsp_logits": self.next_sentence(outputs["pooled_output"]),
        }

    def get_config(self):
        return {"config": self.config.to_dict(), "dtype": self.dtype_policy.name, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(BertConfig.from_dict(config["config"]), dtype=config["dtype"], name=config["name"])


def pretraining_losses(outputs, features):
    """Google's pretraining loss: weighted mean MLM cross-entropy + mean NSP cross-entropy.

    features holds masked_lm_ids [B, P], masked_lm_weights [B, P] float and
    next_sentence_labels [B, 1]. Returns float32 scalars {loss, mlm_loss, nsp_loss} and the
    counts the metrics need.
    """
    mlm_logits = outputs["mlm_logits"]                                         # [B, P, V]
    labels = ops.cast(features["masked_lm_ids"], "int32")                      # [B, P]
    weights = ops.cast(features["masked_lm_weights"], "float32")               # [B, P]
    log_probs = ops.log_softmax(mlm_logits, axis=-1)
    label_log_probs = ops.squeeze(
        ops.take_along_axis(log_probs, labels[:, :, None], axis=-1), -1)       # [B, P]
    mlm_loss = -ops.sum(label_log_probs * weights) / (ops.sum(weights) + 1e-5)

    nsp_labels = ops.cast(ops.reshape(features["next_sentence_labels"], (-1,)), "int32")  # [B]
    nsp_log_probs = ops.log_softmax(outputs["nsp_logits"], axis=-1)            # [B, 2]
    nsp_loss = -ops.mean(ops.squeeze(
        ops.take_along_axis(nsp_log_probs, nsp_labels[:, None], axis=-1), -1))
    return {"loss": mlm_loss + nsp_loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss}
