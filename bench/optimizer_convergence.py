"""Does LAMB keep large-batch training close to small-batch Adam? A table of held-out MLM accuracy.

    .venv/bin/python -m bench optimizer_convergence                  # ~10-20 min on 2 cores
    .venv/bin/python -m bench optimizer_convergence --sequences 16384 # a quick look

Three runs see the same number of training sequences from the same TFRecords:
  (a) Adam (bias-corrected AdamW) at batch 64,
  (b) Adam at batch 64 x k (gradient accumulation), learning rate scaled by sqrt(k),
  (c) LAMB at batch 64 x k, learning rate scaled by sqrt(k) from its own base.
Square-root scaling is the rule of the LAMB paper (You et al., 2019) for both optimizers;
linear scaling of Adam's rate at k = 32 diverges outright. (b) and (c) make k times fewer updates.

The corpus is real text that exists offline on any machine (the docstrings and documentation of
the installed Python standard library, bench/fixtures.py's corpus), prepared
with the project's own pipeline: prepare_data.py text_formatting -> sharding -> vocab (a WordPiece vocab
trained on the training shards) -> create_tfrecord_files. Training is the project's one train
step (training/train_step.py); accuracy is measured on the held-out test shards.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import fixtures, harness  # noqa: E402  (after the path insert)
from data import paths  # noqa: E402

SEQ, PREDICTIONS = paths.PHASE_SHAPES[1]
DUPE = 3
# The quickstart's shards (4 training, 1 test, 5% held out).
SHARDS = [arg for name, value in paths.QUICKSTART_SHARDS.items() for arg in (f"--{name}", str(value))]


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    optimizer: str
    accumulation: int
    learning_rate: float
    power: float


def prepare(cache_dir: str, megabytes: float, vocab_size: int) -> tuple[str, str, str]:
    """Corpus -> TFRecords with prepare_data.py; returns (training glob, test glob, vocab file)."""
    import prepare_data

    corpus = fixtures.stdlib_corpus(cache_dir, megabytes)
    data_dir = os.path.join(cache_dir, "convergence")
    common = ["--data_dir", data_dir, "--dataset", "stdlib"]
    records = [
        "--max_seq_length",
        str(SEQ),
        "--max_predictions_per_seq",
        str(PREDICTIONS),
        "--dupe_factor",
        str(DUPE),
    ]
    steps = [
        ["--action", "text_formatting", "--input_files", corpus, "--input_format", "text"],
        ["--action", "sharding", *SHARDS],
        ["--action", "vocab", *SHARDS, "--vocab_size", str(vocab_size)],
        ["--action", "create_tfrecord_files", *SHARDS, *records, "--n_processes", "2"],
    ]
    for argv in steps:
        # Every stage keeps a manifest, so a second run of the bench skips verified work.
        if prepare_data.main([*common, *argv], environ={}) != 0:
            raise SystemExit(f"prepare_data.py {argv[1]} failed")
    shards = paths.QUICKSTART_SHARDS
    out = paths.default_pretraining_dirs(
        data_dir, "stdlib", shards["n_training_shards"], shards["fraction_test_set"], dupe_factor=DUPE
    )["phase1"]
    vocab = os.path.join(paths.vocab_dir(data_dir, "stdlib"), "vocab.txt")
    return os.path.join(out, "training", "*"), os.path.join(out, "test", "*"), vocab


def train(run: Run, args, train_glob: str, test_glob: str, vocab_size: int) -> dict:
    import keras
    import tensorflow as tf

    from bert.config import BertConfig
    from bert.pretraining import BertPretrainer
    from optimization import WarmupPolynomialDecay, create_optimizer
    from training.input_pipeline import evaluation_dataset, training_dataset
    from training.train_step import PretrainingStep

    keras.utils.set_random_seed(args.seed)
    config = dataclasses.replace(
        BertConfig.from_json_file(os.path.join(ROOT, "configs", "bert_tiny.json")),
        vocab_size=vocab_size,
        max_position_embeddings=SEQ,
    )
    model = BertPretrainer(config)
    updates = args.sequences // (args.micro_batch * run.accumulation)
    warmup = max(1, int(updates * args.warmup_fraction))
    schedule = WarmupPolynomialDecay(run.learning_rate, warmup, updates, run.power)
    optimizer = create_optimizer(run.optimizer, schedule)
    step = PretrainingStep(
        model, optimizer, accumulation_steps=run.accumulation, jit_compile=args.xla == "on"
    )
    data = iter(
        training_dataset(
            sorted(glob.glob(train_glob)), args.micro_batch, SEQ, PREDICTIONS, seed=args.seed
        ).as_numpy_iterator()
    )
    start, losses = time.perf_counter(), []
    for update in range(updates):
        metrics = step(data)
        losses.append(metrics["loss"])
        if update % max(1, updates // 10) == 0 or update == updates - 1:
            print(
                f"  {run.name}: update {update + 1}/{updates} loss {metrics['loss']:.3f} "
                f"mlm_acc {metrics['mlm_accuracy']:.3f} ({time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        if not math.isfinite(metrics["loss"]):
            break
    held_out = evaluation_dataset(sorted(glob.glob(test_glob)), args.micro_batch, SEQ, PREDICTIONS)
    result = step.evaluate(held_out.take(args.eval_batches).as_numpy_iterator())
    tf.keras.backend.clear_session() if hasattr(tf, "keras") else None
    return {
        "updates": updates,
        "batch": args.micro_batch * run.accumulation,
        "final_train_loss": sum(losses[-5:]) / len(losses[-5:]),
        "seconds": time.perf_counter() - start,
        **result,
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=32768, help="training sequences per run")
    parser.add_argument("--micro_batch", type=int, default=64)
    parser.add_argument("--accumulation", type=int, default=16, help="k: large batch = micro_batch * k")
    parser.add_argument("--adam_lr", type=float, default=1e-3, help="Adam's rate at batch micro_batch")
    parser.add_argument(
        "--lamb_lr",
        type=float,
        default=1.25e-2,
        help="LAMB's base rate at batch micro_batch (scaled by sqrt(k))",
    )
    parser.add_argument("--warmup_fraction", type=float, default=0.1)
    parser.add_argument("--corpus_mb", type=float, default=8.0)
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--eval_batches", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--runs",
        type=harness.comma_list(choices=("a", "b", "c")),
        default="a,b,c",
        help="runs to do, of a, b, c (the module docstring's)",
    )
    parser.add_argument(
        "--xla",
        choices=("on", "off"),
        default="on",
        help="compile the train step with XLA (off: no compilation, for a quick look at tiny sizes)",
    )
    parser.add_argument("--cache_dir", default=fixtures.CACHE_DIR)
    return parser.parse_args(argv)


def runs_of(args) -> dict[str, Run]:
    """(a), (b) and (c) of the module docstring: square-root scaling of both rates by k."""
    k, root_k = args.accumulation, math.sqrt(args.accumulation)
    return {
        "a": Run(f"(a) Adam, batch {args.micro_batch}", "adamw", 1, args.adam_lr, 1.0),
        "b": Run(f"(b) Adam, batch {args.micro_batch * k}", "adamw", k, args.adam_lr * root_k, 1.0),
        "c": Run(f"(c) LAMB, batch {args.micro_batch * k}", "lamb", k, args.lamb_lr * root_k, 0.5),
    }


def main(argv=None):
    args = parse_args(argv)
    train_glob, test_glob, vocab = prepare(args.cache_dir, args.corpus_mb, args.vocab_size)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    runs = runs_of(args)
    rows = []
    for key in args.runs:
        run = runs[key]
        print(f"{run.name}: lr {run.learning_rate:.2e}", file=sys.stderr, flush=True)
        r = train(run, args, train_glob, test_glob, vocab_size)
        rows.append(
            [
                run.name,
                f"{run.learning_rate:.2e}",
                r["updates"],
                f"{r['final_train_loss']:.3f}",
                f"{r['loss']:.3f}",
                f"{r['mlm_accuracy']:.3f}",
                f"{r['nsp_accuracy']:.3f}",
                f"{r['seconds']:.0f}",
            ]
        )
    print(
        f"\nbert_tiny (vocab {vocab_size}), seq {SEQ}, {args.sequences} training sequences per run, "
        f"held-out: {args.eval_batches} x {args.micro_batch} sequences"
    )
    headers = ["run", "peak lr", "updates", "train loss", "held-out loss", "MLM acc", "NSP acc", "seconds"]
    print(harness.markdown_table(headers, rows))


if __name__ == "__main__":
    main()
