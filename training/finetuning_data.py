"""Fine-tuning's data in memory: the training micro-batches of one worker from feature arrays in
the global order of training/data_order.py, prediction over feature arrays (by length under
--bin_size). Every fine-tuning task (training/finetuning_job.py) uses these alike."""

from __future__ import annotations

import numpy as np

from common.errors import UserError


def training_dataset(
    arrays: dict,
    batch_size: int,
    *,
    num_workers: int,
    worker_index: int,
    seed: int,
    start: int = 0,
    accumulation: int = 1,
    bin_size: int = 0,
    group_by_length: bool = False,
):
    """Training micro-batches of one worker from in-memory feature arrays: the rows in the global
    order of training/data_order.py (a seeded permutation per epoch, endless; grouped by length
    with `group_by_length`) from sequence `start` of it. bin_size 0: every num_workers-th
    micro-batch of B, each S long; else each update's W x k x B rows (k = accumulation) sorted by
    length and dealt to the workers, each micro-batch cut to its bin (training/length_bins.py)."""
    import tensorflow as tf

    from training.data_order import as_written, rows_in_order, worker_micro_batches
    from training.length_bins import trim

    rows = len(next(iter(arrays.values())))
    if rows < batch_size * num_workers:
        raise UserError(
            f"{rows} training features are fewer than --train_batch_size={batch_size} x "
            f"{num_workers} worker(s), one micro-batch for each."
        )
    lengths = arrays["input_mask"].sum(axis=1) if bin_size or group_by_length else None
    order = rows_in_order(
        rows,
        seed=seed,
        start=start,
        lengths=lengths,
        group_batch=batch_size * accumulation * num_workers if group_by_length else None,
    )
    tensors = {name: tf.constant(value) for name, value in arrays.items()}
    lengths_of = None
    if bin_size:
        row_lengths = tf.constant(lengths.astype(np.int32))

        def lengths_of(index):
            return tf.gather(row_lengths, index)

    d = worker_micro_batches(
        order, batch_size, num_workers, worker_index, accumulation=accumulation, lengths_of=lengths_of
    )
    max_seq_length = arrays["input_ids"].shape[1] if bin_size else None
    d = d.map(
        as_written(
            lambda index: trim(
                {name: tf.gather(t, index) for name, t in tensors.items()}, bin_size, max_seq_length
            )
        )
    )
    return d.prefetch(tf.data.AUTOTUNE)


def predict(
    step,
    arrays: dict,
    batch_size: int,
    progress_name: str,
    stream,
    *,
    bin_size: int = 0,
    sequence_outputs: tuple = (),
) -> dict[str, np.ndarray]:
    """The model's outputs (float32 arrays, one row per feature) over `arrays`, in input order.

    With bin_size the rows go by length (training/length_bins.by_length), each batch cut to its
    bin; the outputs named in `sequence_outputs` ([B, L]) are filled back to S with -inf past L:
    positions that are padding in every row of the batch."""
    from common.progress import Progress
    from training.length_bins import SEQUENCE_FEATURES, by_length

    rows, max_seq_length = arrays["input_ids"].shape
    outputs: dict[str, np.ndarray] = {}
    lengths = arrays["input_mask"].sum(axis=1)
    with Progress(progress_name, rows, unit="features", stream=stream) as progress:
        for index, real, length in by_length(lengths, batch_size, bin_size, max_seq_length):
            batch = {
                name: value[index][:, :length] if name in SEQUENCE_FEATURES else value[index]
                for name, value in arrays.items()
            }
            for name, value in step.predict(batch).items():
                value = np.asarray(value, np.float32)[:real]
                if name in sequence_outputs and value.shape[1] < max_seq_length:
                    filler = np.full((real, max_seq_length - value.shape[1]), -np.inf, np.float32)
                    value = np.concatenate([value, filler], axis=1)
                if name not in outputs:
                    outputs[name] = np.empty((rows, *value.shape[1:]), np.float32)
                outputs[name][index[:real]] = value
            progress(real)
    return outputs
