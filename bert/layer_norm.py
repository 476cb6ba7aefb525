"""LayerNorm that always computes in float32, whatever the layer's precision policy."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert")
class LayerNorm(keras.layers.Layer):
    """Layer normalisation over the last axis with Google's gamma/beta names.

    Under mixed precision the mean and variance of a bfloat16/float16 activation lose too many
    bits, so the input is cast to float32 and the result cast back to the compute dtype.
    """

    def __init__(self, epsilon=1e-12, **kwargs):
        # autocast=False: gamma and beta are read as the float32 they are stored in. It is set on
        # the weights too: Keras autocasts the variables of a mixed-precision layer that is called
        # outside any other layer whatever the layer's own autocast says.
        super().__init__(autocast=False, **kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        dim = input_shape[-1]
        self.gamma = self.add_weight(
            name="gamma", shape=(dim,), initializer="ones", dtype="float32", autocast=False
        )
        self.beta = self.add_weight(
            name="beta", shape=(dim,), initializer="zeros", dtype="float32", autocast=False
        )

    def call(self, x):
        x32 = ops.cast(x, "float32")
        mean = ops.mean(x32, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * ops.rsqrt(variance + self.epsilon)
        y = y * ops.convert_to_tensor(self.gamma) + ops.convert_to_tensor(self.beta)
        return ops.cast(y, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
