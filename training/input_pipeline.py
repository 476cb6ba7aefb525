"""tf.data input of pretraining TFRecords (the schema of data/pretraining/schema.py).

Per-worker file sharding (each worker reads a disjoint subset of the files, so no two
workers see the same example in an epoch), parallel interleave across files, example
shuffling, repeat and static batch shapes for training; files in order, once, for
evaluation. Worker index and count are plain ints from the caller: nothing here knows about
Horovod.

Before building the pipeline every file of this worker is checked cheaply by reading its
first record: a file that is not a TFRecord, or whose records were written for another
max_seq_length / max_predictions_per_seq (a phase-2 file in a phase-1 run), stops with one
sentence naming the file instead of a parse error from deep inside TensorFlow. Corruption
further into a file surfaces from TensorFlow as DataLossError at the step that reaches it,
without the file's name; `naming_corrupt_files` then has `verify_files` walk every record (CRCs
included) to name the culprit. Problems a user can fix raise common.errors.UserError.
"""

from __future__ import annotations

import tensorflow as tf

from common.errors import UserError
from common.files import expand_globs
from data.pretraining import schema, tfrecord

DEFAULT_SHUFFLE_BUFFER = 10000
DEFAULT_CYCLE_LENGTH = 8


def worker_files(files, num_workers, worker_index, patterns=None):
    """The files of one worker: every num_workers-th, starting at worker_index (disjoint, and
    together all of them). Raises UserError when there are fewer files than workers."""
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"worker_index={worker_index} is not within num_workers={num_workers}.")
    if len(files) < num_workers:
        source = f" (from {patterns!r})" if patterns is not None else ""
        raise UserError(
            f"{len(files)} input file(s){source} for {num_workers} workers: every worker needs at "
            f"least one file of its own. Write at least {num_workers} output files "
            "(create_pretraining_data takes a comma-separated --output_file) or use fewer workers."
        )
    return files[worker_index::num_workers]


def check_file(path, max_seq_length, max_predictions_per_seq):
    """Reads the first record of `path` and checks it against the schema and sizes.

    Raises UserError naming the file on a non-TFRecord, corrupt or mismatched record."""
    expected = schema.feature_lengths(max_seq_length, max_predictions_per_seq)
    try:
        first = next(tfrecord.read_records(path, verify=True, limit=1), None)
    except tfrecord.CorruptRecordError as e:
        raise UserError(f"{e} Regenerate it or remove it from the input.") from None
    if first is None:
        return  # an empty file contributes nothing; not an error
    try:
        found = schema.example_lengths(first)
    except Exception as e:  # protobuf's DecodeError, whatever its module
        raise UserError(f"{path}: its first record is not a tf.train.Example ({e}).") from None
    dtypes = {f.name: f.dtype for f in schema.FEATURES}
    for name, length in expected.items():
        if name not in found:
            raise UserError(f"{path}: its records lack the feature {name!r}; is it a pretraining file?")
        kind, n = found[name]
        if kind != dtypes[name] or n != length:
            hint = ""
            if name in (schema.INPUT_IDS, schema.MASKED_LM_POSITIONS):
                hint = (
                    f" (the files were written with max_seq_length="
                    f"{found[schema.INPUT_IDS][1]}, max_predictions_per_seq="
                    f"{found.get(schema.MASKED_LM_POSITIONS, ('', '?'))[1]})"
                )
            raise UserError(
                f"{path}: feature {name!r} holds {n} {kind} values but max_seq_length={max_seq_length}, "
                f"max_predictions_per_seq={max_predictions_per_seq} need {length} {dtypes[name]}{hint}."
            )


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


def pretraining_dataset(
    file_patterns,
    batch_size,
    max_seq_length,
    max_predictions_per_seq,
    is_training=True,
    num_workers=1,
    worker_index=0,
    shuffle_buffer=DEFAULT_SHUFFLE_BUFFER,
    seed=None,
    cycle_length=DEFAULT_CYCLE_LENGTH,
    deterministic=None,
):
    """The pretraining input of one worker: `worker_dataset` of its share of the files.

    Args:
      file_patterns: globs (a list, or one comma-separated string) of TFRecord files.
      num_workers, worker_index: this worker's share of the files (plain ints; worker_files).
      The others as for worker_dataset.
    """
    mine = worker_files(expand_globs(file_patterns), num_workers, worker_index, patterns=file_patterns)
    return worker_dataset(
        mine,
        batch_size,
        max_seq_length,
        max_predictions_per_seq,
        is_training=is_training,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        cycle_length=cycle_length,
        deterministic=deterministic,
    )


def worker_dataset(
    files,
    batch_size,
    max_seq_length,
    max_predictions_per_seq,
    is_training=True,
    shuffle_buffer=DEFAULT_SHUFFLE_BUFFER,
    seed=None,
    cycle_length=DEFAULT_CYCLE_LENGTH,
    deterministic=None,
):
    """The pretraining input from `files`, one worker's (worker_files), each checked first.

    Args:
      files: TFRecord paths.
      batch_size: per-worker batch size B.
      is_training: shuffle files and examples, repeat forever, drop the last partial batch
        (static shapes for XLA). Otherwise the files in order, once, keeping the last partial
        batch.
      shuffle_buffer: examples in the shuffle buffer (training).
      seed: seeds the file and example shuffles (None: different every run).
      cycle_length: files read at once (capped at the file count).
      deterministic: interleave order; None lets tf.data options decide (training may trade
        determinism for speed), True gives the same order for the same seed.

    Returns a tf.data.Dataset of dicts: input_ids, input_mask, segment_ids int32 [B, S];
    masked_lm_positions, masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P];
    next_sentence_labels int32 [B, 1].
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    for path in files:
        check_file(path, max_seq_length, max_predictions_per_seq)

    def parse(serialized):
        return schema.parse_examples(serialized, max_seq_length, max_predictions_per_seq)

    if is_training:
        d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        d = d.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
        d = d.interleave(
            tf.data.TFRecordDataset,
            cycle_length=max(1, min(cycle_length, len(files))),
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        d = d.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        d = d.batch(batch_size, drop_remainder=True)
    else:
        d = tf.data.TFRecordDataset(files)
        d = d.batch(batch_size, drop_remainder=False)
    # Parsing whole batches is several times faster than example by example.
    d = d.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
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
