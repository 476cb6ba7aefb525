"""BertPretrainer and its loss: shapes and dtypes under every precision, tied embeddings, an
XLA-compiled train step, and the config round trip."""

import numpy as np
import pytest
import tensorflow as tf

from bert.checkpoints import model_variables
from bert.encoder import BertEncoder
from bert.pretraining import BertPretrainer, pretraining_losses
from conftest import random_batch
from layer_contract import assert_config_round_trip

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


def test_masked_lm_logits_use_the_tied_word_embeddings(tiny_config):
    model = BertPretrainer(tiny_config)
    assert model.masked_lm.word_embeddings is model.encoder.embeddings.word_embeddings
    names = model_variables(model)
    assert len(names) == len(model.weights)  # every weight has exactly one checkpoint name
    assert len(model.weights) == 5 + 16 * tiny_config.num_hidden_layers + 2 + 5 + 2


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
    mlm = -(np.take_along_axis(logp, batch["masked_lm_ids"][..., None], -1)[..., 0] * w).sum() / (
        w.sum() + 1e-5
    )
    nsp_logp = tf.nn.log_softmax(out["nsp_logits"]).numpy()
    nsp = -np.take_along_axis(nsp_logp, batch["next_sentence_labels"], -1).mean()
    assert abs(float(eager_loss) - (mlm + nsp)) < 1e-4 if policy == "float32" else True


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_config_round_trip(tiny_config, policy):
    model = BertPretrainer(
        tiny_config, dtype=policy, encoder=BertEncoder(tiny_config, dtype=policy, name="encoder")
    )
    copy = assert_config_round_trip(model, random_batch(tiny_config))
    assert copy.encoder.name == "encoder" and copy.encoder.dtype_policy.name == policy
    # The copy's MLM head is tied to the copy's own encoder, not to a table of its own.
    assert copy.masked_lm.word_embeddings is copy.encoder.embeddings.word_embeddings
    assert len(copy.weights) == len(model.weights)
