"""The train step: accumulation equals one big batch, no extra update, fp16 overflow is skipped."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.pretraining import BertPretrainer
from conftest import random_batch
from training.train_step import PretrainingStep


@pytest.fixture()
def config(tiny_config):
    # Dropout off so that two ways of computing the same update can be compared exactly.
    return dataclasses.replace(tiny_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _model(config, dtype="float32", seed=3):
    keras.utils.set_random_seed(seed)
    return BertPretrainer(config, dtype=dtype)


def _split(batch, parts):
    n = len(batch["input_ids"]) // parts
    return [{k: v[i * n:(i + 1) * n] for k, v in batch.items()} for i in range(parts)]


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
    assert int(acc_step.optimizer.iterations) == 1 and int(acc_step.accumulator.count) == 0


def test_one_update_per_k_micro_batches_and_none_before(config):
    model = _model(config)
    step = PretrainingStep(model, keras.optimizers.SGD(0.1), accumulation_steps=3)
    batches = iter(_split(random_batch(config, batch=16, seq=16), 8))
    initial = [w.numpy().copy() for w in model.weights]
    step._micro_step(next(batches))
    step._micro_step(next(batches))
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(initial, model.weights))
    assert int(step.optimizer.iterations) == 0 and int(step.accumulator.count) == 2
    step.accumulator.reset()
    step(batches)
    step(batches)
    assert int(step.optimizer.iterations) == 2
    with pytest.raises(ValueError, match="ran out after 0 of 3"):
        step(batches)


def test_float16_overflow_skips_the_update_and_halves_the_scale(config):
    model = _model(config, dtype="mixed_float16")
    optimizer = keras.optimizers.Adam(1e-3)
    step = PretrainingStep(model, optimizer)
    assert step.loss_scale.enabled and float(step.loss_scale.scale) == 2.0 ** 15
    metrics = step([random_batch(config)])
    assert metrics["applied"] and int(optimizer.iterations) == 1
    weights = [w.numpy().copy() for w in model.weights]
    slots = [v.numpy().copy() for v in optimizer.variables]
    bad = [tf.zeros(v.shape, tf.float32) for v in step.variables]
    bad[3] = tf.fill(bad[3].shape, float("inf"))
    applied = step._update(bad)
    assert not bool(applied)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(weights, model.weights))
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(slots, optimizer.variables))
    assert int(optimizer.iterations) == 1  # so the schedule does not advance either
    assert float(step.loss_scale.scale) == 2.0 ** 14 and int(step.loss_scale.skipped_steps) == 1


def test_loss_scale_grows_after_clean_steps():
    from optimization.loss_scale import DynamicLossScale
    scale = DynamicLossScale(initial_scale=8.0, growth_interval=3)
    for finite in (True, True, True, True, False, True):
        scale.update(tf.constant(finite))
    # 3 clean -> 16, 1 clean, overflow -> 8 (counter reset), 1 clean.
    assert float(scale.scale) == 8.0 and int(scale.good_steps) == 1 and int(scale.skipped_steps) == 1
    off = DynamicLossScale(enabled=False)
    assert float(off.scale_loss(tf.constant(3.0))) == 3.0 and bool(off.all_finite([tf.constant(np.inf)]))


def test_evaluate_reports_masked_lm_accuracy(config):
    model = _model(config)
    step = PretrainingStep(model, keras.optimizers.SGD(0.1))
    batch = random_batch(config, batch=4, seq=16)
    result = step.evaluate([batch])
    logits = model(batch)["mlm_logits"].numpy().argmax(-1)
    w = batch["masked_lm_weights"]
    expected = ((logits == batch["masked_lm_ids"]) * w).sum() / w.sum()
    assert result["mlm_accuracy"] == pytest.approx(expected) and result["batches"] == 1
