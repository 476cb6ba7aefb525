"""scripts/quickstart.sh end to end at a small scale: corpus, vocab, TFRecords, both pretraining
phases through the launcher, held-out evaluations, the picture of the run, the question-answering
fine-tunes of our model and of the real all-MiniLM-L6-v2 weights, the closing table, and not one
of TensorFlow's start-up notes in the output."""

import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, XLA_CACHE_FLAG, worker_env, xla_default_effort

pytestmark = pytest.mark.process

# TensorFlow's start-up notes (common/tensorflow_startup.py), matched loosely on purpose: any line
# that carries one of them counts, whichever process printed it.
STARTUP_NOTE = re.compile(r"absl::InitializeLog|oneDNN custom operations are on|cpu_feature_guard")


@pytest.mark.slow
def test_quickstart_runs_every_stage_and_prints_the_results(tmp_path, minilm_dir):
    # A few updates per fine-tune: the stages' wiring is checked here, their quality in the full run.
    env = {**worker_env(), "QUICKSTART_QA_EPOCHS": "0.05", "QUICKSTART_MINILM_EPOCHS": "0.02"}
    # Without the suite's XLA cache, as a user runs it: reading a cache entry, TensorFlow tries the
    # text format first, and protobuf logs that failure (after absl's preface) before the binary
    # read succeeds, so a warm cache would put lines on stderr that no user sees.
    env["TF_XLA_FLAGS"] = env.get("TF_XLA_FLAGS", "").replace(XLA_CACHE_FLAG, "").strip()
    env = xla_default_effort(env)  # all-MiniLM-L6-v2's update: 10 s to compile, 26 s at the least effort
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
    notes = [line for line in (out + result.stderr).splitlines() if STARTUP_NOTE.search(line)]
    assert notes == []
    for stage in range(1, 8):
        assert f"== quickstart {stage}/7:" in out
    # Phase 1 runs 90% of the 20 steps; phase 2 the rest at the same global batch (32).
    assert "ckpt-18.index" in os.listdir(tmp_path / "phase_1")
    assert "ckpt-2.index" in os.listdir(tmp_path / "phase_2")
    results = {}
    for name in ("start_128", "start_512", "final_128", "final_512"):
        with open(tmp_path / "eval" / name / "eval_results.json") as f:
            results[name] = json.load(f)["masked_lm_accuracy"]
        assert 0.0 <= results[name] <= 1.0
    assert (
        f"seq 128: {results['start_128']:.3f} before pretraining -> {results['final_128']:.3f} after" in out
    )

    # The picture: a PNG of the drawn size (training/plot.py: 13 x 8.5 inches at 100 dpi).
    picture = tmp_path / "pretraining.png"
    assert f"Wrote {picture}" in out
    header = picture.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (1300, 850)

    # Both models answered every dev question; each ran with its own config and vocab.
    squad = {}
    for name, hidden, vocab in (("squad", 128, 2048), ("squad_minilm", 384, 30522)):
        with open(tmp_path / name / "eval_results.json") as f:
            squad[name] = json.load(f)
        with open(tmp_path / name / "predictions.json") as f:
            assert len(json.load(f)) > 100
        with open(tmp_path / name / "bert_config.json") as f:
            config = json.load(f)
        assert (config["hidden_size"], config["vocab_size"]) == (hidden, vocab)
        with open(tmp_path / name / "vocab.txt", encoding="utf-8") as f:
            assert sum(1 for _ in f) == vocab
    with open(tmp_path / "squad_minilm" / "resolved_config.json") as f:
        assert json.load(f)["init_checkpoint"] == minilm_dir
    ours, minilm = squad["squad"], squad["squad_minilm"]
    assert (
        f"ours EM {ours['exact_match']:.1f}, F1 {ours['f1']:.1f}; "
        f"all-MiniLM-L6-v2 EM {minilm['exact_match']:.1f}, F1 {minilm['f1']:.1f}"
    ) in out

    # The closing table: one row per stage, each with its time, the QA rows with their scores.
    table = out[out.index("Quickstart results") :].split("\n\n")[0].splitlines()
    rows = table[3:]  # after the title, the header and its rule; the table ends at a blank line
    assert [row.split()[0] for row in rows] == [str(i) for i in range(1, 8)]
    assert all(re.search(r"  \d+:\d\d  ", row) for row in rows)
    assert f"EM {minilm['exact_match']:.1f}, F1 {minilm['f1']:.1f}" in rows[6]
    assert "squad_minilm/" in rows[6] and "pretraining.png" in rows[3]
