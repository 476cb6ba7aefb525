"""training/squad_task.py through run_squad.py: SQuAD v1.1 and v2.0 fine-tuned on the tiny
fixtures (tests/fixtures/squad), then predictions.json, nbest_predictions.json and null_odds.json
read back, the official metrics recomputed from them, and the span head's checkpoint names."""

import math

import pytest

import run_squad
from data import squad_metrics
from finetuning_runs import SQUAD, SQUAD_DEV_V2, SQUAD_FLAGS, SQUAD_TRAIN, D, _checkpoint, _flags, _json, _ok


def _question_ids(path):
    return [qa["id"] for a in _json(path)["data"] for p in a["paragraphs"] for qa in p["qas"]]


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
