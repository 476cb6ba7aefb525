"""LayerNorm: float32 statistics under every precision, and its config round trip."""

import numpy as np
import pytest

from bert.layer_norm import LayerNorm
from layer_contract import assert_config_round_trip


def test_normalises_in_float32_with_gamma_and_beta():
    x = np.random.default_rng(1).normal(3.0, 2.0, (2, 5, 8)).astype("float32")
    layer = LayerNorm(1e-12, name="LayerNorm")
    layer.build(x.shape)
    gamma = np.linspace(0.5, 2.0, 8).astype("float32")
    beta = np.linspace(-1.0, 1.0, 8).astype("float32")
    layer.set_weights([gamma, beta])
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * gamma + beta
    np.testing.assert_allclose(layer(x).numpy(), expected, atol=1e-5)
    assert [w.name for w in layer.weights] == ["gamma", "beta"]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_config_round_trip(policy):
    x = np.random.default_rng(2).normal(size=(2, 3, 8)).astype("float32")
    copy = assert_config_round_trip(LayerNorm(1e-6, name="LayerNorm", dtype=policy), x)
    assert copy.epsilon == 1e-6
    assert {w.dtype for w in copy.weights} == {"float32"}
