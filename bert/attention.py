"""Multi-head self-attention with Google's weight layout ([in, out] kernels per projection)."""

import math

import keras
from keras import ops

from bert.config import BertConfig, as_bert_config

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab.

# Added to the scores of padded keys. Google's value; large enough that exp() underflows to 0
# in float32 softmax, small enough to stay finite in float16 before the float32 cast.
_MASK_VALUE = -10000.0


def dense(units, config: BertConfig, name, dtype, activation=None):
    """A Dense layer initialised as Google's (truncated normal, config.initializer_range)."""
    init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    return keras.layers.Dense(units, activation=activation, kernel_initializer=init, name=name, dtype=dtype)


@keras.saving.register_keras_serializable(package="bert")
class SelfAttention(keras.layers.Layer):
    """Scaled dot-product attention over all heads: x [B, S, D] and the additive attention_bias
    [B, 1, 1, S] (attention_bias_from_mask) -> context [B, S, D]."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = as_bert_config(config)
        d = self.config.hidden_size
        self.query = dense(d, self.config, "query", self.dtype_policy)
        self.key = dense(d, self.config, "key", self.dtype_policy)
        self.value = dense(d, self.config, "value", self.dtype_policy)
        self.dropout = keras.layers.Dropout(
            self.config.attention_probs_dropout_prob, name="dropout", dtype=self.dtype_policy
        )

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value):
            layer.build((None, None, self.config.hidden_size))

    def _split_heads(self, x):
        b, s = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (b, s, self.config.num_attention_heads, self.config.head_size))  # [B, S, N, H]
        return ops.transpose(x, (0, 2, 1, 3))  # [B, N, S, H]

    def call(self, x, attention_bias, training=False):
        q = self._split_heads(self.query(x))  # [B, N, S, H]
        k = self._split_heads(self.key(x))  # [B, N, S, H]
        v = self._split_heads(self.value(x))  # [B, N, S, H]
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, N, S, S]
        # Softmax in float32: bf16/fp16 scores lose the small differences that matter here.
        scores = ops.cast(scores, "float32") * (1.0 / math.sqrt(self.config.head_size))
        # Keras casts call arguments to the compute dtype; the bias is re-widened to float32.
        probs = ops.softmax(scores + ops.cast(attention_bias, "float32"), axis=-1)  # [B, N, S, S]
        probs = self.dropout(ops.cast(probs, self.compute_dtype), training=training)
        context = ops.matmul(probs, v)  # [B, N, S, H]
        context = ops.transpose(context, (0, 2, 1, 3))  # [B, S, N, H]
        b, s = ops.shape(context)[0], ops.shape(context)[1]
        return ops.reshape(context, (b, s, self.config.hidden_size))  # [B, S, D]

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


def attention_bias_from_mask(input_mask):
    """input_mask [B, S] (1 real, 0 pad) -> additive float32 bias [B, 1, 1, S]."""
    mask = ops.cast(input_mask, "float32")[:, None, None, :]
    return (1.0 - mask) * _MASK_VALUE
