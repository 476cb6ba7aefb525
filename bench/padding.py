"""Padding computed or not: sequences/s and real-token fraction for --bin_size 0 / 32 / 64 / 128
and, for pretraining, --packing (training/length_bins.py, training/packing.py), side by side in
one process, interleaved, repeated.

    .venv/bin/python -m bench padding                       # everything (~20 min on 2 cores)
    .venv/bin/python -m bench padding --only pretraining    # or squad, glue
    .venv/bin/python -m bench padding --repeats 5 --updates 3 --bins 0,64
    .venv/bin/python -m bench padding --xla off             # TensorFlow graphs, one per shape
    .venv/bin/python -m bench padding --only pretraining --phases 1 --model small   # L4/H512

Rows:
- pretraining updates on real records: the quickstart corpus's phase-1 (seq 128) and phase-2 (seq
  512) TFRecords (made by the quickstart's own data commands under --work_dir when missing) and
  those of a generated Wikipedia dump (tests/dump_generator.py through bench/prep_scale.py's
  pipeline, NVIDIA's recipe), each with the global batch of the quickstart preset (phase 1: 32 x 1,
  phase 2: 8 x 4) and NVIDIA's recipe scaled down to this machine (phase 1: 16 x 8, phase 2: 8 x
  16; its 64 x 128 and 8 x 512 would take minutes an update here). One update is timed through
  the real input pipeline and TrainStep (XLA unless --xla off, fp32, one worker); every program is
  compiled in warm-up updates before the clock starts (their compile time is printed apart).
- "real tokens": the share of the computed positions that are real tokens (1 - padding),
  over the measured updates; "worker spread": how evenly an update of the same global batch
  would spread over 8 workers dealt as training/length_bins.deal_by_length deals (busiest
  worker's padded tokens / the mean worker's; 1.00 is even).
- SQuAD fine-tuning updates and prediction on the python_qa set (max_seq_length 384,
  doc_stride 128, batch 8); GLUE prediction on SST-2-like short sentences (real sentences of the
  python_docs corpus cut to SST-2's length mix, max_seq_length 128, batch 32).

The model is configs/bert_<--model>.json (default tiny: L2 H128; small is L4 H512, where
attention's share of the work is nearer BERT's) with the records' vocabulary. The ratio column
divides by the bin 0 figure of the same row group, measured in the same rounds. The "packed" row
(pretraining, --packing on) lays each update out in rows of max_seq_length, "packed, B" the same
rows cut to bins of B (`--packing` with `--bin_size B`); their worker spread is not measured ("-").
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "tests"))

from bench import fixtures, harness  # noqa: E402
from data import paths  # noqa: E402

WORKERS_FOR_SPREAD = 8
RECIPES = {  # (micro-batch B, accumulation k) per phase
    "quickstart": {1: (32, 1), 2: (8, 4)},
    "NVIDIA scaled": {1: (16, 8), 2: (8, 16)},
}


# ----------------------------------------------------------------------------------- records


def quickstart_records(work_dir: str) -> tuple[dict, str, str]:
    """({phase: training TFRecord files}, vocab file, python_qa dir) of the quickstart's data
    commands, run under work_dir/quickstart/data when missing."""
    data = quickstart_data_root(work_dir)
    if not all(quickstart_files(data).values()):
        harness.log("building the quickstart's corpus and records (a few minutes)")
        fixtures.quickstart_data(data)
    return quickstart_files(data), paths.quickstart_vocab(data), fixtures.python_qa(data)


def quickstart_files(data: str) -> dict:
    """{phase: the quickstart's training TFRecord files} under the data root `data` (none yet: [])."""
    return {
        p: sorted(glob.glob(os.path.join(paths.quickstart_records(data, p), "training", "*"))) for p in (1, 2)
    }


def quickstart_data_root(work_dir: str) -> str:
    return os.path.join(work_dir, "quickstart", "data")


def wikipedia_records(work_dir: str, xml_mb: float) -> tuple[dict, str]:
    """({phase: training TFRecord files}, vocab) from a generated dump through NVIDIA's recipe
    (its static, masked-when-written records)."""
    from bench import prep_scale

    data_dir = os.path.join(work_dir, f"wikipedia_{xml_mb:g}MB")

    def files():
        return {
            p: sorted(
                glob.glob(
                    os.path.join(data_dir, f"tfrecord_seq{paths.PHASE_SHAPES[p][0]}_static", "training", "*")
                )
            )
            for p in (1, 2)
        }

    if not all(files().values()):
        dump, _ = prep_scale.dump_path(os.path.join(work_dir, "dumps"), xml_mb, seed=0)
        prep_scale.run_pipeline(dump, data_dir, 1, shard_mb=max(1.0, xml_mb / 8))
    return files(), fixtures.bert_base_vocab()


def docstring_records(work_dir: str) -> tuple[dict, str]:
    """({phase: training TFRecord files}, vocab) of many short documents: every docstring of the
    installed Python's modules its own document (data.corpus.stdlib_text.build_docstring_corpus),
    through scripts/data_download.sh with the quickstart's vocab, shards and dupe factor."""
    from data.corpus import stdlib_text

    _, vocab, _ = quickstart_records(work_dir)
    data = os.path.join(work_dir, "docstrings")

    def files():
        return {
            p: sorted(
                glob.glob(
                    os.path.join(
                        data, "tfrecord", f"*seq_len_{paths.PHASE_SHAPES[p][0]}_*", "*", "training", "*"
                    )
                )
            )
            for p in (1, 2)
        }

    if not all(files().values()):
        corpus = os.path.join(data, "corpus.txt")
        os.makedirs(data, exist_ok=True)
        stdlib_text.build_docstring_corpus(corpus, 4.0)
        shards = [arg for name, value in paths.QUICKSTART_SHARDS.items() for arg in (f"--{name}", str(value))]
        harness.run(
            [
                "bash",
                os.path.join(ROOT, "scripts", "data_download.sh"),
                "--data_dir",
                data,
                "--corpus",
                corpus,
            ]
            + ["--dataset", "docstrings", "--vocab_file", vocab, *shards]
            + ["--dupe_factor", str(paths.QUICKSTART_DUPE_FACTOR)],
            "data_download.sh (docstrings)",
        )
    return files(), vocab


# ----------------------------------------------------------------------------------- models


def build_model(build, vocab_size: int, seq: int, model: str = "tiny"):
    """A model of configs/bert_<model>.json sized to the vocab (dropout kept: the cost is real)."""
    import dataclasses

    from bert.config import read_config_file
    from training import job

    config = read_config_file(os.path.join(ROOT, "configs", f"bert_{model}.json"))
    config = dataclasses.replace(config, vocab_size=vocab_size, max_position_embeddings=max(512, seq))
    return job.build_model(lambda dtype: build(config, dtype), seed=1, precision="fp32", rank=0)


def vocab_size(vocab: str) -> int:
    with open(vocab, encoding="utf-8") as f:
        return sum(1 for _ in f)


PACKED = "packed"
# --sets: the record sets' names in the table
SETS = {
    "quickstart": "quickstart corpus",
    "wikipedia": "generated Wikipedia",
    "docstrings": "stdlib docstrings",
}


def packed(bin_size: int) -> str:
    """The kind of a packed layout: rows of max_seq_length ("packed"), or with bins ("packed, 64")."""
    return PACKED if not bin_size else f"{PACKED}, {bin_size}"


def kind_bin(kind) -> tuple[int, bool]:
    """(bin size, packed) of a kind: a bin size, or `packed`'s name."""
    if isinstance(kind, int):
        return kind, False
    return int(kind.split(", ")[1]) if ", " in kind else 0, True


def steps_for(model, objective, accumulation: int, bins: list, xla: bool, seq: int, batch: int = 0) -> dict:
    """{kind: TrainStep} on one model: bin 0 the stacked update, the other bins the binned one,
    `packed(b)` the packed one (micro-batches of `batch` sequences, cut to bins of b); XLA
    programs where `xla`, TensorFlow graphs where not."""
    from training.distributed import Distributed
    from training.length_bins import bin_lengths
    from training.packing import row_counts
    from training.update import Update

    update = Update(1, accumulation, 1e-4, 1, "lamb")
    dist = Distributed(use_horovod=False)
    return {
        kind: update.build(
            model,
            objective,
            warmup_steps=1,
            train_steps=10**6,
            distributed=dist,
            jit_compile=xla,
            bin_lengths=bin_lengths(kind_bin(kind)[0], seq),
            row_counts=row_counts(batch) if kind_bin(kind)[1] else (),
        )
        for kind in bins
    }


# ----------------------------------------------------------------------------------- measuring


class Counting:
    """Wraps a micro-batch iterator, counting real and computed positions."""

    def __init__(self, batches):
        self.batches, self.real, self.computed = batches, 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.batches)
        mask = batch["input_mask"]
        self.real += int(mask.numpy().sum())
        self.computed += int(mask.shape[0] * mask.shape[1])
        return batch


def timed_updates(step, batches, updates: int) -> float | None:
    """Seconds for `updates` updates (dispatched, then read once); None when a program was
    compiled for a shape the warm-up did not meet (that round is not a steady one)."""
    compiling = step.compile_seconds
    started = time.perf_counter()
    step.read([step.dispatch(batches) for _ in range(updates)])
    seconds = time.perf_counter() - started
    return None if step.compile_seconds > compiling else seconds


def compare(streams: dict, sequences_per_round: int, repeats: int, updates: int, warmup: int) -> dict:
    """{bin: {"rate": [seq/s per round], "real": fraction, "compile": s}} for streams {bin: (step,
    Counting)}: `warmup` updates each, then `repeats` interleaved rounds of `updates` updates."""
    results = {b: {"rate": []} for b in streams}
    for b, (step, batches) in streams.items():
        for _ in range(warmup):
            step(batches)
        batches.real = batches.computed = 0
    for _, b in harness.interleaved(list(streams), repeats):
        step, batches = streams[b]
        for _ in range(5):  # a round that compiled a new shape is run again
            seconds = timed_updates(step, batches, updates)
            if seconds is not None:
                results[b]["rate"].append(sequences_per_round / seconds)
                break
    for b, (step, batches) in streams.items():
        results[b]["real"] = batches.real / max(batches.computed, 1)
        results[b]["compile"] = step.compile_seconds
    return results


def worker_spread(
    files: list, seq: int, batch: int, accumulation: int, bin_size: int, updates: int = 8
) -> float:
    """Busiest / mean worker's padded tokens over `updates` updates of W x k x B sequences."""
    import numpy as np
    import tensorflow as tf

    from training.data_order import records_in_order
    from training.input_pipeline import _record_lengths, record_counts
    from training.length_bins import bin_length, deal_by_length

    if not bin_size:
        return 1.0
    g = WORKERS_FOR_SPREAD * accumulation * batch
    order = records_in_order(files, record_counts(files), seed=12345, window=10000)
    ratios = []
    for update in order.batch(g).map(_record_lengths(seq)).take(updates):
        lengths = update.numpy()
        tokens = []
        for w in range(WORKERS_FOR_SPREAD):
            rows = deal_by_length(tf.constant(lengths), batch, WORKERS_FOR_SPREAD, w).numpy()
            tokens.append(sum(batch * bin_length(int(n), bin_size, seq) for n in lengths[rows].max(axis=1)))
        ratios.append(max(tokens) / float(np.mean(tokens)))
    return float(np.mean(ratios))


def pretraining_rows(name: str, files: list, vocab: str, phase: int, recipe: str, args) -> list:
    """The rows of one record set, phase and global batch (RECIPES), one per bin."""
    from bert.pretraining import BertPretrainer
    from training.input_pipeline import training_dataset
    from training.pretraining_objective import PretrainingObjective

    seq, predictions = paths.PHASE_SHAPES[phase]
    batch, k = RECIPES[recipe][phase]
    model = build_model(lambda c, d: BertPretrainer(c, dtype=d), vocab_size(vocab), seq, args.model)
    harness.log(f"pretraining {name} phase {phase}, {recipe} ({batch} x {k})")
    kinds = [*args.bins, *([packed(b) for b in args.bins] if args.packing == "on" else [])]
    steps = steps_for(model, PretrainingObjective(), k, kinds, args.xla == "on", seq, batch)

    def stream(kind):
        bin_size, packing = kind_bin(kind)
        return training_dataset(
            files, batch, seq, predictions, accumulation=k, bin_size=bin_size, seed=12345, packing=packing
        )

    streams = {b: (steps[b], Counting(iter(stream(b)))) for b in kinds}
    results = compare(streams, batch * k * args.updates, args.repeats, args.updates, args.warmup)
    base = statistics.median(results[0]["rate"])
    rows = []
    for b in kinds:
        rate = statistics.median(results[b]["rate"])
        rows.append(
            [
                f"{name} phase {phase} (seq {seq})",
                f"{recipe}: {batch} x {k}",
                str(b),
                f"{results[b]['real']:.1%}",
                "-" if kind_bin(b)[1] else f"{worker_spread(files, seq, batch, k, b):.2f}",
                harness.median_range(results[b]["rate"], "{:.1f}"),
                f"{rate / base:.2f}x",
                f"{results[b]['compile']:.0f}",
            ]
        )
    return rows


def squad_rows(vocab: str, qa_dir: str, args) -> list:
    from bert.finetuning import BertSpanModel
    from bert.tokenization import build_tokenizer
    from training.finetuning_job import predict, training_dataset
    from training.finetuning_objectives import SpanObjective
    from training.squad_task import SquadTask

    seq, batch = 384, 8
    task = SquadTask(
        train_file=os.path.join(qa_dir, "train.json"),
        predict_file=os.path.join(qa_dir, "dev.json"),
        doc_stride=128,
    )
    tokenizer = build_tokenizer(vocab_file=vocab, do_lower_case=True)
    train, _ = task.train_features(tokenizer, seq, seed=1, stream=open(os.devnull, "w"))
    arrays, _ = task.predict_features("predict", tokenizer, seq, stream=open(os.devnull, "w"))
    model = build_model(lambda c, d: BertSpanModel(c, dtype=d), vocab_size(vocab), seq, args.model)
    rows = []
    harness.log(f"SQuAD python_qa fine-tuning ({len(train['input_ids'])} windows)")
    steps = steps_for(model, SpanObjective(), 1, args.bins, args.xla == "on", seq)
    streams = {
        b: (
            steps[b],
            Counting(iter(training_dataset(train, batch, num_workers=1, worker_index=0, seed=1, bin_size=b))),
        )
        for b in args.bins
    }
    results = compare(streams, batch * args.updates, args.repeats, args.updates, args.warmup)
    base = statistics.median(results[0]["rate"]) if 0 in results else None
    for b in args.bins:
        rate = statistics.median(results[b]["rate"])
        rows.append(
            [
                "SQuAD python_qa (seq 384)",
                f"fine-tuning: {batch} x 1",
                str(b),
                f"{results[b]['real']:.1%}",
                "",
                harness.median_range(results[b]["rate"], "{:.1f}"),
                f"{rate / base:.2f}x" if base else "",
                f"{results[b]['compile']:.0f}",
            ]
        )
    rows += prediction_rows(
        "SQuAD python_qa (seq 384)", steps, arrays, batch, args, predict, ("start_logits", "end_logits")
    )
    return rows


def prediction_rows(
    label: str, steps: dict, arrays: dict, batch: int, args, predict, sequence_outputs
) -> list:
    """Prediction over every row of `arrays`, each bin timed in interleaved rounds (one warm-up
    pass compiles every shape)."""
    from training.length_bins import by_length

    harness.log(f"{label} prediction ({len(arrays['input_ids'])} rows)")
    devnull = open(os.devnull, "w")
    rates = {b: [] for b in args.bins}
    seq = arrays["input_ids"].shape[1]
    lengths = arrays["input_mask"].sum(axis=1)

    def run(b):
        return predict(
            steps[b], arrays, batch, "predict", devnull, bin_size=b, sequence_outputs=sequence_outputs
        )

    compile_s = {}
    for b in args.bins:
        compile_s[b], _ = harness.timed(lambda b=b: run(b))
    for _, b in harness.interleaved(list(args.bins), args.repeats):
        seconds, _ = harness.timed(lambda b=b: run(b))
        rates[b].append(len(lengths) / seconds)
    rows = []
    base = statistics.median(rates[0]) if 0 in rates else None
    for b in args.bins:
        computed = sum(batch * length for _, _, length in by_length(lengths, batch, b, seq))
        rate = statistics.median(rates[b])
        rows.append(
            [
                label,
                f"prediction: {batch}",
                str(b),
                f"{lengths.sum() / computed:.1%}",
                "",
                harness.median_range(rates[b], "{:.1f}"),
                f"{rate / base:.2f}x" if base else "",
                f"{compile_s[b]:.0f}",
            ]
        )
    return rows


def sst2_like_arrays(corpus: str, vocab: str, count: int, seq: int) -> dict:
    """`count` single sentences of the corpus cut to SST-2's length mix (3 to 50 words, most
    between 5 and 30), tokenized to GLUE's features at `seq`."""
    import numpy as np

    from bert.tokenization import build_tokenizer, encode_pair

    rng = random.Random(2)
    tokenizer = build_tokenizer(vocab_file=vocab, do_lower_case=True)
    with open(corpus, encoding="utf-8") as f:
        words = [line.split() for line in f if len(line.split()) >= 8]
    rows = []
    while len(rows) < count:
        sentence = rng.choice(words)
        n = max(3, min(50, int(rng.lognormvariate(2.8, 0.5))))
        rows.append(encode_pair(tokenizer, " ".join(sentence[:n]), None, max_seq_length=seq))
    return {
        k: np.asarray([r[k] + [0] * (seq - len(r[k])) for r in rows], np.int32)
        for k in ("input_ids", "input_mask", "segment_ids")
    }


def glue_rows(vocab: str, corpus: str, args) -> list:
    from bert.finetuning import BertClassifier
    from training.finetuning_job import predict
    from training.finetuning_objectives import ClassificationObjective

    seq, batch = 128, 32
    arrays = sst2_like_arrays(corpus, vocab, args.glue_rows, seq)
    model = build_model(lambda c, d: BertClassifier(c, 2, dtype=d), vocab_size(vocab), seq, args.model)
    steps = steps_for(model, ClassificationObjective(), 1, args.bins, args.xla == "on", seq)
    return prediction_rows("GLUE SST-2-like (seq 128)", steps, arrays, batch, args, predict, ())


# ----------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work_dir", default=os.path.join(ROOT, "results", "bench_padding"))
    p.add_argument(
        "--bins",
        type=harness.comma_list(int),
        default="0,32,64,128",
        help="bin sizes; 0 (padded) is the ratios' base",
    )
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    p.add_argument("--updates", type=int, default=2, help="updates per round and bin")
    p.add_argument("--warmup", type=int, default=4, help="updates before the clock (compiles every shape)")
    p.add_argument(
        "--xml_mb",
        type=float,
        default=8.0,
        help="size of the generated Wikipedia dump (0: no Wikipedia rows)",
    )
    p.add_argument("--only", choices=("pretraining", "squad", "glue"), action="append")
    p.add_argument(
        "--sets",
        type=harness.comma_list(choices=SETS),
        default="quickstart,wikipedia",
        help=f"pretraining record sets ({', '.join(SETS)}; wikipedia only with --xml_mb > 0)",
    )
    p.add_argument(
        "--phases",
        type=harness.comma_list(int, choices=(1, 2)),
        default="1,2",
        help="pretraining phases to run (1: seq 128, 2: seq 512)",
    )
    p.add_argument(
        "--packing",
        choices=("on", "off"),
        default="on",
        help="pretraining: packed rows beside the bins (training/packing.py), one per bin size [on]",
    )
    p.add_argument(
        "--model",
        choices=sorted(f[5:-5] for f in os.listdir(os.path.join(ROOT, "configs")) if f.startswith("bert_")),
        default="tiny",
        help="configs/bert_<model>.json [tiny]",
    )
    p.add_argument(
        "--recipes",
        type=harness.comma_list(choices=RECIPES),
        default=",".join(RECIPES),
        help=f"global batches to run ({', '.join(RECIPES)})",
    )
    p.add_argument("--vocab", help="with --corpus: GLUE's rows from these, without the quickstart's data")
    p.add_argument("--corpus", help="sentences for GLUE's SST-2-like rows (default: the quickstart corpus)")
    p.add_argument("--glue_rows", type=int, default=872, help="SST-2-like sentences (SST-2's dev size)")
    p.add_argument(
        "--xla",
        choices=("on", "off"),
        default="on",
        help="compile the steps with XLA (off: TensorFlow graphs, traced once per shape) [on]",
    )
    p.add_argument("--timeout_s", type=float, default=3600, help="per group of rows")
    args = p.parse_args(argv)
    if 0 not in args.bins:
        args.bins.insert(0, 0)
    return args


def measure(spec: dict) -> None:
    """One group's rows, in a child process of its own (bench/harness.py's serve)."""
    args = argparse.Namespace(**spec["args"])
    group = spec["group"]
    if group == "pretraining":
        rows = pretraining_rows(
            spec["name"], spec["files"], spec["vocab"], spec["phase"], spec["recipe"], args
        )
    elif group == "squad":
        rows = squad_rows(spec["vocab"], spec["qa_dir"], args)
    else:
        rows = glue_rows(spec["vocab"], spec["corpus"], args)
    harness.emit({"event": "rows", "rows": rows})


def groups(args) -> list[dict]:
    """The children to run: (record set, phase, recipe) for pretraining, then SQuAD and GLUE."""
    only = set(args.only or ("pretraining", "squad", "glue"))
    shared = {
        "args": {
            k: getattr(args, k)
            for k in (
                "bins",
                "repeats",
                "updates",
                "warmup",
                "glue_rows",
                "recipes",
                "xla",
                "packing",
                "model",
            )
        }
    }
    quick = vocab = qa_dir = None
    if only & {"pretraining", "squad"} or not (args.vocab and args.corpus):
        quick, vocab, qa_dir = quickstart_records(args.work_dir)
    vocab = args.vocab or vocab
    specs = []
    if "pretraining" in only:
        sets = [("quickstart corpus", quick, vocab)] if "quickstart" in args.sets else []
        if args.xml_mb and "wikipedia" in args.sets:
            sets.append(("generated Wikipedia", *wikipedia_records(args.work_dir, args.xml_mb)))
        if "docstrings" in args.sets:
            sets.append((SETS["docstrings"], *docstring_records(args.work_dir)))
        for name, files, set_vocab in sets:
            for phase in args.phases:
                for recipe in args.recipes:
                    specs.append(
                        {
                            **shared,
                            "group": "pretraining",
                            "name": name,
                            "files": files[phase],
                            "vocab": set_vocab,
                            "phase": phase,
                            "recipe": recipe,
                        }
                    )
    if "squad" in only:
        specs.append({**shared, "group": "squad", "vocab": vocab, "qa_dir": qa_dir})
    if "glue" in only:
        corpus = args.corpus or paths.python_docs_file(quickstart_data_root(args.work_dir))
        specs.append({**shared, "group": "glue", "vocab": vocab, "corpus": corpus})
    return specs


def main(argv=None) -> None:
    if len(sys.argv) > 2 and sys.argv[1] == harness.CHILD_FLAG:
        harness.serve(measure, sys.argv[2])
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parse_args(argv)
    started = time.perf_counter()
    rows = []
    for spec in groups(args):
        # A child per group: compiled programs and input buffers leave with it.
        with harness.Child(harness.child_argv(__file__, spec)) as child:
            try:
                found = child.next_event(timeout_s=args.timeout_s)["rows"]
            except harness.ChildFailed as err:
                label = spec.get("name", spec["group"]) + (
                    f" phase {spec['phase']}" if "phase" in spec else ""
                )
                found = [[label, spec.get("recipe", ""), "", "", "", harness.error_cell(str(err)), "", ""]]
        for row in found:
            harness.log(" | ".join(row))
        rows += found
    headers = [
        "input",
        "work: batch",
        "bin",
        "real tokens",
        "worker spread",
        "seq/s",
        "vs bin 0",
        "compile s",
    ]
    print(harness.markdown_table(headers, rows))
    print(
        f"\n{harness.cpu_name()}, {harness.usable_cores()} cores; bert_{args.model}, fp32, {'XLA' if args.xla == 'on' else 'no XLA'}; medians (min-max) of "
        f"{args.repeats} interleaved rounds of {args.updates} updates; {time.perf_counter() - started:.0f} s in all."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
