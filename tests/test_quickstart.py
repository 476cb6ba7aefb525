"""scripts/quickstart.sh end to end at a small scale: corpus, vocab, TFRecords, both pretraining
phases through the launcher, held-out evaluations, and the question-answering fine-tune."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, worker_env


@pytest.mark.slow
def test_quickstart_runs_every_stage_and_prints_the_results(tmp_path):
    env = {**worker_env(), "QUICKSTART_QA_EPOCHS": "0.05"}
    result = subprocess.run(
        [
            "bash",
            "scripts/quickstart.sh",
            "--dir",
            str(tmp_path),
            "--corpus_mb",
            "0.3",
            "--train_steps",
            "20",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for stage in range(1, 7):
        assert f"== quickstart {stage}/6:" in out
    # Phase 1 runs 90% of the 20 steps; phase 2 the rest at the same global batch (32).
    assert "ckpt-18.index" in os.listdir(tmp_path / "phase_1")
    assert "ckpt-2.index" in os.listdir(tmp_path / "phase_2")
    results = {}
    for name in ("start_128", "start_512", "final_128", "final_512"):
        with open(tmp_path / "eval" / name / "eval_results.json") as f:
            results[name] = json.load(f)["masked_lm_accuracy"]
        assert 0.0 <= results[name] <= 1.0
    with open(tmp_path / "squad" / "eval_results.json") as f:
        squad = json.load(f)
    with open(tmp_path / "squad" / "predictions.json") as f:
        assert len(json.load(f)) > 100  # every dev question answered
    assert f"EM {squad['exact_match']:.1f}, F1 {squad['f1']:.1f}" in out
    assert (
        f"seq 128: {results['start_128']:.3f} before pretraining -> {results['final_128']:.3f} after" in out
    )
