"""training/input_pipeline.py: shapes and dtypes, values, worker sharding, clear errors."""

import os
import random

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.files import expand_globs
from data.pretraining import schema, tfrecord
from training.input_pipeline import (
    count_records,
    naming_corrupt_files,
    pretraining_dataset,
    verify_files,
    worker_files,
)

S, P = 16, 4


def write_file(path, n, start, S=S, P=P):
    """n examples whose input_ids[1] is a unique serial number start, start + 1, ..."""
    rng = random.Random(start)
    with tfrecord.RecordWriter(str(path)) as w:
        for k in range(start, start + n):
            length = rng.randrange(5, S + 1)
            ids = [2, k] + [rng.randrange(5, 99) for _ in range(length - 3)] + [3]
            positions = sorted(rng.sample(range(1, length - 1), min(P, length - 2)))[
                : rng.randrange(1, P + 1)
            ]
            w.write(
                schema.serialize_example(
                    schema.pad_features(
                        ids, [0] * 3 + [1] * (length - 3), positions, [ids[p] for p in positions], k % 2, S, P
                    )
                )
            )
    return str(path)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    # 7 files of 10, 11, ..., 16 examples; serials are unique across files.
    files, start = [], 0
    for j in range(7):
        files.append(write_file(d / f"part-{j:02d}.tfrecord", 10 + j, start))
        start += 10 + j
    return str(d), files, start


def serials(dataset):
    return [int(x) for batch in dataset for x in batch["input_ids"][:, 1].numpy()]


def test_training_batches_have_static_shapes_and_dtypes(shards):
    d, files, _ = shards
    ds = pretraining_dataset(
        os.path.join(d, "part-*.tfrecord"), 8, S, P, is_training=True, seed=1, shuffle_buffer=50
    )
    spec = ds.element_spec
    assert spec["input_ids"].shape == (8, S) and spec["input_ids"].dtype == tf.int32
    assert spec["masked_lm_positions"].shape == (8, P) and spec["masked_lm_ids"].dtype == tf.int32
    assert spec["masked_lm_weights"].dtype == tf.float32 and spec["next_sentence_labels"].shape == (8, 1)
    batches = list(ds.take(30))  # more than one epoch (91 examples): it repeats
    assert len(batches) == 30
    b = batches[0]
    # Values are consistent with how the records were written.
    ids, mask, weights = b["input_ids"].numpy(), b["input_mask"].numpy(), b["masked_lm_weights"].numpy()
    np.testing.assert_array_equal(ids[mask == 0], 0)
    for row in range(8):
        n = int(weights[row].sum())
        pos = b["masked_lm_positions"].numpy()[row, :n]
        np.testing.assert_array_equal(b["masked_lm_ids"].numpy()[row, :n], ids[row, pos])
        assert b["next_sentence_labels"].numpy()[row, 0] == ids[row, 1] % 2


def test_evaluation_reads_every_example_once_in_order(shards):
    d, files, total = shards
    ds = pretraining_dataset(files, 8, S, P, is_training=False)
    assert serials(ds) == list(range(total))  # last partial batch kept


def test_workers_read_disjoint_files_that_cover_all(shards):
    d, files, total = shards
    pattern = os.path.join(d, "part-*.tfrecord")
    seen = []
    for worker in range(3):
        mine = worker_files(expand_globs(pattern), 3, worker)
        assert mine == files[worker::3]
        seen.append(
            serials(
                pretraining_dataset(pattern, 4, S, P, is_training=False, num_workers=3, worker_index=worker)
            )
        )
    assert sum(len(s) for s in seen) == total
    assert sorted(x for s in seen for x in s) == list(range(total))
    assert not set(seen[0]) & set(seen[1]) and not set(seen[1]) & set(seen[2])


def test_training_seed_makes_the_order_reproducible(shards):
    d, _, _ = shards
    pattern = os.path.join(d, "part-*.tfrecord")

    def first(seed):
        return serials(
            pretraining_dataset(pattern, 4, S, P, seed=seed, shuffle_buffer=20, deterministic=True).take(5)
        )

    assert first(3) == first(3)
    assert first(3) != first(4)


def test_fewer_files_than_workers_is_a_clear_error(shards):
    d, _, _ = shards
    pattern = os.path.join(d, "part-0[01].tfrecord")
    with pytest.raises(UserError, match=r"2 input file\(s\) .*part-0\[01\].*for 4 workers"):
        pretraining_dataset(pattern, 4, S, P, num_workers=4, worker_index=0)
    # Comma-separated globs: one that matches nothing is named, even beside one that matches.
    with pytest.raises(UserError, match=r"match .*nope-\*"):
        pretraining_dataset(pattern + "," + os.path.join(d, "nope-*"), 4, S, P)


def test_records_of_another_length_name_the_file(tmp_path):
    good = write_file(tmp_path / "a.tfrecord", 3, 0)
    other = write_file(tmp_path / "b.tfrecord", 3, 100, S=32, P=5)
    with pytest.raises(
        UserError,
        match=r"b\.tfrecord: feature 'input_ids' holds 32 .*max_seq_length=32, "
        r"max_predictions_per_seq=5",
    ):
        pretraining_dataset([good, other], 2, S, P, is_training=False)


def test_corrupt_or_foreign_files_name_the_file(tmp_path):
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"this is not a TFRecord file at all, just text\n" * 3)
    with pytest.raises(UserError, match=r"junk\.tfrecord: corrupt record header"):
        pretraining_dataset(str(junk), 2, S, P)
    good = write_file(tmp_path / "c.tfrecord", 4, 0)
    data = bytearray(open(good, "rb").read())
    data[-30] ^= 0xFF  # inside the last record
    open(good, "wb").write(bytes(data))
    with pytest.raises(UserError, match=r"c\.tfrecord: corrupt record at byte"):
        verify_files([good])


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damage_past_the_first_record_names_the_file_when_read(tmp_path, damage):
    path = write_file(tmp_path / "d.tfrecord", 6, 0)
    data = bytearray(open(path, "rb").read())
    if damage == "truncate":
        data = data[:-25]  # a killed writer: the last record is cut short
    else:
        data[-30] ^= 0xFF
    open(path, "wb").write(bytes(data))
    ds = pretraining_dataset(path, 2, S, P, is_training=False)  # the first record is fine
    with pytest.raises(UserError, match=r"d\.tfrecord: (truncated|corrupt) record"):
        list(naming_corrupt_files(iter(ds), [path]))


def test_count_records(shards):
    d, files, total = shards
    assert count_records(files) == total
    assert count_records(os.path.join(d, "part-0[0-2].tfrecord")) == 10 + 11 + 12
