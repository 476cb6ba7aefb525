"""Multi-head self-attention with Google's weight layout ([in, out] kernels per projection)."""

import math

import keras
from keras import ops

from bert.config import BertConfig, as_bert_config

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.

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
    [B, 1, 1, S] (attention_bias_from_mask), or [B, 1, S, S] for packed rows
    (attention_bias_from_sequences) -> context [B, S, D].

    The weights are Google's three projections (query, key, value: kernels [D, D], biases [D]),
    which checkpoints read and write by name, and the call uses them as three products. One
    [D, 3D] product of concatenated kernels was measured and dropped (bench/README.md): no
    faster on CPU, and the concatenation is a copy that the backward pass keeps alive in every
    layer (BERT-base fp32: 12 x 6.75 MiB at XLA's peak), while three products read the weights'
    own buffers; XLA's DotMerger pass merges products that share an input where that pays.
    """

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

    def _queries_keys_values(self, x):
        """x [B, S, D] -> queries, keys, values, each [B, N, S, H]."""
        b, s = ops.shape(x)[0], ops.shape(x)[1]
        n, h = self.config.num_attention_heads, self.config.head_size
        return tuple(
            ops.transpose(ops.reshape(p(x), (b, s, n, h)), (0, 2, 1, 3))
            for p in (self.query, self.key, self.value)
        )

    def call(self, x, attention_bias, training=False):
        q, k, v = self._queries_keys_values(x)  # [B, N, S, H] each
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


def attention_bias_from_sequences(sequence_ids):
    """sequence_ids [B, S] (sequences packed into a row numbered from 1, padding 0) -> additive
    float32 bias [B, 1, S, S]: each token attends to the real tokens of its own sequence only (a
    padding query to none: its output is never read)."""
    same = ops.equal(sequence_ids[:, :, None], sequence_ids[:, None, :]) & (sequence_ids[:, None, :] > 0)
    return (1.0 - ops.cast(same, "float32"))[:, None, :, :] * _MASK_VALUE
