"""training/glue_task.py through run_classifier.py: MRPC and STS-B fine-tuned on the
official-format fixtures (tests/fixtures/glue) with a tiny BERT, then what they leave behind read
back independently: metrics recomputed from the written predictions, the submission files, the
head's checkpoint under Google's names, the log."""

import math
import os

import pytest

import run_classifier
from finetuning_runs import GLUE, D, _checkpoint, _flags, _json, _log, _ok, _tsv


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
        learning_rate=1e-3,  # 1e-2 can push every prediction past 5 (clipped: all equal)
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
