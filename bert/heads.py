"""Heads that sit on the encoder: MLM and NSP for pretraining, span and classifier for fine-tuning."""

import keras
from keras import ops

from bert.activations import get_activation
from bert.attention import dense
from bert.config import as_bert_config
from bert.layer_norm import LayerNorm

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab.


def gather_positions(sequence, positions):
    """sequence [B, S, D], positions int [B, P] -> [B, P, D]."""
    positions = ops.cast(positions, "int32")
    return ops.take_along_axis(sequence, positions[:, :, None], axis=1)


@keras.saving.register_keras_serializable(package="bert")
class MaskedLMHead(keras.layers.Layer):
    """Dense + activation + LayerNorm, then logits against the word embeddings.

    Only the P masked positions are transformed, which saves the [B, S, V] logits that a full
    projection would materialise. Logits are float32 for a stable softmax cross-entropy.

    word_embeddings: the [V, D] table the logits score against. BertPretrainer passes the
    encoder's (tied, as BERT trains them). A variable is state, not configuration, so
    get_config() leaves it out and a head rebuilt from its config creates a table of its own.
    """

    def __init__(self, config, word_embeddings=None, **kwargs):
        # autocast=False: the float32 output_bias is added to float32 logits; the table is cast
        # to the compute dtype explicitly below. The bias says it too (see LayerNorm).
        super().__init__(autocast=False, **kwargs)
        self.config = config = as_bert_config(config)
        if word_embeddings is None:
            init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
            word_embeddings = self.add_weight(
                name="word_embeddings", initializer=init, shape=(config.vocab_size, config.hidden_size)
            )
        self.word_embeddings = word_embeddings  # [V, D]
        self.transform = dense(
            config.hidden_size,
            config,
            "transform_dense",
            self.dtype_policy,
            activation=get_activation(config.hidden_act),
        )
        self.layer_norm = LayerNorm(
            config.layer_norm_eps, name="transform_LayerNorm", dtype=self.dtype_policy
        )
        self.output_bias = self.add_weight(
            name="output_bias",
            shape=(config.vocab_size,),
            initializer="zeros",
            dtype="float32",
            autocast=False,
        )

    def build(self, input_shape):
        d = self.config.hidden_size
        self.transform.build((None, None, d))
        self.layer_norm.build((None, None, d))

    def call(self, sequence_output, masked_lm_positions):
        x = gather_positions(sequence_output, masked_lm_positions)  # [B, P, D]
        x = self.layer_norm(self.transform(x))  # [B, P, D]
        table = ops.cast(self.word_embeddings, self.compute_dtype)  # [V, D]
        logits = ops.matmul(x, ops.transpose(table))  # [B, P, V]
        return ops.cast(logits, "float32") + self.output_bias

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert")
class NextSentenceHead(keras.layers.Layer):
    """pooled_output [B, D] -> float32 logits [B, 2]; weights stored [2, D] as in Google's."""

    def __init__(self, config, **kwargs):
        super().__init__(autocast=False, **kwargs)  # see MaskedLMHead
        self.config = config = as_bert_config(config)
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.output_weights = self.add_weight(
            name="output_weights", shape=(2, config.hidden_size), initializer=init
        )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(2,), initializer="zeros", dtype="float32", autocast=False
        )

    def call(self, pooled_output):
        w = ops.cast(self.output_weights, self.compute_dtype)
        logits = ops.matmul(pooled_output, ops.transpose(w))  # [B, 2]
        return ops.cast(logits, "float32") + self.output_bias

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert")
class SpanHead(keras.layers.Layer):
    """SQuAD head: sequence_output [B, S, D] -> float32 start_logits, end_logits [B, S]."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = as_bert_config(config)
        self.dense = dense(2, self.config, "dense", self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, None, self.config.hidden_size))

    def call(self, sequence_output):
        logits = ops.cast(self.dense(sequence_output), "float32")  # [B, S, 2]
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert")
class ClassifierHead(keras.layers.Layer):
    """GLUE head: pooled_output [B, D] -> dropout -> float32 logits [B, num_classes]."""

    def __init__(self, config, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_bert_config(config)
        self.num_classes = num_classes
        self.dropout = keras.layers.Dropout(
            config.hidden_dropout_prob, name="dropout", dtype=self.dtype_policy
        )
        self.dense = dense(num_classes, config, "dense", self.dtype_policy)

    def build(self, input_shape):
        self.dense.build((None, self.config.hidden_size))

    def call(self, pooled_output, training=False):
        return ops.cast(self.dense(self.dropout(pooled_output, training=training)), "float32")

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_classes": self.num_classes}
