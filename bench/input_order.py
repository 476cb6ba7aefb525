"""The pretraining input of one worker: the global data order against the per-worker-files
pipeline it replaced, side by side, as a table.

    .venv/bin/python bench/input_order.py                    # phases 1 and 2, 1 and 8 workers
    .venv/bin/python bench/input_order.py --records 2000 --repeats 1   # a quick look

What is measured: sequences per second that worker 0 gets out of its tf.data pipeline (parsed
micro-batches, as the train step takes them; no model), after a warm-up, for
- "global order" (training/input_pipeline.training_dataset, what the job uses): every worker
  reads every file in the epoch's seeded order, shuffles windows of --window records, cuts
  micro-batches and keeps every W-th; a checkpoint's position is one number, valid for any W;
- "per-worker files" (the pipeline before it, kept here as the peer): worker r reads files r,
  r + W, ... through a parallel interleave of 8 files and a 10,000-example shuffle buffer; its
  position is tf.data's iterator state, which holds the buffer and fits only the same W.
With W workers each worker of the global order reads W times the records it keeps (all of them),
so its rate per worker is what bounds it; a GPU worker of phase 1 takes about 4,000 sequences/s
(DGX A100, BERT-large, mixed precision), of phase 2 about 800.

Also the start-up of a resumed run: seconds to the first micro-batch when starting in the middle
of an epoch (whole files skipped by their record counts, one file read through up to the
window), against starting at 0.

The files are written here in the pretraining schema, random token ids, the phase's shapes
(phase 1: 128/20, phase 2: 512/80), --files files of --records records each. Rows are measured
in interleaved repeats (median, min-max) in this one process.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PHASES = {1: (128, 20), 2: (512, 80)}


def write_files(directory, files, records, seq, predictions, seed=0):
    from data.pretraining import schema, tfrecord

    rng = random.Random(seed)
    paths = []
    for f in range(files):
        path = os.path.join(directory, f"part-{f:03d}.tfrecord")
        with tfrecord.RecordWriter(path) as w:
            for _ in range(records):
                length = rng.randrange(seq // 2, seq + 1)
                ids = [2] + [rng.randrange(5, 30000) for _ in range(length - 2)] + [3]
                positions = sorted(rng.sample(range(1, length - 1), predictions))
                features = schema.pad_features(
                    ids,
                    [0] * length,
                    positions,
                    [ids[p] for p in positions],
                    rng.random() < 0.5,
                    seq,
                    predictions,
                )
                w.write(schema.serialize_example(features))
        paths.append(path)
    return paths


def per_worker_files(files, batch, seq, predictions, workers, rank, seed):
    """The pipeline before the global order (as it was in training/input_pipeline.py)."""
    import tensorflow as tf

    from data.pretraining import schema

    mine = files[rank::workers]
    d = tf.data.Dataset.from_tensor_slices(tf.constant(mine))
    d = d.shuffle(len(mine), seed=seed, reshuffle_each_iteration=True).repeat()
    d = d.interleave(
        tf.data.TFRecordDataset,
        cycle_length=max(1, min(8, len(mine))),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    d = d.shuffle(10000, seed=seed, reshuffle_each_iteration=True)
    d = d.batch(batch, drop_remainder=True)
    d = d.map(lambda s: schema.parse_examples(s, seq, predictions), num_parallel_calls=tf.data.AUTOTUNE)
    return d.prefetch(tf.data.AUTOTUNE)


def global_order(files, batch, seq, predictions, workers, rank, seed, window, start=0, counts=None):
    from training.input_pipeline import training_dataset

    return training_dataset(
        files,
        batch,
        seq,
        predictions,
        num_workers=workers,
        worker_index=rank,
        start=start,
        seed=seed,
        window=window,
        count=None if counts is None else (lambda _: counts),
    )


def rate(dataset, batch, seconds):
    """Sequences/s out of `dataset` over about `seconds`, after 20 warm-up batches."""
    iterator = iter(dataset)
    for _ in range(20):
        next(iterator)
    n, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        next(iterator)
        n += 1
    return n * batch / (time.perf_counter() - started)


def first_batch_seconds(make):
    started = time.perf_counter()
    next(iter(make()))
    return time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--records", type=int, default=4000, help="records per file (phase 2: a quarter)")
    parser.add_argument("--workers", default="1,8", help="worker counts; worker 0 is measured")
    parser.add_argument("--phases", default="1,2")
    parser.add_argument("--window", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from training.input_pipeline import record_counts

    batches = {1: 64, 2: 8}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-input-order-") as tmp:
        for phase in (int(p) for p in args.phases.split(",")):
            seq, predictions = PHASES[phase]
            records = args.records if phase == 1 else max(1, args.records // 4)
            directory = os.path.join(tmp, f"phase{phase}")
            os.makedirs(directory)
            print(f"writing phase {phase}: {args.files} files x {records} records ...", file=sys.stderr)
            files = write_files(directory, args.files, records, seq, predictions)
            megabytes = sum(os.path.getsize(f) for f in files) / 1e6
            counts = record_counts(files)
            batch = batches[phase]
            for workers in (int(w) for w in args.workers.split(",")):
                makers = {
                    "global order": lambda w=workers: global_order(
                        files, batch, seq, predictions, w, 0, 7, args.window, counts=counts
                    ),
                    "per-worker files": lambda w=workers: per_worker_files(
                        files, batch, seq, predictions, w, 0, 7
                    ),
                }
                measured = {name: [] for name in makers}
                for _ in range(args.repeats):
                    for name, make in makers.items():
                        measured[name].append(rate(make(), batch, args.seconds))
                peer = statistics.median(measured["per-worker files"])
                for name, values in measured.items():
                    median = statistics.median(values)
                    rows.append(
                        (
                            f"phase {phase} (s{seq}, b{batch})",
                            workers,
                            name,
                            f"{median:,.0f} ({min(values):,.0f}-{max(values):,.0f})",
                            f"{median / peer:.2f}",
                        )
                    )
            middle = sum(counts) // 2 + 17
            starts = {
                "0": first_batch_seconds(
                    lambda: global_order(files, batch, seq, predictions, 1, 0, 7, args.window, counts=counts)
                ),
                f"{middle} (mid-epoch)": first_batch_seconds(
                    lambda: global_order(
                        files,
                        batch,
                        seq,
                        predictions,
                        1,
                        0,
                        7,
                        args.window,
                        start=middle,
                        counts=counts,
                    )
                ),
            }
            for where, seconds in starts.items():
                rows.append(
                    (
                        f"phase {phase}: first batch from sequence {where}",
                        "",
                        "global order",
                        f"{seconds:.2f} s",
                        "",
                    )
                )
            print(f"phase {phase}: {megabytes:.0f} MB of TFRecords", file=sys.stderr)
    print("| input | workers | pipeline | sequences/s of worker 0, median (min-max) | / per-worker files |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
