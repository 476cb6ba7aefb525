"""TFRecord files without TensorFlow: framing, CRC-32C, writing, reading, counting.

Each record is `uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)`.
`RecordWriter` writes it (the data writer never imports TensorFlow), `read_records` reads and
checks it with errors that name the file and the byte offset (TensorFlow's own reader reports
corruption without the file name), `count_records` walks the length headers.
"""

from __future__ import annotations

import os
import struct


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = None


def crc32c(data):
    """CRC-32C (Castagnoli) of bytes: in C when this process already loaded the native writer,
    else in Python. Never builds the native library: reading records in a training process must
    not start a C compiler."""
    from data.pretraining import native

    lib = native.loaded()
    if lib is not None:
        return native.crc32c(lib, data)
    global _CRC_TABLE
    if _CRC_TABLE is None:
        _CRC_TABLE = _crc32c_table()
    table, c = _CRC_TABLE, 0xFFFFFFFF
    for b in bytes(data):
        c = (c >> 8) ^ table[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data):
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


class RecordWriter:
    """Writes TFRecord files without TensorFlow: `write(example_bytes)` frames one record,
    `write_framed(buffer)` appends records framed elsewhere (the C writer)."""

    def __init__(self, path):
        self.path = path
        self._file = open(path, "wb")

    def write(self, data):
        self._file.write(frame_record(data))

    def write_framed(self, buffer):
        self._file.write(buffer)

    def close(self):
        if not self._file.closed:
            self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CorruptRecordError(ValueError):
    """A TFRecord file is truncated or fails its CRC; the message names the file."""


def _open(path):
    # Local files with open(); other schemes (gs://, hdfs://) through tf.io.gfile.
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def read_records(path, verify=True, limit=None):
    """Yields the data of each record of a TFRecord file (at most `limit`).

    Raises CorruptRecordError naming the file and the byte offset of a truncated record or
    (with `verify`) a CRC mismatch.
    """
    with _open(path) as f:
        offset, n = 0, 0
        while limit is None or n < limit:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise CorruptRecordError(f"{path}: truncated record header at byte {offset}.")
            (length,) = struct.unpack("<Q", header[:8])
            if verify and struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                raise CorruptRecordError(
                    f"{path}: corrupt record header at byte {offset} (CRC mismatch); is this a TFRecord file?"
                )
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                raise CorruptRecordError(f"{path}: truncated record at byte {offset}.")
            if verify and struct.unpack("<I", footer)[0] != masked_crc32c(data):
                raise CorruptRecordError(f"{path}: corrupt record at byte {offset} (CRC mismatch).")
            yield data
            offset += 16 + length
            n += 1


def count_records(path):
    """Number of records in one TFRecord file, by walking the length headers (no CRC check).

    Raises CorruptRecordError naming the file if it ends inside a record.
    """
    if "://" in path:
        return sum(1 for _ in read_records(path, verify=False))
    size = os.path.getsize(path)
    count, offset = 0, 0
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(8)
            if len(header) < 8:
                raise CorruptRecordError(f"{path}: truncated record header at byte {offset}.")
            offset += 16 + struct.unpack("<Q", header)[0]
            if offset > size:
                raise CorruptRecordError(f"{path}: truncated record at the end of the file.")
            count += 1
    return count
