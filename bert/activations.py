"""Activation functions named as in bert_config.json."""

import math

import keras
from keras import ops


# Registered so that a Dense layer using them serializes in get_config() and rebuilds.
@keras.saving.register_keras_serializable(package="bert")
def gelu(x):
    """Exact GELU, x * Phi(x) with the erf form: what Google's BERT and HF "gelu" compute."""
    return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))


@keras.saving.register_keras_serializable(package="bert")
def gelu_tanh(x):
    """The tanh approximation of GELU (NVIDIA's BERT, HF "gelu_new")."""
    return 0.5 * x * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * ops.power(x, 3))))


_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_tanh": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": keras.activations.relu,
}


def get_activation(name: str):
    """The activation function a bert_config.json hidden_act names."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"hidden_act {name!r} is not one of {', '.join(_ACTIVATIONS)}.") from None
