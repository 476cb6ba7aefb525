"""WarmupPolynomialDecay against its closed form and Google's formula; the optimizer's step count."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from optimization import AdamWeightDecay, WarmupPolynomialDecay, scaled_learning_rate
from optimization.schedules import WarmupPolynomialDecay as Schedule

PEAK, WARMUP, TOTAL = 7.5e-4, 20, 100


def google_learning_rate(step, init_lr, num_warmup_steps, num_train_steps, power, end_lr=0.0):
    """google-research/bert optimization.create_optimizer, written out for one integer step."""
    decay_step = min(step, num_train_steps)
    learning_rate = (init_lr - end_lr) * (1 - decay_step / num_train_steps) ** power + end_lr
    if num_warmup_steps:
        is_warmup = float(step < num_warmup_steps)
        warmup_learning_rate = init_lr * (step / num_warmup_steps)
        learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
    return learning_rate


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_closed_form_at_the_boundaries(power):
    schedule = WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, power)
    expected = {
        0: 0.0,  # the first update uses lr 0
        1: PEAK / WARMUP,
        WARMUP - 1: PEAK * (WARMUP - 1) / WARMUP,
        WARMUP: PEAK * (1 - WARMUP / TOTAL) ** power,  # decay counted from step 0: a drop here
        60: PEAK * (1 - 60 / TOTAL) ** power,
        TOTAL - 1: PEAK * (1 / TOTAL) ** power,
        TOTAL: 0.0,
        TOTAL + 7: 0.0,
    }
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, rel=1e-6, abs=1e-12), step
    assert float(schedule(WARMUP)) < float(schedule(WARMUP - 1))


@pytest.mark.parametrize("warmup, power, end", [(WARMUP, 0.5, 0.0), (WARMUP, 1.0, 1e-5), (0, 1.0, 0.0)])
def test_every_step_equals_googles_formula(warmup, power, end):
    schedule = WarmupPolynomialDecay(PEAK, warmup, TOTAL, power, end_learning_rate=end)
    steps = np.arange(TOTAL + 5)
    ours = np.array([float(schedule(tf.constant(s, tf.int64))) for s in steps])
    theirs = np.array([google_learning_rate(s, PEAK, warmup, TOTAL, power, end) for s in steps])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-12)
    assert ours[-1] == pytest.approx(end)
    if warmup == 0:
        assert ours[0] == pytest.approx(PEAK)


def hugging_face_learning_rate(step, init_lr, num_warmup_steps, num_training_steps):
    """transformers.get_linear_schedule_with_warmup's lr_lambda times the peak, for one step."""
    if step < num_warmup_steps:
        return init_lr * step / max(1, num_warmup_steps)
    return init_lr * max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))


def test_decay_from_warmup_reaches_the_peak_and_equals_hugging_faces_formula():
    schedule = WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, 1.0, decay_from_warmup=True)
    expected = {  # by hand: W = 20, T = 100, so the decay spans 80 steps
        0: 0.0,
        WARMUP - 1: PEAK * 19 / 20,
        WARMUP: PEAK,  # no drop at the end of warmup
        60: PEAK * 40 / 80,
        TOTAL - 1: PEAK / 80,
        TOTAL: 0.0,
        TOTAL + 3: 0.0,
    }
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, rel=1e-6, abs=1e-12), step
    steps = np.arange(TOTAL + 5)
    ours = np.array([float(schedule(tf.constant(s, tf.int64))) for s in steps])
    theirs = np.array([hugging_face_learning_rate(s, PEAK, WARMUP, TOTAL) for s in steps])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-12)
    # The issue-37 setting: 88 updates, 8 of warmup. Google's rate after warmup is 80/88 of the
    # peak and its rates add up to 0.916 of these.
    google = WarmupPolynomialDecay(5e-5, 8, 88, 1.0)
    after = WarmupPolynomialDecay(5e-5, 8, 88, 1.0, decay_from_warmup=True)
    assert float(google(8)) == pytest.approx(5e-5 * 80 / 88) and float(after(8)) == pytest.approx(5e-5)
    totals = [sum(float(s(step)) for step in range(88)) for s in (google, after)]
    assert totals[0] / totals[1] == pytest.approx(0.9163, abs=1e-3)


def test_decay_from_warmup_with_power_and_all_warmup():
    schedule = WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, 0.5, end_learning_rate=1e-5, decay_from_warmup=True)
    assert float(schedule(60)) == pytest.approx((PEAK - 1e-5) * 0.5**0.5 + 1e-5, rel=1e-6)
    whole = WarmupPolynomialDecay(PEAK, TOTAL, TOTAL, 1.0, decay_from_warmup=True)  # T - W = 0
    assert [float(whole(s)) for s in (50, TOTAL, TOTAL + 1)] == pytest.approx([PEAK / 2, 0.0, 0.0])


def test_same_value_inside_an_xla_function():
    for schedule in (
        WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, 0.5),
        WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, 1.0, decay_from_warmup=True),
    ):
        step = tf.Variable(0, dtype=tf.int64)
        compiled = tf.function(lambda: schedule(step), jit_compile=True)  # noqa: B023 (called at once)
        for s in [0, WARMUP - 1, WARMUP, 73, TOTAL, TOTAL + 1]:
            step.assign(s)
            assert float(compiled()) == pytest.approx(float(schedule(s)), rel=1e-6, abs=1e-12)


def test_serialisable():
    schedule = WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, 0.5, end_learning_rate=1e-6)
    assert schedule.get_config() == {
        "peak_learning_rate": PEAK,
        "warmup_steps": WARMUP,
        "total_steps": TOTAL,
        "power": 0.5,
        "end_learning_rate": 1e-6,
        "decay_from_warmup": False,
    }
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert type(restored) is Schedule and restored.get_config() == schedule.get_config()
    assert float(restored(50)) == float(schedule(50))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"peak_learning_rate": 0.0}, "peak_learning_rate"),
        ({"total_steps": 0}, "total_steps"),
        ({"warmup_steps": TOTAL + 1}, "warmup_steps"),
        ({"warmup_steps": 2.5}, "warmup_steps"),
        ({"power": 0.0}, "power"),
        ({"end_learning_rate": 1.0}, "end_learning_rate"),
    ],
)
def test_invalid_arguments_are_named(kwargs, word):
    arguments = {"peak_learning_rate": PEAK, "warmup_steps": WARMUP, "total_steps": TOTAL, "power": 1.0}
    with pytest.raises(ValueError, match=word):
        WarmupPolynomialDecay(**{**arguments, **kwargs})


def test_scaled_learning_rate():
    assert scaled_learning_rate(7.5e-4, 8) == pytest.approx(6e-3)
    assert scaled_learning_rate(5e-4, 1) == 5e-4
    with pytest.raises(ValueError, match="num_workers"):
        scaled_learning_rate(1e-3, 0)


def test_schedule_reads_applied_updates_and_skipped_steps_do_not_advance_it():
    """A train step that skips apply() (non-finite gradients, inside XLA) leaves no trace: the
    count, the schedule position and the weights are those of a run that never saw the step."""

    def make():
        variable = keras.Variable(np.full((3,), 0.5, np.float32), name="kernel")
        optimizer = AdamWeightDecay(WarmupPolynomialDecay(0.1, 4, 10, 1.0), exclude_from_weight_decay=())
        optimizer.build([variable])
        return variable, optimizer

    variable, optimizer = make()

    @tf.function(jit_compile=True)
    def step(gradient):
        def apply():
            optimizer.apply([gradient], [variable])
            return tf.constant(True)

        return tf.cond(tf.reduce_all(tf.math.is_finite(gradient)), apply, lambda: tf.constant(False))

    good = [tf.constant([0.3, -0.1, 0.2]), tf.constant([0.1, 0.4, -0.2])]
    applied = [bool(step(good[0])), bool(step(tf.constant([np.inf, 0.0, 0.0]))), bool(step(good[1]))]
    assert applied == [True, False, True]
    assert int(optimizer.iterations) == 2
    assert float(optimizer.learning_rate) == pytest.approx(0.1 * 2 / 4)

    twin_variable, twin = make()
    for gradient in good:
        twin.apply([gradient], [twin_variable])
    np.testing.assert_allclose(variable.numpy(), twin_variable.numpy(), rtol=0, atol=1e-7)
    assert not np.allclose(variable.numpy(), 0.5)

    # The schedule is read at optimizer.iterations, whatever sets it (e.g. a restored checkpoint).
    optimizer.iterations.assign(7)
    assert float(optimizer.learning_rate) == pytest.approx(0.1 * (1 - 7 / 10))
