"""Google's AdamWeightDecay and bias-corrected AdamW in lock-step with NumPy; the factory."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimization import LAMB, OPTIMIZERS, AdamW, AdamWeightDecay, WarmupPolynomialDecay, create_optimizer
from test_lamb import (
    EXCLUDED,
    TOLERANCE,
    TOTAL,
    WARMUP,
    clip,
    gradient_sequence,
    initial_values,
    make_variables,
    max_abs_diff,
    run_keras,
    schedule_closed_form,
)

PEAK = 0.01
WD = 0.1  # 10x BERT's, so that a wrong exclusion shows far above the tolerance


def lr_at(step):
    return schedule_closed_form(step, PEAK, power=1.0)


def numpy_adam_weight_decay(
    values, grads_seq, lr_at, *, wd=WD, b1=0.9, b2=0.999, eps=1e-6, clipping="global", excluded=EXCLUDED
):
    """Google's AdamWeightDecayOptimizer.apply_gradients: no bias correction."""
    w = {p: v.astype(np.float64) for p, v in values.items()}
    m = {p: np.zeros_like(x) for p, x in w.items()}
    v = {p: np.zeros_like(x) for p, x in w.items()}
    for step, grads in enumerate(grads_seq):
        g = clip({p: x.astype(np.float64) for p, x in grads.items()}, clipping)
        for p, grad in g.items():
            m[p] = b1 * m[p] + (1.0 - b1) * grad
            v[p] = b2 * v[p] + (1.0 - b2) * np.square(grad)
            update = m[p] / (np.sqrt(v[p]) + eps)
            if p not in excluded:
                update += wd * w[p]
            w[p] = w[p] - lr_at(step) * update
    return w


def numpy_adamw(
    values, grads_seq, lr_at, *, wd=WD, b1=0.9, b2=0.999, eps=1e-6, clipping="global", excluded=EXCLUDED
):
    """torch.optim.AdamW's order: decay w by (1 - lr wd) first, then the bias-corrected Adam step."""
    w = {p: v.astype(np.float64) for p, v in values.items()}
    m = {p: np.zeros_like(x) for p, x in w.items()}
    v = {p: np.zeros_like(x) for p, x in w.items()}
    for t, grads in enumerate(grads_seq, start=1):
        g = clip({p: x.astype(np.float64) for p, x in grads.items()}, clipping)
        lr = lr_at(t - 1)
        for p, grad in g.items():
            if p not in excluded:
                w[p] = w[p] * (1.0 - lr * wd)
            m[p] = b1 * m[p] + (1.0 - b1) * grad
            v[p] = b2 * v[p] + (1.0 - b2) * np.square(grad)
            step_size = lr / (1.0 - b1**t)
            denominator = np.sqrt(v[p]) / np.sqrt(1.0 - b2**t) + eps
            w[p] = w[p] - step_size * m[p] / denominator
    return w


REFERENCES = {AdamWeightDecay: numpy_adam_weight_decay, AdamW: numpy_adamw}


def schedule():
    return WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, power=1.0)


@pytest.fixture(scope="module", params=[AdamWeightDecay, AdamW], ids=lambda c: c.__name__)
def adam_runs(request):
    cls = request.param
    values, grads = initial_values(), gradient_sequence()
    eager = run_keras(cls(schedule(), weight_decay=WD), values, grads, jit=False)
    xla = run_keras(cls(schedule(), weight_decay=WD), values, grads, jit=True)
    return cls, values, grads, eager, xla


def test_matches_numpy_reference_eagerly_and_under_xla(adam_runs):
    cls, values, grads, (eager, eager_lrs), (xla, _) = adam_runs
    reference = REFERENCES[cls](values, grads, lr_at)
    assert max_abs_diff(eager, reference) <= TOLERANCE
    assert max_abs_diff(xla, reference) <= TOLERANCE
    assert max_abs_diff(eager, {p: x.astype(np.float64) for p, x in xla.items()}) <= TOLERANCE
    np.testing.assert_allclose(eager_lrs, [lr_at(s) for s in range(len(grads))], rtol=1e-6, atol=1e-9)


def test_the_scenario_exercises_every_rule_of_the_reference(adam_runs):
    cls, values, grads, (eager, _), _ = adam_runs
    reference = REFERENCES[cls]
    other_form = REFERENCES[AdamW if cls is AdamWeightDecay else AdamWeightDecay]
    assert max_abs_diff(eager, other_form(values, grads, lr_at)) > 1e-4, "bias correction"
    for name, change in {
        "no clipping": {"clipping": "none"},
        "per-variable clipping": {"clipping": "per_variable"},
        "decay everything": {"excluded": set()},
        "decay nothing": {"wd": 0.0},
    }.items():
        assert max_abs_diff(eager, reference(values, grads, lr_at, **change)) > 1e-5, name


@pytest.mark.parametrize("cls", [AdamWeightDecay, AdamW, LAMB], ids=lambda c: c.__name__)
def test_decay_alone_is_multiplied_by_the_learning_rate(cls):
    """With a zero gradient the Adam term is 0 and w <- w - lr * wd * w (LAMB: r = ||w||/||wd w||)."""
    values = {
        "layer_0/output_dense/kernel": np.full((3, 2), 0.5, np.float32),
        "layer_0/output_dense/bias": np.full((2,), 0.5, np.float32),
    }
    variables = make_variables(values)
    optimizer = cls(0.1, weight_decay=0.01, exclude_from_weight_decay=("bias",))
    optimizer.apply([tf.zeros((3, 2)), tf.zeros((2,))], variables)
    kernel, bias = (v.numpy() for v in variables)
    expected = 0.5 - 0.1 * (0.5 if cls is LAMB else 0.01 * 0.5)  # LAMB: the step is lr * ||w||-sized
    np.testing.assert_allclose(kernel, np.full((3, 2), expected), rtol=1e-6)
    np.testing.assert_array_equal(bias, values["layer_0/output_dense/bias"])


def test_factory_builds_each_optimizer_with_its_hyperparameters():
    assert set(OPTIMIZERS) == {"lamb", "adamw", "adam_weight_decay"}
    for name, cls in [("lamb", LAMB), ("adamw", AdamW), ("adam_weight_decay", AdamWeightDecay)]:
        optimizer = create_optimizer(
            name,
            2e-5,
            weight_decay=0.02,
            beta_1=0.8,
            beta_2=0.99,
            epsilon=1e-8,
            exclude_from_weight_decay=("bias",),
            clip_global_norm=None,
        )
        assert type(optimizer) is cls
        config = optimizer.get_config()
        assert config["learning_rate"] == pytest.approx(2e-5)
        assert (config["weight_decay"], config["beta_1"], config["beta_2"], config["epsilon"]) == (
            0.02,
            0.8,
            0.99,
            1e-8,
        )
        assert config["exclude_from_weight_decay"] == ["bias"]
        assert config["clip_global_norm"] is None and optimizer.global_clipnorm is None
    default = create_optimizer("lamb", schedule())
    assert default.global_clipnorm == 1.0 and default.weight_decay_rate == 0.01
    assert default.exclude_patterns == ("LayerNorm", "layer_norm", "bias") and default.epsilon == 1e-6
    assert default.weight_decay is None  # Keras' own decay stays off; ours is in update_step
    with pytest.raises(ValueError, match="lamb, adamw, adam_weight_decay"):
        create_optimizer("adam", 1e-3)


def test_config_round_trips_through_keras_serialization():
    optimizer = create_optimizer("lamb", schedule(), weight_decay=0.02, trust_ratio_for_excluded=False)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is LAMB and restored.get_config() == optimizer.get_config()
    assert restored.trust_ratio_for_excluded is False
    assert float(restored.learning_rate) == float(optimizer.learning_rate) == 0.0


def test_second_switches_for_owned_concepts_are_refused():
    with pytest.raises(ValueError, match="clip_global_norm"):
        AdamW(1e-3, global_clipnorm=1.0)
    with pytest.raises(ValueError, match="training/"):
        LAMB(1e-3, gradient_accumulation_steps=4)
    with pytest.raises(TypeError, match="exclude_from_weight_decay="):
        AdamW(1e-3).exclude_from_weight_decay(var_names=["bias"])
    with pytest.raises(ValueError, match="'gamma'"):
        AdamWeightDecay(1e-3, exclude_from_weight_decay=("bias", "gamma")).build(
            make_variables(
                {"dense/kernel": np.ones((2, 2), np.float32), "dense/bias": np.ones((2,), np.float32)}
            )
        )
