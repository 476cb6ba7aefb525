"""TransformerLayer: the config round trip, its Dense sublayers' included."""

import keras
import numpy as np

from bert.attention import attention_bias_from_mask
from bert.transformer import TransformerLayer
from conftest import random_batch
from layer_contract import assert_config_round_trip


def test_config_round_trip(tiny_config):
    batch = random_batch(tiny_config)
    x = np.random.default_rng(0).normal(size=(*batch["input_ids"].shape, tiny_config.hidden_size))
    layer = TransformerLayer(tiny_config, name="layer_0")
    copy = assert_config_round_trip(layer, x.astype("float32"), attention_bias_from_mask(batch["input_mask"]))
    assert copy.config == tiny_config
    # The feed-forward Dense carries the config's GELU, which serializes by its registered name.
    dense = keras.layers.Dense.from_config(layer.intermediate.get_config())
    assert dense.activation is layer.intermediate.activation
