"""Pretraining and fine-tuning heads: shapes, dtypes, and the config round trip of each."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.encoder import BertEncoder
from bert.heads import ClassifierHead, MaskedLMHead, NextSentenceHead, SpanHead
from conftest import random_batch
from layer_contract import assert_config_round_trip


def _sequence(config, seed=0):
    batch = random_batch(config)
    x = np.random.default_rng(seed).normal(size=(*batch["input_ids"].shape, config.hidden_size))
    return x.astype("float32"), batch["masked_lm_positions"]


def test_fine_tuning_heads_shapes(tiny_config):
    encoder = BertEncoder(tiny_config)
    batch = random_batch(tiny_config, batch=2, seq=10)
    out = encoder(batch)
    span = SpanHead(tiny_config, name="squad")(out["sequence_output"])
    assert span["start_logits"].shape == (2, 10) and span["end_logits"].dtype == tf.float32
    logits = ClassifierHead(tiny_config, 3, name="classifier")(out["pooled_output"])
    assert logits.shape == (2, 3)


def test_masked_lm_head_round_trip_with_its_own_table(tiny_config):
    sequence, positions = _sequence(tiny_config)
    head = MaskedLMHead(tiny_config, name="cls_predictions")
    copy = assert_config_round_trip(head, sequence, positions)
    assert copy.word_embeddings.shape == (tiny_config.vocab_size, tiny_config.hidden_size)
    assert copy(sequence, positions).shape == (*positions.shape, tiny_config.vocab_size)


def test_masked_lm_head_scores_against_the_table_it_is_given(tiny_config):
    sequence, positions = _sequence(tiny_config)
    table = keras.Variable(np.zeros((tiny_config.vocab_size, tiny_config.hidden_size), "float32"))
    head = MaskedLMHead(tiny_config, table, name="cls_predictions")
    assert head.word_embeddings is table
    np.testing.assert_array_equal(head(sequence, positions).numpy(), 0.0)  # zero table, zero bias
    assert "config" in head.get_config() and "word_embeddings" not in head.get_config()


def test_next_sentence_head_round_trip(tiny_config):
    pooled = np.random.default_rng(0).normal(size=(3, tiny_config.hidden_size)).astype("float32")
    copy = assert_config_round_trip(NextSentenceHead(tiny_config, name="cls_seq_relationship"), pooled)
    assert copy(pooled).shape == (3, 2) and copy(pooled).dtype == tf.float32


def test_span_head_round_trip(tiny_config):
    sequence, _ = _sequence(tiny_config)
    assert_config_round_trip(SpanHead(tiny_config, name="squad"), sequence)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_classifier_head_round_trip(tiny_config, policy):
    pooled = np.random.default_rng(0).normal(size=(3, tiny_config.hidden_size)).astype("float32")
    copy = assert_config_round_trip(ClassifierHead(tiny_config, 5, name="classifier", dtype=policy), pooled)
    assert copy.num_classes == 5 and copy(pooled).shape == (3, 5)
