"""The pretraining input of one worker: the global data order against the per-worker-files
pipeline it replaced, side by side, as a table.

    .venv/bin/python -m bench input_order                    # phases 1 and 2, 1 and 8 workers
    .venv/bin/python -m bench input_order --records 2000 --repeats 1   # a quick look
    .venv/bin/python -m bench input_order --maskings static               # without unmasked records

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
(DGX A100, BERT-large, mixed precision), of phase 2 about 800 (the "x A100" column: worker 0's
rate over that).

Records come masked (static, as written with a dupe factor) or unmasked (dynamic masking,
`--maskings`): the global order then also numbers each record by its position and masks each
micro-batch as it is parsed (training/masking.py: counter-based draws, a sort of each sequence's
groups and a greedy walk over them), so the rows "global order, dynamic" show what masking in
the pipeline costs worker 0 beside "global order, static" (the same record count and shapes);
"dynamic, whole words" adds word_continues (about one token in four a "##" piece) and masks
whole words. The per-worker-files peer reads static records only.

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import harness  # noqa: E402  (after the path insert)
from data.paths import PHASE_SHAPES as PHASES  # noqa: E402  phase -> (S, P)

BATCHES = {1: 64, 2: 8}  # micro-batch per worker
A100 = {1: 4000, 2: 800}  # sequences/s one A100 trains (BERT-large, mixed precision), the docstring's
SEED = 7
MASKINGS = ("static", "dynamic", "dynamic_wwm")  # masked when written; unmasked; unmasked, whole words
MASKING_IDS = (2, 3, 4, 30000)  # [CLS], [SEP], [MASK], vocabulary size of the random ids below
CONTINUES = 0.25  # share of "##" pieces in the whole-word records


def write_files(directory, files, records, seq, predictions, seed=0, masking="static"):
    """`files` TFRecord files of `records` random records each in `masking`'s layout."""
    from data.pretraining import schema, tfrecord

    layout = schema.Layout(
        "static" if masking == "static" else "dynamic", whole_word=masking == "dynamic_wwm"
    )
    rng = random.Random(seed)
    paths = []
    for f in range(files):
        path = os.path.join(directory, f"part-{f:03d}.tfrecord")
        with tfrecord.RecordWriter(path) as w:
            for _ in range(records):
                length = rng.randrange(seq // 2, seq + 1)
                ids = [2] + [rng.randrange(5, 30000) for _ in range(length - 2)] + [3]
                if masking == "static":
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
                else:
                    words = None
                    if layout.whole_word:
                        words = [0] + [int(rng.random() < CONTINUES) for _ in range(length - 2)] + [0]
                    features = schema.unmasked_features(
                        ids, [0] * length, rng.random() < 0.5, MASKING_IDS, words, seq
                    )
                w.write(schema.serialize_example(features, layout))
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
    return batch * harness.calls_per_second(lambda: next(iterator), seconds, warmup=20)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--records", type=int, default=4000, help="records per file (phase 2: a quarter)")
    parser.add_argument(
        "--workers", type=harness.comma_list(int), default="1,8", help="worker counts; worker 0 is measured"
    )
    parser.add_argument("--phases", type=harness.comma_list(int, choices=PHASES), default="1,2")
    parser.add_argument("--window", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--maskings",
        type=harness.comma_list(choices=MASKINGS, allow_empty=False),
        default=",".join(MASKINGS),
        help="record layouts: static (masked when written), dynamic (masked as read), "
        "dynamic_wwm (whole words); static first: the per-worker-files peer reads it",
    )
    return parser.parse_args(argv)


def write_phase(directory, phase, args, masking="static"):
    """The phase's TFRecords: --files files of --records records (phase 2: a quarter)."""
    seq, predictions = PHASES[phase]
    records = args.records if phase == 1 else max(1, args.records // 4)
    directory = os.path.join(directory, f"phase{phase}-{masking}")
    os.makedirs(directory)
    print(f"writing phase {phase}, {masking}: {args.files} files x {records} records ...", file=sys.stderr)
    files = write_files(directory, args.files, records, seq, predictions, masking=masking)
    megabytes = sum(os.path.getsize(f) for f in files) / 1e6
    print(f"phase {phase}, {masking}: {megabytes:.0f} MB of TFRecords", file=sys.stderr)
    return files


PIPELINES = {
    "static": "global order, static",
    "dynamic": "global order, dynamic",
    "dynamic_wwm": "global order, dynamic, whole words",
}
PEER = "per-worker files, static"


def throughput_rows(files, counts, phase, args):
    """Worker 0's sequences/s through each pipeline (the global order on each masking's files
    `files[masking]`, and the per-worker-files peer on the static ones) for each worker count,
    interleaved repeats."""
    seq, predictions = PHASES[phase]
    batch = BATCHES[phase]
    rows = []
    for workers in args.workers:
        makers = {}
        for masking in files:
            makers[PIPELINES[masking]] = lambda w=workers, m=masking: global_order(
                files[m], batch, seq, predictions, w, 0, SEED, args.window, counts=counts[m]
            )
            if masking == "static":
                makers[PEER] = lambda w=workers: per_worker_files(
                    files["static"], batch, seq, predictions, w, 0, SEED
                )
        measured = {name: [] for name in makers}
        for _, name in harness.interleaved(makers, args.repeats):
            measured[name].append(rate(makers[name](), batch, args.seconds))
        peer = statistics.median(measured[PEER]) if PEER in measured else None
        for name, values in measured.items():
            median = statistics.median(values)
            rows.append(
                [
                    f"phase {phase} (s{seq}, b{batch})",
                    workers,
                    name,
                    harness.median_range(values, "{:,.0f}"),
                    f"{median / peer:.2f}" if peer else "",
                    f"{median / A100[phase]:.1f}",
                ]
            )
    return rows


def start_up_rows(files, counts, phase, args, masking):
    """Seconds to the first micro-batch of one worker from sequence 0 and from mid-epoch."""
    seq, predictions = PHASES[phase]
    batch = BATCHES[phase]
    middle = sum(counts) // 2 + 17
    rows = []
    for start, where in ((0, "0"), (middle, f"{middle} (mid-epoch)")):
        seconds, _ = harness.timed(
            lambda start=start: next(
                iter(global_order(files, batch, seq, predictions, 1, 0, SEED, args.window, start, counts))
            )
        )
        rows.append(
            [
                f"phase {phase}: first batch from sequence {where}",
                "",
                PIPELINES[masking],
                f"{seconds:.2f} s",
                "",
                "",
            ]
        )
    return rows


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from training.input_pipeline import record_counts

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-input-order-") as tmp:
        for phase in args.phases:
            files = {m: write_phase(tmp, phase, args, m) for m in args.maskings}
            counts = {m: record_counts(f) for m, f in files.items()}
            rows += throughput_rows(files, counts, phase, args)
            first = args.maskings[0]
            rows += start_up_rows(files[first], counts[first], phase, args, first)
    headers = [
        "input",
        "workers",
        "pipeline",
        "sequences/s of worker 0, median (min-max)",
        "/ per-worker files",
        "x A100",
    ]
    print(harness.markdown_table(headers, rows))


if __name__ == "__main__":
    main()
