"""scripts/quickstart.sh's launcher (launch/quickstart.py) in process through `python -m launch
plan`: its three options, its stages' commands (the ones the script ran before it moved into the
engine), the environment variables of the fine-tunes, the steps of a real run; and its Python
steps on their own: a stage's banner and time, the model config, an evaluation run once, and the
closing table from a results tree written here. tests/test_quickstart.py runs it all for real."""

import io
import json
import os
import re
import shlex
import sys

import pytest

from common.errors import UserError
from data import paths
from launch import quickstart
from launch.__main__ import LAUNCHERS, main
from launch.engine import plan_launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/nonexistent/bin/python"
STEP = [PYTHON, "-m", "launch", "quickstart"]


def plan(tmp_path, *args, environ=None):
    """(exit status, printed text, the plan file's path) of one `python -m launch plan quickstart`."""
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
    with open(plan_file) as f:
        values = dict(line.split("=", 1) for line in f.read().splitlines())
    steps = [shlex.split(values[f"STEP_{i}"][1:-1]) for i in range(1, int(values["STEPS"]) + 1)]
    stages = [(i, s[5:]) for i, s in enumerate(steps) if s[:5] == [*STEP, "stage"]]
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
        in values["STEP_10_FAILURE"]
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


# ---- the Python steps ------------------------------------------------------------------------


def test_a_stage_prints_its_banner_and_the_table_times_each_until_the_next(tmp_path):
    out = io.StringIO()
    quickstart.start_stage(str(tmp_path), 1, 7, "old", "a previous run", out, now=1.0)
    for number, (name, at) in enumerate([("corpus", 1000.0), ("data", 1010.5), ("pretraining", 1075.0)], 1):
        quickstart.start_stage(str(tmp_path), number, 7, name, f"title {number}", out, now=at)
    assert out.getvalue().splitlines()[1:] == [
        "== quickstart 1/7: title 1 ==",
        "== quickstart 2/7: title 2 ==",
        "== quickstart 3/7: title 3 ==",
    ]
    # The first stage starts the file afresh; the last stage runs until now.
    assert quickstart.stage_times(str(tmp_path), 1200.9) == (
        {"corpus": 10, "data": 64, "pretraining": 125},
        200,
    )


def test_the_stage_step_runs_through_python_m_launch(tmp_path, capsys):
    assert main(["quickstart", "stage", str(tmp_path), "2", "7", "data", "shards"], environ={}) == 0
    assert capsys.readouterr().out == "== quickstart 2/7: shards ==\n"
    assert main(["quickstart", "stage", str(tmp_path)], environ={}) == 2
    assert "quickstart stage DIR N TOTAL NAME TITLE" in capsys.readouterr().err


def test_the_config_is_the_tiny_one_with_the_trained_vocab_and_no_dropout(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"token{i}\n" for i in range(37)))
    quickstart.write_config(
        os.path.join(ROOT, "configs", "bert_tiny.json"), str(vocab), str(tmp_path / "c.json")
    )
    with open(os.path.join(ROOT, "configs", "bert_tiny.json")) as f:
        tiny = json.load(f)
    with open(tmp_path / "c.json") as f:
        config = json.load(f)
    assert config == {
        **tiny,
        "vocab_size": 37,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }


def test_an_evaluation_runs_once_and_shows_only_its_result_lines(tmp_path):
    out_dir = tmp_path / "eval" / "start_128"
    writes = (
        "import json, os, sys; d = sys.argv[1]; os.makedirs(d); "
        "print('Resolved pretraining settings:'); print('  a  1'); "
        "print('No checkpoint; Initialised nothing'); print('Evaluation: masked_lm_accuracy = 0.0100'); "
        "json.dump({'masked_lm_accuracy': 0.01}, open(os.path.join(d, 'eval_results.json'), 'w'))"
    )
    out = io.StringIO()
    quickstart.evaluate(str(out_dir), [sys.executable, "-c", writes, str(out_dir)], out)
    assert out.getvalue().splitlines() == [
        "No checkpoint; Initialised nothing",
        "Evaluation: masked_lm_accuracy = 0.0100",
    ]
    quickstart.evaluate(str(out_dir), ["false"], out)  # results there: not run again
    silent = tmp_path / "eval" / "final_128"
    with pytest.raises(
        UserError, match=r"the evaluation 'final_128' wrote no results \(exit status 1; see above\)"
    ):
        quickstart.evaluate(str(silent), [sys.executable, "-c", "import sys; sys.exit(1)"], io.StringIO())


def _results_tree(root, minilm: bool):
    """What a quickstart run leaves under `root` that the table reads, with known values."""
    data = root / "data"

    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    times = [("corpus", 1000), ("data", 1010), ("mlm_start", 1075), ("pretraining", 1080)]
    times += [("mlm_final", 1200), ("qa_ours", 1210), ("qa_minilm", 1300)]
    write(root / quickstart.STAGE_TIMES, "".join(f"{n}\t{t}.000\n" for n, t in times))
    for name, accuracy in (
        ("start_128", 0.01),
        ("start_512", 0.02),
        ("final_128", 0.15),
        ("final_512", 0.12),
    ):
        write(root / "eval" / name / "eval_results.json", json.dumps({"masked_lm_accuracy": accuracy}))
    write(root / "squad" / "eval_results.json", json.dumps({"exact_match": 6.1, "f1": 12.34}))
    if minilm:
        write(root / "squad_minilm" / "eval_results.json", json.dumps({"exact_match": 88.2, "f1": 88.8}))
    write(root / "phase_1" / "log.jsonl", '{"step": 18, "mlm_accuracy": 0.1}\n{"step": 18, "eval": {}}\n')
    write(
        root / "phase_2" / "log.jsonl",
        '{"step": 1, "mlm_accuracy": 0.1}\n{"step": 2, "mlm_accuracy": 0.25}\n',
    )
    write(data / "download" / "python_docs" / "python_docs.txt", "x" * 300_000)
    write(data / "vocab" / "python_docs" / "vocab.txt", "a\nb\nc\n")
    phases = paths.default_pretraining_dirs(str(data), "python_docs", 4, 0.05, dupe_factor=2)
    for phase, (training, test) in (("phase1", (7, 3)), ("phase2", (5, 2))):
        outputs = {
            "training/python_docs_training_0.tfrecord": {"counts": {"instances": training - 1}},
            "training/python_docs_training_1.tfrecord": {"counts": {"instances": 1}},
            "test/python_docs_test_0.tfrecord": {"counts": {"instances": test}},
        }
        write(root / os.path.relpath(phases[phase], root) / "manifest.json", json.dumps({"outputs": outputs}))


def test_the_closing_table_has_each_stage_its_time_result_and_outputs(tmp_path):
    root = tmp_path / "qs"
    _results_tree(root, minilm=True)
    out = io.StringIO()
    quickstart.report(str(root), out, now=1400.0)
    text = out.getvalue()
    table = text[text.index("Quickstart results") :].split("\n\n")[0].splitlines()
    assert table[0] == f"Quickstart results (outputs under {root}):"
    cells = [re.split(r"\s{2,}", row.strip()) for row in table[1:]]
    assert cells[0] == ["stage", "time", "result (held-out data)", "outputs"]
    assert all(set(cell) == {"-"} for cell in cells[1])
    assert cells[2:] == [
        ["1 corpus", "0:10", "0.3 MB of text", "data/download/"],
        [
            "2 shards, vocab, TFRecords",
            "1:05",
            "vocab 3; records seq 128: 7 + 3 held out, seq 512: 5 + 2",
            "data/tfrecord/",
        ],
        ["3 masked-LM acc. before", "0:05", "seq 128: 0.010, seq 512: 0.020", "eval/"],
        [
            "4 pretraining",
            "2:00",
            "LAMB, 18 + 2 steps, training-batch MLM acc. 0.250",
            "phase_1/, phase_2/, pretraining.png",
        ],
        ["5 masked-LM acc. after", "0:10", "seq 128: 0.150 (15x), seq 512: 0.120 (6x)", "eval/"],
        ["6 QA, our tiny BERT", "1:30", "EM 6.1, F1 12.3", "squad/"],
        ["7 QA, all-MiniLM-L6-v2", "1:40", "EM 88.2, F1 88.8", "squad_minilm/"],
    ]
    lines = text.splitlines()
    assert "  masked-LM accuracy, seq 128: 0.010 before pretraining -> 0.150 after" in lines
    assert (
        "  question answering (official SQuAD v1.1 metric): ours EM 6.1, F1 12.3; all-MiniLM-L6-v2 EM 88.2, F1 88.8"
        in lines
    )
    assert any(line.startswith("  Why they differ:") for line in lines)
    assert lines[-1] == "  6 min 40 s in all"


def test_the_table_says_skipped_for_a_fine_tune_that_did_not_run(tmp_path):
    root = tmp_path / "qs"
    _results_tree(root, minilm=False)
    out = io.StringIO()
    quickstart.report(str(root), out, now=1400.0)
    rows = out.getvalue().split("Quickstart results", 1)[1].split("\n\n")[0].splitlines()
    assert re.split(r"\s{2,}", rows[-1].strip()) == ["7 QA, all-MiniLM-L6-v2", "1:40", "skipped", "-"]
    assert "Why they differ" not in out.getvalue()
