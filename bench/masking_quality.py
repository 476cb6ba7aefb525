"""Does dynamic masking train as well as static? Held-out masked-LM accuracy after the quickstart's
pretraining on statically masked records and on unmasked ones masked as they are read, side by side.

    .venv/bin/python -m bench masking_quality                     # 600 updates: ~5-8 min on 2 cores
    .venv/bin/python -m bench masking_quality --train_steps 2200  # the quickstart's whole budget (~15 min)
    .venv/bin/python -m bench masking_quality --seeds 1,2         # two seeds each: the noise
    .venv/bin/python -m bench masking_quality --xla off           # TensorFlow graphs: no compiles

Both runs are the quickstart's (scripts/quickstart.sh), through the same
commands:
- corpus: `prepare_data.py --action download --dataset python_docs --corpus_mb 4` (the installed
  Python's prose);
- records: `scripts/data_download.sh` with the quickstart's shards (4 training + 1 test, 5% held
  out) and trained WordPiece vocab (2,048), twice: `--dupe_factor 2` (static, the quickstart's)
  and `--masking dynamic` (each pair once, unmasked; the same pairs as the static records' first
  copy). The second run reuses the formatted text, shards and vocab (their manifests);
- model: `python -m tools.quickstart config` (configs/bert_tiny.json, the trained vocab,
  dropout off);
- pretraining: `scripts/run_pretraining_lamb.sh --preset quickstart` (LAMB, phase 1 seq 128 batch
  32 peak 1e-2, phase 2 seq 512 8 x 4; with --train_steps N the warm-ups shrink as the
  quickstart's own --train_steps does; without its evaluation at the end of each phase, which the
  evaluation below replaces), with `--seed` the same for both: the same initial weights and the
  same order of records. The dynamic run masks each record by (seed, its position
  in the global order), anew in every epoch; the static one sees the two copies written;
- evaluation: `run_pretraining.py --nodo_train --do_eval` of each final checkpoint on the same
  held-out records: the static test shard at seq 128 and at 512, the quickstart's 50 batches of
  32 (the shard holds fewer), so both models answer exactly the same masked positions.

The table: each run's held-out masked-LM accuracy and loss, NSP accuracy, the last logged
training-batch accuracy, and its seconds; below it the records each way (count and bytes) and the
binomial standard error of an accuracy on that many held-out predictions (the evaluation's own
noise; the spread between seeds, with --seeds, is the training's).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import fixtures, harness  # noqa: E402  (after the path insert)
from common.files import read_json  # noqa: E402
from data import paths as data_paths  # noqa: E402
from data.paths import PHASE_SHAPES  # noqa: E402

MASKINGS = ("static", "dynamic")
PRESET_STEPS = 2200  # configs/presets/run_pretraining_lamb/quickstart.conf's train_steps
EVAL_BATCHES, EVAL_BATCH = 50, 32  # the quickstart's evaluations


def dupe_factor(masking: str) -> int:
    return data_paths.QUICKSTART_DUPE_FACTOR if masking == "static" else 1


def records_dir(data: str, masking: str, phase: int) -> str:
    """Where data_download.sh writes one masking's records of one phase (training/ and test/)."""
    return data_paths.quickstart_records(data, phase, masking)


def prepare(work: str, corpus_mb: float) -> str:
    """Corpus, shards, vocab, the tiny model's config and both maskings' records of both phases
    under `work` (each stage skipped when its manifest says it is done); returns the data root."""
    data = os.path.join(work, "data")
    fixtures.quickstart_data(data, corpus_mb, MASKINGS)
    harness.run(
        [
            sys.executable,
            "-m",
            "tools.quickstart",
            "config",
            os.path.join(ROOT, "configs", "bert_tiny.json"),
        ]
        + [data_paths.quickstart_vocab(data), os.path.join(work, "bert_config.json")],
        "config",
    )
    return data


def steps_flags(n: int) -> list[str]:
    """The quickstart's --train_steps rule: the warm-ups a tenth of each phase (none: the preset's)."""
    if n == PRESET_STEPS:
        return []
    return [
        f"--train_steps={n}",
        f"--warmup_steps_phase1={n * 9 // 100}",
        f"--warmup_steps_phase2={(n - n * 9 // 10) // 10}",
    ]


def pretrain(work: str, data: str, masking: str, seed: int, train_steps: int, xla: bool = True) -> dict:
    """Both phases on one masking's records; returns the run's directory, seconds and the last
    logged training-batch masked-LM accuracy."""
    from training.metrics_log import LOG_NAME, read_log

    run = os.path.join(work, "runs", f"{masking}-seed{seed}")
    shutil.rmtree(run, ignore_errors=True)  # a fresh run, not a resumed one
    env = {
        **os.environ,
        "PHASE1_DATA": records_dir(data, masking, 1),
        "PHASE2_DATA": records_dir(data, masking, 2),
        "VOCAB_FILE": data_paths.quickstart_vocab(data),
        "BERT_CONFIG": os.path.join(work, "bert_config.json"),
        "RESULTS_DIR": run,
    }
    argv = ["bash", os.path.join(ROOT, "scripts", "run_pretraining_lamb.sh"), "--preset", "quickstart"]
    argv += [
        *steps_flags(train_steps),
        "--do_eval=false",  # the evaluations below, on the same held-out records for both, replace it
        f"--use_xla={str(xla).lower()}",
        "--",
        f"--seed={seed}",
        "--log_every_n_steps=50",
    ]
    harness.log(f"pretraining: {masking} records, seed {seed}, {train_steps} steps")
    done = harness.run(argv, f"pretraining ({masking}, seed {seed})", env=env)
    logged = [e for e in read_log(os.path.join(run, "phase_2", LOG_NAME)) if "mlm_accuracy" in e]
    return {"dir": run, "seconds": done.seconds, "train_mlm": logged[-1]["mlm_accuracy"] if logged else None}


def evaluate(work: str, data: str, run_dir: str, phase: int, seed: int, xla: bool = True) -> dict:
    """The final checkpoint's eval_results on the static test records of `phase`."""
    seq, predictions = PHASE_SHAPES[phase]
    out = os.path.join(run_dir, f"eval_static_{seq}")
    argv = [sys.executable, os.path.join(ROOT, "run_pretraining.py")]
    argv += [f"--bert_config_file={os.path.join(work, 'bert_config.json')}"]
    argv += [f"--vocab_file={data_paths.quickstart_vocab(data)}"]
    argv += [f"--eval_files={os.path.join(records_dir(data, 'static', phase), 'test', '*')}"]
    argv += [f"--output_dir={out}", f"--init_checkpoint={os.path.join(run_dir, 'phase_2')}", f"--seed={seed}"]
    argv += [f"--max_seq_length={seq}", f"--max_predictions_per_seq={predictions}"]
    argv += [
        f"--eval_batch_size={EVAL_BATCH}",
        f"--max_eval_steps={EVAL_BATCHES}",
        "--nodo_train",
        "--do_eval",
        f"--use_xla={str(xla).lower()}",
    ]
    harness.run(argv, f"evaluation at seq {seq}")
    return read_json(os.path.join(out, "eval_results.json"), "evaluation results")


def records_summary(data: str) -> dict:
    """masking -> phase -> (training records, training bytes), from the manifests and files."""
    summary = {}
    for masking in MASKINGS:
        for phase in (1, 2):
            root = records_dir(data, masking, phase)
            (manifest,) = glob.glob(os.path.join(root, "manifest.json")) or glob.glob(
                os.path.join(root, "*", "manifest.json")
            )
            outputs = read_json(manifest, "manifest")["outputs"]
            count = sum(
                o["counts"]["instances"] for name, o in outputs.items() if name.startswith("training")
            )
            size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "training", "*")))
            summary.setdefault(masking, {})[phase] = (count, size)
    return summary


def held_out_predictions(data: str, phase: int) -> int:
    """Masked positions the evaluation answers: the masked_lm_weights of the first
    EVAL_BATCHES x EVAL_BATCH static test records."""
    from training.input_pipeline import evaluation_dataset

    seq, predictions = PHASE_SHAPES[phase]
    test = os.path.join(records_dir(data, "static", phase), "test", "*")
    batches = evaluation_dataset([test], EVAL_BATCH, seq, predictions, max_batches=EVAL_BATCHES)
    return int(sum(float(b["masked_lm_weights"].numpy().sum()) for b in batches))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus_mb", type=float, default=4.0, help="the quickstart's corpus size")
    parser.add_argument(
        "--train_steps",
        type=int,
        default=600,
        help=f"pretraining updates, phase 1 90%% (the quickstart's budget: {PRESET_STEPS})",
    )
    parser.add_argument(
        "--seeds",
        type=harness.comma_list(int),
        default="12345",
        help="comma-separated; each masking runs with each",
    )
    parser.add_argument(
        "--work_dir",
        default=os.path.join(tempfile.gettempdir(), "bert-tf2-bench", "masking-quality"),
        help="data (kept: a second run skips its preparation) and runs",
    )
    parser.add_argument(
        "--xla",
        choices=("on", "off"),
        default="on",
        help="compile the pretraining and evaluation steps with XLA, as the quickstart does (off: "
        "TensorFlow graphs, nothing compiled; dropout draws other masks, so the figures move within "
        "the seeds' noise) [on]",
    )
    args = parser.parse_args(argv)
    if args.train_steps < 10:
        parser.error("--train_steps must be at least 10 (phase 2 gets a tenth)")
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    data = prepare(args.work_dir, args.corpus_mb)
    results = []
    xla = args.xla == "on"
    for seed in args.seeds:
        for masking in MASKINGS:
            run = pretrain(args.work_dir, data, masking, seed, args.train_steps, xla)
            held_out = {
                phase: evaluate(args.work_dir, data, run["dir"], phase, seed, xla) for phase in (1, 2)
            }
            results.append({"masking": masking, "seed": seed, **run, "held_out": held_out})

    header = [
        "records",
        "seed",
        "steps",
        "held-out MLM acc seq 128",
        "seq 512",
        "held-out MLM loss seq 128",
        "seq 512",
        "NSP acc seq 128",
        "last training-batch MLM acc",
        "seconds",
    ]
    rows = []
    for r in results:
        h1, h2 = r["held_out"][1], r["held_out"][2]
        rows.append(
            [
                f"{r['masking']}, dupe {dupe_factor(r['masking'])}",
                r["seed"],
                args.train_steps,
                f"{h1['masked_lm_accuracy']:.3f}",
                f"{h2['masked_lm_accuracy']:.3f}",
                f"{h1['masked_lm_loss']:.3f}",
                f"{h2['masked_lm_loss']:.3f}",
                f"{h1['next_sentence_accuracy']:.3f}",
                "-" if r["train_mlm"] is None else f"{r['train_mlm']:.3f}",
                f"{r['seconds']:.0f}",
            ]
        )

    def mean_difference(phase, key):
        """dynamic - static of one held-out figure, each the mean over the seeds."""
        means = {
            m: statistics.mean(r["held_out"][phase][key] for r in results if r["masking"] == m)
            for m in MASKINGS
        }
        return f"{means['dynamic'] - means['static']:+.3f}"

    rows.append(
        ["dynamic - static, mean over seeds", "", ""]
        + [
            mean_difference(phase, key)
            for key in ("masked_lm_accuracy", "masked_lm_loss")
            for phase in (1, 2)
        ]
        + [mean_difference(1, "next_sentence_accuracy"), "", ""]
    )
    print(
        f"\nthe quickstart's pretraining ({args.train_steps} updates, phase 1 90%), bert_tiny with its "
        f"trained vocab, on {args.corpus_mb:g} MB of the installed Python's prose; held out: the same "
        f"static test records for every run"
    )
    print(harness.markdown_table(header, rows))

    summary = records_summary(data)
    print()
    for masking in MASKINGS:
        parts = [
            f"seq {PHASE_SHAPES[p][0]}: {c:,} records, {b / 1e6:.1f} MB"
            for p, (c, b) in summary[masking].items()
        ]
        print(f"training records, {masking} (dupe {dupe_factor(masking)}): {'; '.join(parts)}")
    for phase in (1, 2):
        n = held_out_predictions(data, phase)
        p = statistics.mean(r["held_out"][phase]["masked_lm_accuracy"] for r in results)
        print(
            f"held out at seq {PHASE_SHAPES[phase][0]}: {n:,} masked positions; binomial standard error "
            f"of an accuracy near {p:.3f}: {math.sqrt(p * (1 - p) / max(n, 1)):.4f}"
        )


if __name__ == "__main__":
    main()
