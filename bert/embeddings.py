"""BERT input embeddings: word + position + token type, then LayerNorm and dropout."""

import keras
from keras import ops

from bert.config import as_bert_config
from bert.layer_norm import LayerNorm

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


@keras.saving.register_keras_serializable(package="bert")
class BertEmbeddings(keras.layers.Layer):
    """Maps (input_ids, segment_ids) [B, S] to embeddings [B, S, D]; positions 0..S-1, or
    position_ids [B, S] where sequences are packed into rows (each counting from 0).

    The word embedding table [V, D] is also the MLM output projection (weights tied), so it is
    exposed as `word_embeddings`.
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_bert_config(config)
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        # Tables are created here, not in build(): their shapes come from the config alone and
        # checkpoint loaders need them before the first call.
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(config.vocab_size, config.hidden_size), initializer=init
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(config.max_position_embeddings, config.hidden_size),
            initializer=init,
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(config.type_vocab_size, config.hidden_size), initializer=init
        )
        self.layer_norm = LayerNorm(config.layer_norm_eps, name="LayerNorm", dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(
            config.hidden_dropout_prob, name="dropout", dtype=self.dtype_policy
        )

    def build(self, input_shape):
        self.layer_norm.build((None, None, self.config.hidden_size))

    def call(self, input_ids, segment_ids, position_ids=None, training=False):
        x = ops.take(self.word_embeddings, input_ids, axis=0)  # [B, S, D]
        x = x + ops.take(self.token_type_embeddings, segment_ids, axis=0)  # [B, S, D]
        if position_ids is None:
            x = x + self.position_embeddings[: ops.shape(input_ids)[1]][None]  # [1, S, D]
        else:
            x = x + ops.take(self.position_embeddings, position_ids, axis=0)  # [B, S, D]
        x = self.layer_norm(x)
        x = ops.cast(x, self.compute_dtype)
        return self.dropout(x, training=training)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}
