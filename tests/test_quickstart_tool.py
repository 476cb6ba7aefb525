"""tools/quickstart.py, the quickstart's own steps: a stage's banner and time, the model config,
an evaluation run once, and the closing table from a results tree written here."""

import io
import json
import os
import re
import sys

import pytest

from common.errors import UserError
from data import paths
from tools import quickstart as tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_stage_prints_its_banner_and_the_table_times_each_until_the_next(tmp_path):
    out = io.StringIO()
    tool.start_stage(str(tmp_path), 1, 7, "old", "a previous run", out, now=1.0)
    for number, (name, at) in enumerate([("corpus", 1000.0), ("data", 1010.5), ("pretraining", 1075.0)], 1):
        tool.start_stage(str(tmp_path), number, 7, name, f"title {number}", out, now=at)
    assert out.getvalue().splitlines()[1:] == [
        "== quickstart 1/7: title 1 ==",
        "== quickstart 2/7: title 2 ==",
        "== quickstart 3/7: title 3 ==",
    ]
    # The first stage starts the file afresh; the last stage runs until now.
    assert tool.stage_times(str(tmp_path), 1200.9) == (
        {"corpus": 10, "data": 64, "pretraining": 125},
        200,
    )


def test_the_stage_step_runs_through_the_tools_main(tmp_path, capsys):
    assert tool.main(["stage", str(tmp_path), "2", "7", "data", "shards"]) == 0
    assert capsys.readouterr().out == "== quickstart 2/7: shards ==\n"
    assert tool.main(["stage", str(tmp_path)]) == 2
    assert "python -m tools.quickstart stage DIR N TOTAL NAME TITLE" in capsys.readouterr().err


def test_the_config_is_the_tiny_one_with_the_trained_vocab_and_no_dropout(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"token{i}\n" for i in range(37)))
    tool.write_config(os.path.join(ROOT, "configs", "bert_tiny.json"), str(vocab), str(tmp_path / "c.json"))
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


@pytest.mark.process
def test_an_evaluation_runs_once_and_shows_only_its_result_lines(tmp_path):
    out_dir = tmp_path / "eval" / "start_128"
    writes = (
        "import json, os, sys; d = sys.argv[1]; os.makedirs(d); "
        "print('Resolved pretraining settings:'); print('  a  1'); "
        "print('No checkpoint; Initialised nothing'); print('Evaluation: masked_lm_accuracy = 0.0100'); "
        "json.dump({'masked_lm_accuracy': 0.01}, open(os.path.join(d, 'eval_results.json'), 'w'))"
    )
    out = io.StringIO()
    tool.evaluate(str(out_dir), [sys.executable, "-c", writes, str(out_dir)], out)
    assert out.getvalue().splitlines() == [
        "No checkpoint; Initialised nothing",
        "Evaluation: masked_lm_accuracy = 0.0100",
    ]
    tool.evaluate(str(out_dir), ["false"], out)  # results there: not run again
    silent = tmp_path / "eval" / "final_128"
    with pytest.raises(
        UserError, match=r"the evaluation 'final_128' wrote no results \(exit status 1; see above\)"
    ):
        tool.evaluate(str(silent), [sys.executable, "-c", "import sys; sys.exit(1)"], io.StringIO())


def _results_tree(root, minilm: bool):
    """What a quickstart run leaves under `root` that the table reads, with known values."""
    data = root / "data"

    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    times = [("corpus", 1000), ("data", 1010), ("mlm_start", 1075), ("pretraining", 1080)]
    times += [("mlm_final", 1200), ("qa_ours", 1210), ("qa_minilm", 1300)]
    write(root / tool.STAGE_TIMES, "".join(f"{n}\t{t}.000\n" for n, t in times))
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
    tool.report(str(root), out, now=1400.0)
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
    tool.report(str(root), out, now=1400.0)
    rows = out.getvalue().split("Quickstart results", 1)[1].split("\n\n")[0].splitlines()
    assert re.split(r"\s{2,}", rows[-1].strip()) == ["7 QA, all-MiniLM-L6-v2", "1:40", "skipped", "-"]
    assert "Why they differ" not in out.getvalue()
