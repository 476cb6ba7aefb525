"""LAMB as NVIDIA uses it for BERT pretraining (You et al., 2019, with NVIDIA's choices).

Per applied update, after the gradients are accumulated and averaged across workers:
  1. g <- g / max(1, ||g||_global): one norm over ALL gradients ("pre-normalization", clip 1.0)
  2. Adam moments with bias correction, t = 1 at the first applied update
  3. u = m_hat / (sqrt(v_hat) + eps) + wd * w, wd only for paths matching no exclusion pattern
  4. r = ||w|| / ||u|| per variable when both norms are > 0, else 1.0; NVIDIA applies it to every
     variable, excluded ones included (trust_ratio_for_excluded=False restricts it to decayed ones)
  5. w <- w - lr * r * u
Steps 1-3 and 5 are the shared Adam core in optimization/adamw.py; this class adds step 4.
NVIDIA's TF1 LAMBOptimizer counted t with a Python counter bumped once per variable at graph
construction, so its bias correction was a constant; here t is optimizer.iterations + 1.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from optimization.adamw import DecoupledWeightDecayAdam


@keras.saving.register_keras_serializable(package="bert")
class LAMB(DecoupledWeightDecayAdam):
    """Layer-wise Adaptive Moments for Batch training; constructor arguments as AdamW plus
    trust_ratio_for_excluded (default True: LayerNorm and bias variables get the ratio too).

    `optimizer.iterations` is the applied-update count; the learning-rate schedule reads it.
    """

    bias_correction = True

    def __init__(self, learning_rate=1e-3, *, trust_ratio_for_excluded: bool = True, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.trust_ratio_for_excluded = bool(trust_ratio_for_excluded)

    def _scale_update(self, update, weight, index, shared):
        if self._excluded[index] and not self.trust_ratio_for_excluded:
            return update
        zero, one = shared["0"], shared["1"]
        w_norm = tf.norm(weight)
        u_norm = tf.norm(update)
        u_positive = u_norm > zero
        # A zero-initialised bias has ||w|| = 0: its first steps use r = 1, not 0.
        ratio = tf.where(
            tf.logical_and(w_norm > zero, u_positive), w_norm / tf.where(u_positive, u_norm, one), one
        )
        return ratio * update

    def get_config(self):
        config = super().get_config()
        config["trust_ratio_for_excluded"] = self.trust_ratio_for_excluded
        return config
