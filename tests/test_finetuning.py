"""Fine-tuning end to end: run_classifier.py and run_squad.py on the official-format fixtures
(tests/fixtures/glue, tests/fixtures/squad) with a tiny BERT, then what they leave behind read
back independently: metrics recomputed from the written predictions, checkpoints read with
tf.train, SavedModels served by a fresh Python that imports TensorFlow alone.

Also: a task a tiny BERT learns from random init (and MiniLM from its weights), two Horovod
workers against one worker with the doubled batch, exact resume after kill -9, and the errors
a user can cause (one sentence, exit status 2).
"""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import run_classifier
import run_squad
from bert.checkpoints import (
    load_for_fine_tuning,
    load_weights,
    model_variables,
    save_huggingface,
)
from bert.finetuning import BertClassifier, BertSpanModel
from common.files import TEMP_MARK
from conftest import BIN, ROOT, kill_after_step, worker_env
from data import glue, squad, squad_metrics
from tiny_pretraining import CONFIG
from word_order import DEV_SENTENCES, TRAIN_SENTENCES, write_model_files, write_word_order_task

# Shapes: B batch, S sequence, D hidden, C classes.
D = CONFIG["hidden_size"]
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
GLUE = os.path.join(FIXTURES, "glue")
SQUAD_TRAIN = os.path.join(FIXTURES, "squad", "train-v1.1-tiny.json")
SQUAD_DEV_V2 = os.path.join(FIXTURES, "squad", "dev-v2.0-tiny.json")
GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")
SEQ = 64  # the tiny config's max_position_embeddings
SQUAD = {"doc_stride": 32, "max_query_length": 16, "n_best_size": 5, "max_answer_length": 10}
SQUAD_FLAGS = [f"--{k}={v}" for k, v in SQUAD.items()]
# Only TensorFlow (and numpy, its dependency) in a process started outside the repository: the
# SavedModel must serve without this project's code.
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
results = {}
for key, (model_dir, inputs_file) in json.load(open(sys.argv[1])).items():
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    x = np.load(inputs_file)
    out = serve(input_ids=tf.constant(x["input_ids"]), input_mask=tf.constant(x["input_mask"]),
                segment_ids=tf.constant(x["segment_ids"]))
    results.update({key + "/" + name: value.numpy() for name, value in out.items()})
np.savez(sys.argv[2], **results)
ours = {m.split(".")[0] for m in sys.modules} & {"bert", "common", "data", "optimization", "training"}
assert not ours, ours
"""


# --- model files and helpers -------------------------------------------------------------------


def _fixture_texts():
    """Every cell of the GLUE fixtures and every context, question and answer of the SQuAD ones."""
    texts = []
    for task in os.listdir(GLUE):
        for name in sorted(os.listdir(os.path.join(GLUE, task))):
            with open(os.path.join(GLUE, task, name), encoding="utf-8") as f:
                texts += f.read().replace("\n", "\t").split("\t")
    for path in (SQUAD_TRAIN, SQUAD_DEV_V2):
        with open(path, encoding="utf-8") as f:
            for article in json.load(f)["data"]:
                for paragraph in article["paragraphs"]:
                    texts.append(paragraph["context"])
                    for qa in paragraph["qas"]:
                        texts += [qa["question"]] + [a["text"] for a in qa.get("answers", [])]
    return texts


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    return write_model_files(str(tmp_path_factory.mktemp("model")), _fixture_texts())


def _flags(files, output_dir, *extra, **values):
    """Flags of a tiny in-process run: batch 1, no XLA (compiling costs more than these runs)."""
    values = {
        "bert_config_file": files["bert_config_file"],
        "vocab_file": files["vocab_file"],
        "output_dir": str(output_dir),
        "max_seq_length": SEQ,
        "train_batch_size": 1,
        "learning_rate": 1e-3,
        "log_every_n_steps": 1,
        "use_xla": "false",
        **values,
    }
    return [f"--{k}={v}" for k, v in values.items() if v is not None] + list(extra)


def _ok(main, argv):
    status = main(argv)
    assert status == 0, f"{main.__module__} exited {status}"


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _tsv(path):
    """Rows of a TSV as written (quoting off, as GLUE's files), header included."""
    with open(path, encoding="utf-8", newline="") as f:
        return [row for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if row]


def _checkpoint(output_dir):
    prefix = tf.train.latest_checkpoint(str(output_dir))
    assert prefix is not None, f"no checkpoint in {output_dir}"
    reader = tf.train.load_checkpoint(prefix)
    return prefix, {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _log(output_dir):
    with open(os.path.join(output_dir, "log.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _serve(tmp_path, jobs):
    """{key: (SavedModel dir, input arrays)} -> {key/output name: array}, computed by a fresh
    `python -c` outside the repository with only TensorFlow imported."""
    spec = {}
    for key, (model_dir, arrays) in jobs.items():
        inputs_file = str(tmp_path / f"serve-{key}.npz")
        np.savez(inputs_file, **arrays)
        spec[key] = (str(model_dir), inputs_file)
    spec_file, out_file = tmp_path / "serve.json", tmp_path / "served.npz"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(spec_file), str(out_file)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out_file))


def _glue_features(files, task, split, max_seq_length=SEQ):
    from bert.tokenization import build_tokenizer

    task = glue.get_task(task)
    examples, _ = glue.read_examples(task, GLUE, split, log=lambda m: None)
    tokenizer = build_tokenizer(vocab_file=files["vocab_file"], do_lower_case=True)
    features = glue.convert_examples(examples, task, tokenizer, max_seq_length)
    return examples, {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}


# --- GLUE and SQuAD end to end ---------------------------------------------------------------


@pytest.fixture(scope="module")
def mrpc_run(model_files, tmp_path_factory):
    """MRPC trained (2 examples, batch 1, 2.5 epochs: 5 updates), evaluated, predicted, exported."""
    root = tmp_path_factory.mktemp("mrpc")
    run = {"output": root / "run", "export": root / "export", "triton": root / "triton"}
    argv = _flags(
        model_files,
        run["output"],
        "--do_train",
        "--do_eval",
        "--do_predict",
        task_name="MRPC",
        data_dir=GLUE,
        num_train_epochs=2.5,
        save_checkpoints_steps=2,
        export_dir=run["export"],
        triton_repository=run["triton"],
    )
    _ok(run_classifier.main, argv)
    return run


def test_mrpc_end_to_end_metrics_submission_checkpoint_and_log(mrpc_run):
    out = mrpc_run["output"]
    resolved = _json(out / "resolved_config.json")
    train_rows = _tsv(os.path.join(GLUE, "MRPC", "train.tsv"))[1:]
    # Google's count: int(examples / global batch x epochs), here int(2 / 1 x 2.5).
    assert resolved["num_train_examples"] == len(train_rows) == 2
    assert resolved["num_train_steps"] == int(len(train_rows) / 1 * 2.5) == 5
    assert (resolved["workers"], resolved["global_batch_size"], resolved["num_classes"]) == (1, 1, 2)

    results = _json(out / "eval_results.json")
    assert set(results) == {"accuracy", "f1", "examples", "global_step"}
    gold = [row[0] for row in _tsv(os.path.join(GLUE, "MRPC", "dev.tsv"))[1:]]
    written = _tsv(out / "dev_predictions.tsv")
    assert written[0] == ["index", "prediction"]
    assert [int(r[0]) for r in written[1:]] == list(range(len(gold)))
    predicted = [r[1] for r in written[1:]]
    assert set(predicted) <= {"0", "1"}
    assert results["examples"] == len(gold) == 2 and results["global_step"] == 5
    assert results["accuracy"] == sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    tp = sum(p == g == "1" for p, g in zip(predicted, gold))
    positives, relevant = predicted.count("1"), gold.count("1")
    assert results["f1"] == pytest.approx(2 * tp / (positives + relevant) if tp else 0.0, abs=1e-12)

    test_rows = _tsv(os.path.join(GLUE, "MRPC", "test.tsv"))
    submission = _tsv(out / "MRPC.tsv")
    assert submission[0] == ["index", "prediction"]
    assert [r[0] for r in submission[1:]] == [r[0] for r in test_rows[1:]]  # one row per test example
    assert len(submission) - 1 == len(test_rows) - 1 == 2 and {r[1] for r in submission[1:]} <= {"0", "1"}

    prefix, weights = _checkpoint(out)
    assert prefix.endswith("ckpt-5") and int(weights["global_step"]) == 5
    assert weights["output_weights"].shape == (2, D) and weights["output_bias"].shape == (2,)
    assert weights["bert/embeddings/word_embeddings"].shape[1] == D
    assert weights["bert/encoder/layer_1/attention/self/query/kernel"].shape == (D, D)
    assert weights["bert/pooler/dense/kernel"].shape == (D, D)
    assert "output_weights/adam_m" in weights  # the optimizer state, under NVIDIA's slot names
    assert not [n for n in weights if n.startswith("cls/")]
    assert sorted(f for f in os.listdir(out) if f.endswith(".index")) == [
        "ckpt-2.index",
        "ckpt-4.index",
        "ckpt-5.index",
    ]

    log = _log(out)
    assert [e["step"] for e in log] == [1, 2, 3, 4, 5]
    assert all(math.isfinite(e["loss"]) and 0.0 <= e["accuracy"] <= 1.0 for e in log)
    # No warmup (int(5 x 0.1) = 0), then linear decay to 0 over the 5 updates: update n uses
    # 1e-3 x (1 - (n - 1) / 5).
    assert [e["learning_rate"] for e in log] == pytest.approx([1e-3, 8e-4, 6e-4, 4e-4, 2e-4], rel=1e-6)


def test_stsb_regression_end_to_end_matches_scipy(model_files, tmp_path):
    scipy_stats = pytest.importorskip("scipy.stats")
    # Five dev pairs (the fixture's dev and train rows): enough for correlations that are not
    # just the sign of one difference.
    data = tmp_path / "STS-B"
    data.mkdir()
    source = os.path.join(GLUE, "STS-B")
    train, dev, test = (_tsv(os.path.join(source, f"{s}.tsv")) for s in ("train", "dev", "test"))
    rows = dev[1:] + train[1:]
    for name, table in (("train", train), ("dev", [dev[0], *rows]), ("test", test)):
        (data / f"{name}.tsv").write_text("\n".join("\t".join(r) for r in table) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = _flags(
        model_files,
        out,
        "--do_train",
        "--do_eval",
        "--do_predict",
        task_name="STS-B",
        data_dir=data,
        num_train_epochs=4,
        learning_rate=1e-2,
    )
    _ok(run_classifier.main, argv)

    results = _json(out / "eval_results.json")
    assert set(results) == {"pearson", "spearman", "examples", "global_step"}
    gold = [float(r[-1]) for r in rows]
    predicted = [float(r[1]) for r in _tsv(out / "dev_predictions.tsv")[1:]]
    assert len(predicted) == results["examples"] == 5
    assert results["global_step"] == _json(out / "resolved_config.json")["num_train_steps"] == int(3 / 1 * 4)
    assert len(set(predicted)) > 1 and all(0.0 <= p <= 5.0 for p in predicted)
    assert results["pearson"] == pytest.approx(scipy_stats.pearsonr(predicted, gold)[0], abs=1e-12)
    assert results["spearman"] == pytest.approx(scipy_stats.spearmanr(predicted, gold)[0], abs=1e-12)
    _, weights = _checkpoint(out)
    assert weights["output_weights"].shape == (1, D) and weights["output_bias"].shape == (1,)
    submission = _tsv(out / "STS-B.tsv")
    assert submission[0] == ["index", "prediction"] and len(submission) == len(test)
    assert all(0.0 <= float(r[1]) <= 5.0 for r in submission[1:])


def _question_ids(path):
    return [qa["id"] for a in _json(path)["data"] for p in a["paragraphs"] for qa in p["qas"]]


@pytest.fixture(scope="module")
def squad_run(model_files, tmp_path_factory):
    """SQuAD v1.1 trained on the tiny training file, which it then predicts and scores; exported."""
    root = tmp_path_factory.mktemp("squad")
    run = {"output": root / "run", "export": root / "export"}
    argv = _flags(
        model_files,
        run["output"],
        "--do_train",
        "--do_predict",
        "--do_eval",
        *SQUAD_FLAGS,
        train_file=SQUAD_TRAIN,
        predict_file=SQUAD_TRAIN,
        train_batch_size=4,
        num_train_epochs=2,
        export_dir=run["export"],
    )
    _ok(run_squad.main, argv)
    return run


def test_squad_v11_end_to_end_predictions_and_official_metrics(squad_run):
    out = squad_run["output"]
    ids = _question_ids(SQUAD_TRAIN)
    predictions = _json(out / "predictions.json")
    nbest = _json(out / "nbest_predictions.json")
    assert sorted(predictions) == sorted(nbest) == sorted(ids) and len(ids) == 13
    assert not (out / "null_odds.json").exists()
    contexts = {
        qa["id"]: p["context"] for a in _json(SQUAD_TRAIN)["data"] for p in a["paragraphs"] for qa in p["qas"]
    }
    for qid, answer in predictions.items():
        candidates = nbest[qid]
        assert 1 <= len(candidates) <= SQUAD["n_best_size"] and candidates[0]["text"] == answer
        assert sum(c["probability"] for c in candidates) == pytest.approx(1.0, abs=1e-6)
        # A span of its own context (v1.1 always answers), or Google's placeholder when no
        # candidate span survived.
        assert answer in contexts[qid] or [c["text"] for c in candidates] == ["empty"]

    results = _json(out / "eval_results.json")
    official = squad_metrics.evaluate(SQUAD_TRAIN, str(out / "predictions.json"), log=lambda m: None)
    assert set(official) == {"exact_match", "f1"}
    assert results == {**official, "global_step": _json(out / "resolved_config.json")["num_train_steps"]}

    _, weights = _checkpoint(out)
    assert weights["cls/squad/output_weights"].shape == (2, D)
    assert weights["cls/squad/output_bias"].shape == (2,)
    assert "output_weights" not in weights and "bert/encoder/layer_0/output/dense/kernel" in weights


def test_squad_v20_end_to_end_null_odds_and_v2_metrics(model_files, tmp_path):
    out = tmp_path / "run"
    argv = _flags(
        model_files,
        out,
        "--do_train",
        "--do_predict",
        "--do_eval",
        "--version_2_with_negative",
        *SQUAD_FLAGS,
        train_file=SQUAD_DEV_V2,
        predict_file=SQUAD_DEV_V2,
        train_batch_size=2,
        num_train_epochs=1,
    )
    _ok(run_squad.main, argv)
    ids = _question_ids(SQUAD_DEV_V2)
    predictions = _json(out / "predictions.json")
    null_odds = _json(out / "null_odds.json")
    assert sorted(predictions) == sorted(null_odds) == sorted(_json(out / "nbest_predictions.json"))
    assert sorted(ids) == sorted(predictions)
    assert all(isinstance(v, float) and math.isfinite(v) for v in null_odds.values())
    # The v2.0 rule with --null_score_diff_threshold=0: no answer exactly where the odds are > 0.
    assert all((predictions[q] == "") == (null_odds[q] > 0.0) for q in ids)

    results = _json(out / "eval_results.json")
    official = squad_metrics.evaluate(
        SQUAD_DEV_V2,
        str(out / "predictions.json"),
        na_probs=str(out / "null_odds.json"),
        version="2.0",
        log=lambda m: None,
    )
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_f1_thresh"):
        assert key in official
    assert results == {**official, "global_step": _json(out / "resolved_config.json")["num_train_steps"]}


# --- export ------------------------------------------------------------------------------------


def test_glue_export_serves_the_checkpoints_logits_with_tensorflow_alone(mrpc_run, model_files, tmp_path):
    config = model_files["config"]
    model = BertClassifier(config, 2)
    load_weights(model, tf.train.latest_checkpoint(str(mrpc_run["output"])))
    _, dev = _glue_features(model_files, "MRPC", "dev")
    _, test = _glue_features(model_files, "MRPC", "test")
    rows = {k: np.concatenate([dev[k], test[k]]) for k in dev}  # B=4 at S=64
    expected = model(rows)["logits"].numpy()  # [B, C]
    # Three rows cut to their longest real length: another batch and another sequence length
    # than training's, which the padding mask makes no difference to.
    length = int(rows["input_mask"][:3].sum(axis=1).max())
    assert length < SEQ
    short = {k: v[:3, :length] for k, v in rows.items()}
    triton_copy = mrpc_run["triton"] / "bert_glue_mrpc" / "1" / "model.savedmodel"
    served = _serve(
        tmp_path,
        {
            "full": (mrpc_run["export"], rows),
            "short": (mrpc_run["export"], short),
            "triton": (triton_copy, short),
        },
    )
    assert set(served) == {"full/logits", "short/logits", "triton/logits"}
    assert served["full/logits"].shape == (4, 2) and served["full/logits"].dtype == np.float32
    assert np.abs(served["full/logits"] - expected).max() <= 1e-5
    assert np.abs(served["short/logits"] - expected[:3]).max() <= 1e-5
    np.testing.assert_array_equal(served["triton/logits"], served["short/logits"])
    # The job's own dev predictions are the argmax of what the export serves.
    predicted = [r[1] for r in _tsv(mrpc_run["output"] / "dev_predictions.tsv")[1:]]
    assert predicted == [str(i) for i in served["full/logits"][:2].argmax(axis=1)]


def test_triton_repository_layout(mrpc_run):
    model_dir = mrpc_run["triton"] / "bert_glue_mrpc"
    assert sorted(os.listdir(mrpc_run["triton"])) == ["bert_glue_mrpc"]
    assert sorted(os.listdir(model_dir)) == ["1", "config.pbtxt"]
    assert (model_dir / "1" / "model.savedmodel" / "saved_model.pb").is_file()
    assert sorted(os.listdir(model_dir / "1" / "model.savedmodel")) == sorted(os.listdir(mrpc_run["export"]))
    text = (model_dir / "config.pbtxt").read_text()
    assert re.search(r'^name: "bert_glue_mrpc"$', text, re.M)
    assert re.search(r'^platform: "tensorflow_savedmodel"$', text, re.M)
    assert re.search(r"^max_batch_size: 0$", text, re.M)  # the batch is the dims' first -1
    tensors = re.findall(r'\{ name: "(\w+)" data_type: (\w+) dims: \[ ([-\d, ]+) \] \}', text)
    assert tensors == [
        ("input_ids", "TYPE_INT32", "-1, -1"),
        ("input_mask", "TYPE_INT32", "-1, -1"),
        ("segment_ids", "TYPE_INT32", "-1, -1"),
        ("logits", "TYPE_FP32", "-1, 2"),
    ]
    assert text.index("input [") < text.index("input_ids") < text.index("output [") < text.index('"logits"')
    assert 'key: "TF_SIGNATURE_DEF" value: { string_value: "serving_default" }' in text


def test_export_only_run_equals_the_export_after_training(mrpc_run, model_files, tmp_path, capsys):
    # A copy: the export-only run rewrites resolved_config.json of the directory it reads.
    finished = tmp_path / "finished"
    shutil.copytree(mrpc_run["output"], finished)
    export = tmp_path / "export"
    argv = [
        "--task_name=MRPC",
        f"--data_dir={GLUE}",
        f"--output_dir={finished}",  # its bert_config.json, vocab.txt and latest checkpoint
        f"--export_dir={export}",
        f"--max_seq_length={SEQ}",
    ]
    _ok(run_classifier.main, argv)
    assert f"Predicting with the weights of {finished / 'ckpt-5'}." in capsys.readouterr().out
    assert sorted(f for f in os.listdir(finished) if f.endswith(".index")) == [
        "ckpt-2.index",
        "ckpt-4.index",
        "ckpt-5.index",
    ]  # nothing trained
    _, rows = _glue_features(model_files, "MRPC", "test")
    served = _serve(tmp_path, {"after_training": (mrpc_run["export"], rows), "export_only": (export, rows)})
    np.testing.assert_array_equal(served["export_only/logits"], served["after_training/logits"])
    # A second export into the now non-empty directory is refused, naming it.
    status, err = _error(run_classifier.main, argv, capsys)
    assert status == 2 and f"--export_dir {export} exists and is not empty" in err


def test_non_empty_export_dir_is_refused_before_training(model_files, tmp_path, capsys):
    export = tmp_path / "export"
    export.mkdir()
    (export / "saved_model.pb").write_bytes(b"an earlier export")
    argv = _flags(
        model_files, tmp_path / "run", "--do_train", task_name="MRPC", data_dir=GLUE, export_dir=export
    )
    status, err = _error(run_classifier.main, argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert f"--export_dir {export} exists and is not empty" in err
    assert not (tmp_path / "run").exists()  # stopped before any training


def test_squad_export_serves_start_and_end_logits_with_tensorflow_alone(squad_run, model_files, tmp_path):
    from bert.tokenization import build_tokenizer

    config = model_files["config"]
    model = BertSpanModel(config)
    load_weights(model, tf.train.latest_checkpoint(str(squad_run["output"])))
    examples, _ = squad.read_examples(SQUAD_TRAIN, False, False, log=lambda m: None)
    tokenizer = build_tokenizer(vocab_file=model_files["vocab_file"], do_lower_case=True)
    features = squad.convert_examples_to_features(
        examples,
        tokenizer,
        max_seq_length=SEQ,
        doc_stride=SQUAD["doc_stride"],
        max_query_length=SQUAD["max_query_length"],
        progress=False,
    )
    arrays = squad.features_to_arrays(features)
    rows = {k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")}  # B = every window
    assert len(features) not in (4, 8)  # neither the training nor the prediction batch
    served = _serve(tmp_path, {"squad": (squad_run["export"], rows)})
    assert set(served) == {"squad/start_logits", "squad/end_logits"}
    expected = model(rows)
    for name in ("start_logits", "end_logits"):
        assert served[f"squad/{name}"].shape == (len(features), SEQ)
        assert np.abs(served[f"squad/{name}"] - expected[name].numpy()).max() <= 1e-5
    # Decoding the served logits gives the job's predictions.json.
    predictions, _, _ = squad.postprocess(
        examples,
        features,
        served["squad/start_logits"],
        served["squad/end_logits"],
        n_best_size=SQUAD["n_best_size"],
        max_answer_length=SQUAD["max_answer_length"],
    )
    assert predictions == _json(squad_run["output"] / "predictions.json")


# --- a task a tiny BERT can learn -------------------------------------------------------------


@pytest.fixture(scope="module")
def word_order_task(tmp_path_factory):
    return write_word_order_task(tmp_path_factory.mktemp("word_order"))


def _dev_accuracy(output_dir, data_dir):
    gold = [r[1] for r in _tsv(os.path.join(data_dir, "SST-2", "dev.tsv"))[1:]]
    predicted = [r[1] for r in _tsv(os.path.join(output_dir, "dev_predictions.tsv"))[1:]]
    assert len(predicted) == len(gold) == DEV_SENTENCES and gold.count("1") == DEV_SENTENCES // 2
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold)


@pytest.mark.slow
def test_tiny_bert_from_random_init_learns_word_order(word_order_task, tmp_path):
    out = tmp_path / "run"
    argv = _flags(
        word_order_task,
        out,
        "--do_train",
        "--do_eval",
        task_name="SST-2",
        data_dir=word_order_task["data_dir"],
        max_seq_length=32,
        train_batch_size=32,
        num_train_epochs=5,
        save_checkpoints_steps=1000,
        log_every_n_steps=25,
        predict_batch_size=64,
        use_xla="true",
    )
    _ok(run_classifier.main, argv)
    accuracy = _json(out / "eval_results.json")["accuracy"]
    assert accuracy == _dev_accuracy(out, word_order_task["data_dir"])
    # Measured 0.99 on the 200 unseen sentences (1.0 with seeds 1 and 2) after 250 updates of 32
    # (about 20 s of training on 2 cores); chance is 0.5.
    assert accuracy >= 0.9
    log = _log(out)
    assert log[-1]["step"] == 250 and log[-1]["loss"] < 0.5 * log[0]["loss"]


@pytest.mark.slow
def test_minilm_fine_tunes_to_word_order_in_a_few_updates(word_order_task, minilm_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "--task_name=SST-2",
        f"--data_dir={word_order_task['data_dir']}",
        f"--init_checkpoint={minilm_dir}",  # its config.json and vocab.txt are found beside it
        f"--output_dir={out}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--num_train_epochs=0.125",
        "--learning_rate=1e-4",
        "--log_every_n_steps=4",
        "--save_checkpoints_steps=1000",
        "--predict_batch_size=64",
        "--use_xla=false",  # compiling the 6 layers would take longer than the 12 updates
    ]
    _ok(run_classifier.main, argv)
    assert f"Initialised the encoder from {minilm_dir}; the head starts fresh." in capsys.readouterr().out
    resolved = _json(out / "resolved_config.json")
    assert resolved["num_train_steps"] == int(2 * TRAIN_SENTENCES / 16 * 0.125) == 12
    accuracy = _json(out / "eval_results.json")["accuracy"]
    assert accuracy == _dev_accuracy(out, word_order_task["data_dir"])
    # Measured 1.0 after 12 updates of 16 sentences; chance is 0.5.
    assert accuracy >= 0.9
    _, weights = _checkpoint(out)
    assert weights["output_weights"].shape == (2, 384)


# --- Horovod -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_horovod_workers_equal_one_worker_with_the_doubled_batch(model_files, tmp_path):
    pytest.importorskip("horovod.tensorflow")
    horovodrun = os.path.join(BIN, "horovodrun")
    if not os.path.exists(horovodrun):
        pytest.skip("horovodrun is missing: scripts/setup.sh builds Horovod")
    # Dropout off: the two runs must not depend on per-process random streams.
    files = write_model_files(
        str(tmp_path / "model"), _fixture_texts(), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    common = dict(task_name="MRPC", data_dir=GLUE, num_train_epochs=3, save_checkpoints_steps=2)
    # On CPU, GPU machines included: the tolerance below is for float32 CPU kernels.
    env = worker_env(CUDA_VISIBLE_DEVICES="")
    entry = [sys.executable, os.path.join(ROOT, "run_classifier.py")]
    two = tmp_path / "two"
    launcher = [horovodrun, "-np", "2", "-H", "localhost:2", "--gloo"]
    # Rank 0 also scores dev after updates 1 and 2 while rank 1 waits at the next allreduce.
    cmd = [*launcher, *entry, *_flags(files, two, "--do_train", "--do_eval", eval_every_n_steps=1, **common)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("Resolved fine-tuning settings:") == 1  # rank 0 alone reports

    resolved = _json(two / "resolved_config.json")
    assert (resolved["workers"], resolved["train_batch_size"], resolved["global_batch_size"]) == (2, 1, 2)
    assert resolved["effective_learning_rate"] == pytest.approx(2e-3)  # per worker x workers
    assert resolved["num_train_steps"] == int(2 / 2 * 3) == 3
    # Rank 0 wrote each checkpoint once; each worker its own input position.
    names = os.listdir(two)
    assert sorted(n for n in names if n.startswith("ckpt-")) == [
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
    ]
    assert not [n for n in names if TEMP_MARK in n]
    assert sorted(os.listdir(two / "worker_state")) == [
        f"ckpt-{s}-rank-{r}-of-2" for s in (2, 3) for r in (0, 1)
    ]
    two_log = [e for e in _log(two) if "eval" not in e]
    assert [e["step"] for e in two_log] == [1, 2, 3]
    evals = [e for e in _log(two) if "eval" in e]
    assert [e["step"] for e in evals] == [1, 2]  # the last update's evaluation is eval_results.json
    assert all(set(e["eval"]) == {"split", "accuracy", "f1", "examples"} for e in evals)
    assert _json(two / "eval_results.json")["global_step"] == 3

    # One worker, batch 2, the same peak rate: the same updates.
    one = tmp_path / "one"
    cmd = [*entry, *_flags(files, one, "--do_train", train_batch_size=2, learning_rate=2e-3, **common)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _, got = _checkpoint(two)
    _, want = _checkpoint(one)
    weights = [n for n in want if n.startswith(("bert/", "output_"))]  # and their Adam slots
    assert len(weights) > 20 and not [n for n in weights if n not in got]
    assert max(float(np.abs(got[n] - want[n]).max()) for n in weights) <= 1e-5
    assert [e["loss"] for e in two_log] == pytest.approx([e["loss"] for e in _log(one)], abs=1e-6)


# --- resume ------------------------------------------------------------------------------------

STEPS, SAVE_EVERY, KILL_AFTER = 10, 4, 5  # checkpoints at 4, 8, 10; killed after step 5 is logged


@pytest.mark.slow
def test_kill_9_then_the_same_command_ends_bit_identical(word_order_task, tmp_path):
    def command(output_dir):
        # 2 micro-batches of 64 (dropout on, XLA): an update long enough for the kill to land
        # between checkpoints 4 and 8; 1600 rows / 128 x 0.8 epochs = 10 updates.
        flags = _flags(
            word_order_task,
            output_dir,
            "--do_train",
            task_name="SST-2",
            data_dir=word_order_task["data_dir"],
            max_seq_length=32,
            train_batch_size=64,
            num_accumulation_steps=2,
            num_train_epochs=0.8,
            save_checkpoints_steps=SAVE_EVERY,
            keep_checkpoints=2,
            use_xla="true",
            deterministic="true",
            seed=7,
        )
        return [sys.executable, os.path.join(ROOT, "run_classifier.py"), *flags]

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    uninterrupted = subprocess.Popen(
        command(straight), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    kill_after_step(command(killed), killed, env, KILL_AFTER)
    latest = tf.train.latest_checkpoint(str(killed))
    assert latest is not None and latest.endswith(f"ckpt-{SAVE_EVERY}"), (
        f"the kill did not land between checkpoints {SAVE_EVERY} and {2 * SAVE_EVERY} (latest {latest})"
    )

    resumed = subprocess.run(command(killed), env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from {latest} (step {SAVE_EVERY} of {STEPS})." in resumed.stdout
    assert uninterrupted.wait(timeout=300) == 0, uninterrupted.stderr.read()[-3000:]
    assert _json(killed / "resolved_config.json")["num_train_steps"] == STEPS

    _, want = _checkpoint(straight)
    _, got = _checkpoint(killed)
    assert int(got["global_step"]) == STEPS and set(got) == set(want)
    assert "output_weights/adam_m" in got and "training_state/optimizer/iterations" in got
    diffs = {
        n: float(np.max(np.abs(got[n].astype(np.float64) - want[n].astype(np.float64)), initial=0.0))
        for n in want
    }
    assert max(diffs.values()) == 0.0, sorted(diffs.items(), key=lambda kv: -kv[1])[:5]
    straight_log, killed_log = _log(straight), _log(killed)
    assert [e["step"] for e in killed_log] == list(range(1, STEPS + 1))
    assert [e["loss"] for e in killed_log] == [e["loss"] for e in straight_log]
    # The input position and dropout seeds went along with each kept checkpoint (keep 2).
    assert sorted(os.listdir(killed / "worker_state")) == [f"ckpt-{STEPS}-rank-0-of-1", "ckpt-8-rank-0-of-1"]


# --- errors a user can cause ------------------------------------------------------------------


def _error(main, argv, capsys):
    """(exit status, stderr) of an entry point that must stop with one sentence."""
    capsys.readouterr()
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return status, err


def test_unknown_task_name_exits_2_naming_the_known_tasks(tmp_path, capsys):
    status, err = _error(
        run_classifier.main,
        ["--task_name=MRCP", f"--data_dir={GLUE}", f"--output_dir={tmp_path / 'run'}", "--do_train"],
        capsys,
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("run_classifier: error: Unknown GLUE task 'MRCP'")
    assert all(name in err for name in GLUE_TASKS)
    assert not (tmp_path / "run").exists()


def test_missing_squad_train_file_exits_2_naming_it(model_files, tmp_path, capsys):
    missing = tmp_path / "train-v1.1.json"
    status, err = _error(
        run_squad.main, _flags(model_files, tmp_path / "run", "--do_train", train_file=missing), capsys
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert f"--train_file {missing} does not exist" in err


def test_malformed_squad_json_exits_2_naming_file_and_line(model_files, tmp_path, capsys):
    broken = tmp_path / "train.json"
    broken.write_text('{\n  "version": "1.1",\n  "data": [\n    {"title": "x",, "paragraphs": []}\n  ]\n}\n')
    status, err = _error(
        run_squad.main, _flags(model_files, tmp_path / "run", "--do_train", train_file=broken), capsys
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert str(broken) in err and "line 4" in err and "not valid JSON" in err
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is None


@pytest.mark.parametrize("task, classes", [("MNLI", 3), ("STS-B", 1)])
def test_fine_tuned_head_with_another_class_count_is_a_shape_error(mrpc_run, tmp_path, capsys, task, classes):
    status, err = _error(
        run_classifier.main,
        [
            f"--task_name={task}",
            f"--data_dir={GLUE}",
            f"--init_checkpoint={mrpc_run['output']}",  # MRPC's: a head of 2 classes
            f"--output_dir={tmp_path / 'run'}",
            f"--max_seq_length={SEQ}",
            "--train_batch_size=1",
            "--use_xla=false",
            "--do_train",
        ],
        capsys,
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert "shape mismatch" in err and str(mrpc_run["output"]) in err
    assert f"output_weights (2, {D}) vs model ({classes}, {D})" in err
    assert f"output_bias (2,) vs model ({classes},)" in err
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is None


def test_save_huggingface_keeps_the_classifier_head_and_load_for_fine_tuning_reads_it(tmp_path, tiny_config):
    import keras
    from safetensors.numpy import load_file, save_file

    keras.utils.set_random_seed(1)
    source = BertClassifier(tiny_config, 3)
    source.classifier.output_bias.assign([0.5, -0.25, 1.0])  # not the zeros a fresh head has
    save_huggingface(source, str(tmp_path / "hf"))
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert tensors["classifier.weight"].shape == (3, D) and tensors["classifier.bias"].shape == (3,)
    np.testing.assert_array_equal(tensors["classifier.bias"], [0.5, -0.25, 1.0])
    assert "embeddings.word_embeddings.weight" in tensors and "pooler.dense.weight" in tensors
    # BertForSequenceClassification's own layout: the encoder under "bert.", the head not.
    prefixed = tmp_path / "prefixed"
    prefixed.mkdir()
    save_file(
        {(k if k.startswith("classifier.") else "bert." + k): v for k, v in tensors.items()},
        str(prefixed / "model.safetensors"),
    )

    want = {n: v.numpy() for n, v in model_variables(source).items()}
    assert "output_weights" in want and "bert/pooler/dense/kernel" in want
    for checkpoint in (tmp_path / "hf", prefixed):
        keras.utils.set_random_seed(2)
        target = BertClassifier(tiny_config, 3)
        assert load_for_fine_tuning(target, str(checkpoint)) is True
        got = model_variables(target)
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name].numpy(), want[name], err_msg=f"{checkpoint}: {name}")


@pytest.mark.parametrize("head", ["classifier", "span"])
def test_transformers_fine_tuned_checkpoint_loads_with_its_head(tmp_path, head):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert.checkpoints import read_config_beside

    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**CONFIG, num_labels=3 if head == "classifier" else 2)
    if head == "classifier":
        reference = transformers.BertForSequenceClassification(hf_config)
    else:
        reference = transformers.BertForQuestionAnswering(hf_config)
    with torch.no_grad():  # a head that is not at its initial values
        for parameter in reference.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    reference.eval().save_pretrained(str(tmp_path / "hf"), safe_serialization=True)

    config = read_config_beside(str(tmp_path / "hf"))
    model = BertClassifier(config, 3) if head == "classifier" else BertSpanModel(config)
    assert load_for_fine_tuning(model, str(tmp_path / "hf")) is True
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(5, CONFIG["vocab_size"], (2, 12)).astype("int32"),
        "input_mask": np.array([[1] * 12, [1] * 7 + [0] * 5], "int32"),
        "segment_ids": np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 3 + [0] * 5], "int32"),
    }
    with torch.no_grad():
        out = reference(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )
    ours = model(batch)
    if head == "classifier":
        assert ours["logits"].shape == (2, 3)
        assert np.abs(ours["logits"].numpy() - out.logits.numpy()).max() <= 1e-5
    else:
        real = batch["input_mask"].astype(bool)  # HF does not mask the padded positions' logits
        for name in ("start_logits", "end_logits"):
            got, want = ours[name].numpy(), getattr(out, name).numpy()
            assert np.abs(got[real] - want[real]).max() <= 1e-5
