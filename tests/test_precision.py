"""training/precision.py: each --precision name gives its Keras dtype policy and turns TF32 on or
off for the process; extract_features.py's dtype-named aliases reach the same table."""

import pytest
import tensorflow as tf

from training.precision import POLICIES, configure_precision


@pytest.fixture(autouse=True)
def _restore_tf32():
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    yield
    tf.config.experimental.enable_tensor_float_32_execution(before)


@pytest.mark.parametrize(
    "precision, policy, tf32",
    [
        ("fp32", "float32", False),
        ("tf32", "float32", True),
        ("fp16", "mixed_float16", True),
        ("bf16", "mixed_bfloat16", True),
    ],
)
def test_each_precision_gives_its_policy_and_tf32_setting(precision, policy, tf32):
    tf.config.experimental.enable_tensor_float_32_execution(not tf32)
    assert configure_precision(precision) == policy
    assert tf.config.experimental.tensor_float_32_execution_enabled() is tf32


def test_an_unknown_precision_is_refused_with_the_names():
    with pytest.raises(ValueError, match="precision must be one of .*fp8"):
        configure_precision("fp8")


def test_extract_features_aliases_map_onto_the_same_table():
    import extract_features

    assert set(extract_features.PRECISIONS) == {*POLICIES, "float32", "float16", "bfloat16"}
    for alias, name in extract_features.PRECISION_ALIASES.items():
        assert (
            POLICIES[name][0]
            == {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}[alias]
        )
