"""Activations named in bert_config.json."""

from math import erf, sqrt

import numpy as np
import pytest

from bert.activations import get_activation


def test_gelu_variants_follow_the_config():
    x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0], "float32")
    exact = get_activation("gelu")(x).numpy()
    tanh = get_activation("gelu_new")(x).numpy()
    np.testing.assert_allclose(exact, [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=1e-6)
    assert 0 < np.abs(exact - tanh).max() < 1e-3
    with pytest.raises(ValueError, match="swish"):
        get_activation("swish")
