"""The TFRecord schema of pretraining examples: the one module the writer and the reader share.

Records come in two layouts (S = max_seq_length, P = max_predictions_per_seq).

Static masking (`--masking=static`, Google's and NVIDIA's layout, masked when written):

    input_ids            int64 [S]  [CLS] A [SEP] B [SEP] with the masks applied, zero padded
    input_mask           int64 [S]  1 for real tokens, 0 for padding
    segment_ids          int64 [S]  0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
    masked_lm_positions  int64 [P]  zero padded
    masked_lm_ids        int64 [P]  the original token ids, zero padded
    masked_lm_weights    float [P]  1.0 for real predictions, 0.0 for padding
    next_sentence_labels int64 [1]  1 = B is a random sentence, 0 = B really follows A

Dynamic masking (`--masking=dynamic`, unmasked: training/masking.py masks each sequence as it is
read, differently in every epoch):

    input_ids            int64 [S]  [CLS] A [SEP] B [SEP], unmasked, zero padded
    input_mask, segment_ids, next_sentence_labels   as above
    masking_ids          int64 [4]  the ids of [CLS], [SEP], [MASK] and the vocabulary size
                                    (random replacements are drawn below it)
    word_continues       int64 [S]  whole-word masking only: 1 where the token is a "##" piece

The reader tells the layouts apart by their feature names (`layout_of`).

Writing: `serialize_example` builds the protobuf bytes directly (no message objects) in
protobuf's deterministic form, which sorts map keys. Google's writer goes through
`tf.train.Example.SerializeToString()`, whose map order is a hash order that even changes
between processes, so "the same bytes as Google" only has one stable meaning: the
deterministic serialization of the same values, which is what this produces (and what
`SerializeToString(deterministic=True)` gives). Every protobuf reader parses both alike.

Framing the records into files is data/pretraining/tfrecord.py; reading them into the model
goes through `parse_examples`.
"""

from __future__ import annotations

import dataclasses
import struct

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
NEXT_SENTENCE_LABELS = "next_sentence_labels"
MASKING_IDS = "masking_ids"
WORD_CONTINUES = "word_continues"

SEQ = "max_seq_length"
PRED = "max_predictions_per_seq"

STATIC, DYNAMIC = "static", "dynamic"
MASKINGS = (STATIC, DYNAMIC)


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    dtype: str  # "int64" or "float32" (tf.train.FloatList holds float32)
    length: str | int  # SEQ, PRED or a fixed count


# Google's order (the order its writer adds them), then the features of unmasked records;
# data/pretraining/native.c numbers the features in this order too.
ALL_FEATURES = (
    Feature(INPUT_IDS, "int64", SEQ),
    Feature(INPUT_MASK, "int64", SEQ),
    Feature(SEGMENT_IDS, "int64", SEQ),
    Feature(MASKED_LM_POSITIONS, "int64", PRED),
    Feature(MASKED_LM_IDS, "int64", PRED),
    Feature(MASKED_LM_WEIGHTS, "float32", PRED),
    Feature(NEXT_SENTENCE_LABELS, "int64", 1),
    Feature(MASKING_IDS, "int64", 4),
    Feature(WORD_CONTINUES, "int64", SEQ),
)
_BY_NAME = {f.name: f for f in ALL_FEATURES}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The features of one record layout: static (masked when written) or dynamic (unmasked;
    `whole_word` when the records carry word_continues for whole-word masking)."""

    masking: str
    whole_word: bool = False

    @property
    def names(self) -> tuple:
        if self.masking == STATIC:
            return ALL_FEATURES_STATIC
        return (INPUT_IDS, INPUT_MASK, SEGMENT_IDS, NEXT_SENTENCE_LABELS, MASKING_IDS) + (
            (WORD_CONTINUES,) if self.whole_word else ()
        )

    @property
    def features(self) -> tuple:
        return tuple(_BY_NAME[n] for n in self.names)

    def describe(self) -> str:
        if self.masking == STATIC:
            return "static (masked when written)"
        return "dynamic (masked as read" + (", whole words)" if self.whole_word else ")")


ALL_FEATURES_STATIC = tuple(f.name for f in ALL_FEATURES[:7])
STATIC_LAYOUT = Layout(STATIC)
FEATURES = STATIC_LAYOUT.features
FEATURE_NAMES = STATIC_LAYOUT.names
# Protobuf's deterministic serialization writes map entries sorted by key.
SERIALIZATION_ORDER = tuple(sorted(FEATURE_NAMES))


LAYOUTS = (STATIC_LAYOUT, Layout(DYNAMIC), Layout(DYNAMIC, whole_word=True))


def layout_of(names) -> Layout | None:
    """The layout whose features are exactly `names` (a record's feature names), else None."""
    names = set(names)
    for layout in LAYOUTS:
        if names == set(layout.names):
            return layout
    return None


def feature_lengths(max_seq_length, max_predictions_per_seq, layout=STATIC_LAYOUT):
    """Returns {feature name: number of values} of `layout` for the given sizes."""
    sizes = {SEQ: max_seq_length, PRED: max_predictions_per_seq}
    return {f.name: sizes.get(f.length, f.length) for f in layout.features}


def feature_spec(max_seq_length, max_predictions_per_seq, layout=STATIC_LAYOUT):
    """The reader spec (Google's for the static layout): {name: tf.io.FixedLenFeature([length],
    tf.int64 | tf.float32)}."""
    import tensorflow as tf

    lengths = feature_lengths(max_seq_length, max_predictions_per_seq, layout)
    return {
        f.name: tf.io.FixedLenFeature([lengths[f.name]], tf.float32 if f.dtype == "float32" else tf.int64)
        for f in layout.features
    }


def parse_examples(serialized, max_seq_length, max_predictions_per_seq, layout=STATIC_LAYOUT):
    """Parses a batch of serialized examples [B] of `layout` into model inputs.

    Returns a dict of int32 tensors [B, S] / [B, P] / [B, 1] / [B, 4] (int64 is what
    tf.train.Example stores; TPUs and the model want int32) and float32 masked_lm_weights [B, P].
    """
    import tensorflow as tf

    parsed = tf.io.parse_example(serialized, feature_spec(max_seq_length, max_predictions_per_seq, layout))
    return {
        name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value for name, value in parsed.items()
    }


# ---- serialization ------------------------------------------------------------------------

_VARINT_CACHE = [bytes([v]) if v < 0x80 else bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(1 << 14)]


def _varint(value):
    if 0 <= value < 1 << 14:
        return _VARINT_CACHE[value]
    value &= (1 << 64) - 1  # negative int64: ten bytes of two's complement, as protobuf writes
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry(name, dtype, values):
    if dtype == "float32":
        packed = struct.pack(f"<{len(values)}f", *values)
        list_tag = b"\x12"  # Feature.float_list = 2
    else:
        packed = b"".join(_varint(int(v)) for v in values)
        list_tag = b"\x1a"  # Feature.int64_list = 3
    # XList { repeated value = 1 [packed] }; an empty repeated field is omitted.
    value_list = b"\x0a" + _varint(len(packed)) + packed if len(values) else b""
    feature = list_tag + _varint(len(value_list)) + value_list
    key = name.encode()
    # Features.feature map entry { key = 1; value = 2 }.
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
    return b"\x0a" + _varint(len(entry)) + entry


def serialize_example(features, layout=STATIC_LAYOUT):
    """Serializes {feature name: sequence of values} to tf.train.Example bytes.

    Every feature of `layout` must be present; the values are written as given (the
    writer pads them). The bytes equal `tf.train.Example(...).SerializeToString(
    deterministic=True)` for the same values.
    """
    missing = [n for n in layout.names if n not in features]
    if missing:
        raise KeyError(f"serialize_example needs the features {missing}.")
    body = b"".join(_entry(n, _BY_NAME[n].dtype, features[n]) for n in sorted(layout.names))
    return b"\x0a" + _varint(len(body)) + body  # Example { features = 1 }


def pad_features(
    input_ids,
    segment_ids,
    masked_lm_positions,
    masked_lm_ids,
    is_random_next,
    max_seq_length,
    max_predictions_per_seq,
):
    """Google's writer step: one instance's ids -> the padded feature dict of the schema."""
    n, m = len(input_ids), len(masked_lm_positions)
    if n > max_seq_length or len(segment_ids) != n:
        raise ValueError(f"An instance of {n} tokens does not fit max_seq_length={max_seq_length}.")
    if m > max_predictions_per_seq or len(masked_lm_ids) != m:
        raise ValueError(f"{m} predictions exceed max_predictions_per_seq={max_predictions_per_seq}.")
    pad, pad_p = [0] * (max_seq_length - n), [0] * (max_predictions_per_seq - m)
    return {
        INPUT_IDS: list(input_ids) + pad,
        INPUT_MASK: [1] * n + pad,
        SEGMENT_IDS: list(segment_ids) + pad,
        MASKED_LM_POSITIONS: list(masked_lm_positions) + pad_p,
        MASKED_LM_IDS: list(masked_lm_ids) + pad_p,
        MASKED_LM_WEIGHTS: [1.0] * m + [0.0] * (max_predictions_per_seq - m),
        NEXT_SENTENCE_LABELS: [1 if is_random_next else 0],
    }


def unmasked_features(input_ids, segment_ids, is_random_next, masking_ids, word_continues, max_seq_length):
    """The dynamic layout's padded feature dict of one instance: `masking_ids` is ([CLS] id, [SEP]
    id, [MASK] id, vocabulary size); `word_continues` (0/1 per token) or None without whole-word
    masking."""
    n = len(input_ids)
    if n > max_seq_length or len(segment_ids) != n:
        raise ValueError(f"An instance of {n} tokens does not fit max_seq_length={max_seq_length}.")
    pad = [0] * (max_seq_length - n)
    features = {
        INPUT_IDS: list(input_ids) + pad,
        INPUT_MASK: [1] * n + pad,
        SEGMENT_IDS: list(segment_ids) + pad,
        NEXT_SENTENCE_LABELS: [1 if is_random_next else 0],
        MASKING_IDS: list(masking_ids),
    }
    if word_continues is not None:
        features[WORD_CONTINUES] = list(word_continues) + pad
    return features


def native_layout(layout=STATIC_LAYOUT):
    """(keys bytes, key lengths, feature numbers) of `layout` in serialization order, for the C
    writer (feature numbers index ALL_FEATURES)."""
    order = sorted(layout.names)
    names = [f.name for f in ALL_FEATURES]
    keys = b"".join(n.encode() for n in order)
    lengths = [len(n.encode()) for n in order]
    kinds = [names.index(n) for n in order]
    return keys, lengths, kinds


def example_lengths(data):
    """{feature name: (kind, number of values)} of one serialized tf.train.Example.

    kind is "int64", "float32" or "bytes"; used to check records against the expected
    sizes with a clear message. Uses the protobuf classes that ship with TensorFlow.
    """
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example.FromString(data)
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value if kind else []
        out[name] = ({"int64_list": "int64", "float_list": "float32"}.get(kind, "bytes"), len(values))
    return out
