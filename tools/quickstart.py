"""The quickstart's own steps (scripts/quickstart.sh plans them, launch/quickstart.py): `stage`
opens a stage (its banner, its start time in DIR/stage_times.tsv), `config` writes the tiny model's
config for the trained vocab, `evaluate` measures a model's held-out masked-LM accuracy once, and
`report` prints the closing table from what the stages wrote. A tool the plan runs as
`python -m tools.quickstart STEP ...`, not launcher code: it reads training's metrics log and the
runs' results, which the launcher process never imports. `Layout` is where one quickstart reads
and writes, for the plan and the table alike.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import signal
import subprocess
import sys
import time

from common.errors import UserError
from data import paths as data_paths
from training.loop import EVAL_RESULTS_NAME

STAGE_TIMES = "stage_times.tsv"  # under --dir: "name<TAB>start time" per stage of the latest run
EVALUATIONS = ("start_128", "start_512", "final_128", "final_512")
FINE_TUNES = ("squad", "squad_minilm")  # our tiny BERT's fine-tune, all-MiniLM-L6-v2's


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one quickstart under `root` reads and writes (the data under <root>/data)."""

    root: str

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def corpus(self) -> str:
        return data_paths.python_docs_file(self.data)

    def records(self, phase: int) -> str:
        return data_paths.quickstart_records(self.data, phase)

    @property
    def vocab_file(self) -> str:
        return data_paths.quickstart_vocab(self.data)

    @property
    def config(self) -> str:
        return os.path.join(self.root, "bert_config.json")

    def out(self, *parts) -> str:
        return os.path.join(self.root, *parts)


def start_stage(root: str, number: int, total: int, name: str, title: str, out, now=None) -> None:
    """Prints the stage's banner and records its start in <root>/stage_times.tsv (the first stage
    starts the file afresh: the table reports the latest run)."""
    from common.files import write_text

    path = os.path.join(root, STAGE_TIMES)
    lines = []
    if number > 1 and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    lines.append(f"{name}\t{time.time() if now is None else now:.3f}")
    write_text(path, "\n".join(lines) + "\n")
    print(f"== quickstart {number}/{total}: {title} ==", file=out, flush=True)


def stage_times(root: str, now: float) -> tuple:
    """({stage name: whole seconds}, whole seconds since the first stage started): each stage lasts
    until the next one starts, the last one until `now`."""
    with open(os.path.join(root, STAGE_TIMES), encoding="utf-8") as f:
        starts = [(name, float(at)) for name, at in (line.split("\t") for line in f.read().splitlines())]
    ends = [at for _, at in starts[1:]] + [now]
    seconds = {name: int(end - start) for (name, start), end in zip(starts, ends)}
    return seconds, int(now - starts[0][1])


def write_config(template: str, vocab_file: str, config_file: str) -> None:
    """The tiny BERT's config for the quickstart's trained vocab."""
    from common.files import read_json, write_json

    config = read_json(template, "config")
    with open(vocab_file, encoding="utf-8") as f:
        config["vocab_size"] = sum(1 for _ in f)  # the trained vocab, not the 30522 uncased one
    # A few thousand updates on 2 cores: dropout only slows a model this small and this short a run.
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = 0.0
    write_json(config_file, config)


def evaluate(output_dir: str, command: list, out) -> None:
    """Runs an evaluation `command` unless <output_dir>/eval_results.json is there already, showing
    only its result lines (the rest of its stdout is its settings); stderr passes through."""
    results = os.path.join(output_dir, EVAL_RESULTS_NAME)
    if os.path.isfile(results):
        return
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        previous = signal.signal(signal.SIGTERM, lambda number, frame: process.send_signal(number))
        try:
            for line in process.stdout:
                if line.startswith("Evaluation") or "Initialised" in line:
                    print(line, end="", file=out, flush=True)
        finally:
            signal.signal(signal.SIGTERM, previous)
    if not os.path.isfile(results):
        raise UserError(
            f"the evaluation '{os.path.basename(output_dir)}' wrote no results (exit status "
            f"{process.returncode}; see above)."
        )


def report(root: str, out, now=None) -> None:
    """The closing table: each stage, its time, its result on held-out data and its outputs; then
    the accuracies before and after pretraining and both fine-tunes' scores."""
    from common.files import read_json
    from training.metrics_log import read_log

    times, seconds = stage_times(root, time.time() if now is None else now)
    at = Layout(root)
    data = at.data

    def short(path):
        return os.path.relpath(path, root) + ("/" if os.path.isdir(path) else "")

    def instances(phase_glob):
        """Training and test records of one phase, from its create_tfrecord_files manifest."""
        (manifest,) = glob.glob(os.path.join(data, "tfrecord", phase_glob, "*", "manifest.json"))
        counts = {"training": 0, "test": 0}
        for name, output in read_json(manifest, "manifest")["outputs"].items():
            counts[name.split("/")[0]] += output["counts"]["instances"]
        return counts

    acc = {
        n: read_json(os.path.join(root, "eval", n, EVAL_RESULTS_NAME))["masked_lm_accuracy"]
        for n in EVALUATIONS
    }
    squad = {
        name: read_json(os.path.join(root, name, EVAL_RESULTS_NAME))
        for name in FINE_TUNES
        if os.path.isfile(os.path.join(root, name, EVAL_RESULTS_NAME))
    }
    corpus = glob.glob(os.path.join(data, "download", data_paths.QUICKSTART_DATASET, "*.txt"))
    with open(at.vocab_file, encoding="utf-8") as f:
        vocab = sum(1 for _ in f)
    p1, p2 = instances("*seq_len_128_*"), instances("*seq_len_512_*")

    def last(run):
        return [e for e in read_log(os.path.join(root, run, "log.jsonl")) if "eval" not in e][-1]

    def gain(start, final):
        return f" ({final / start:.0f}x)" if start > 0 else ""

    def qa(name):
        r = squad.get(name)
        return f"EM {r['exact_match']:.1f}, F1 {r['f1']:.1f}" if r else "skipped"

    def at(*parts):
        return short(os.path.join(root, *parts))

    rows = [
        (
            "1 corpus",
            "corpus",
            f"{sum(os.path.getsize(p) for p in corpus) / 1e6:.1f} MB of text",
            short(os.path.join(data, "download")),
        ),
        (
            "2 shards, vocab, TFRecords",
            "data",
            f"vocab {vocab}; records seq 128: {p1['training']} + {p1['test']} held out, "
            f"seq 512: {p2['training']} + {p2['test']}",
            short(os.path.join(data, "tfrecord")),
        ),
        (
            "3 masked-LM acc. before",
            "mlm_start",
            f"seq 128: {acc['start_128']:.3f}, seq 512: {acc['start_512']:.3f}",
            at("eval"),
        ),
        (
            "4 pretraining",
            "pretraining",
            f"LAMB, {last('phase_1')['step']} + {last('phase_2')['step']} steps, "
            f"training-batch MLM acc. {last('phase_2')['mlm_accuracy']:.3f}",
            f"{at('phase_1')}, {at('phase_2')}, pretraining.png",
        ),
        (
            "5 masked-LM acc. after",
            "mlm_final",
            f"seq 128: {acc['final_128']:.3f}{gain(acc['start_128'], acc['final_128'])}, "
            f"seq 512: {acc['final_512']:.3f}{gain(acc['start_512'], acc['final_512'])}",
            at("eval"),
        ),
        ("6 QA, our tiny BERT", "qa_ours", qa("squad"), at("squad")),
        (
            "7 QA, all-MiniLM-L6-v2",
            "qa_minilm",
            qa("squad_minilm"),
            at("squad_minilm") if "squad_minilm" in squad else "-",
        ),
    ]
    table = [("stage", "time", "result (held-out data)", "outputs")] + [
        (label, f"{times.get(key, 0) // 60}:{times.get(key, 0) % 60:02d}", result, where)
        for label, key, result, where in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = [f"\nQuickstart results (outputs under {root}):"]
    for i, row in enumerate(table):
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    lines += [
        "",
        f"  masked-LM accuracy, seq 128: {acc['start_128']:.3f} before pretraining -> {acc['final_128']:.3f} after",
        f"  masked-LM accuracy, seq 512: {acc['start_512']:.3f} before pretraining -> {acc['final_512']:.3f} after",
        f"  question answering (official SQuAD v1.1 metric): ours {qa('squad')}; "
        f"all-MiniLM-L6-v2 {qa('squad_minilm')}",
    ]
    if "squad_minilm" in squad:
        lines += [
            "  Why they differ: the same questions and launcher, but all-MiniLM-L6-v2 (6 layers of 384, distilled",
            "  from a large BERT, then trained on a billion sentence pairs) starts from far more than our 2 layers",
            "  of 128 pretrained on a few MB of text for minutes.",
        ]
    lines += [
        f"  Picture of the pretraining run: {root}/pretraining.png; TensorBoard: tensorboard --logdir {root}",
        f"  {seconds // 60} min {seconds % 60} s in all",
    ]
    print("\n".join(lines), file=out, flush=True)


USAGE = (
    "usage: python -m tools.quickstart stage DIR N TOTAL NAME TITLE | config TEMPLATE VOCAB CONFIG | "
    "evaluate DIR COMMAND... | report DIR"
)


def main(argv=None, out=None) -> int:
    """Runs one of the quickstart's steps (USAGE); exit status 2 with one sentence on a problem."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    name, args = (args[0], args[1:]) if args else ("", [])
    try:
        if name == "stage" and len(args) == 5:
            start_stage(args[0], int(args[1]), int(args[2]), args[3], args[4], out)
        elif name == "config" and len(args) == 3:
            write_config(*args)
        elif name == "evaluate" and len(args) >= 2:
            evaluate(args[0], args[1:], out)
        elif name == "report" and len(args) == 1:
            report(args[0], out)
        else:
            print(USAGE, file=sys.stderr)
            return 2
    except UserError as e:
        print(f"quickstart.sh: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
