"""LAMB in lock-step with a NumPy reference, and the weight-decay rule on the real BERT paths.

The lock-step harness (variables with realistic paths, a gradient sequence whose global norm
crosses 1 both ways, eager and XLA runs) is shared with tests/test_adamw.py.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.checkpoints import model_variables
from bert.pretraining import BertPretrainer
from optimization import LAMB, WarmupPolynomialDecay, create_optimizer

# --- the lock-step harness ------------------------------------------------------------------

INITIAL = {  # path -> (shape, initial values)
    "embeddings/word_embeddings": ((12, 8), "normal"),
    "embeddings/LayerNorm/gamma": ((8,), "ones"),
    "embeddings/LayerNorm/beta": ((8,), "zeros"),
    "layer_0/attention_self/query/kernel": ((8, 8), "normal"),
    "layer_0/attention_self/query/bias": ((8,), "zeros"),
    "cls_predictions/output_bias": ((12,), "zeros"),
}
# Written out by hand, not computed by the rule under test.
EXCLUDED = {
    "embeddings/LayerNorm/gamma",
    "embeddings/LayerNorm/beta",
    "layer_0/attention_self/query/bias",
    "cls_predictions/output_bias",
}
# Global gradient norm of each step: above 1 (clipped) and below 1 (left alone), in turn.
TARGET_NORMS = [2.5, 0.4, 1.8, 0.9, 7.0, 0.05, 3.0, 0.6, 1.2, 0.3, 4.0, 0.7]
SPREAD_STEP = 2  # every variable's norm is below 1 there, the global norm is not
ZERO_GRAD_STEP = 5  # cls_predictions/output_bias gets a zero gradient (its moments still move)
WARMUP, TOTAL = 3, 14  # the schedule: lr(0) = 0, warmup, decay, and the last steps near 0
TOLERANCE = 1e-6


def initial_values(seed=0):
    rng = np.random.default_rng(seed)
    values = {}
    for path, (shape, init) in INITIAL.items():
        if init == "normal":  # larger than BERT's 0.02 so that weight decay visibly matters
            values[path] = rng.normal(0.0, 0.2, shape).astype(np.float32)
        else:
            values[path] = (np.ones if init == "ones" else np.zeros)(shape, np.float32)
    return values


def gradient_sequence(seed=1):
    rng = np.random.default_rng(seed)
    steps = []
    for step, target in enumerate(TARGET_NORMS):
        grads = {p: rng.normal(0.0, 1.0, shape).astype(np.float64) for p, (shape, _) in INITIAL.items()}
        if step == ZERO_GRAD_STEP:
            grads["cls_predictions/output_bias"][:] = 0.0
        if step == SPREAD_STEP:
            grads = {p: g / np.linalg.norm(g) * target / np.sqrt(len(grads)) for p, g in grads.items()}
        else:
            norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
            grads = {p: g * target / norm for p, g in grads.items()}
        steps.append({p: g.astype(np.float32) for p, g in grads.items()})
    return steps


def make_variables(values):
    """keras.Variables whose .path is the dict key (name scopes cannot contain '/')."""
    variables = []
    for path, value in values.items():
        *scopes, name = path.split("/")
        with _nested_scopes(scopes):
            variables.append(keras.Variable(value, name=name))
        assert variables[-1].path == path
    return variables


class _nested_scopes:
    def __init__(self, names):
        self.scopes = [keras.name_scope(n) for n in names]

    def __enter__(self):
        for s in self.scopes:
            s.__enter__()

    def __exit__(self, *exc):
        for s in reversed(self.scopes):
            s.__exit__(*exc)


def as_tf_gradients(grads):
    """The word-embedding gradient as IndexedSlices with repeated rows, as a gather produces."""
    out = []
    for path, g in grads.items():
        if path == "embeddings/word_embeddings":
            repeated = [3, 7]
            values = np.concatenate([g, np.zeros((len(repeated), g.shape[1]), np.float32)])
            for k, row in enumerate(repeated):  # split the row between its two occurrences
                values[row], values[len(g) + k] = 0.25 * g[row], 0.75 * g[row]
            indices = np.concatenate([np.arange(len(g)), repeated]).astype(np.int64)
            out.append(
                tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(g.shape, tf.int64))
            )
        else:
            out.append(tf.constant(g))
    return out


def schedule_closed_form(step, peak, warmup=WARMUP, total=TOTAL, power=0.5):
    if step < warmup:
        return peak * step / warmup
    return peak * (1.0 - min(step, total) / total) ** power


def run_keras(optimizer, values, grads_seq, jit):
    """Applies the sequence; returns final weights {path: array} and the lr each update used."""
    variables = make_variables(values)
    optimizer.build(variables)

    def apply(grads):
        return optimizer.apply(grads, variables)

    if jit:
        apply = tf.function(apply, jit_compile=True)
    learning_rates = []
    for grads in grads_seq:
        learning_rates.append(float(optimizer.learning_rate))
        apply(as_tf_gradients(grads))
    assert int(optimizer.iterations) == len(grads_seq)
    return {v.path: v.numpy() for v in variables}, learning_rates


def clip(grads, mode, clip_norm=1.0):
    if mode == "global":
        norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
        return {p: g * clip_norm / max(norm, clip_norm) for p, g in grads.items()}
    if mode == "per_variable":
        return {p: g * clip_norm / max(np.linalg.norm(g), clip_norm) for p, g in grads.items()}
    assert mode == "none"
    return grads


def max_abs_diff(a, b):
    return max(float(np.max(np.abs(a[p].astype(np.float64) - b[p]))) for p in a)


# --- the NumPy reference ----------------------------------------------------------------------


def numpy_lamb(
    values,
    grads_seq,
    lr_at,
    *,
    wd=0.01,
    b1=0.9,
    b2=0.999,
    eps=1e-6,
    clipping="global",
    excluded=EXCLUDED,
    trust_ratio_for_excluded=True,
    ratio_when_w_is_zero=1.0,
):
    w = {p: v.astype(np.float64) for p, v in values.items()}
    m = {p: np.zeros_like(v) for p, v in w.items()}
    v = {p: np.zeros_like(x) for p, x in w.items()}
    for t, grads in enumerate(grads_seq, start=1):
        g = clip({p: x.astype(np.float64) for p, x in grads.items()}, clipping)
        lr = lr_at(t - 1)
        for p, grad in g.items():
            m[p] = b1 * m[p] + (1 - b1) * grad
            v[p] = b2 * v[p] + (1 - b2) * grad**2
            m_hat, v_hat = m[p] / (1 - b1**t), v[p] / (1 - b2**t)
            u = m_hat / (np.sqrt(v_hat) + eps)
            if p not in excluded:
                u = u + wd * w[p]
            r = 1.0
            if p not in excluded or trust_ratio_for_excluded:
                w_norm, u_norm = np.linalg.norm(w[p]), np.linalg.norm(u)
                if w_norm > 0 and u_norm > 0:
                    r = w_norm / u_norm
                elif w_norm == 0:
                    r = ratio_when_w_is_zero
            w[p] = w[p] - lr * r * u
    return w


PEAK = 0.05
WD = 0.1  # 10x BERT's, so that a wrong exclusion shows far above the tolerance


def lamb_optimizer(**kwargs):
    return LAMB(WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, power=0.5), weight_decay=WD, **kwargs)


@pytest.fixture(scope="module")
def lamb_runs():
    values, grads = initial_values(), gradient_sequence()
    eager = run_keras(lamb_optimizer(), values, grads, jit=False)
    xla = run_keras(lamb_optimizer(), values, grads, jit=True)
    return values, grads, eager, xla


def test_lamb_matches_numpy_reference_eagerly_and_under_xla(lamb_runs):
    values, grads, (eager, eager_lrs), (xla, xla_lrs) = lamb_runs
    reference = numpy_lamb(values, grads, lambda s: schedule_closed_form(s, PEAK), wd=WD)
    assert max_abs_diff(eager, reference) <= TOLERANCE
    assert max_abs_diff(xla, reference) <= TOLERANCE
    assert max_abs_diff(eager, {p: x.astype(np.float64) for p, x in xla.items()}) <= TOLERANCE
    expected_lrs = [schedule_closed_form(s, PEAK) for s in range(len(grads))]
    np.testing.assert_allclose(eager_lrs, expected_lrs, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(xla_lrs, expected_lrs, rtol=1e-6, atol=1e-9)
    assert eager_lrs[0] == 0.0 and eager_lrs[-1] > 0.0


def test_the_scenario_exercises_every_rule_of_the_reference(lamb_runs):
    """Each rule, changed in the reference, moves the result far outside the tolerance: the
    parity above could fail on clipping, decay exclusion, trust ratio and the zero-norm case."""
    values, grads, (eager, _), _ = lamb_runs
    norms = [np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in s.values())) for s in grads]
    assert sum(n > 1 for n in norms) >= 4 and sum(n < 1 for n in norms) >= 4
    spread = grads[SPREAD_STEP]
    assert norms[SPREAD_STEP] > 1 and all(np.linalg.norm(g) < 1 for g in spread.values())

    def lr_at(s):
        return schedule_closed_form(s, PEAK)

    variants = {
        "no clipping": {"clipping": "none"},
        "per-variable clipping": {"clipping": "per_variable"},
        "decay everything": {"excluded": set()},
        "no trust ratio for excluded": {"trust_ratio_for_excluded": False},
        "ratio 0 when ||w|| = 0": {"ratio_when_w_is_zero": 0.0},
    }
    for name, change in variants.items():
        assert max_abs_diff(eager, numpy_lamb(values, grads, lr_at, wd=WD, **change)) > 1e-4, name


def test_trust_ratio_can_be_limited_to_decayed_variables():
    values, grads = initial_values(), gradient_sequence()[:4]
    result, _ = run_keras(lamb_optimizer(trust_ratio_for_excluded=False), values, grads, jit=False)
    reference = numpy_lamb(
        values, grads, lambda s: schedule_closed_form(s, PEAK), wd=WD, trust_ratio_for_excluded=False
    )
    assert max_abs_diff(result, reference) <= TOLERANCE


def test_zero_initialised_bias_moves_with_trust_ratio_one():
    bias = make_variables({"pooler_dense/bias": np.zeros(4, np.float32)})
    gradient = np.array([0.3, -0.2, 1e-4, 0.0], np.float32)
    optimizer = LAMB(0.1, clip_global_norm=None, exclude_from_weight_decay=("bias",))
    optimizer.apply([tf.constant(gradient)], bias)
    # t = 1: m_hat = g and v_hat = g^2, so u = g / (|g| + eps); r = 1 because ||w|| = 0.
    expected = -0.1 * gradient / (np.abs(gradient) + 1e-6)
    np.testing.assert_allclose(bias[0].numpy(), expected, rtol=1e-5, atol=1e-7)
    assert abs(bias[0].numpy()[0] + 0.1) < 1e-6


# --- the exclusion rule on the real model --------------------------------------------------


def test_default_rule_on_real_bert_paths(tiny_config):
    model = BertPretrainer(tiny_config)
    optimizer = create_optimizer("lamb", 1e-3)
    optimizer.build(model.trainable_variables)
    excluded = {v.path for v in model.trainable_variables if optimizer.is_excluded(v)}
    decayed = {v.path for v in model.trainable_variables if optimizer.uses_weight_decay(v)}
    assert excluded | decayed == {v.path for v in model.trainable_variables}
    assert not excluded & decayed
    assert {
        "cls_predictions/output_bias",
        "cls_seq_relationship/output_bias",
        "embeddings/LayerNorm/gamma",
        "embeddings/LayerNorm/beta",
        "layer_1/attention_output_LayerNorm/gamma",
        "layer_0/output_LayerNorm/beta",
        "cls_predictions/transform_LayerNorm/gamma",
        "pooler_dense/bias",
        "layer_0/attention_self/query/bias",
    } <= excluded
    assert {
        "embeddings/word_embeddings",
        "embeddings/position_embeddings",
        "embeddings/token_type_embeddings",
        "cls_seq_relationship/output_weights",
        "layer_1/intermediate_dense/kernel",
        "cls_predictions/transform_dense/kernel",
        "pooler_dense/kernel",
    } <= decayed
    # Every kernel, embedding table and output_weights is decayed; nothing else is.
    assert decayed == {
        p for p in excluded | decayed if p.endswith(("/kernel", "_embeddings", "/output_weights"))
    }
    # Per layer 6 biases + 2 LayerNorms; embeddings LayerNorm 2, pooler bias, MLM head 4, NSP bias.
    assert len(excluded) == 10 * tiny_config.num_hidden_layers + 8
    # The same classification Google's rule gives on the TF1 checkpoint names of the variables.
    google = model_variables(model)
    assert len(google) == len(model.trainable_variables)
    for name, variable in google.items():
        google_excluded = any(re.search(p, name) for p in ("LayerNorm", "layer_norm", "bias"))
        assert optimizer.is_excluded(variable) == google_excluded, name


def test_pattern_matching_no_variable_is_an_error_naming_it(tiny_config):
    model = BertPretrainer(tiny_config)
    with pytest.raises(ValueError, match="'Layer_Norm'"):
        LAMB(1e-3, exclude_from_weight_decay=("LayerNorm", "bias", "Layer_Norm")).build(
            model.trainable_variables
        )
    # Google's two spellings of LayerNorm count as one: one of them matching is enough ...
    LAMB(1e-3, exclude_from_weight_decay=("LayerNorm", "layer_norm", "bias")).build(model.trainable_variables)
    # ... but not when neither does.
    with pytest.raises(ValueError, match="'layer_norm'"):
        LAMB(1e-3, exclude_from_weight_decay=("layer_norm", "bias")).build(model.trainable_variables)


def test_non_float32_master_weights_are_rejected():
    variables = [keras.Variable(np.zeros((2, 2), np.float16), name="kernel")]
    with pytest.raises(ValueError, match="float32"):
        LAMB(1e-3, exclude_from_weight_decay=()).build(variables)
