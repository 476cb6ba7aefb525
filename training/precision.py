"""--precision: which Keras dtype policy the model is built with, and whether TF32 is allowed.

fp32  float32 everywhere, TF32 off (Ampere+ GPUs would otherwise round matmul inputs to 10
      mantissa bits: fp32 means float32-accurate)
tf32  float32 variables and activations, matmuls in TF32 on Ampere+ GPUs (TF's default)
fp16  mixed_float16: float16 compute, float32 master weights, dynamic loss scaling
bf16  mixed_bfloat16: bfloat16 compute, float32 master weights, no loss scaling needed
"""

from __future__ import annotations

from common.kinds import PRECISIONS

# precision -> (Keras dtype policy, TF32 allowed); the names are common/kinds.py's.
POLICIES = {
    "fp32": ("float32", False),
    "tf32": ("float32", True),
    "fp16": ("mixed_float16", True),
    "bf16": ("mixed_bfloat16", True),
}
if set(POLICIES) != set(PRECISIONS):
    raise ImportError(
        f"training/precision.py maps {sorted(POLICIES)}, common/kinds.py names {sorted(PRECISIONS)}."
    )


def configure_precision(precision: str) -> str:
    """Sets TF32 on or off for the process and returns the dtype policy to build the model with."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} (got {precision!r}).")
    import tensorflow as tf

    policy, tf32 = POLICIES[precision]
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    return policy
