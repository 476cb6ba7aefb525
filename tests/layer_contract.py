"""The keras-hub layer contract, asserted the same way for every layer in bert/."""

import json

import numpy as np
from keras import tree


def _arrays(outputs):
    return [np.asarray(x) for x in tree.flatten(outputs)]


def assert_config_round_trip(layer, *inputs, **call_kwargs):
    """`type(layer).from_config(layer.get_config())` rebuilds `layer`: the config is JSON, names
    exactly the constructor's arguments, survives a second trip unchanged, and the copy given
    `layer`'s weights computes identical outputs. Returns the copy.

    `layer`'s weights are first set to random values, so that a copy with fresh initial weights
    (LayerNorm's ones and zeros included) would be caught computing something else.
    """
    rng = np.random.default_rng(0)
    layer(*inputs, **call_kwargs)  # builds
    layer.set_weights([rng.normal(0.0, 0.5, w.shape).astype(w.dtype) for w in layer.get_weights()])
    expected = _arrays(layer(*inputs, **call_kwargs))

    config = layer.get_config()
    assert json.loads(json.dumps(config)) == config
    copy = type(layer).from_config(config)
    assert type(copy) is type(layer) and copy.name == layer.name
    assert copy.dtype_policy.name == layer.dtype_policy.name
    assert copy.get_config() == config
    before = _arrays(copy(*inputs, **call_kwargs))
    assert any(not np.array_equal(a, b) for a, b in zip(before, expected))

    assert [tuple(w.shape) for w in copy.weights] == [tuple(w.shape) for w in layer.weights]
    copy.set_weights(layer.get_weights())
    got = _arrays(copy(*inputs, **call_kwargs))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    return copy
