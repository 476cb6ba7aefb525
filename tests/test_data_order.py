"""training/data_order.py: one global order of the examples for every worker count, resumable
from one number, fixed by the seed, another order in each epoch; Position's arithmetic.

Expected orders are rebuilt here in plain Python from the module's stated rule: epoch e reads the
files in a seeded order, cuts the records into windows of `window` and permutes each window with
a permutation seeded by (seed, e, window index). The only TensorFlow call of the reference is the
stateless shuffle itself (the seeded permutation primitive), never the function under test."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from data.pretraining import tfrecord
from training.data_order import (
    Position,
    file_order,
    records_in_order,
    rows_in_order,
    worker_micro_batches,
)

# Five files, one of them empty: 21 records, serial numbers 0..20 in file order.
COUNTS = [5, 0, 7, 3, 6]
TOTAL = sum(COUNTS)
SERIALS = [list(range(sum(COUNTS[:i]), sum(COUNTS[: i + 1]))) for i in range(len(COUNTS))]
WINDOW = 4
SEED = 12


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(paths, SERIALS): each record's bytes are its serial number."""
    directory = tmp_path_factory.mktemp("order")
    paths = []
    for i, serials in enumerate(SERIALS):
        path = str(directory / f"part-{i}.tfrecord")
        with tfrecord.RecordWriter(path) as w:
            for s in serials:
                w.write(str(s).encode())
        paths.append(path)
    return paths, SERIALS


def shuffle(n: int, seed: int, stream: int) -> list:
    """The seeded permutation of range(n) for (seed, stream): the primitive the rule names."""
    seeds = tf.constant([seed, stream], tf.int64)
    return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=seeds).numpy().tolist()


def reference_records(serials, seed, window, epochs) -> list:
    """The first `epochs` epochs of the global order, built from the rule in plain Python."""
    return list(_reference(tuple(map(tuple, serials)), seed, window, epochs))


@functools.lru_cache(maxsize=None)
def _reference(serials, seed, window, epochs) -> tuple:
    order = []
    for e in range(epochs):
        stream = [s for f in shuffle(len(serials), seed, -1 - e) for s in serials[f]]
        for w, lo in enumerate(range(0, len(stream), window)):
            chunk = stream[lo : lo + window]
            order += [chunk[i] for i in shuffle(len(chunk), seed, e * 2**32 + w)]
    return tuple(order)


def taken(dataset, n) -> list:
    return [int(x) for x in dataset.take(n).as_numpy_iterator()]


def micro_batches(order, batch_size, workers, worker, n) -> list:
    return [
        [int(x) for x in b]
        for b in worker_micro_batches(order, batch_size, workers, worker).take(n).as_numpy_iterator()
    ]


# ---- one epoch -------------------------------------------------------------------------------


def test_file_orders_are_seeded_permutations_of_their_own_per_epoch():
    orders = [file_order(len(COUNTS), SEED, e).numpy().tolist() for e in range(6)]
    assert all(sorted(o) == list(range(len(COUNTS))) for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not one order for every epoch
    assert file_order(len(COUNTS), SEED, 3).numpy().tolist() == orders[3]
    assert [file_order(len(COUNTS), SEED + 1, e).numpy().tolist() for e in range(6)] != orders


def test_each_epoch_reads_every_record_once_window_by_window_in_its_file_order(files):
    paths, serials = files
    order = taken(records_in_order(paths, COUNTS, seed=SEED, window=WINDOW), 3 * TOTAL)
    epochs = [order[e * TOTAL : (e + 1) * TOTAL] for e in range(3)]
    shuffled_windows = 0
    for e, epoch in enumerate(epochs):
        assert sorted(epoch) == list(range(TOTAL))
        # Window w holds the records w*4 .. w*4+3 of the files read through in the epoch's order.
        stream = [s for f in file_order(len(COUNTS), SEED, e).numpy() for s in serials[f]]
        for lo in range(0, TOTAL, WINDOW):
            assert sorted(epoch[lo : lo + WINDOW]) == sorted(stream[lo : lo + WINDOW])
            shuffled_windows += epoch[lo : lo + WINDOW] != stream[lo : lo + WINDOW]
    assert shuffled_windows > 0  # the windows are permuted, not read as they lie
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]


def test_the_order_is_the_rule_the_module_states(files):
    paths, serials = files
    order = taken(records_in_order(paths, COUNTS, seed=SEED, window=WINDOW), 3 * TOTAL)
    assert order == reference_records(serials, SEED, WINDOW, 3)
    # A window larger than an epoch shuffles the whole epoch as one window.
    order = taken(records_in_order(paths, COUNTS, seed=SEED, window=100), 2 * TOTAL)
    assert order == reference_records(serials, SEED, 100, 2)


def test_the_seed_alone_fixes_the_order(files):
    paths, serials = files
    one = taken(records_in_order(paths, COUNTS, seed=SEED, window=WINDOW), 2 * TOTAL)
    assert taken(records_in_order(list(paths), list(COUNTS), seed=SEED, window=WINDOW), 2 * TOTAL) == one
    other = taken(records_in_order(paths, COUNTS, seed=SEED + 1, window=WINDOW), 2 * TOTAL)
    assert other != one and other == reference_records(serials, SEED + 1, WINDOW, 2)


# ---- resuming --------------------------------------------------------------------------------


# Inside the first window, on a window's edge, on and past a file's end, in the last (partial)
# window, on the epoch's end, in the next epoch and two epochs on.
@pytest.mark.parametrize("start", [1, 3, 4, 5, 11, 19, 20, 21, 22, 30, 2 * TOTAL + 6])
def test_starting_at_sequence_n_gives_exactly_the_tail_of_the_full_order(files, start):
    paths, serials = files
    whole = reference_records(serials, SEED, WINDOW, 5)
    assert (
        taken(records_in_order(paths, COUNTS, seed=SEED, window=WINDOW, start=start), 30)
        == whole[start : start + 30]
    )


# ---- workers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("workers, batch_size", [(1, 4), (2, 2), (3, 2), (2, 3)])
def test_worker_r_of_w_takes_micro_batches_r_r_plus_w_and_so_on(files, workers, batch_size):
    paths, serials = files
    whole = reference_records(serials, SEED, WINDOW, 4)
    for r in range(workers):
        got = micro_batches(
            records_in_order(paths, COUNTS, seed=SEED, window=WINDOW), batch_size, workers, r, 6
        )
        expected = [
            whole[(k * workers + r) * batch_size : (k * workers + r + 1) * batch_size] for k in range(6)
        ]
        assert got == expected


@pytest.mark.parametrize("workers, accumulation", [(2, 1), (3, 1), (2, 2)])
def test_every_update_sees_the_same_examples_for_any_worker_count(files, workers, accumulation):
    """W workers x B per micro-batch x k micro-batches read, update by update, what one worker
    reads with micro-batches of W x B."""
    paths, _ = files
    batch, updates = 2, 5
    per_worker = [
        micro_batches(
            records_in_order(paths, COUNTS, seed=SEED, window=WINDOW, start=3),
            batch,
            workers,
            r,
            updates * accumulation,
        )
        for r in range(workers)
    ]
    one = micro_batches(
        records_in_order(paths, COUNTS, seed=SEED, window=WINDOW, start=3),
        workers * batch,
        1,
        0,
        updates * accumulation,
    )
    for u in range(updates):
        steps = range(u * accumulation, (u + 1) * accumulation)
        union = sorted(x for r in range(workers) for k in steps for x in per_worker[r][k])
        assert union == sorted(x for k in steps for x in one[k])
        assert len(union) == workers * batch * accumulation
        # ...and in order: micro-batch k of every worker in turn is one worker's micro-batch k.
        for k in steps:
            assert [x for r in range(workers) for x in per_worker[r][k]] == one[k]


def test_a_worker_outside_the_workers_or_an_empty_order_is_refused(files):
    paths, _ = files
    order = records_in_order(paths, COUNTS, seed=SEED, window=WINDOW)
    for workers, index in ((2, 2), (2, -1), (0, 0)):
        with pytest.raises(ValueError, match=f"worker_index={index} is not within num_workers={workers}"):
            worker_micro_batches(order, 2, workers, index)
    with pytest.raises(ValueError, match="the training files hold no record"):
        records_in_order(paths[1:2], [0], seed=SEED, window=WINDOW)
    with pytest.raises(ValueError, match=r"window must be >= 1 \(got 0\)"):
        records_in_order(paths, COUNTS, seed=SEED, window=0)
    with pytest.raises(ValueError, match="there are no training rows"):
        rows_in_order(0, seed=SEED)


# ---- fine-tuning rows ------------------------------------------------------------------------


def test_rows_come_in_a_seeded_permutation_per_epoch_from_any_start():
    rows = 7
    expected = [r for e in range(5) for r in shuffle(rows, SEED, -1 - e)]
    whole = taken(rows_in_order(rows, seed=SEED), 5 * rows)
    assert whole == expected
    epochs = [whole[e * rows : (e + 1) * rows] for e in range(5)]
    assert all(sorted(epoch) == list(range(rows)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1
    for start in (1, 6, 7, 16):
        assert taken(rows_in_order(rows, seed=SEED, start=start), 12) == expected[start : start + 12]
    assert taken(rows_in_order(rows, seed=SEED + 1), 5 * rows) != whole


# ---- Position --------------------------------------------------------------------------------


def test_position_counts_the_sequences_of_every_worker_as_micro_batches_are_taken():
    position = Position(np.int64(10), batch_size=3, workers=2)
    assert (position.start, position.sequences, position.per_micro_batch) == (10, 10, 6)
    assert type(position.sequences) is int
    counting = position.counted(iter(["a", "b", "c", "d"]))
    assert position.sequences == 10  # nothing taken yet: counted is lazy
    assert [next(counting), next(counting)] == ["a", "b"]
    assert position.sequences == 10 + 2 * 6
    assert list(counting) == ["c", "d"]
    assert (position.start, position.sequences) == (10, 10 + 4 * 6)


def test_a_position_saved_by_two_workers_resumes_one_worker_where_they_stopped(files):
    """Two workers of batch 2 take 3 micro-batches each from sequence 7; one worker of batch 4
    resumes from the number the position holds and reads on without a gap or a repeat."""
    paths, serials = files
    whole = reference_records(serials, SEED, WINDOW, 4)
    start, batch, workers, taken_each = 7, 2, 2, 3
    positions = [Position(start, batch, workers) for _ in range(workers)]
    read = []
    for r in range(workers):
        order = records_in_order(paths, COUNTS, seed=SEED, window=WINDOW, start=start)
        stream = positions[r].counted(worker_micro_batches(order, batch, workers, r).as_numpy_iterator())
        read += [int(x) for _, b in zip(range(taken_each), stream) for x in b]
    assert positions[0].sequences == positions[1].sequences == start + taken_each * batch * workers == 19
    assert sorted(read) == sorted(whole[start:19])
    resumed = micro_batches(
        records_in_order(paths, COUNTS, seed=SEED, window=WINDOW, start=positions[0].sequences), 4, 1, 0, 3
    )
    assert [x for b in resumed for x in b] == whole[19:31]
