"""One order of the training examples for every worker count, and how much of it was consumed.

The examples of a run form one endless global order fixed by the seed alone:

- pretraining records (`records_in_order`): epoch e reads the files through in a seeded order of
  its own, and shuffles each window of `window` consecutive records with a permutation seeded by
  (seed, e, window index). The shuffle's whole state is those integers, never a buffer, so any
  point of the order can be rebuilt;
- fine-tuning rows (`rows_in_order`): epoch e is a seeded permutation of the rows.

`worker_micro_batches` cuts the order into micro-batches of B and gives worker r of W the
micro-batches r, r + W, r + 2W, ... An update of k micro-batches per worker so consumes the W x k
micro-batches after the previous update's whoever the workers are: 2 workers x 1 micro-batch and
1 worker x 2 micro-batches see the same examples in each update.

The position a checkpoint keeps (`Position`) is one integer, the sequences consumed by all workers
together. A resumed run starts the order there, with any worker count or micro-batch size: the
epoch is position // epoch size and the window offset // window; whole files before the window
are skipped by their record counts (nothing read), the rest of one file is read through, and the
records of the window before the position are dropped. Nothing in an epoch is skipped or repeated.
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf


def as_written(function):
    """`function` for tf.data's map/flat_map traced as written: the pipelines' functions hold no
    Python control flow on tensors, so AutoGraph's source conversion (which tf.data otherwise runs
    on each, in every process) is skipped; a tensor used as a Python bool then fails the trace."""
    return tf.autograph.experimental.do_not_convert(function)


_ENDLESS = 2**62  # epochs
_READ_BUFFER_BYTES = 8 << 20


def _seed_pair(seed: int, stream) -> tf.Tensor:
    return tf.stack([tf.constant(seed, tf.int64), tf.cast(stream, tf.int64)])


def _permutation(n, seed: int, stream) -> tf.Tensor:
    """A seeded permutation of range(n), int64; the same in eager code and in tf.data's graphs."""
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=_seed_pair(seed, stream)
    )


def file_order(num_files: int, seed: int, epoch) -> tf.Tensor:
    """The order epoch `epoch` reads the files in (file orders use streams -1, -2, ...; window
    shuffles the non-negative ones, so no two share a seed)."""
    return _permutation(num_files, seed, -1 - tf.cast(epoch, tf.int64))


def _shuffled_windows(records: tf.data.Dataset, seed: int, epoch, first_window: int, window: int):
    """`records` (an epoch's, from window `first_window` on) with each window of `window` records
    permuted by its own seed."""

    def shuffle(w, batch):
        n = tf.shape(batch, out_type=tf.int64)[0]
        return tf.gather(batch, _permutation(n, seed, tf.cast(epoch, tf.int64) * 2**32 + w))

    windows = records.batch(window).enumerate(start=first_window)
    return windows.map(as_written(shuffle), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()


def records_in_order(files: list[str], counts: list[int], *, seed: int, window: int, start: int = 0):
    """The serialized records of `files` (`counts` records each) in the global order, endless,
    from sequence `start` of it. Raises ValueError when the files hold no record."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if total < 1:
        raise ValueError("the training files hold no record.")
    if window < 1:
        raise ValueError(f"window must be >= 1 (got {window}).")
    names = tf.constant(list(files))
    epoch, offset = divmod(int(start), total)
    first_window, within = divmod(offset, window)

    # The rest of epoch `epoch`: skip the files wholly before the window by their counts.
    order = file_order(len(files), seed, epoch).numpy()
    ends = np.cumsum(counts[order])
    first_record = first_window * window
    i = int(np.searchsorted(ends, first_record, side="right"))
    into = first_record - int(ends[i] - counts[order[i]])
    rest = tf.data.TFRecordDataset(files[order[i]], buffer_size=_READ_BUFFER_BYTES).skip(into)
    if i + 1 < len(files):
        later = [files[j] for j in order[i + 1 :]]
        rest = rest.concatenate(tf.data.TFRecordDataset(later, buffer_size=_READ_BUFFER_BYTES))
    current = _shuffled_windows(rest, seed, epoch, first_window, window).skip(within)

    def whole_epoch(e):
        records = tf.data.TFRecordDataset(
            tf.gather(names, file_order(len(files), seed, e)), buffer_size=_READ_BUFFER_BYTES
        )
        return _shuffled_windows(records, seed, e, 0, window)

    return current.concatenate(tf.data.Dataset.range(epoch + 1, _ENDLESS).flat_map(as_written(whole_epoch)))


def rows_in_order(
    rows: int, *, seed: int, start: int = 0, lengths=None, group_batch: int | None = None
) -> tf.data.Dataset:
    """Row indices (int64) of an in-memory training set in the global order, endless, from
    sequence `start` of it.

    With `group_batch` (the global batch G) and `lengths` (int [rows], real tokens per row): each
    epoch's permutation is cut into groups of GROUP_BATCHES x G rows, each group sorted by length
    (longest first) and cut into batches of G, and the batches of a group shuffled by the seed;
    the epoch's last, partial batch stays last (Hugging Face's group_by_length, seeded so that
    every worker count sees one order)."""
    if rows < 1:
        raise ValueError("there are no training rows.")
    epoch, offset = divmod(int(start), rows)
    if group_batch is None:

        def epoch_rows(e):
            return tf.data.Dataset.from_tensor_slices(_permutation(rows, seed, -1 - e))

    else:
        lengths = tf.constant(np.asarray(lengths, np.int64))

        def epoch_rows(e):
            return tf.data.Dataset.from_tensor_slices(
                _grouped_by_length(_permutation(rows, seed, -1 - e), lengths, group_batch, seed, e)
            )

    return tf.data.Dataset.range(epoch, _ENDLESS).flat_map(as_written(epoch_rows)).skip(offset)


GROUP_BATCHES = 50  # batches per length group (Hugging Face's megabatch)


def _grouped_by_length(permutation, lengths, batch: int, seed: int, epoch):
    """`permutation` (int64 [N]) regrouped as rows_in_order's group_batch describes."""
    n = int(permutation.shape[0])
    group = GROUP_BATCHES * batch
    groups = -(-n // group)
    # Pad to whole groups with rows of length -1: they sort to the end of the last group.
    rows = tf.concat([permutation, tf.fill([groups * group - n], tf.constant(-1, tf.int64))], 0)
    row_lengths = tf.where(rows >= 0, tf.gather(lengths, tf.maximum(rows, 0)), -1)
    rows = tf.reshape(rows, [groups, group])
    longest_first = tf.argsort(tf.reshape(-row_lengths, [groups, group]), axis=1, stable=True)
    batches = tf.reshape(tf.gather(rows, longest_first, batch_dims=1), [groups, GROUP_BATCHES, batch])
    # Each group's batches in a seeded order; a batch holding padding rows (the epoch's tail) last.
    keys = tf.random.stateless_uniform(
        [groups, GROUP_BATCHES], seed=_seed_pair(seed, -(2**40) - tf.cast(epoch, tf.int64))
    )
    keys = tf.where(tf.reduce_any(batches < 0, axis=2), 2.0, keys)
    batches = tf.gather(batches, tf.argsort(keys, axis=1, stable=True), batch_dims=1)
    flat = tf.reshape(batches, [-1])
    return tf.boolean_mask(flat, flat >= 0)


def worker_micro_batches(
    order: tf.data.Dataset,
    batch_size: int,
    num_workers: int,
    worker_index: int,
    *,
    accumulation: int = 1,
    lengths_of=None,
):
    """Worker `worker_index`'s micro-batches of `order` (elements [B], or tuples of them).

    Without `lengths_of`: every num_workers-th batch of batch_size. With it (an element's parts
    [G] -> their real token counts int [G]): each update's G = W x k x B elements sorted by length
    and dealt as training/length_bins.deal_by_length says, k micro-batches per update."""
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"worker_index={worker_index} is not within num_workers={num_workers}.")
    if lengths_of is None:
        return order.batch(batch_size, drop_remainder=True).shard(num_workers, worker_index)
    from training.length_bins import deal_by_length

    def deal(*update):
        pick = deal_by_length(lengths_of(*update), batch_size, num_workers, worker_index)
        dealt = tuple(tf.gather(part, pick) for part in update)
        return dealt if len(dealt) > 1 else dealt[0]

    updates = order.batch(batch_size * accumulation * num_workers, drop_remainder=True)
    return updates.map(as_written(deal), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()


class Position:
    """The sequences of the global order that every worker together has taken: `start` (where
    the input began) plus batch_size x workers per micro-batch each worker took through `counted`.
    The checkpointer saves `sequences` at an update boundary, where every worker took as many.

    `restored`: the position of the checkpoint the run continues from (checked at restore),
    `start` unless a divergence rollback (training/rollback.py) skipped the order from there on."""

    def __init__(self, start: int, batch_size: int, workers: int, restored: int | None = None):
        self.start = self.sequences = int(start)
        self.restored = self.start if restored is None else int(restored)
        self.per_micro_batch = batch_size * workers

    def skipped_to(self, start: int, restored: int) -> "Position":
        """This position's counting for an input that starts at `start` after a checkpoint at
        `restored` (a rollback's skip)."""
        moved = copy.copy(self)
        moved.start = moved.sequences = int(start)
        moved.restored = int(restored)
        return moved

    def counted(self, micro_batches):
        """Yields this worker's micro-batches, counting each one taken."""
        for batch in micro_batches:
            self.sequences += self.per_micro_batch
            yield batch
