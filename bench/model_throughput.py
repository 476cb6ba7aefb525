"""Forward+backward training throughput of BertPretrainer on this machine's CPU.

For each model x precision x XLA setting, one measured step is: forward pass (dropout on),
pretraining loss, tf.GradientTape gradients of every trainable variable, and the global norm
of those gradients, so the whole backward pass is needed and nothing can be pruned. No
optimizer update: this measures the model, not the optimizer.

    .venv/bin/python -m bench model_throughput              # tiny, small, base; ~10-20 min
    .venv/bin/python -m bench model_throughput --quick      # smoke run, about a minute
    .venv/bin/python -m bench model_throughput --models base --precisions float32 --xla on,off

Each combination runs in its own child process: an XLA compile failure on CPU can abort the
process from C++ rather than raise, and a fresh process also gives every row the same clean
allocator and thread-pool state. A failing combination prints its row with the shortened cause.

Threads: TF gets one intra-op thread per usable core and a single inter-op thread. The
development machine has only 2 cores, where parallel independent ops only contend for the
cores that each matmul already fills; absolute numbers there are small and say little about
GPUs, but the ratios between rows are what this table is for.

Columns: compile s is the first call's extra time over a steady step (tracing, plus XLA
compilation when on); seq/s is the median over --repeats timed blocks of --steps steps each,
after --warmup untimed steps; speed-up is against float32 / XLA off of the same model.
Shared or virtual machines can swing by 2x within a minute (a plain numpy matmul did on the
development VM), which is why the median of several repeats is reported and each repeat's rate
is logged to stderr: compare rows only where those spreads do not overlap.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import harness  # noqa: E402  (after the path insert)
from data.pretraining.masking import MASKED_LM_PROB  # noqa: E402

DEFAULT_MODELS = ("tiny", "small", "base")
# Batch sizes that keep one step of each model at seconds, not minutes, on a 2-core CPU.
DEFAULT_BATCH_SIZES = {"tiny": 32, "mini": 32, "small": 16, "base": 8, "large": 4}
FALLBACK_BATCH_SIZE = 8
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
ERROR_WIDTH = 60

# BERT vocab ids of the special tokens (uncased and cased vocabs agree on these).
CLS_ID, SEP_ID = 101, 102
# In the uncased 30522 vocab, ids below 1996 are [PAD], [unused*], specials and single
# characters; real word pieces start at 1996, so drawing from there gives realistic
# embedding-row access rather than a handful of hot rows.
FIRST_WORD_PIECE_ID = 1996


# ----------------------------------------------------------------------------- child process


def random_pretraining_batch(
    vocab_size: int, batch: int, seq_length: int, predictions: int, seed: int
) -> dict:
    """A batch shaped like create_pretraining_data output: [CLS] A [SEP] B [SEP], padded.

    Like Google's data, 90% of sequences fill seq_length and 10% are shorter; 15% of the real
    tokens (capped at `predictions`) are masked. Returns int32 [B, S] / [B, P] arrays, float32
    masked_lm_weights [B, P] and int32 next_sentence_labels [B, 1].
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    lo = FIRST_WORD_PIECE_ID if vocab_size > FIRST_WORD_PIECE_ID else 1
    ids = np.zeros((batch, seq_length), "int32")
    mask = np.zeros((batch, seq_length), "int32")
    segments = np.zeros((batch, seq_length), "int32")
    positions = np.zeros((batch, predictions), "int32")
    lm_ids = np.zeros((batch, predictions), "int32")
    weights = np.zeros((batch, predictions), "float32")
    for b in range(batch):
        short = rng.random() >= 0.9
        length = max(int(rng.integers(seq_length // 4, seq_length)) if short else seq_length, 5)
        len_a = int(rng.integers(1, length - 3))
        tokens = rng.integers(lo, vocab_size, length).astype("int32")
        sep_a = 1 + len_a
        tokens[0], tokens[sep_a], tokens[length - 1] = CLS_ID, SEP_ID, SEP_ID
        ids[b, :length] = tokens
        mask[b, :length] = 1
        segments[b, sep_a + 1 : length] = 1
        candidates = np.array([i for i in range(1, length - 1) if i != sep_a])
        n = min(predictions, max(1, round(length * MASKED_LM_PROB)), len(candidates))
        chosen = np.sort(rng.choice(candidates, n, replace=False))
        positions[b, :n] = chosen
        lm_ids[b, :n] = tokens[chosen]
        weights[b, :n] = 1.0
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_ids": lm_ids,
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype("int32"),
    }


def measure_one(spec: dict) -> None:
    """Builds one model and times its training step; emits params, compile_s and seq_per_s."""
    import tensorflow as tf

    # Must happen before TF creates its thread pools. One inter-op thread: on 2 cores, running
    # independent ops side by side only makes them fight over the cores each already saturates.
    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)

    import keras

    from bert.config import BertConfig
    from bert.pretraining import BertPretrainer, pretraining_losses

    keras.utils.set_random_seed(spec["seed"])
    config = BertConfig.from_json_file(spec["config_path"])
    model = BertPretrainer(config, dtype=spec["precision"])
    features = random_pretraining_batch(
        config.vocab_size, spec["batch"], spec["seq_length"], spec["predictions"], spec["seed"]
    )
    features = {k: tf.constant(v) for k, v in features.items()}
    variables = model.trainable_variables

    def train_step(features):
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss = pretraining_losses(outputs, features)["loss"]
        grads = tape.gradient(loss, variables)
        # Returning a value that depends on every gradient keeps grappler/XLA from dropping
        # any part of the backward pass.
        return loss, tf.linalg.global_norm(grads)

    step = tf.function(train_step, jit_compile=spec["xla"])

    def run_step():
        loss, norm = step(features)
        norm.numpy()  # block until the step is really done
        return float(loss.numpy())

    tag = f"{spec['model']} {spec['precision']} xla={'on' if spec['xla'] else 'off'}"
    first_call_s, first_loss = harness.timed(run_step)
    harness.log(f"{tag}: first call {first_call_s:.1f}s (loss {first_loss:.3f})")
    harness.timed_calls(run_step, spec["warmup"] - 1)
    rates = []
    for r in range(spec["repeats"]):
        rates.append(spec["batch"] * spec["steps"] / sum(harness.timed_calls(run_step, spec["steps"])))
        harness.log(f"{tag}: repeat {r + 1}/{spec['repeats']}: {rates[-1]:.2f} seq/s")
    seq_per_s = statistics.median(rates)
    step_s = spec["batch"] / seq_per_s
    harness.emit(
        {
            "event": "result",
            "params": model.count_params(),
            "compile_s": max(first_call_s - step_s, 0.0),
            "seq_per_s": seq_per_s,
        }
    )


# ---------------------------------------------------------------------------- parent process


def run_combination(spec: dict, timeout_s: float) -> dict:
    """One combination in a child process: its result event, or {"error": why it failed}."""
    # Keep BLAS/OpenMP pools (if any library brings one) to the same core budget as TF's.
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(spec["threads"]))}
    deadline = time.monotonic() + timeout_s
    try:
        with harness.Child(harness.child_argv(__file__, spec), env=env) as child:
            result = child.next_event(timeout_s)
            child.wait(max(1.0, deadline - time.monotonic()))
        return result
    except harness.ChildFailed as err:
        return {"error": harness.error_cell(str(err), ERROR_WIDTH)}


def batch_sizes_flag(text: str) -> dict[str | None, int]:
    """--batch_sizes: "8" -> {None: 8} (every model); "tiny=32,base=4" -> {"tiny": 32, "base": 4}."""
    if "=" not in text:
        return {None: harness.positive_int(text)} if text.strip() else {}
    return dict(harness.comma_list(model_batch_size)(text))


def model_batch_size(item: str) -> tuple[str, int]:
    """One name=int item of --batch_sizes."""
    name, sep, value = item.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(
            f"{item!r} is not name=int; give one int for every model, or name=int pairs."
        )
    return name.strip(), harness.positive_int(value.strip())


def batch_sizes_for(sizes: dict[str | None, int], models: list[str]) -> dict[str, int]:
    """{model: batch}: --batch_sizes' (batch_sizes_flag) where it gives one, else the default."""
    for name in sizes:
        if name is not None and name not in models:
            raise SystemExit(f"--batch_sizes names {name!r}, which is not in --models ({','.join(models)}).")
    return {m: sizes.get(m, sizes.get(None, DEFAULT_BATCH_SIZES.get(m, FALLBACK_BATCH_SIZE))) for m in models}


def config_path(model: str, seq_length: int) -> str:
    """configs/bert_<model>.json (or the .json path given), checked to hold seq_length."""
    from bert.config import BertConfig  # here: pretrain_throughput imports this module before bert

    path = model if model.endswith(".json") else os.path.join(ROOT, "configs", f"bert_{model}.json")
    if not os.path.isfile(path):
        raise SystemExit(
            f"--models: no config for {model!r} (looked for {path}); name one of "
            f"configs/bert_*.json without prefix and suffix, or give a .json path."
        )
    try:
        config = BertConfig.from_json_file(path)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if seq_length > config.max_position_embeddings:
        raise SystemExit(
            f"--seq_length {seq_length} exceeds max_position_embeddings "
            f"{config.max_position_embeddings} of {path}."
        )
    return path


def table_rows(rows: list[dict]) -> list[list[str]]:
    """One row per combination; speed-up against float32 / XLA off of the same model."""
    baselines = {
        r["model"]: r["seq_per_s"]
        for r in rows
        if r["precision"] == "float32" and not r["xla"] and "seq_per_s" in r
    }
    cells = []
    for r in rows:
        common = [
            r["model"],
            f"{r['params'] / 1e6:.1f}" if "params" in r else "-",
            r["precision"],
            "on" if r["xla"] else "off",
            str(r["batch"]),
        ]
        if "error" in r:
            cells.append(common + ["-", "FAILED", r["error"]])
            continue
        base = baselines.get(r["model"])
        speedup = f"{r['seq_per_s'] / base:.2f}x" if base else "-"
        cells.append(common + [f"{r['compile_s']:.1f}", f"{r['seq_per_s']:.2f}", speedup])
    return cells


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=harness.comma_list(),
        default=None,
        help="comma list of configs/bert_<name>.json names or .json paths "
        "(default tiny,small,base; --quick: tiny)",
    )
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument(
        "--max_predictions", type=int, default=20, help="masked LM predictions per sequence (P)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps per repeat (default 3; --quick: 2)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed repeats, the median is reported (default 5; --quick: 2)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed steps, the first one compiles (default 2; --quick: 1)",
    )
    parser.add_argument(
        "--batch_sizes",
        type=batch_sizes_flag,
        default=None,
        help="one int for all models, or name=int pairs, e.g. tiny=32,base=4 "
        "(default tiny=32,small=16,base=8; --quick: 8)",
    )
    parser.add_argument(
        "--precisions",
        type=harness.comma_list(choices=PRECISIONS),
        default="float32,mixed_bfloat16",
        help=f"comma list of {', '.join(PRECISIONS)}",
    )
    parser.add_argument(
        "--xla", type=harness.comma_list(choices=("on", "off")), default="on,off", help="on, off or on,off"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="TF intra-op threads (default: the cores this process may use)",
    )
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds before one combination is abandoned and reported as failed",
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run (tiny model)")
    parser.add_argument(harness.CHILD_FLAG, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def combinations(args: argparse.Namespace) -> list[dict]:
    """The child specs of every model x precision x XLA setting, checked; float32 / XLA off of a
    model comes first, so its reference row exists before its variants."""
    models = args.models or (["tiny"] if args.quick else list(DEFAULT_MODELS))
    steps = args.steps or (2 if args.quick else 3)
    repeats = args.repeats or (2 if args.quick else 5)
    warmup = args.warmup or (1 if args.quick else 2)
    batch_sizes = batch_sizes_for(args.batch_sizes or ({None: 8} if args.quick else {}), models)
    xla_modes = sorted(x == "on" for x in args.xla)
    if args.seq_length < 8 or args.max_predictions < 1 or min(steps, repeats, warmup) < 1:
        raise SystemExit(
            "--seq_length must be >= 8 and --max_predictions, --steps, --repeats, --warmup >= 1."
        )
    paths = {m: config_path(m, args.seq_length) for m in models}
    return [
        {
            "model": model,
            "config_path": paths[model],
            "precision": precision,
            "xla": xla,
            "batch": batch_sizes[model],
            "seq_length": args.seq_length,
            "predictions": args.max_predictions,
            "steps": steps,
            "repeats": repeats,
            "warmup": warmup,
            "threads": args.threads or harness.usable_cores(),
            "seed": args.seed,
        }
        for model in models
        for precision in args.precisions
        for xla in xla_modes
    ]


def measure_all(specs: list[dict], timeout_s: float) -> list[dict]:
    """Each combination in its own child, one after the other; one result row each."""
    harness.log(
        f"{len(specs)} combinations; {specs[0]['threads']} intra-op thread(s), 1 inter-op thread "
        f"({harness.usable_cores()} usable cores)"
    )
    rows = []
    for i, spec in enumerate(specs, 1):
        model, precision, xla = spec["model"], spec["precision"], spec["xla"]
        harness.log(
            f"[{i}/{len(specs)}] {model} {precision} xla={'on' if xla else 'off'} batch={spec['batch']}"
        )
        seconds, result = harness.timed(lambda spec=spec: run_combination(spec, timeout_s))
        if "error" in result:
            harness.log(f"[{i}/{len(specs)}] FAILED: {result['error']}")
        else:
            harness.log(f"[{i}/{len(specs)}] {result['seq_per_s']:.2f} seq/s ({seconds:.0f}s wall)")
        rows.append({"model": model, "precision": precision, "xla": xla, "batch": spec["batch"], **result})
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    if args._child:
        harness.serve(measure_one, args._child)
        return
    specs = combinations(args)
    rows = measure_all(specs, args.timeout)
    first = specs[0]
    print(
        f"BERT pretraining step (forward + loss + gradients) throughput, "
        f"TF {harness.package_version('tensorflow', 'tensorflow-cpu')}, CPU: {harness.cpu_name()}, "
        f"{first['threads']} intra-op / 1 inter-op thread(s)"
    )
    print(
        f"seq_length {args.seq_length}, {args.max_predictions} masked predictions, "
        f"median of {first['repeats']} x {first['steps']} steps after {first['warmup']} warm-up step(s)"
    )
    headers = ["model", "params (M)", "precision", "xla", "batch", "compile s", "seq/s", "vs fp32/no-XLA"]
    print(harness.markdown_table(headers, table_rows(rows)))


if __name__ == "__main__":
    main()
