"""BertEncoder: precision, padding, and the config round trip."""

import numpy as np
import pytest
import tensorflow as tf

from bert.encoder import BertEncoder
from conftest import random_batch
from layer_contract import assert_config_round_trip


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


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_config_round_trip(tiny_config, policy):
    batch = {
        k: v for k, v in random_batch(tiny_config).items() if k in ("input_ids", "input_mask", "segment_ids")
    }
    encoder = BertEncoder(tiny_config, dtype=policy, name="encoder")
    copy = assert_config_round_trip(encoder, batch)
    assert copy.config == tiny_config and len(copy.transformer_layers) == tiny_config.num_hidden_layers
