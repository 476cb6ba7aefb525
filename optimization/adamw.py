"""Adam with decoupled weight decay, in Google's form (AdamWeightDecay) and the standard one (AdamW).

Both, and LAMB (optimization/lamb.py), share one update step. Per applied update, with the
gradients g of all variables and t = optimizer.iterations + 1 (the 1-based update number):

    g <- g * c / max(||g||_global, c)        only when clip_global_norm = c is set
    m <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2
    m_hat, v_hat = m / (1 - b1^t), v / (1 - b2^t)      (AdamW, LAMB)
    m_hat, v_hat = m, v                                (AdamWeightDecay: no bias correction)
    u = m_hat / (sqrt(v_hat) + eps) + wd * w           (wd only where weight_decay_mask says so)
    u <- r * u                                         (LAMB only: the trust ratio)
    w <- w - lr * u

The decay is therefore multiplied by the full (scheduled) learning rate, as in Google's
AdamWeightDecayOptimizer, torch.optim.AdamW and keras.optimizers.AdamW. Loshchilov & Hutter's
paper multiplies it by the schedule multiplier only (their wd_paper = wd * peak_lr here).

`optimizer.iterations` counts applied updates. `apply()` reads the learning-rate schedule at
`iterations` *before* incrementing it, so update n (1-based) uses lr(n - 1) and bias correction
t = n; a train step that skips `apply()` (fp16 overflow) advances neither.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from optimization.weight_decay import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, variable_path, weight_decay_mask

# Keras base-optimizer options that would be a second switch for something this module or
# training/ already owns.
_OWNED_ELSEWHERE = {
    "global_clipnorm": "use clip_global_norm=",
    "clipnorm": "BERT clips by one global norm: use clip_global_norm=",
    "clipvalue": "BERT clips by one global norm: use clip_global_norm=",
    "gradient_accumulation_steps": "accumulation lives in training/ (optimization.accumulation)",
}


class _PerUpdate:
    """The scalars one apply() shares with its variables' update_step calls. A plain object: the
    optimizer's checkpoint tracking wraps and follows a dict or list set on it, not this."""

    scalars: dict | None = None


class DecoupledWeightDecayAdam(keras.optimizers.Optimizer):
    """Adam moments + decoupled weight decay with path-based exclusion; see the module docstring.

    Master weights and the m/v slots are float32 (a non-float32 trainable variable is an error:
    use a mixed_* dtype policy, whose variables are float32). Build the optimizer eagerly
    (`optimizer.build(model.trainable_variables)`) before calling `apply` inside an XLA function:
    building creates the slots and validates the exclusion patterns against the variable paths.
    """

    bias_correction = True

    def __init__(
        self,
        learning_rate=1e-3,
        weight_decay: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
        clip_global_norm: float | None = 1.0,
        name: str | None = None,
        **kwargs,
    ):
        for key, why in _OWNED_ELSEWHERE.items():
            if kwargs.get(key) is not None:
                raise ValueError(f"{type(self).__name__} does not take {key}= ({why}).")
            kwargs.pop(key, None)
        if isinstance(exclude_from_weight_decay, str):
            raise TypeError("exclude_from_weight_decay is a sequence of patterns, not one string.")
        if clip_global_norm is not None and not clip_global_norm > 0:
            raise ValueError(f"clip_global_norm must be > 0 or None (got {clip_global_norm}).")
        if not 0.0 <= beta_1 < 1.0 or not 0.0 <= beta_2 < 1.0:
            raise ValueError(f"beta_1 and beta_2 must be in [0, 1) (got {beta_1}, {beta_2}).")
        if weight_decay < 0 or epsilon < 0:
            raise ValueError(f"weight_decay and epsilon must be >= 0 (got {weight_decay}, {epsilon}).")
        if isinstance(learning_rate, int):
            learning_rate = float(learning_rate)
        # The base class's own weight_decay stays None: it would decay every variable a second
        # time, before update_step, with Keras' name-based rule instead of ours.
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=None,
            global_clipnorm=clip_global_norm,
            name=name,
            **kwargs,
        )
        self.weight_decay_rate = float(weight_decay)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_patterns = tuple(exclude_from_weight_decay)
        self._excluded = ()
        self._per_update = _PerUpdate()

    @property
    def clip_global_norm(self) -> float | None:
        """c in g <- g * c / max(||g||_global, c); Keras' own global_clipnorm does the clipping."""
        return self.global_clipnorm

    def build(self, var_list):
        if self.built:
            return
        not_float32 = [variable_path(v) for v in var_list if v.dtype != "float32"]
        if not_float32:
            raise ValueError(
                f"{type(self).__name__} keeps float32 master weights, but "
                f"{', '.join(not_float32[:3])} are not float32; build the model with a "
                "mixed_float16 / mixed_bfloat16 policy instead of a float16 one."
            )
        paths = [variable_path(v) for v in var_list]
        # Inside update_step the TF backend hands over the raw tf.Variable (no Keras path), so
        # the decision is made here, once, and looked up by the variable's index.
        self._excluded = tuple(not decayed for decayed in weight_decay_mask(paths, self.exclude_patterns))
        super().build(var_list)
        self._m = [self.add_variable_from_reference(v, "adam_m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, "adam_v") for v in var_list]

    def is_excluded(self, variable) -> bool:
        """Whether `variable`'s path matches an exclusion pattern (the optimizer must be built)."""
        return self._excluded[self._get_variable_index(variable)]

    def uses_weight_decay(self, variable) -> bool:
        """Whether this (built) optimizer adds wd * w to `variable`'s update."""
        return self.weight_decay_rate > 0 and not self.is_excluded(variable)

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        # The Keras base method would configure a rule this class never reads: a silent no-op.
        raise TypeError(f"pass exclude_from_weight_decay= to {type(self).__name__}(...) instead.")

    def apply(self, grads, trainable_variables=None):
        # Embedding gradients arrive as IndexedSlices with repeated rows (one per token), and
        # Keras/TF global norms sum the squares of those rows separately: the norm of the true
        # (summed) gradient is different. Densify first so clipping sees the real gradient; the
        # Adam moments are dense anyway.
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        # The scalars every variable's step shares, made once per update instead of once per
        # variable: the same values in a third fewer traced operations (docs/performance.md).
        # The base class increments `iterations` only after every variable's step.
        self._per_update.scalars = self._shared_scalars()
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._per_update.scalars = None

    def _shared_scalars(self) -> dict:
        """b1, 1 - b1, b2, 1 - b2, eps, wd, 0 and 1 as float32 tensors, and the bias corrections
        1 - b1^t and 1 - b2^t for t = iterations + 1 (AdamW, LAMB)."""
        scalars = {
            "b1": self.beta_1,
            "1-b1": 1.0 - self.beta_1,
            "b2": self.beta_2,
            "1-b2": 1.0 - self.beta_2,
            "eps": self.epsilon,
            "wd": self.weight_decay_rate,
            "0": 0.0,
            "1": 1.0,
        }
        shared = {name: tf.constant(value, tf.float32) for name, value in scalars.items()}
        if self.bias_correction:
            t = tf.cast(self.iterations + 1, tf.float32)
            shared["c1"] = 1.0 - tf.pow(shared["b1"], t)
            shared["c2"] = 1.0 - tf.pow(shared["b2"], t)
        return shared

    def _scale_update(self, update, weight, index, shared):
        """Hook for LAMB's trust ratio (`shared`: _shared_scalars()); Adam applies the update as
        it is."""
        return update

    def update_step(self, gradient, variable, learning_rate):
        shared = self._per_update.scalars or self._shared_scalars()  # called outside apply(): its own
        index = self._get_variable_index(variable)
        m_slot, v_slot = self._m[index], self._v[index]
        grad = tf.cast(tf.convert_to_tensor(gradient), tf.float32)
        weight = tf.convert_to_tensor(variable)
        m = shared["b1"] * tf.convert_to_tensor(m_slot) + shared["1-b1"] * grad
        v = shared["b2"] * tf.convert_to_tensor(v_slot) + shared["1-b2"] * tf.square(grad)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        if self.bias_correction:
            m = m / shared["c1"]
            v = v / shared["c2"]
        update = m / (tf.sqrt(v) + shared["eps"])
        if self.weight_decay_rate > 0 and not self._excluded[index]:
            update += shared["wd"] * weight
        update = self._scale_update(update, weight, index, shared)
        self.assign_sub(variable, tf.cast(learning_rate, tf.float32) * update)

    def get_config(self):
        config = super().get_config()
        del config["global_clipnorm"]
        config.update(
            {
                "weight_decay": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_patterns),
                "clip_global_norm": self.clip_global_norm,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert")
class AdamWeightDecay(DecoupledWeightDecayAdam):
    """Google's AdamWeightDecayOptimizer (BERT fine-tuning): Adam WITHOUT bias correction.

    update = m / (sqrt(v) + eps) + wd * w ; w <- w - lr * update. Google used eps 1e-6, wd 0.01,
    the default exclusions, and clipped the gradients to global norm 1.0 before the optimizer.
    """

    bias_correction = False


@keras.saving.register_keras_serializable(package="bert")
class AdamW(DecoupledWeightDecayAdam):
    """Bias-corrected Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW).

    w <- w - lr * (m_hat / (sqrt(v_hat) + eps) + wd * w), i.e. w * (1 - lr * wd) - lr * adam step;
    the decay is multiplied by the scheduled learning rate.
    """

    bias_correction = True
