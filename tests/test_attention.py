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


def _three_projection_attention(layer, x, bias):
    """The textbook layout: three separate Dense projections, heads split one by one (NumPy)."""
    config = layer.config
    n, h = config.num_attention_heads, config.head_size

    def heads(dense):
        y = x @ dense.kernel.numpy() + dense.bias.numpy()  # [B, S, D]
        return y.reshape(*y.shape[:2], n, h).transpose(0, 2, 1, 3)  # [B, N, S, H]

    q, k, v = heads(layer.query), heads(layer.key), heads(layer.value)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(h) + bias  # [B, N, S, S]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3)  # [B, S, N, H]
    return context.reshape(*context.shape[:2], n * h)


def test_attention_equals_three_separate_projections(tiny_config):
    """The layer gives the outputs of Google's three projections, which are the layer's weights
    (so checkpoints keep their names and bytes)."""
    layer = SelfAttention(tiny_config, name="attention_self")
    x, bias = _inputs(tiny_config)
    got = layer(x, bias).numpy()
    expected = _three_projection_attention(layer, x.astype("float64"), bias.numpy().astype("float64"))
    np.testing.assert_allclose(got, expected, atol=2e-6)
    d = tiny_config.hidden_size
    assert [(w.path.split("/")[-2], w.shape) for w in layer.weights] == [
        (name, shape) for name in ("query", "key", "value") for shape in ((d, d), (d,))
    ]
