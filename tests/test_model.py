"""Model shapes and dtypes under every precision, heads, and an XLA-compiled train step."""

import numpy as np
import pytest
import tensorflow as tf

from bert.checkpoints import model_variables
from bert.encoder import BertEncoder
from bert.heads import ClassifierHead, SpanHead
from bert.pretraining import BertPretrainer, pretraining_losses
from conftest import random_batch

PRECISIONS = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


@pytest.mark.parametrize("policy, compute", PRECISIONS.items())
def test_output_shapes_and_dtypes(tiny_config, policy, compute):
    model = BertPretrainer(tiny_config, dtype=policy)
    batch = random_batch(tiny_config, batch=3, seq=12, predictions=4)
    out = model(batch)
    assert out["mlm_logits"].shape == (3, 4, tiny_config.vocab_size)
    assert out["nsp_logits"].shape == (3, 2)
    assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
    enc = model.encoder(batch)
    assert enc["sequence_output"].shape == (3, 12, tiny_config.hidden_size)
    assert enc["pooled_output"].shape == (3, tiny_config.hidden_size)
    assert len(enc["encoder_outputs"]) == tiny_config.num_hidden_layers
    assert enc["sequence_output"].dtype.name == compute
    # Master weights stay float32 under mixed precision.
    assert {v.dtype for v in model.weights} == {"float32"}
    losses = pretraining_losses(out, batch)
    assert all(v.dtype == tf.float32 and np.isfinite(v.numpy()) for v in losses.values())


def test_mixed_precision_stays_close_to_float32(tiny_config):
    fp32 = BertEncoder(tiny_config)
    bf16 = BertEncoder(tiny_config, dtype="mixed_bfloat16")
    for a, b in zip(fp32.weights, bf16.weights):
        b.assign(a)
    batch = random_batch(tiny_config)
    ref = fp32(batch)["sequence_output"].numpy()
    got = tf.cast(bf16(batch)["sequence_output"], tf.float32).numpy()
    assert np.abs(ref - got).max() < 0.1  # bf16 keeps 8 mantissa bits; LN outputs are O(1)


def test_padding_does_not_change_real_positions(tiny_config):
    encoder = BertEncoder(tiny_config)
    batch = random_batch(tiny_config, batch=2, seq=16)
    short = {k: batch[k][:1, :8] for k in ("input_ids", "input_mask", "segment_ids")}
    padded = {k: np.pad(short[k], ((0, 0), (0, 8))) for k in short}
    a = encoder(short)["sequence_output"].numpy()
    b = encoder(padded)["sequence_output"].numpy()[:, :8]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_masked_lm_logits_use_the_tied_word_embeddings(tiny_config):
    model = BertPretrainer(tiny_config)
    assert model.masked_lm.word_embeddings is model.encoder.embeddings.word_embeddings
    names = model_variables(model)
    assert len(names) == len(model.weights)  # every weight has exactly one checkpoint name
    assert len(model.weights) == 5 + 16 * tiny_config.num_hidden_layers + 2 + 5 + 2


def test_gelu_variants_follow_the_config():
    from bert.activations import get_activation
    x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0], "float32")
    exact = get_activation("gelu")(x).numpy()
    tanh = get_activation("gelu_new")(x).numpy()
    from math import erf, sqrt
    np.testing.assert_allclose(exact, [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=1e-6)
    assert 0 < np.abs(exact - tanh).max() < 1e-3
    with pytest.raises(ValueError, match="swish"):
        get_activation("swish")


def test_fine_tuning_heads_shapes(tiny_config):
    encoder = BertEncoder(tiny_config)
    batch = random_batch(tiny_config, batch=2, seq=10)
    out = encoder(batch)
    span = SpanHead(tiny_config, name="squad")(out["sequence_output"])
    assert span["start_logits"].shape == (2, 10) and span["end_logits"].dtype == tf.float32
    logits = ClassifierHead(tiny_config, 3, name="classifier")(out["pooled_output"])
    assert logits.shape == (2, 3)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_xla_train_step_matches_eager_gradients(tiny_config, policy):
    model = BertPretrainer(tiny_config, dtype=policy)
    batch = random_batch(tiny_config, batch=4, seq=16)

    def grads(features):
        with tf.GradientTape() as tape:
            loss = pretraining_losses(model(features, training=False), features)["loss"]
        return loss, tape.gradient(loss, model.trainable_variables)

    eager_loss, eager_grads = grads(batch)
    xla_loss, xla_grads = tf.function(grads, jit_compile=True)(batch)
    tol = 1e-5 if policy == "float32" else 3e-2
    assert abs(float(eager_loss) - float(xla_loss)) < tol * 10
    assert all(g is not None for g in xla_grads)
    for e, x in zip(eager_grads, xla_grads):
        e = tf.convert_to_tensor(e).numpy()
        x = tf.convert_to_tensor(x).numpy()
        assert np.abs(e - x).max() <= tol * max(1.0, np.abs(e).max())
    # The loss is the documented combination: weighted mean MLM NLL + mean NSP NLL.
    out = model(batch)
    logp = tf.nn.log_softmax(out["mlm_logits"]).numpy()
    w = batch["masked_lm_weights"]
    mlm = -(np.take_along_axis(logp, batch["masked_lm_ids"][..., None], -1)[..., 0] * w).sum() / (w.sum() + 1e-5)
    nsp_logp = tf.nn.log_softmax(out["nsp_logits"]).numpy()
    nsp = -np.take_along_axis(nsp_logp, batch["next_sentence_labels"], -1).mean()
    assert abs(float(eager_loss) - (mlm + nsp)) < 1e-4 if policy == "float32" else True
