"""One post-LayerNorm transformer layer, named like Google's checkpoint scopes."""

import keras

from bert.activations import get_activation
from bert.attention import SelfAttention, dense
from bert.config import as_bert_config
from bert.layer_norm import LayerNorm

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


@keras.saving.register_keras_serializable(package="bert")
class TransformerLayer(keras.layers.Layer):
    """x [B, S, D] and attention_bias [B, 1, 1, S] -> [B, S, D]: attention, residual + LN,
    feed-forward, residual + LN."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_bert_config(config)
        policy = self.dtype_policy
        self.attention = SelfAttention(config, name="attention_self", dtype=policy)
        self.attention_output = dense(config.hidden_size, config, "attention_output_dense", policy)
        self.attention_layer_norm = LayerNorm(
            config.layer_norm_eps, name="attention_output_LayerNorm", dtype=policy
        )
        self.intermediate = dense(
            config.intermediate_size,
            config,
            "intermediate_dense",
            policy,
            activation=get_activation(config.hidden_act),
        )
        self.output_dense = dense(config.hidden_size, config, "output_dense", policy)
        self.output_layer_norm = LayerNorm(config.layer_norm_eps, name="output_LayerNorm", dtype=policy)
        self.dropout = keras.layers.Dropout(config.hidden_dropout_prob, name="dropout", dtype=policy)

    def build(self, input_shape):
        d, i = self.config.hidden_size, self.config.intermediate_size
        self.attention.build((None, None, d))
        self.attention_output.build((None, None, d))
        self.attention_layer_norm.build((None, None, d))
        self.intermediate.build((None, None, d))
        self.output_dense.build((None, None, i))
        self.output_layer_norm.build((None, None, d))

    def call(self, x, attention_bias, training=False):
        context = self.attention(x, attention_bias, training=training)  # [B, S, D]
        attended = self.dropout(self.attention_output(context), training=training)
        x = self.attention_layer_norm(x + attended)  # [B, S, D]
        hidden = self.intermediate(x)  # [B, S, I]
        out = self.dropout(self.output_dense(hidden), training=training)  # [B, S, D]
        return self.output_layer_norm(x + out)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}
