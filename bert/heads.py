"""Heads that sit on the encoder: MLM and NSP for pretraining, span and classifier for fine-tuning."""

import keras
from keras import ops

from bert.activations import get_activation
from bert.attention import dense
from bert.config import as_bert_config
from bert.layer_norm import LayerNorm

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.


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


class _OutputProjection(keras.layers.Layer):
    """x [..., D] -> float32 logits [..., outputs] through output_weights [outputs, D] and
    output_bias [outputs]:
    Google's layout and names for its task heads (NSP, SQuAD, run_classifier), so checkpoints
    hold them as Google's and Hugging Face's tools expect ([out, in], like a torch Linear)."""

    def __init__(self, config, num_outputs: int, **kwargs):
        # autocast=False: the float32 bias is added to float32 logits; the weights are cast to
        # the compute dtype explicitly in call (see MaskedLMHead).
        super().__init__(autocast=False, **kwargs)
        self.config = config = as_bert_config(config)
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.output_weights = self.add_weight(
            name="output_weights", shape=(num_outputs, config.hidden_size), initializer=init
        )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(num_outputs,), initializer="zeros", dtype="float32", autocast=False
        )

    def project(self, x):
        w = ops.cast(self.output_weights, self.compute_dtype)  # [outputs, D]
        return ops.cast(ops.matmul(x, ops.transpose(w)), "float32") + self.output_bias


@keras.saving.register_keras_serializable(package="bert")
class NextSentenceHead(_OutputProjection):
    """pooled_output [B, D] -> float32 logits [B, 2]; weights stored [2, D] as in Google's."""

    def __init__(self, config, **kwargs):
        super().__init__(config, 2, **kwargs)

    def call(self, pooled_output):
        return self.project(pooled_output)  # [B, 2]

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert")
class SpanHead(_OutputProjection):
    """SQuAD head: sequence_output [B, S, D] -> float32 start_logits, end_logits [B, S].

    Stored as Google's run_squad stores it: cls/squad/output_weights [2, D] and output_bias [2]
    (Hugging Face: qa_outputs.weight / .bias)."""

    def __init__(self, config, **kwargs):
        super().__init__(config, 2, **kwargs)

    def call(self, sequence_output):
        logits = self.project(sequence_output)  # [B, S, 2]
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert")
class ClassifierHead(_OutputProjection):
    """GLUE head: pooled_output [B, D] -> dropout -> float32 logits [B, num_classes] (one
    column, a score, for a regression task such as STS-B).

    Stored as Google's run_classifier stores it: output_weights [num_classes, D] and output_bias
    (Hugging Face: classifier.weight / .bias)."""

    def __init__(self, config, num_classes: int, **kwargs):
        super().__init__(config, num_classes, **kwargs)
        self.num_classes = num_classes
        self.dropout = keras.layers.Dropout(
            self.config.hidden_dropout_prob, name="dropout", dtype=self.dtype_policy
        )

    def call(self, pooled_output, training=False):
        return self.project(self.dropout(pooled_output, training=training))

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(), "num_classes": self.num_classes}
