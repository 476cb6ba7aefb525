"""SelfAttention and the attention bias: masking and the config round trip."""

import numpy as np

from bert.attention import SelfAttention, attention_bias_from_mask
from conftest import random_batch
from layer_contract import assert_config_round_trip


def _inputs(config, seed=0):
    batch = random_batch(config)
    x = np.random.default_rng(seed).normal(size=(*batch["input_ids"].shape, config.hidden_size))
    return x.astype("float32"), attention_bias_from_mask(batch["input_mask"])


def test_bias_masks_padded_keys_only():
    bias = attention_bias_from_mask(np.array([[1, 1, 0]])).numpy()
    assert bias.shape == (1, 1, 1, 3) and bias.dtype == np.float32
    np.testing.assert_array_equal(bias[0, 0, 0], [0.0, 0.0, -10000.0])


def test_config_round_trip(tiny_config):
    layer = SelfAttention(tiny_config, name="attention_self")
    copy = assert_config_round_trip(layer, *_inputs(tiny_config))
    assert copy.config == tiny_config
    assert [w.path for w in copy.weights] == [w.path for w in layer.weights]
