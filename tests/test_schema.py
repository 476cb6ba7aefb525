"""The pretraining Example schema (data/pretraining/schema.py): the bytes we write are what protobuf
writes, and Google's reader reads them back exactly."""

import os
import random

import numpy as np
import pytest
import tensorflow as tf

from data.pretraining import native, schema

S, P = 16, 4


def google_feature_spec(max_seq_length, max_predictions_per_seq):
    # Written out as in google-research/bert run_pretraining.py, not taken from schema.py.
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def google_example(features):
    # Google's create_int_feature / create_float_feature.
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    f = {name: floats(v) if name == "masked_lm_weights" else ints(v) for name, v in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=f))


def random_features(rng, n_tokens, n_masked, vocab_size=30522):
    ids = [101] + [rng.randrange(vocab_size) for _ in range(n_tokens - 2)] + [102]
    cut = rng.randrange(1, n_tokens - 1)
    segments = [0] * (cut + 1) + [1] * (n_tokens - cut - 1)
    positions = sorted(rng.sample(range(1, n_tokens - 1), n_masked))
    return schema.pad_features(
        ids, segments, positions, [ids[p] for p in positions], rng.random() < 0.5, S, P
    )


def test_feature_layout_is_googles():
    assert schema.FEATURE_NAMES == tuple(google_feature_spec(S, P))
    assert schema.feature_lengths(128, 20) == {
        "input_ids": 128,
        "input_mask": 128,
        "segment_ids": 128,
        "masked_lm_positions": 20,
        "masked_lm_ids": 20,
        "masked_lm_weights": 20,
        "next_sentence_labels": 1,
    }
    spec = schema.feature_spec(S, P)
    for name, google in google_feature_spec(S, P).items():
        assert spec[name].shape == google.shape and spec[name].dtype == google.dtype


def test_pad_features_layout():
    f = schema.pad_features([2, 7, 3, 8, 3], [0, 0, 0, 1, 1], [1], [9], True, 8, 3)
    assert f == {
        "input_ids": [2, 7, 3, 8, 3, 0, 0, 0],
        "input_mask": [1, 1, 1, 1, 1, 0, 0, 0],
        "segment_ids": [0, 0, 0, 1, 1, 0, 0, 0],
        "masked_lm_positions": [1, 0, 0],
        "masked_lm_ids": [9, 0, 0],
        "masked_lm_weights": [1.0, 0.0, 0.0],
        "next_sentence_labels": [1],
    }
    with pytest.raises(ValueError, match="max_seq_length=4"):
        schema.pad_features([1] * 5, [0] * 5, [], [], False, 4, 3)


def test_serialization_equals_protobuf_deterministic_bytes():
    rng = random.Random(0)
    for n_tokens, n_masked in [(S, P), (5, 1), (9, 3), (S, 0)]:
        features = random_features(rng, n_tokens, n_masked)
        ours = schema.serialize_example(features)
        assert ours == google_example(features).SerializeToString(deterministic=True)
    # Large and negative int64 values use protobuf's varint forms too.
    features = random_features(rng, S, 2)
    features["masked_lm_ids"] = [2**40, -1, 0, 127]
    expected = google_example(features).SerializeToString(deterministic=True)
    assert schema.serialize_example(features) == expected


def test_googles_reader_parses_our_bytes_exactly():
    rng = random.Random(1)
    batch = [random_features(rng, rng.randrange(5, S + 1), rng.randrange(0, P + 1)) for _ in range(6)]
    for features in batch:
        parsed = tf.io.parse_single_example(schema.serialize_example(features), google_feature_spec(S, P))
        for name, values in features.items():
            want = np.asarray(values, parsed[name].dtype.as_numpy_dtype)
            np.testing.assert_array_equal(parsed[name].numpy(), want)
    # And a non-deterministic (hash-ordered) SerializeToString parses to the same values as ours.
    ours = schema.serialize_example(batch[0])
    theirs = google_example(batch[0]).SerializeToString()
    a = tf.io.parse_single_example(ours, google_feature_spec(S, P))
    b = tf.io.parse_single_example(theirs, google_feature_spec(S, P))
    for name in a:
        np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())


def test_parse_examples_gives_int32_and_float32():
    rng = random.Random(2)
    batch = [schema.serialize_example(random_features(rng, S, 2)) for _ in range(3)]
    parsed = schema.parse_examples(tf.constant(batch), S, P)
    assert set(parsed) == set(schema.FEATURE_NAMES)
    for name, value in parsed.items():
        assert value.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32)
    assert parsed["input_ids"].shape == (3, S) and parsed["next_sentence_labels"].shape == (3, 1)


def test_native_serializer_matches(tmp_path):
    lib = native.load(required=False)
    if lib is None:
        pytest.skip(f"no native helper: {native.unavailable_reason()}")
    layout = native.NativeLayout(*schema.native_layout())
    rng = random.Random(4)
    for n_tokens, n_masked in [(S, P), (5, 1), (12, 0)]:
        features = random_features(rng, n_tokens, n_masked)
        ours = native.serialize_example(lib, layout, features, S, P)
        assert ours == schema.serialize_example(features)
    assert os.path.exists(native._SOURCE)
