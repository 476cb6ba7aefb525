"""The train step: accumulation equals one big batch (also with unequal mask counts), no extra
update, fp16 overflow is skipped, a non-finite fp32 update is never applied, evaluation sums."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.pretraining import BertPretrainer, pretraining_losses
from conftest import random_batch
from training.pretraining_objective import PretrainingObjective
from training.train_step import PretrainingStep, TrainStep


@pytest.fixture()
def config(tiny_config):
    # Dropout off so that two ways of computing the same update can be compared exactly.
    return dataclasses.replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _model(config, dtype="float32", seed=3):
    keras.utils.set_random_seed(seed)
    return BertPretrainer(config, dtype=dtype)


def _split(batch, parts):
    n = len(batch["input_ids"]) // parts
    return [{k: v[i * n : (i + 1) * n] for k, v in batch.items()} for i in range(parts)]


def _unequal_masks(config, batch=8):
    """A batch whose first half has 1 masked token per row and second half 4."""
    b = random_batch(config, batch=batch, seq=16, predictions=4)
    b["masked_lm_weights"] = np.ones((batch, 4), "float32")
    b["masked_lm_weights"][: batch // 2, 1:] = 0.0
    return b


@pytest.mark.slow
@pytest.mark.parametrize("jit", [True, False])
def test_accumulated_micro_batches_equal_one_big_batch(config, jit):
    batch = random_batch(config, batch=8, seq=16)
    big = _model(config)
    big_step = PretrainingStep(big, keras.optimizers.SGD(0.5), jit_compile=jit)
    big_metrics = big_step([batch])
    acc = _model(config)
    acc_step = PretrainingStep(acc, keras.optimizers.SGD(0.5), accumulation_steps=4, jit_compile=jit)
    acc_metrics = acc_step(_split(batch, 4))
    moved = max(np.abs(a.numpy() - b.numpy()).max() for a, b in zip(big.weights, _model(config).weights))
    assert moved > 1e-4  # the update did something
    for a, b in zip(big.weights, acc.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    assert abs(big_metrics["loss"] - acc_metrics["loss"]) < 1e-5
    assert int(acc_step.optimizer.iterations) == 1


def test_masked_lm_loss_is_normalised_by_the_update_s_mask_count(config):
    """Micro-batches with 1 and 4 masks per row: the update is the big batch's (Google's loss on
    all 8 rows), not the mean of two per-micro-batch means, which weights a sparse row's token 4x."""
    batch = _unequal_masks(config)
    initial = _model(config)
    with tf.GradientTape() as tape:
        loss = pretraining_losses(initial(batch), batch)["loss"]
    gradients = tape.gradient(loss, initial.trainable_variables)
    expected = [
        w.numpy() - 0.5 * tf.convert_to_tensor(g).numpy()
        for w, g in zip(initial.trainable_variables, gradients)
    ]
    naive = []  # what averaging the micro-batches' own means would give
    for half in _split(batch, 2):
        with tf.GradientTape() as tape:
            half_loss = pretraining_losses(initial(half), half)["loss"]
        naive.append(tape.gradient(half_loss, initial.trainable_variables))
    naive_update = [
        w.numpy() - 0.25 * (tf.convert_to_tensor(a) + tf.convert_to_tensor(b)).numpy()
        for w, a, b in zip(initial.trainable_variables, *naive)
    ]

    acc = _model(config)
    metrics = PretrainingStep(acc, keras.optimizers.SGD(0.5), accumulation_steps=2, jit_compile=False)(
        _split(batch, 2)
    )
    got = [w.numpy() for w in acc.trainable_variables]
    assert max(np.abs(a - b).max() for a, b in zip(naive_update, expected)) > 1e-4
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=2e-6)
    assert metrics["loss"] == pytest.approx(float(loss), abs=1e-5)
    assert metrics["mlm_loss"] + metrics["nsp_loss"] == pytest.approx(metrics["loss"])


def test_one_update_per_k_micro_batches_and_none_before(config):
    model = _model(config)
    step = PretrainingStep(model, keras.optimizers.SGD(0.1), accumulation_steps=3, jit_compile=False)
    initial = [w.numpy().copy() for w in model.weights]
    with pytest.raises(ValueError, match="ran out after 2 of 3"):
        step(iter(_split(random_batch(config, batch=4, seq=16), 2)))
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(initial, model.weights))
    assert int(step.optimizer.iterations) == 0
    batches = iter(_split(random_batch(config, batch=12, seq=16), 6))
    step(batches)
    step(batches)
    assert int(step.optimizer.iterations) == 2
    with pytest.raises(ValueError, match="ran out after 0 of 3"):
        step(batches)


@pytest.mark.parametrize("accumulation", [1, 3])
def test_one_worker_update_is_one_compiled_program(config, accumulation):
    """With one worker an update is a single call of one XLA program (the micro-batch loop and
    the optimizer inside it); the multi-worker programs are never traced."""
    step = PretrainingStep(_model(config), keras.optimizers.SGD(0.1), accumulation_steps=accumulation)
    batches = iter(_split(random_batch(config, batch=12, seq=16), 6))
    for _ in range(6 // accumulation):
        step(batches)
    assert step._whole_update.experimental_get_tracing_count() == 1
    assert step._gradients.experimental_get_tracing_count() == 0
    assert step._update.experimental_get_tracing_count() == 0
    assert int(step.optimizer.iterations) == 6 // accumulation


def test_objective_sums_must_match_their_declaration(config):
    class Undeclared(PretrainingObjective):
        sums = ("mlm_loss", "nsp_loss")

    step = TrainStep(_model(config), keras.optimizers.SGD(0.1), Undeclared(), jit_compile=False)
    with pytest.raises(ValueError, match=r"declares \['mlm_loss', 'nsp_loss'\]"):
        step([random_batch(config, batch=2, seq=16)])


def test_float16_overflow_skips_the_update_and_halves_the_scale(config):
    model = _model(config, dtype="mixed_float16")
    optimizer = keras.optimizers.Adam(1e-3)
    step = PretrainingStep(model, optimizer)
    assert step.loss_scale.enabled and float(step.loss_scale.scale) == 2.0**15
    assert step.fp16_compression  # gradients travel as float16 between workers, unscaled
    metrics = step([random_batch(config)])
    assert metrics["applied"] and int(optimizer.iterations) == 1
    weights = [w.numpy().copy() for w in model.weights]
    slots = [v.numpy().copy() for v in optimizer.variables]
    bad = [tf.zeros(v.shape, tf.float32) for v in step.variables]
    bad[3] = tf.fill(bad[3].shape, float("inf"))
    totals = {
        "mlm_loss": tf.constant(1.0),
        "nsp_loss": tf.constant(1.0),
        "masked_tokens": tf.constant(3.0),
        "sequences": tf.constant(2.0),
    }
    status = step._update(bad, totals)
    assert not bool(status["applied"]) and int(status["skipped"]) == 1
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(weights, model.weights))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(slots, optimizer.variables))
    assert int(optimizer.iterations) == 1  # so the schedule does not advance either
    assert float(step.loss_scale.scale) == 2.0**14 and int(step.loss_scale.skipped_steps) == 1


def test_float16_gradients_are_unscaled_like_float32(config):
    batch = random_batch(config, batch=4, seq=16)
    updates = {}
    for dtype in ("float32", "mixed_float16"):
        model = _model(config, dtype=dtype)
        before = [w.numpy().copy() for w in model.trainable_variables]
        PretrainingStep(model, keras.optimizers.SGD(1.0), jit_compile=False)([batch])
        updates[dtype] = [w.numpy() - b for w, b in zip(model.trainable_variables, before)]
    for a, b in zip(updates["float32"], updates["mixed_float16"]):
        np.testing.assert_allclose(a, b, atol=5e-3 * max(1e-3, np.abs(a).max()) + 1e-4)


def test_non_finite_float32_update_is_not_applied(config):
    model = _model(config)
    step = PretrainingStep(model, keras.optimizers.SGD(0.1), jit_compile=False)
    assert not step.loss_scale.enabled and not step.fp16_compression
    batch = random_batch(config, batch=4, seq=16)
    batch["masked_lm_weights"] = batch["masked_lm_weights"].copy()
    batch["masked_lm_weights"][0, 0] = np.nan
    before = [w.numpy().copy() for w in model.weights]
    metrics = step([batch])
    assert not metrics["applied"] and not np.isfinite(metrics["loss"])
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.weights))
    assert int(step.optimizer.iterations) == 0


def test_loss_scale_grows_after_clean_steps():
    from optimization.loss_scale import DynamicLossScale

    scale = DynamicLossScale(initial_scale=8.0, growth_interval=3)
    for finite in (True, True, True, True, False, True):
        scale.update(tf.constant(finite))
    # 3 clean -> 16, 1 clean, overflow -> 8 (counter reset), 1 clean.
    assert float(scale.scale) == 8.0 and int(scale.good_steps) == 1 and int(scale.skipped_steps) == 1
    off = DynamicLossScale(enabled=False)
    assert float(off.scale_loss(tf.constant(3.0))) == 3.0 and bool(off.all_finite([tf.constant(np.inf)]))


def test_evaluate_reports_accuracies_and_losses_over_all_batches(config):
    model = _model(config)
    step = PretrainingStep(model, keras.optimizers.SGD(0.1), jit_compile=False)
    batch = _unequal_masks(config, batch=4)
    result = step.evaluate(iter(_split(batch, 2)))
    outputs = model(batch)
    logits = outputs["mlm_logits"].numpy().argmax(-1)
    w = batch["masked_lm_weights"]
    expected = ((logits == batch["masked_lm_ids"]) * w).sum() / w.sum()
    losses = pretraining_losses(outputs, batch)  # the whole set at once, not a mean of batch means
    assert result["mlm_accuracy"] == pytest.approx(expected) and result["batches"] == 2
    assert result["mlm_loss"] == pytest.approx(float(losses["mlm_loss"]), rel=1e-5)
    assert result["nsp_loss"] == pytest.approx(float(losses["nsp_loss"]), rel=1e-5)
    assert 0.0 <= result["nsp_accuracy"] <= 1.0
    assert step.evaluate(iter(_split(batch, 2)), max_batches=1)["batches"] == 1


def test_training_state_is_the_optimizer_and_the_loss_scale(config):
    """Gradient sums live inside the compiled update (no accumulator variables), so the state a
    checkpoint holds besides the weights is the optimizer's and the loss scale's."""
    model = _model(config)
    step = TrainStep(model, keras.optimizers.SGD(0.1), PretrainingObjective(), accumulation_steps=2)
    step(_split(random_batch(config, batch=4, seq=16), 2))
    state = {id(v) for v in step.state_variables}
    assert id(step.optimizer.iterations) in state and id(step.loss_scale.scale) in state
    assert not hasattr(step, "accumulator")


def _of_length(batch, length):
    return {
        name: value[:, :length] if name in ("input_ids", "input_mask", "segment_ids") else value
        for name, value in batch.items()
    }


def _traced_update(config, batch, **options):
    """A step of 2 micro-batches in bins of 8 that ran one update of a short (8) and a long (16)
    micro-batch of batch / 2 each: (the step, the tracing counts of its micro-step, stacked update
    and update programs, the two micro-batches)."""
    step = PretrainingStep(
        _model(config),
        keras.optimizers.SGD(0.1),
        accumulation_steps=2,
        jit_compile=False,
        bin_lengths=(8, 16),
        **options,
    )
    short, long = _split(random_batch(config, batch=batch, seq=16), 2)
    step([_of_length(short, 8), long])
    functions = (step._accumulate, step._whole_update, step._update)
    return step, [f.experimental_get_tracing_count() for f in functions], (_of_length(short, 8), long)


@pytest.mark.parametrize("trace_ahead", [True, False])
def test_tracing_ahead_traces_every_program_of_every_bin_length_before_the_first_update(config, trace_ahead):
    """Two micro-batches of 8 and 16 positions (bins of 8): with trace_ahead the first update has
    traced the micro-step and the stacked update once for both lengths, and the update program, the
    names settled first (training/compile_cache.py); without, only what the update ran."""
    from tensorflow.python.framework.ops import uid

    from training.compile_cache import STRIDE

    before = uid()
    step, counts, (short, long) = _traced_update(config, batch=4, trace_ahead=trace_ahead)
    assert counts == ([1, 1, 1] if trace_ahead else [1, 0, 1])
    assert (uid() // STRIDE > before // STRIDE) == trace_ahead
    assert (step.traced_ahead is not None) == trace_ahead
    if trace_ahead:
        assert step.traced_ahead.startswith("Traced the update's 3 programs for 2 bin lengths ahead in ")
    step([long, short])  # nothing new to trace
    assert step._accumulate.experimental_get_tracing_count() == 1


def test_tracing_ahead_with_row_counts_and_bins_traces_every_pair(config):
    """Packed rows cut to bins (training/packing.py): one trace of each program serves every
    (row count, bin length)."""
    step, counts, _ = _traced_update(config, batch=8, trace_ahead=True, row_counts=(2, 4))  # 4 rows each
    assert counts == [1, 1, 1]
    assert step.traced_ahead.startswith("Traced the update's 3 programs for 4 shapes ahead in ")


def test_settled_names_start_at_the_next_multiple_of_the_stride_and_the_cache_is_read_from_tf_xla_flags():
    from tensorflow.python.framework.ops import uid

    from training.compile_cache import STRIDE, persistent_cache_in_use, settle_names

    mark = settle_names()
    assert mark % STRIDE == 0 and uid() == mark
    assert settle_names() == mark + STRIDE
    assert persistent_cache_in_use(
        {"TF_XLA_FLAGS": "--tf_xla_auto_jit=-1 --tf_xla_persistent_cache_directory=/c"}
    )
    assert not persistent_cache_in_use({"TF_XLA_FLAGS": "--tf_xla_auto_jit=-1"})
    assert not persistent_cache_in_use({})


@pytest.mark.parametrize("binned", [True, False])
def test_one_trace_serves_every_bin_length_and_draws_no_retracing_warning(config, binned):
    """Five evaluation batches of five lengths: a step that knows them for its bin lengths traces
    its function once for all five; one that expects a single length traces it five times, which
    TensorFlow warns about."""
    import logging

    class Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    lengths = (8, 10, 12, 14, 16)
    step = PretrainingStep(
        _model(config), keras.optimizers.SGD(0.1), jit_compile=False, bin_lengths=lengths if binned else ()
    )
    batch = random_batch(config, batch=2, seq=16)
    collect = Collect()
    tf.get_logger().addHandler(collect)
    try:
        step.evaluate(_of_length(batch, length) for length in lengths)
    finally:
        tf.get_logger().removeHandler(collect)
    assert step._evaluate.experimental_get_tracing_count() == (1 if binned else 5)
    warned = [m for m in collect.messages if "triggered tf.function retracing" in m]
    assert (warned == []) == binned, collect.messages
