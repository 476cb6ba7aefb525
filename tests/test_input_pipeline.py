"""training/input_pipeline.py and data_order.py: shapes and dtypes, values, one global order for
every worker count, exact start positions, record counts, clear errors."""

import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from data.pretraining import schema, tfrecord
from training.input_pipeline import (
    count_records,
    evaluation_dataset,
    naming_corrupt_files,
    record_counts,
    training_dataset,
    verify_files,
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
    ds = training_dataset(files, 8, S, P, seed=1, window=50)
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
    ds = evaluation_dataset(files, 8, S, P)
    assert serials(ds) == list(range(total))  # last partial batch kept


def _order(files, batch, workers, start=0, micro_batches=12, window=20, seed=5):
    """The serials of the first micro_batches micro-batches of every worker, dealt back in the
    order of the global stream (worker r's k-th micro-batch is number k * workers + r)."""
    streams = [
        [
            b["input_ids"][:, 1].numpy().tolist()
            for b in training_dataset(
                files, batch, S, P, num_workers=workers, worker_index=r, start=start, seed=seed, window=window
            ).take(micro_batches)
        ]
        for r in range(workers)
    ]
    return [x for k in range(micro_batches) for r in range(workers) for x in streams[r][k]]


def test_the_global_order_is_one_for_every_worker_count_and_an_epoch_covers_every_example(shards):
    d, files, total = shards
    one = _order(files, 4, 1, micro_batches=48)
    assert sorted(one[:total]) == list(range(total))  # 91 examples, each once per epoch
    assert sorted(one[total : 2 * total]) != one[total : 2 * total]  # shuffled
    assert one[:total] != one[total : 2 * total]  # another order in the next epoch
    assert _order(files, 4, 2, micro_batches=24) == one
    assert _order(files, 4, 3, micro_batches=16) == one
    assert _order(files, 2, 2, micro_batches=48) == one  # 2 x 2 sequences are 4 sequences
    assert _order(files, 4, 1, micro_batches=48, seed=6) != one


@pytest.mark.parametrize("start", [1, 19, 20, 57, 90, 91, 130])
def test_a_start_position_continues_the_order_exactly_there(shards, start):
    # Windows of 20 over files of 10..16 records: starts inside a window, on its edge, in the
    # last file of an epoch, on the epoch's end and in the next epoch.
    d, files, total = shards
    whole = _order(files, 4, 1, micro_batches=60)
    assert _order(files, 4, 2, start=start, micro_batches=8) == whole[start : start + 64]


def test_record_counts_come_from_the_stage_manifest_when_it_lists_the_file(tmp_path):
    out = tmp_path / "phase1"
    (out / "training").mkdir(parents=True)
    a = write_file(out / "training" / "a.tfrecord", 5, 0)
    b = write_file(out / "training" / "b.tfrecord", 7, 100)
    manifest = {
        "stage": "tfrecord",
        "outputs": {
            # A count that is not the file's shows the manifest was read; a size that is not
            # the file's makes the reader count instead.
            "training/a.tfrecord": {"bytes": os.path.getsize(a), "counts": {"instances": 500}},
            "training/b.tfrecord": {"bytes": 1, "counts": {"instances": 700}},
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert record_counts([a, b]) == [500, 7]
    (out / "manifest.json").write_text("{not json")
    assert record_counts([a, b]) == [5, 7]


def test_micro_batches_run_on_into_the_next_epoch_and_no_record_is_a_clear_error(shards, tmp_path):
    d, files, _ = shards
    # 10 records for 3 workers x 4: every micro-batch still has 4, the epochs follow each other.
    assert sorted(_order(files[:1], 4, 3, micro_batches=5, window=3)[:50]) == sorted(list(range(10)) * 5)
    empty = write_file(tmp_path / "empty.tfrecord", 0, 0)
    with pytest.raises(UserError, match=r"empty\.tfrecord hold no record"):
        training_dataset([empty], 4, S, P)
    # Comma-separated globs: one that matches nothing is named, even beside one that matches.
    with pytest.raises(UserError, match=r"match .*nope-\*"):
        evaluation_dataset(os.path.join(d, "part-0[01].tfrecord") + "," + os.path.join(d, "nope-*"), 4, S, P)


def test_records_of_another_length_name_the_file(tmp_path):
    good = write_file(tmp_path / "a.tfrecord", 3, 0)
    other = write_file(tmp_path / "b.tfrecord", 3, 100, S=32, P=5)
    with pytest.raises(
        UserError,
        match=r"b\.tfrecord: feature 'input_ids' holds 32 .*max_seq_length=32, "
        r"max_predictions_per_seq=5",
    ):
        evaluation_dataset([good, other], 2, S, P)


def test_corrupt_or_foreign_files_name_the_file(tmp_path):
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"this is not a TFRecord file at all, just text\n" * 3)
    with pytest.raises(UserError, match=r"junk\.tfrecord: corrupt record header"):
        training_dataset([str(junk)], 2, S, P)
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
    ds = evaluation_dataset(path, 2, S, P)  # the first record is fine
    with pytest.raises(UserError, match=r"d\.tfrecord: (truncated|corrupt) record"):
        list(naming_corrupt_files(iter(ds), [path]))


def test_count_records(shards):
    d, files, total = shards
    assert count_records(files) == total
    assert count_records(os.path.join(d, "part-0[0-2].tfrecord")) == 10 + 11 + 12
