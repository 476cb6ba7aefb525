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
goes through `parse_examples`; `check_file` checks a file's first record against a layout and
its sizes before anything reads it.
"""

from __future__ import annotations

import dataclasses
import struct

from common.errors import UserError
from data.pretraining.tfrecord import CorruptRecordError, read_records

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


def _read_varint(data, i):
    """(value, index after it) of the varint at data[i]."""
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("a truncated or overlong varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data):
    """Yields (field number, wire type, payload) of a protobuf message: an int for varints, bytes
    for the other wire types. Raises ValueError on bytes that are not a message."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            payload, i = _read_varint(data, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            payload, i = data[i : i + size], i + size
        elif wire == 2:
            size, i = _read_varint(data, i)
            payload, i = data[i : i + size], i + size
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if number == 0 or i > len(data):
            raise ValueError("a truncated or malformed field")
        yield number, wire, payload


def _values_in_list(data, kind):
    """How many values a BytesList, FloatList or Int64List message holds (packed or not)."""
    n = 0
    for number, wire, payload in _fields(data):
        if number != 1:
            continue  # an unknown field: skipped, as protobuf does
        if kind == "int64" and wire == 2:  # packed varints
            n += sum(1 for b in payload if b < 0x80)
        elif kind == "float32" and wire == 2:  # packed fixed32
            n += len(payload) // 4
        else:
            n += 1
    return n


_LIST_KINDS = {1: "bytes", 2: "float32", 3: "int64"}  # Feature's oneof: bytes_list, float_list, int64_list


def example_lengths(data):
    """{feature name: (kind, number of values)} of one serialized tf.train.Example.

    kind is "int64", "float32" or "bytes"; used to check records against the expected
    sizes with a clear message. Read from the protobuf wire format here (Example { Features
    features = 1 }, Features { map<string, Feature> feature = 1 }), so checking a record needs no
    TensorFlow; repeated entries and lists merge as protobuf merges them.
    Raises ValueError on bytes that are not an Example.
    """
    out = {}
    for entry in _feature_entries(data):
        name, kind, count = "", None, 0
        for field, field_wire, payload in entry:
            if field == 1 and field_wire == 2:
                name = payload.decode("utf-8")
            elif field == 2 and field_wire == 2:
                for list_field, list_wire, values in _fields(payload):
                    if list_field in _LIST_KINDS and list_wire == 2:
                        listed = _LIST_KINDS[list_field]
                        count = (count if listed == kind else 0) + _values_in_list(values, listed)
                        kind = listed
        out[name] = (kind or "bytes", count)  # a Feature with no list set holds no values
    return out


def _feature_entries(data):
    """The fields of each entry of a serialized Example's feature map (Example { Features
    features = 1 }, Features { map<string, Feature> feature = 1 }), from the wire format."""
    for number, wire, features in _fields(data):
        if number != 1 or wire != 2:
            continue
        for number, wire, entry in _fields(features):
            if number == 1 and wire == 2:
                yield list(_fields(entry))


def _sum_varints(data):
    total, i = 0, 0
    while i < len(data):
        value, i = _read_varint(data, i)
        total += value
    return total


def real_tokens(data):
    """The real tokens of one serialized tf.train.Example: the ones in its input_mask (read from
    the wire format as `example_lengths` reads it; no TensorFlow). Raises ValueError on bytes that
    are not an Example with an input_mask."""
    for fields in _feature_entries(data):
        if not any(f == 1 and w == 2 and payload == INPUT_MASK.encode() for f, w, payload in fields):
            continue
        ones = 0
        for field, field_wire, payload in fields:
            if field != 2 or field_wire != 2:
                continue
            for list_field, list_wire, values in _fields(payload):
                if list_field != 3 or list_wire != 2:
                    continue
                for value_field, value_wire, value in _fields(values):  # Int64List's values
                    if value_field == 1 and value_wire == 0:
                        ones += value
                    elif value_field == 1 and value_wire == 2:  # packed; 0 and 1 are a byte each
                        ones += sum(value) if max(value, default=0) < 0x80 else _sum_varints(value)
        return ones
    raise ValueError(f"a record without {INPUT_MASK!r}")


def sample_real_tokens(files, limit: int = 4096) -> list:
    """Real tokens of up to `limit` records, the first ones of each file in equal parts (records
    are written shuffled within a shard): the lengths `training.layout_choice` predicts from."""
    per_file = max(1, -(-limit // max(1, len(files))))
    out = []
    for path in files:
        out += [real_tokens(r) for r in read_records(path, verify=False, limit=per_file)]
    return out


# ---- checking files ------------------------------------------------------------------------


def check_file(path, max_seq_length, max_predictions_per_seq):
    """Reads the first record of `path` and checks it against the schema and sizes; returns its
    layout (a Layout), or None for an empty file. No TensorFlow: the launchers check every file
    before a training process starts.

    Raises UserError naming the file on a non-TFRecord, corrupt or mismatched record."""
    try:
        first = next(read_records(path, verify=True, limit=1), None)
    except CorruptRecordError as e:
        raise UserError(f"{e} Regenerate it or remove it from the input.") from None
    if first is None:
        return None  # an empty file contributes nothing; not an error
    try:
        found = example_lengths(first)
    except ValueError as e:  # a name that is not UTF-8 too (UnicodeDecodeError)
        raise UserError(f"{path}: its first record is not a tf.train.Example ({e}).") from None
    layout = layout_of(found)
    if layout is None:
        closest = max(LAYOUTS, key=lambda known: len(set(known.names) & set(found)))
        missing = [n for n in closest.names if n not in found]
        what = f"lack the feature {missing[0]!r}" if missing else f"hold other features {sorted(found)}"
        raise UserError(f"{path}: its records {what}; is it a pretraining file?")
    expected = feature_lengths(max_seq_length, max_predictions_per_seq, layout)
    dtypes = {f.name: f.dtype for f in layout.features}
    for name, length in expected.items():
        kind, n = found[name]
        if kind != dtypes[name] or n != length:
            hint = ""
            if name in (INPUT_IDS, MASKED_LM_POSITIONS):
                hint = (
                    f" (the files were written with max_seq_length="
                    f"{found[INPUT_IDS][1]}, max_predictions_per_seq="
                    f"{found.get(MASKED_LM_POSITIONS, ('', '?'))[1]})"
                )
            raise UserError(
                f"{path}: feature {name!r} holds {n} {kind} values but max_seq_length={max_seq_length}, "
                f"max_predictions_per_seq={max_predictions_per_seq} need {length} {dtypes[name]}{hint}."
            )
    return layout


def check_files(files, max_seq_length, max_predictions_per_seq):
    """check_file on every file; returns their one layout (the static one when every file is
    empty). Raises UserError naming two files whose layouts differ."""
    seen = {}
    for path in files:
        layout = check_file(path, max_seq_length, max_predictions_per_seq)
        if layout is not None:
            seen.setdefault(layout, path)
    if len(seen) > 1:
        (a, first), (b, second) = list(seen.items())[:2]
        raise UserError(
            f"The input mixes record layouts: {first} is {a.describe()} but {second} is {b.describe()}; "
            "give files of one TFRecord stage."
        )
    return next(iter(seen), STATIC_LAYOUT)
