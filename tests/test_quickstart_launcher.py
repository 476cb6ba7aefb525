"""scripts/quickstart.sh's launcher (launch/quickstart.py) in process through `python -m launch
plan`: its three options, its stages' commands (the ones the script ran before it moved into the
engine), the environment variables of the fine-tunes and the steps of a real run. Its own steps
(tools/quickstart.py) are tested in tests/test_quickstart_tool.py; tests/test_quickstart.py runs it
all for real."""

import io
import os
import re
import shlex

import pytest

from data import paths
from launch import quickstart
from launch.__main__ import LAUNCHERS, main
from launch.engine import plan_launch, read_steps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/nonexistent/bin/python"
STEP = [PYTHON, "-m", "tools.quickstart"]


def plan(tmp_path, *args, environ=None):
    """(exit status, printed text, the plan's path) of one `python -m launch plan quickstart`."""
    out = io.StringIO()
    plan_file = str(tmp_path / "quickstart.plan")
    status = plan_launch(
        LAUNCHERS["quickstart"], "quickstart.sh", plan_file, list(args), environ or {}, ROOT, PYTHON, out
    )
    return status, out.getvalue(), plan_file


def commands_of(text: str) -> dict:
    block = text.split("\ncommands:\n", 1)[1]
    return {label: shlex.split(command) for label, command in re.findall(r"^  ([^:]+): (.*)$", block, re.M)}


def test_the_dry_run_lists_every_stage_command_as_the_script_ran_it(tmp_path, monkeypatch):
    monkeypatch.setattr(quickstart, "_minilm_dir", lambda: "/models/minilm")
    root = str(tmp_path / "qs")
    environ = {"QUICKSTART_QA_EPOCHS": "0.05", "QUICKSTART_MINILM_LR": "2e-4"}
    status, out, plan_file = plan(
        tmp_path, "--dry_run", "--dir", root, "--corpus_mb", "0.3", "--train_steps=20", environ=environ
    )
    assert status == 0 and not os.path.exists(plan_file) and not os.path.exists(root)
    data = f"{root}/data"
    phase = paths.default_pretraining_dirs(data, "python_docs", 4, 0.05, dupe_factor=2)
    vocab, config = f"{data}/vocab/python_docs/vocab.txt", f"{root}/bert_config.json"
    script = {n: ["bash", os.path.join(ROOT, "scripts", n)] for n in ("data_download.sh", "run_squad.sh")}
    prepare = [PYTHON, os.path.join(ROOT, "prepare_data.py")]

    def evaluation(name, seq, predictions, phase_dir, init=()):
        return [
            *(*STEP, "evaluate", f"{root}/eval/{name}", PYTHON, os.path.join(ROOT, "run_pretraining.py")),
            *(f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--eval_files={phase_dir}/test/*"),
            *(f"--output_dir={root}/eval/{name}", f"--max_seq_length={seq}"),
            *(f"--max_predictions_per_seq={predictions}", "--eval_batch_size=32", "--max_eval_steps=50"),
            *("--nodo_train", "--do_eval", *init),
        ]

    def squad(init, out, lr, epochs):
        return [
            *("env", "-u", "BERT_CONFIG", "-u", "VOCAB_FILE", f"RESULTS_DIR={root}", *script["run_squad.sh"]),
            *("--preset", "cpu_tiny", f"--init_checkpoint={init}", f"--output_dir={root}/{out}"),
            *(f"--learning_rate={lr}", f"--epochs={epochs}"),
            f"--train_file={data}/download/python_qa/train.json",
            f"--predict_file={data}/download/python_qa/dev.json",
            *("--", "--max_query_length=48", "--predict_batch_size=64", "--log_every_n_steps=50"),
        ]

    final = [f"--init_checkpoint={root}/phase_2"]
    assert commands_of(out) == {
        "1 python_docs": [
            *(*prepare, "--action", "download", "--dataset", "python_docs", "--corpus_mb", "0.3"),
            *("--data_dir", data),
        ],
        "2 data_download.sh": [
            *(*script["data_download.sh"], "--data_dir", data),
            *("--corpus", f"{data}/download/python_docs/python_docs.txt", "--dataset", "python_docs"),
            *("--train_vocab", "2048", "--n_training_shards", "4", "--n_test_shards", "1"),
            *("--fraction_test_set", "0.05", "--dupe_factor", "2"),
        ],
        "2 config": [*STEP, "config", os.path.join(ROOT, "configs", "bert_tiny.json"), vocab, config],
        "3 evaluate start_128": evaluation("start_128", 128, 20, phase["phase1"]),
        "3 evaluate start_512": evaluation("start_512", 512, 80, phase["phase2"]),
        "4 run_pretraining_lamb.sh": [
            *("env", f"PHASE1_DATA={phase['phase1']}", f"PHASE2_DATA={phase['phase2']}"),
            *(f"VOCAB_FILE={vocab}", f"BERT_CONFIG={config}", f"RESULTS_DIR={root}"),
            *("bash", os.path.join(ROOT, "scripts", "run_pretraining_lamb.sh"), "--preset", "quickstart"),
            # 20 steps: warmups of 9% of them (phase 1) and a tenth of phase 2's 2.
            *("--train_steps=20", "--warmup_steps_phase1=1", "--warmup_steps_phase2=0"),
            *("--", "--log_every_n_steps=50", "--max_eval_steps=50"),
        ],
        "4 plot": [
            *(PYTHON, "-m", "training.plot", f"{root}/phase_1", f"{root}/phase_2"),
            *("--output", f"{root}/pretraining.png"),
            *("--title", "quickstart pretraining: phase 1 (seq 128) then phase 2 (seq 512)"),
        ],
        "5 clear": ["rm", "-rf", f"{root}/eval/final_128", f"{root}/eval/final_512"],
        "5 evaluate final_128": evaluation("final_128", 128, 20, phase["phase1"], final),
        "5 evaluate final_512": evaluation("final_512", 512, 80, phase["phase2"], final),
        "6 python_qa": [*prepare, "--action", "download", "--dataset", "python_qa", "--data_dir", data],
        "6 fine-tune squad": squad(f"{root}/phase_2", "squad", "3e-4", "0.05"),
        "7 fine-tune squad_minilm": squad("/models/minilm", "squad_minilm", "2e-4", "1.5"),
        "table": [*STEP, "report", root],
    }
    assert "  squad: QUICKSTART_QA_LR=3e-4, QUICKSTART_QA_EPOCHS=0.05" in out.splitlines()


def test_the_defaults_keep_the_presets_steps_and_skip_minilm_when_it_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(quickstart, "_minilm_dir", lambda: None)
    status, out, _ = plan(tmp_path, "--dry_run")
    assert status == 0
    assert f"  dir                = {ROOT}/results/quickstart (default: <repo>/results/quickstart)" in out
    assert "  corpus_mb   = 4          (default)" in out and "  train_steps = -          (default)" in out
    commands = commands_of(out)
    pretraining = commands["4 run_pretraining_lamb.sh"]
    assert pretraining[pretraining.index("quickstart") + 1] == "--"  # no overrides: the preset's steps
    assert commands["7 skipped"] == ["echo", quickstart.MINILM_MISSING]


def test_a_real_run_opens_each_stage_with_a_step_and_ends_with_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(quickstart, "_minilm_dir", lambda: None)
    root = tmp_path / "qs"
    status, out, plan_file = plan(tmp_path, "--dir", str(root))
    assert status == 0 and root.is_dir()
    planned, _ = read_steps(plan_file)
    steps = [step.argv for step in planned]
    stages = [(i, s[len(STEP) + 1 :]) for i, s in enumerate(steps) if s[: len(STEP) + 1] == [*STEP, "stage"]]
    assert [s for _, s in stages] == [
        [str(root), str(n), "7", name, title]
        for n, (name, title) in enumerate(
            [
                ("corpus", "corpus (the installed Python's prose, 4 MB)"),
                ("data", "shards, vocab, phase 1 and phase 2 TFRecords"),
                ("mlm_start", "masked-LM accuracy before pretraining"),
                ("pretraining", "pretraining, phase 1 (seq 128) then phase 2 (seq 512)"),
                ("mlm_final", "masked-LM accuracy after pretraining"),
                (
                    "qa_ours",
                    "fine-tuning our BERT on questions about the Python standard library (SQuAD format)",
                ),
                ("qa_minilm", "fine-tuning a real pretrained model (all-MiniLM-L6-v2) on the same questions"),
            ],
            1,
        )
    ]
    # Between the stage steps: the stages' commands, in the order the summary lists them.
    commands = list(commands_of(out).values())
    assert [s for i, s in enumerate(steps) if i not in dict(stages)] == commands
    assert [i for i, _ in stages] == [0, 2, 5, 8, 11, 15, 18]
    assert steps[-1] == [*STEP, "report", str(root)]
    assert (
        "stage 4/7 (pretraining: run_pretraining_lamb.sh) stopped with exit status {status}"
        in planned[9].failure
    )


@pytest.mark.parametrize(
    "args, environ, sentence",
    [
        (["--corpus_mb", "0"], {}, "corpus_mb (--corpus_mb) must be a positive number such as 4, got '0'."),
        (["--train_steps", "1.5"], {}, "train_steps (--train_steps) must be a positive integer, got '1.5'."),
        ([], {"QUICKSTART_QA_LR": "fast"}, "QUICKSTART_QA_LR must be a number in (0, 1], got 'fast'."),
        (
            [],
            {"QUICKSTART_MINILM_EPOCHS": "-1"},
            "QUICKSTART_MINILM_EPOCHS must be a positive number, got '-1'.",
        ),
        (["--", "--seed=1"], {}, "nothing may follow --: this launcher passes no flags on to a program."),
        (["small"], {}, "no positional arguments are accepted, got 1: small."),
    ],
)
def test_bad_options_stop_with_one_sentence_and_the_usage(tmp_path, capsys, args, environ, sentence):
    assert (
        main(["plan", "quickstart", str(tmp_path / "plan"), PYTHON, *args, "--dry_run"], environ=environ) == 2
    )
    err = capsys.readouterr().err
    assert f"quickstart.sh: error: {sentence}" in err
    assert "usage: quickstart.sh [--NAME=VALUE ...] [--preset NAME|FILE] [--dry_run]   (--help" in err


def test_the_usage_has_no_positional_arguments_and_no_flags_to_pass_on(tmp_path):
    status, out, _ = plan(tmp_path, "--help")
    assert status == 0
    assert "Positional arguments" not in out and "Flags after --" not in out and "bert_model:" not in out
    named = dict(re.findall(r"^     (--\w+) +(.*)$", out, re.M))
    assert named["--corpus_mb"].split(None, 1) == ["4", "megabytes of the installed Python's prose"]
    assert named["--train_steps"].startswith("- ")
    assert named["--dir"] == "where everything lands (default <repo>/results/quickstart)"
