"""Padding only as far as the lengths need: sequences sorted by length, batches padded to bins.

Every sequence is stored padded to max_seq_length S (the TFRecord schema, the fine-tuning
arrays); a batch whose longest sequence has n real tokens needs only its first
`bin_length(n)` positions: n rounded up to a multiple of `bin_size` (at most S). The attention
mask already hides padding from real tokens, so the outputs at real positions, the masked-LM
gather and the [CLS] head do not change; a batch of short sequences simply costs less. Bins keep
the number of distinct shapes, and so of XLA compilations, at most ceil(S / bin_size).

Training (`deal_by_length`): the global order (training/data_order.py) still decides which
sequences form an update; within one update its W x k x B sequences are sorted by length and cut
into W x k micro-batches of B, and the workers take them as a snake over the sorted list (worker
0 the first and the 2W-th, worker W-1 the W-th and the (W+1)-th ...), so each worker's k
micro-batches span the lengths alike. An update's gradient is a sum over the same sequences as
unsorted, so training follows the padded trajectory up to float summation order.

Prediction (`by_length`): rows sorted by length, cut into batches, each padded to its bin; the
outputs go back to the input order.

Shapes: B batch, S max_seq_length, L a batch's bin length (<= S), G an update's sequences
(W x k x B), W workers, k micro-batches per worker.
"""

from __future__ import annotations

# The features with a sequence axis (axis 1, S long): the ones a bin shortens (packed rows add
# position_ids and sequence_ids: training/packing.py).
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "position_ids", "sequence_ids")
DEFAULT_BIN_SIZE = 64  # what --bin_size None means (training.job.JobSettings.bin_size)


def resolved_bin_size(bin_size: int | None, max_seq_length: int) -> int:
    """--bin_size as it runs: None means DEFAULT_BIN_SIZE; 0 pads every batch to max_seq_length,
    and so does a bin as long as max_seq_length or longer (one bin: nothing to sort for, and the
    input stays in the unsorted order of a padded run)."""
    bin_size = DEFAULT_BIN_SIZE if bin_size is None else bin_size
    return 0 if bin_size >= max_seq_length else bin_size


def bin_size_fits(bin_size: int, max_seq_length: int) -> bool:
    """The rule for a bin size: from 0 (pad to max_seq_length) up to max_seq_length. The jobs
    (`bin_size_refusal`) and the launchers (launch/) refuse other values, each in its own words."""
    return 0 <= bin_size <= max_seq_length


def bin_size_refusal(bin_size: int | None, max_seq_length: int) -> str | None:
    """The sentence refusing --bin_size for max_seq_length, or None when it can work."""
    if bin_size is None:
        return None
    if not bin_size_fits(bin_size, max_seq_length):
        return (
            f"--bin_size must be between 0 (pad to --max_seq_length) and --max_seq_length="
            f"{max_seq_length} (got {bin_size})."
        )
    return None


def bin_lengths(bin_size: int, max_seq_length: int) -> tuple[int, ...]:
    """Every length `bin_length` can give, shortest first: (max_seq_length,) for bin_size 0."""
    if bin_size == 0:
        return (max_seq_length,)
    return (*range(bin_size, max_seq_length, bin_size), max_seq_length)


def bin_length(longest, bin_size: int, max_seq_length: int):
    """The padded length of a batch whose longest sequence has `longest` real tokens (a tensor or
    an int): rounded up to a multiple of bin_size, at least one bin, at most max_seq_length.
    bin_size 0: max_seq_length."""
    import numpy as np

    if bin_size == 0:
        return max_seq_length
    if isinstance(longest, (int, np.integer)):
        return int(min(max_seq_length, max(1, -(-int(longest) // bin_size)) * bin_size))
    import tensorflow as tf

    bins = tf.maximum((longest + bin_size - 1) // bin_size, 1)
    return tf.minimum(bins * bin_size, max_seq_length)


def trim(features: dict, bin_size: int, max_seq_length: int) -> dict:
    """A batch of features [B, S] (tensors) cut to its bin length L: the SEQUENCE_FEATURES become
    [B, L]; the others are unchanged. bin_size 0: unchanged."""
    if bin_size == 0:
        return features
    import tensorflow as tf

    longest = tf.reduce_max(tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=1))
    length = bin_length(longest, bin_size, max_seq_length)
    return {
        name: value[:, :length] if name in SEQUENCE_FEATURES else value for name, value in features.items()
    }


def deal_by_length(lengths, batch_size: int, num_workers: int, worker_index: int):
    """Worker `worker_index`'s k micro-batches of one update, as positions into it: int32 [k, B].

    lengths: int [G] (G = W x k x B), the real tokens of the update's sequences in the global
    order. The sequences are sorted by length (stable: equal lengths keep their order), cut into
    W x k micro-batches of B, and dealt as a snake: round i gives its W micro-batches to workers
    0..W-1 when i is even and W-1..0 when i is odd."""
    import tensorflow as tf

    order = tf.argsort(lengths, stable=True)  # [G], shortest first
    rounds = tf.reshape(order, [-1, num_workers, batch_size])  # [k, W, B]
    k = tf.shape(rounds)[0]
    backwards = tf.math.floormod(tf.range(k), 2) == 1
    seat = tf.where(backwards, num_workers - 1 - worker_index, worker_index)  # [k]
    return tf.gather(rounds, seat, batch_dims=1)  # [k, B]


def by_length(lengths, batch_size: int, bin_size: int, max_seq_length: int):
    """Prediction batches of rows sorted by length (`lengths` int [N]): yields (rows int64 [B],
    real, L), where `rows` index the input (the last batch repeats its final row up to B, so every batch has the
    compiled batch size; only the first `real` are results) and L is the batch's bin length.
    bin_size 0: the rows in input order, every batch S long (as padded prediction)."""
    import numpy as np

    lengths = np.asarray(lengths)
    count = len(lengths)
    order = np.argsort(lengths, kind="stable") if bin_size else np.arange(count)
    for start in range(0, count, batch_size):
        rows = order[start : start + batch_size]
        real = len(rows)
        rows = np.concatenate([rows, np.repeat(rows[-1:], batch_size - real)])
        yield rows, real, bin_length(int(lengths[rows].max()), bin_size, max_seq_length)
