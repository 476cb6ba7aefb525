"""Inference throughput and latency of the fine-tuned models as served: the exported SavedModel.

For each task head (SQuAD span, GLUE classifier) x model size, the model is built, exported with
training/export.py exactly as `--export_dir` does, loaded back with tf.saved_model.load, and its
`serving_default` signature is timed one request at a time at batch 1 and batch 8. Warm-up
requests (tracing, first-call allocation) are excluded. Each row reports sequences/s and the
latency percentiles p50 / p90 / p99 / max over the timed requests; `keras` rows time the in-memory
model under tf.function (XLA on) for comparison with the SavedModel path.

    .venv/bin/python -m bench inference                      # base, seq 128 (GLUE) and 384 (SQuAD)
    .venv/bin/python -m bench inference --quick              # tiny, a few requests
    .venv/bin/python -m bench inference --model small --requests 200 --batch_sizes 1,8,32

Random weights: latency does not depend on their values. Shared machines vary 2x from one run to
the next; compare rows of one table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import harness  # noqa: E402  (after the path insert)

CONFIGS = {
    "tiny": "bert_tiny.json",
    "mini": "bert_mini.json",
    "small": "bert_small.json",
    "base": "bert_base.json",
}
SEQ_LENGTHS = {"glue": 128, "squad": 384}


def random_inputs(vocab_size: int, batch: int, seq: int, seed: int = 0) -> dict:
    """int32 [batch, seq] inputs shaped like real requests: [CLS] ... [SEP] with 10% padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab_size, size=(batch, seq), dtype=np.int32)
    ids[:, 0] = 101
    real = int(seq * 0.9)
    ids[:, real - 1] = 102
    ids[:, real:] = 0
    mask = (ids != 0).astype(np.int32)
    segments = np.zeros_like(ids)
    segments[:, seq // 3 : real] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="base", choices=sorted(CONFIGS))
    parser.add_argument(
        "--tasks",
        type=harness.comma_list(choices=SEQ_LENGTHS),
        default="glue,squad",
        help="comma-separated: glue, squad",
    )
    parser.add_argument("--batch_sizes", type=harness.comma_list(int), default="1,8")
    parser.add_argument("--requests", type=int, default=50, help="timed requests per row")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests first")
    parser.add_argument("--quick", action="store_true", help="tiny model, 10 requests")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.requests, args.warmup = "tiny", 10, 2
    return args


def serving_paths(config, task: str, export_root: str) -> dict:
    """{path name: call(features) -> numpy outputs}: the task's model exported and loaded back as
    `--export_dir` writes it, and the in-memory model under XLA."""
    import tensorflow as tf

    from bert.finetuning import BertClassifier, BertSpanModel
    from training.export import export_saved_model

    model = BertSpanModel(config) if task == "squad" else BertClassifier(config, 2)
    outputs = ("start_logits", "end_logits") if task == "squad" else ("logits",)
    export_dir = export_saved_model(model, os.path.join(export_root, task), outputs)
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    keras_call = tf.function(lambda x: model(x, training=False), jit_compile=True)
    return {
        "savedmodel": lambda x: [t.numpy() for t in serve(**x).values()],
        "keras+xla": lambda x: [t.numpy() for t in keras_call(x).values()],
    }


def measure(config, args) -> list[list]:
    """One row per task x batch size x path: sequences/s and latency percentiles in ms."""
    import tensorflow as tf

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            paths = serving_paths(config, task, tmp)
            seq = SEQ_LENGTHS[task]
            for batch in args.batch_sizes:
                inputs = random_inputs(config.vocab_size, batch, seq)
                tensors = {k: tf.constant(v) for k, v in inputs.items()}
                for path, call in paths.items():
                    latencies = harness.timed_calls(lambda: call(tensors), args.requests, args.warmup)
                    ms = [1000 * float(np.percentile(latencies, q)) for q in (50, 90, 99)] + [
                        1000 * max(latencies)
                    ]
                    rate = batch * len(latencies) / sum(latencies)
                    rows.append([task, seq, batch, path, f"{rate:.1f}", *(f"{v:.1f}" for v in ms)])
                    harness.log(f"{task} batch {batch} {path}: done")
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bert.config import read_config_file

    config = read_config_file(os.path.join(ROOT, "configs", CONFIGS[args.model]))
    rows = measure(config, args)
    print(
        f"\nInference, {args.model} ({config.num_hidden_layers} layers x {config.hidden_size}), "
        f"{args.requests} timed requests per row, fp32, {os.cpu_count()} CPU cores\n"
    )
    headers = ["task", "seq", "batch", "path", "seq/s", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    print(harness.markdown_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
