"""TFRecord framing without TensorFlow (data/pretraining/tfrecord.py): CRC-32C, round trips through
TensorFlow's reader and writer, corruption named with the file and offset."""

import os
import random
import struct

import pytest
import tensorflow as tf

from data.pretraining import native, schema, tfrecord
from test_schema import S, random_features


def test_crc32c_known_values():
    # RFC 3720 / iSCSI check value, and TensorFlow's masking of it.
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    assert tfrecord.crc32c(b"") == 0
    lib = native.load(required=False)
    if lib is not None:
        data = bytes(range(256)) * 5 + b"tail"
        table = tfrecord._crc32c_table()
        c = 0xFFFFFFFF
        for b in data:
            c = (c >> 8) ^ table[(c ^ b) & 0xFF]
        assert native.crc32c(lib, data) == c ^ 0xFFFFFFFF


def test_records_round_trip_with_tensorflow(tmp_path):
    rng = random.Random(3)
    examples = [schema.serialize_example(random_features(rng, S, 2)) for _ in range(5)]
    ours = str(tmp_path / "ours.tfrecord")
    with tfrecord.RecordWriter(ours) as w:
        for e in examples:
            w.write(e)
    # TensorFlow reads our framing (it checks the CRCs) ...
    assert [r.numpy() for r in tf.data.TFRecordDataset(ours)] == examples
    # ... and writes the same bytes.
    theirs = str(tmp_path / "theirs.tfrecord")
    with tf.io.TFRecordWriter(theirs) as w:
        for e in examples:
            w.write(e)
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert list(tfrecord.read_records(ours)) == examples
    assert tfrecord.count_records(ours) == 5


def test_corrupt_and_truncated_records_name_the_file(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    with tfrecord.RecordWriter(path) as w:
        w.write(b"x" * 40)
        w.write(b"y" * 40)
    data = bytearray(open(path, "rb").read())
    data[12 + 56 + 20] ^= 0xFF  # a byte inside the second record's data
    open(path, "wb").write(bytes(data))
    with pytest.raises(tfrecord.CorruptRecordError, match=r"bad\.tfrecord: corrupt record at byte 56"):
        list(tfrecord.read_records(path))
    open(path, "wb").write(bytes(data[:-10]))
    with pytest.raises(tfrecord.CorruptRecordError, match="truncated"):
        tfrecord.count_records(path)


def test_frame_record_header():
    framed = tfrecord.frame_record(b"abc")
    assert struct.unpack("<Q", framed[:8])[0] == 3 and framed[12:15] == b"abc" and len(framed) == 19


@pytest.mark.process
def test_reading_records_in_a_training_process_never_builds_the_native_library(tmp_path):
    # The C writer compiles on first use; a training process that only reads records (the input
    # pipeline's checks, CRC verification) must never start a compiler, so it never loads it.
    import subprocess
    import sys

    path = str(tmp_path / "r.tfrecord")
    with tfrecord.RecordWriter(path) as w:
        w.write(schema.serialize_example(random_features(random.Random(0), 10, 2)))
    code = (
        "import sys\n"
        "from data.pretraining import native, tfrecord\n"
        "from data.pretraining import schema\n"
        "from training import input_pipeline\n"
        f"assert len(list(tfrecord.read_records({path!r}, verify=True))) == 1\n"
        f"schema.check_file({path!r}, {S}, 4)\n"
        "assert native.loaded() is None and native.unavailable_reason() is None, 'native load attempted'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
