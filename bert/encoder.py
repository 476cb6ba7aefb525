"""The BERT encoder: embeddings, a stack of transformer layers, and the pooler."""

import keras
from keras import ops

from bert.attention import attention_bias_from_mask, attention_bias_from_sequences, dense
from bert.config import as_bert_config
from bert.embeddings import BertEmbeddings
from bert.transformer import TransformerLayer

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


@keras.saving.register_keras_serializable(package="bert")
class BertEncoder(keras.Model):
    """Inputs {input_ids, input_mask, segment_ids} int32 [B, S]. Sequences packed into rows
    (training/packing.py) add position_ids and sequence_ids [B, S] (each sequence's own positions,
    and which sequence of the row a token is: it attends within its sequence only) and
    cls_positions [B, M] (where each sequence's [CLS] is).

    Outputs a dict: sequence_output [B, S, D], pooled_output [B, D] (tanh dense over [CLS]; [B, M,
    D] over each packed sequence's) and
    encoder_outputs, the output [B, S, D] of every transformer layer, first to last
    (extract_features reads these).
    Outputs are in the compute dtype of `dtype` ("float32", "mixed_float16", "mixed_bfloat16").
    """

    def __init__(self, config, dtype="float32", **kwargs):
        kwargs.setdefault("name", "bert")
        super().__init__(dtype=dtype, **kwargs)
        self.config = config = as_bert_config(config)
        policy = self.dtype_policy
        self.embeddings = BertEmbeddings(config, name="embeddings", dtype=policy)
        self.transformer_layers = [
            TransformerLayer(config, name=f"layer_{i}", dtype=policy) for i in range(config.num_hidden_layers)
        ]
        self.pooler = dense(config.hidden_size, config, "pooler_dense", policy, activation="tanh")
        self.build_weights()

    def build_weights(self):
        """Creates every variable now, so checkpoints can be loaded before the first call."""
        d = self.config.hidden_size
        self.embeddings.build((None, None))
        for layer in self.transformer_layers:
            layer.build((None, None, d))
        self.pooler.build((None, d))
        self.built = True

    def call(self, inputs, training=False):
        input_ids = inputs["input_ids"]
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = ops.zeros_like(input_ids)
        input_mask = inputs.get("input_mask")
        if input_mask is None:
            input_mask = ops.ones_like(input_ids)
        sequence_ids = inputs.get("sequence_ids")
        if sequence_ids is None:
            attention_bias = attention_bias_from_mask(input_mask)  # [B, 1, 1, S]
        else:
            attention_bias = attention_bias_from_sequences(sequence_ids)  # [B, 1, S, S]
        x = self.embeddings(
            input_ids, segment_ids, inputs.get("position_ids"), training=training
        )  # [B, S, D]
        layer_outputs = []
        for layer in self.transformer_layers:
            x = layer(x, attention_bias, training=training)  # [B, S, D]
            layer_outputs.append(x)
        cls_positions = inputs.get("cls_positions")
        if cls_positions is None:
            pooled = self.pooler(x[:, 0, :])  # [B, D]
        else:
            positions = ops.cast(cls_positions, "int32")[:, :, None]  # [B, M, 1]
            pooled = self.pooler(ops.take_along_axis(x, positions, axis=1))  # [B, M, D]
        return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": layer_outputs}

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


class EncoderTaskModel(keras.Model):
    """The base of a BERT with task heads (BertPretrainer, BertSpanModel, BertClassifier): the
    config and an encoder (built here unless given), saved in get_config as the encoder's own
    serialized config, as keras-hub stores a task's backbone."""

    def __init__(self, config, dtype="float32", encoder: BertEncoder | None = None, **kwargs):
        super().__init__(dtype=dtype, **kwargs)
        self.config = as_bert_config(config)
        self.encoder = encoder if encoder is not None else BertEncoder(self.config, dtype=dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
