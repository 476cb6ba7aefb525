"""The pretraining Example schema (data/pretraining/schema.py): the bytes we write are what protobuf
writes, and Google's reader reads them back exactly."""

import os
import random
import struct

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


def _protobufs_lengths(data: bytes) -> dict:
    """example_lengths as TensorFlow's protobuf classes read `data`."""
    example = tf.train.Example.FromString(data)
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value if kind else []
        out[name] = ({"int64_list": "int64", "float_list": "float32"}.get(kind, "bytes"), len(values))
    return out


def test_example_lengths_read_the_wire_format_as_protobuf_does():
    rng = random.Random(4)
    for _ in range(60):
        example = tf.train.Example()
        for _ in range(rng.randint(0, 6)):
            feature = example.features.feature[rng.choice(["input_ids", "masked_lm_weights", "ü", "k" * 200])]
            kind = rng.randrange(4)
            if kind == 0:  # varints of one to ten bytes, negative ones included
                feature.int64_list.value.extend(
                    rng.choice([0, 5, 300, 2**40, -1]) for _ in range(rng.randint(0, 150))
                )
            elif kind == 1:
                feature.float_list.value.extend(rng.random() for _ in range(rng.randint(0, 150)))
            elif kind == 2:
                feature.bytes_list.value.extend(b"ab" * rng.randint(0, 3) for _ in range(rng.randint(0, 4)))
            else:
                feature.int64_list.SetInParent()  # a list set, empty
        data = example.SerializeToString(deterministic=rng.random() < 0.5)
        assert schema.example_lengths(data) == _protobufs_lengths(data)

    # Unpacked lists, and repeated entries and lists (protobuf merges them), written by hand.
    def field(number, payload):
        return bytes([number << 3 | 2]) + schema._varint(len(payload)) + payload

    floats = b"".join(b"\x0d" + struct.pack("<f", x) for x in (1.0, 2.0))
    ints = b"\x08\x05\x08\x96\x01"
    entries = [(b"f", field(2, floats)), (b"i", field(3, ints)), (b"i", field(3, ints))]
    entries += [
        (b"m", field(3, ints) + field(3, ints)),
        (b"s", field(3, ints) + field(2, floats)),
        (b"e", b""),
    ]
    data = field(1, b"".join(field(1, field(1, name) + field(2, feature)) for name, feature in entries))
    assert (
        schema.example_lengths(data)
        == _protobufs_lengths(data)
        == {
            "f": ("float32", 2),
            "i": ("int64", 2),
            "m": ("int64", 4),
            "s": ("float32", 2),
            "e": ("bytes", 0),
        }
    )
    for bad in (b"\x0a\x05ab", b"\xff", b"\x0b", data[:-1]):
        with pytest.raises(ValueError):
            schema.example_lengths(bad)


@pytest.mark.process
def test_check_file_names_the_file_and_needs_no_tensorflow(tmp_path):
    # The launchers check every input file in their planning process, which never imports
    # TensorFlow (a training process starts it): the checks and their sentences, without it.
    import subprocess
    import sys

    from data.pretraining import tfrecord

    good, short, other, junk = (str(tmp_path / n) for n in ("good", "short", "other", "junk"))
    with tfrecord.RecordWriter(good) as w:
        w.write(schema.serialize_example(random_features(random.Random(0), 10, 2)))
    with tfrecord.RecordWriter(short) as w:  # records of seq 8 / 2 predictions
        w.write(
            schema.serialize_example(schema.pad_features([101, 5, 6, 102], [0] * 4, [1], [5], False, 8, 2))
        )
    with tfrecord.RecordWriter(other) as w:
        w.write(
            tf.train.Example(
                features=tf.train.Features(feature={"text": tf.train.Feature()})
            ).SerializeToString()
        )
    with tfrecord.RecordWriter(junk) as w:
        w.write(b"\xff\xff")
    code = f"""
import sys
from data.pretraining import schema
from common.errors import UserError
assert schema.check_file({good!r}, {S}, {P}) is schema.STATIC_LAYOUT
for path in ({short!r}, {other!r}, {junk!r}):
    try:
        schema.check_file(path, {S}, {P})
    except UserError as e:
        print(e)
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        f"{short}: feature 'input_ids' holds 8 int64 values but max_seq_length={S}, max_predictions_per_seq={P} "
        f"need {S} int64 (the files were written with max_seq_length=8, max_predictions_per_seq=2).",
        f"{other}: its records lack the feature 'input_ids'; is it a pretraining file?",
        f"{junk}: its first record is not a tf.train.Example (a truncated or overlong varint).",
    ]


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
