"""tf.data input of pretraining TFRecords (the schema of data/pretraining/schema.py).

Training reads the global order of training/data_order.py: every worker the same endless order
of all the files (seeded file order per epoch, seeded shuffle of each window of records), cut in
micro-batches dealt round-robin to the workers, so the examples of an update do not depend on
the worker count and a checkpoint's position is one number. Static batch shapes (XLA).
Evaluation reads the files in order, once. Worker index and count are plain ints from the
caller: nothing here knows about Horovod.

Records come masked (static: Google's layout) or unmasked (dynamic: data/pretraining/schema.py);
unmasked records are masked as they are read (training/masking.py), each by its position in the
data order, so every epoch draws new masks and a resumed run the same ones.

Before building the pipeline every file is checked cheaply by reading its first record
(data/pretraining/schema.check_files, which the launchers also run, without TensorFlow): a file
that is not a TFRecord, whose records were written for another max_seq_length /
max_predictions_per_seq (a phase-2 file in a phase-1 run), or whose layout differs from the other
files', stops with one sentence naming the file instead of a parse error from deep inside
TensorFlow. Corruption
further into a file surfaces from TensorFlow as DataLossError at the step that reaches it,
without the file's name; `naming_corrupt_files` then has `verify_files` walk every record (CRCs
included) to name the culprit. Problems a user can fix raise common.errors.UserError.
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from common.errors import UserError
from common.files import expand_globs
from data.pretraining import schema, tfrecord
from data.pretraining.masking import MASKED_LM_PROB
from training.data_order import as_written, records_in_order, worker_micro_batches

DEFAULT_SHUFFLE_WINDOW = 10000


def verify_files(files):
    """Reads every record of every file with CRC checks; returns the total record count.
    Raises UserError naming the first corrupt file and the byte offset."""
    total = 0
    for path in files:
        try:
            total += sum(1 for _ in tfrecord.read_records(path, verify=True))
        except tfrecord.CorruptRecordError as e:
            raise UserError(f"{e} Regenerate it or remove it from the input.") from None
    return total


def count_records(files):
    """Total number of records in `files` (a list, or patterns as for pretraining_dataset)."""
    if isinstance(files, str):
        files = expand_globs(files)
    try:
        return sum(tfrecord.count_records(f) for f in files)
    except tfrecord.CorruptRecordError as e:
        raise UserError(str(e)) from None


def _manifest_count(path, manifests: dict):
    """The record count the TFRecord stage's manifest.json (in the file's directory or the one
    above) recorded for `path`, if it lists the file at its current size; else None."""
    from data.manifest import MANIFEST_NAME, read_manifest_outputs

    if "://" in path:
        return None
    here = os.path.dirname(os.path.abspath(path))
    for root in (here, os.path.dirname(here)):
        if root not in manifests:
            manifests[root] = read_manifest_outputs(os.path.join(root, MANIFEST_NAME))
        entry = manifests[root].get(os.path.relpath(os.path.abspath(path), root))
        if entry and entry.get("bytes") == os.path.getsize(path):
            count = entry.get("counts", {}).get("instances")
            return None if count is None else int(count)
    return None


def record_counts(files, counting=None) -> list[int]:
    """The record count of each file: as the TFRecord stage's manifest recorded it (instantly),
    else counted by walking the length headers (about 2 s per million records). `counting(total
    bytes)`, when given, makes the progress display of the files left to count (a callable
    taking bytes done)."""
    manifests: dict[str, dict] = {}
    counts = [_manifest_count(path, manifests) for path in files]
    left = [i for i, count in enumerate(counts) if count is None]
    if not left:
        return counts
    progress = counting(sum(os.path.getsize(files[i]) for i in left)) if counting else None
    for i in left:
        try:
            counts[i] = tfrecord.count_records(files[i])
        except tfrecord.CorruptRecordError as e:
            raise UserError(f"{e} Regenerate it or remove it from the input.") from None
        if progress is not None:
            progress(os.path.getsize(files[i]))
    if progress is not None:
        progress.close()
    return counts


@dataclasses.dataclass(frozen=True)
class Masking:
    """How unmasked (dynamic) records are masked as they are read: training/masking.py's rules
    with this probability, max_predictions_per_seq and seed."""

    masked_lm_prob: float = MASKED_LM_PROB
    seed: int = 12345


def _parse(max_seq_length, max_predictions_per_seq, bin_size=0, layout=schema.STATIC_LAYOUT, masking=None):
    """Parses a batch of records, masks unmasked ones by their positions in the order (elements
    (positions int64 [B], records [B]) then), and cuts it to its bin length when bin_size
    (training/length_bins.py)."""
    from training.length_bins import trim
    from training.masking import mask_sequences

    if layout.masking == schema.STATIC:

        def parse(serialized):
            features = schema.parse_examples(serialized, max_seq_length, max_predictions_per_seq)
            return trim(features, bin_size, max_seq_length)

        return parse
    masking = masking or Masking()

    def parse_and_mask(positions, serialized):
        unmasked = schema.parse_examples(serialized, max_seq_length, max_predictions_per_seq, layout)
        features = mask_sequences(
            unmasked,
            positions,
            seed=masking.seed,
            masked_lm_prob=masking.masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
        )
        return trim(features, bin_size, max_seq_length)

    return parse_and_mask


def _record_lengths(max_seq_length):
    """Serialized records [N] -> their real token counts int32 [N], reading input_mask alone (the
    records' positions in the order may come first: they are ignored)."""

    def lengths(*element):
        serialized = element[-1]
        spec = {schema.INPUT_MASK: tf.io.FixedLenFeature([max_seq_length], tf.int64)}
        mask = tf.io.parse_example(serialized, spec)[schema.INPUT_MASK]
        return tf.cast(tf.reduce_sum(mask, axis=1), tf.int32)

    return lengths


def _packed_updates(
    order, batch_size, num_workers, worker_index, accumulation, S, P, layout, masking, bin_size
):
    """This worker's packed micro-batches (training/packing.py) of each update of `order`: the
    update's W x k x B records' lengths and prediction counts (an upper bound for unmasked
    records: masking's budget) decide the rows; only this worker's records are then parsed (and
    masked by their positions in the order), and laid out in rows of S; with bin_size > 0 the
    rows are dealt in runs by their tokens and each micro-batch is cut to its bin length."""
    import functools

    from training import packing
    from training.length_bins import trim
    from training.masking import budget

    M = packing.MAX_SEQUENCES
    G = batch_size * accumulation * num_workers
    parse = _parse(S, P, 0, layout, masking)
    plan = functools.partial(
        packing.plan,
        max_seq_length=S,
        max_predictions_per_seq=P,
        num_workers=num_workers,
        worker_index=worker_index,
        accumulation=accumulation,
        batch_size=batch_size,
        by_length=bin_size > 0,
    )
    names = (*schema.FEATURE_NAMES, *packing.PACKED_FEATURES)
    dtypes = {"masked_lm_weights": tf.float32, "next_sentence_weights": tf.float32}
    Q = P  # a packed row holds one sequence's predictions (training/packing.py)
    widths = {name: Q for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")}
    widths.update(dict.fromkeys(("cls_positions", "next_sentence_labels", "next_sentence_weights"), M))

    def lay_out(rows, *values):
        features = dict(zip(schema.FEATURE_NAMES, values))
        stacked = packing.layouts(features, rows, M)
        return tuple(stacked[name] for name in names)

    def pack(*update):
        serialized = update[-1]
        spec = {schema.INPUT_MASK: tf.io.FixedLenFeature([S], tf.int64)}
        if layout.masking == schema.STATIC:
            spec[schema.MASKED_LM_WEIGHTS] = tf.io.FixedLenFeature([P], tf.float32)
        parsed = tf.io.parse_example(serialized, spec)
        lengths = tf.cast(tf.reduce_sum(parsed[schema.INPUT_MASK], axis=1), tf.int32)
        if layout.masking == schema.STATIC:
            predictions = tf.reduce_sum(tf.cast(parsed[schema.MASKED_LM_WEIGHTS] > 0, tf.int32), axis=1)
        else:
            predictions = budget(lengths, masking.masked_lm_prob, P)
        rows = tf.numpy_function(lambda n, p: plan(n, p), [lengths, predictions], tf.int32, stateful=False)
        rows.set_shape([accumulation, None, M])
        flat = tf.reshape(rows, [-1])
        taken = flat >= 0
        chosen = tf.boolean_mask(flat, taken)  # this worker's records, in its rows' order
        features = parse(*(tf.gather(part, chosen) for part in update))
        local = tf.where(taken, tf.cumsum(tf.cast(taken, tf.int32)) - 1, -1)  # into `features`
        arrays = tf.numpy_function(
            lay_out,
            [tf.reshape(local, tf.shape(rows)), *(features[name] for name in schema.FEATURE_NAMES)],
            [dtypes.get(name, tf.int32) for name in names],
            stateful=False,
        )
        out = {}
        for name, value in zip(names, arrays):
            value.set_shape([accumulation, None, widths.get(name, S)])
            out[name] = value
        return out

    updates = order.batch(G, drop_remainder=True)
    micro_batches = updates.map(
        as_written(pack), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()
    if bin_size:
        micro_batches = micro_batches.map(lambda features: trim(features, bin_size, S))
    return micro_batches


def training_dataset(
    files,
    batch_size,
    max_seq_length,
    max_predictions_per_seq,
    *,
    num_workers=1,
    worker_index=0,
    start=0,
    seed=12345,
    window=DEFAULT_SHUFFLE_WINDOW,
    count=None,
    accumulation=1,
    bin_size=0,
    masked_lm_prob=MASKED_LM_PROB,
    layout=None,
    packing=False,
):
    """One worker's micro-batches of the global order of `files` (training/data_order.py), from
    sequence `start` of it, endless, each file checked first (unless `layout` says what
    schema.check_files found).

    Args:
      files: TFRecord paths (every worker gets all of them; the order decides who reads what).
      batch_size: the micro-batch B of one worker.
      num_workers, worker_index: this worker's share, every num_workers-th micro-batch.
      start: sequences of the order consumed before (a checkpoint's position).
      seed: fixes the order: the file order of each epoch and each window's shuffle.
      window: consecutive records shuffled together.
      count: count(files) -> their record counts, called once the files passed their checks
        (record_counts when None).
      accumulation, bin_size: with bin_size > 0, each update's W x k x B records (k =
        accumulation) are sorted by length and dealt to the workers, each micro-batch cut to its
        bin length L (training/length_bins.py); 0: every micro-batch S long, every W-th to a worker.
      masked_lm_prob: unmasked records only: the masking probability (the seed is `seed`).
      packing: each update's records packed into rows (training/packing.py); with bin_size > 0
        each packed micro-batch is cut to the bin length of its fullest row.

    Returns a tf.data.Dataset of dicts: input_ids, input_mask, segment_ids int32 [B, S] ([B, L]
    binned);
    masked_lm_positions, masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P];
    next_sentence_labels int32 [B, 1]. Packed: R rows instead of B (one R per update) and
    training/packing.layout's features ([R, L] with bins).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    layout = layout or schema.check_files(files, max_seq_length, max_predictions_per_seq)
    counts = (count or record_counts)(files)
    if sum(counts) == 0:
        raise UserError(f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''} hold no record.")
    order = records_in_order(files, counts, seed=seed, window=window, start=start)
    if layout.masking == schema.DYNAMIC:
        order = order.enumerate(start=start)  # (position in the order, record): the masks' counter
    if packing:
        masking = Masking(masked_lm_prob, seed)
        d = _packed_updates(
            order,
            batch_size,
            num_workers,
            worker_index,
            accumulation,
            max_seq_length,
            max_predictions_per_seq,
            layout,
            masking,
            bin_size,
        )
        return d.prefetch(tf.data.AUTOTUNE)
    d = worker_micro_batches(
        order,
        batch_size,
        num_workers,
        worker_index,
        accumulation=accumulation,
        lengths_of=_record_lengths(max_seq_length) if bin_size else None,
    )
    # Parsing whole batches is several times faster than example by example.
    d = d.map(
        as_written(
            _parse(max_seq_length, max_predictions_per_seq, bin_size, layout, Masking(masked_lm_prob, seed))
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return d.prefetch(tf.data.AUTOTUNE)


EVALUATION_SORT_BATCHES = 64  # batches of records sorted by length together


def evaluation_dataset(
    file_patterns,
    batch_size,
    max_seq_length,
    max_predictions_per_seq,
    *,
    bin_size=0,
    max_batches=None,
    masked_lm_prob=MASKED_LM_PROB,
    seed=12345,
    layout=None,
):
    """The records of `file_patterns` (globs: a list, or one comma-separated string), in file
    order, once (the first max_batches x batch_size when max_batches), in batches of `batch_size`
    (the last one partial), each file checked first. With bin_size > 0 every
    EVALUATION_SORT_BATCHES batches' records are sorted by length and each batch is cut to its bin
    length: the same records, so the same sums, in fewer FLOPs. Unmasked records are masked by
    their position in file order and `seed`: the same masks at every evaluation. `layout`, when
    given, is what schema.check_files found for these files (they are then not read again)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    files = expand_globs(file_patterns)
    layout = layout or schema.check_files(files, max_seq_length, max_predictions_per_seq)
    d = tf.data.TFRecordDataset(files)
    if layout.masking == schema.DYNAMIC:
        d = d.enumerate()
    if max_batches is not None:
        d = d.take(max_batches * batch_size)
    if bin_size:
        lengths = _record_lengths(max_seq_length)

        def by_length(*element):
            order = tf.argsort(lengths(*element), stable=True)
            sorted_element = tuple(tf.gather(part, order) for part in element)
            return sorted_element if len(element) > 1 else sorted_element[0]

        d = d.batch(batch_size * EVALUATION_SORT_BATCHES).map(as_written(by_length)).unbatch()
    d = d.batch(batch_size, drop_remainder=False)
    d = d.map(
        as_written(
            _parse(max_seq_length, max_predictions_per_seq, bin_size, layout, Masking(masked_lm_prob, seed))
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return d.prefetch(tf.data.AUTOTUNE)


def naming_corrupt_files(iterator, files):
    """Yields `iterator`'s batches; a truncated or corrupt record that TensorFlow reports without
    a file name (DataLossError) becomes a UserError naming the file, found by verify_files.

    Reads exactly one element of `iterator` per element yielded, so the iterator's position (what
    a checkpoint saves) stays that of the batches consumed.
    """
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            verify_files(files)  # raises naming the file when one is corrupt
            first = (e.message or str(e)).strip().splitlines()[0]
            raise UserError(
                f"Reading the input failed ({first}); the files "
                f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''} pass their "
                "CRC checks, so the records may not match the schema."
            ) from None
        yield batch
