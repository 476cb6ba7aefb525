"""What a user looks at after a run: the picture training/plot.py draws from log.jsonl (phases
end to end, held-out evaluations as markers), and TensorBoard's own reader on our event files."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, worker_env
from training import plot


def _write_run(run_dir, entries, final=None):
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "log.jsonl"), "w", encoding="utf-8") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")
    if final is not None:
        with open(os.path.join(run_dir, "eval_results.json"), "w", encoding="utf-8") as f:
            json.dump(final, f)


def _entry(step, accuracy, lr):
    return {
        "step": step,
        "loss": 8.0 - step / 100,
        "mlm_loss": 7.0 - step / 100,
        "nsp_loss": 0.7,
        "mlm_accuracy": accuracy,
        "nsp_accuracy": 0.5,
        "learning_rate": lr,
        "loss_scale": 1.0,
        "sequences_per_second": 40.0,
        "skipped": 0,
    }


@pytest.fixture
def two_phases(tmp_path):
    phase_1 = str(tmp_path / "phase_1")
    phase_2 = str(tmp_path / "phase_2")
    _write_run(
        phase_1,
        [_entry(50, 0.05, 1e-2), _entry(100, 0.10, 5e-3), _entry(180, 0.15, 0.0)],
        final={"global_step": 180, "masked_lm_accuracy": 0.14, "next_sentence_accuracy": 0.6},
    )
    # Phase 2 counts from 1 again; a non-finite value is written as a string by metrics_log.
    phase_2_entries = [_entry(10, 0.16, 5e-3), _entry(20, 0.17, 0.0)]
    phase_2_entries[0]["loss"] = "nan"
    _write_run(phase_2, phase_2_entries, final={"global_step": 20, "masked_lm_accuracy": 0.165})
    return phase_1, phase_2


def test_phase_2_continues_where_phase_1_ended(two_phases):
    runs = plot.load_runs(list(two_phases))
    assert [(r.name, r.offset, r.end) for r in runs] == [("phase_1", 0, 180), ("phase_2", 180, 200)]
    assert plot._series(runs, "mlm_accuracy", "train") == (
        [50, 100, 180, 190, 200],
        [0.05, 0.10, 0.15, 0.16, 0.17],
    )
    # The "nan" loss of phase 2's first line is left out, not drawn as a gap at zero.
    assert plot._series(runs, "loss", "train")[0] == [50, 100, 180, 200]
    # Held-out results sit at each run's final step, end to end.
    assert plot._series(runs, "masked_lm_accuracy", "evals") == ([180, 200], [0.14, 0.165])


def test_the_picture_holds_every_panel(two_phases, tmp_path):
    output = str(tmp_path / "pictures" / "pretraining.png")
    drawn = plot.draw(plot.load_runs(list(two_phases)), output)
    assert {
        "loss",
        "mlm_accuracy",
        "learning_rate",
        "sequences_per_second",
        "eval/masked_lm_accuracy",
    } <= set(drawn)
    with open(output, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert (width, height) == (1300, 850)  # figsize 13 x 8.5 inches at 100 dpi


def test_fine_tuning_logs_draw_their_own_keys(tmp_path):
    run = str(tmp_path / "squad")
    entry = {"step": 50, "loss": 2.9, "span_loss": 2.9, "start_accuracy": 0.28, "end_accuracy": 0.25}
    _write_run(run, [entry, {"step": 50, "eval": {"exact_match": 6.0, "f1": 12.0}}, {**entry, "step": 100}])
    runs = plot.load_runs([run])
    assert [e["step"] for e in runs[0].train] == [50, 100]  # the eval line is not a training step
    drawn = plot.draw(runs, str(tmp_path / "squad.png"))
    assert "start_accuracy" in drawn and "mlm_accuracy" not in drawn


def test_a_directory_without_a_log_is_one_sentence(tmp_path, capsys):
    assert plot.main([str(tmp_path), "--output", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"python -m training.plot: error: {tmp_path} holds no log.jsonl; give the output directory of a training run."
    )
    assert not (tmp_path / "x.png").exists()


# Written by a separate process that then exits: the events must be on disk when a run ends,
# which is when a user opens TensorBoard.
_WRITE_EVENTS = """
import sys
from training.metrics_log import MetricsLog
log = MetricsLog(sys.argv[1], total_steps=4, start_step=0, sequences_per_update=8, log_every=2)
for step in range(1, 5):
    metrics = {"loss": 10.0 - step, "mlm_accuracy": step / 10, "learning_rate": 1e-3 * step,
               "loss_scale": 1.0, "skipped": 0}
    log.record(step, metrics, seconds=0.5)
log.record_eval(4, {"masked_lm_accuracy": 0.25})
log.close()
"""


@pytest.mark.process
def test_tensorboard_reads_our_scalars(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from tensorboard.util import tensor_util

    result = subprocess.run(
        [sys.executable, "-c", _WRITE_EVENTS, str(tmp_path)],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reader = event_accumulator.EventAccumulator(
        str(tmp_path / "tensorboard"), size_guidance={event_accumulator.TENSORS: 0}
    )
    reader.Reload()
    tags = set(reader.Tags()["tensors"])
    assert {"train/loss", "train/mlm_accuracy", "train/learning_rate", "eval/masked_lm_accuracy"} <= tags

    def values(tag):
        return [
            (e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 6)) for e in reader.Tensors(tag)
        ]

    assert values("train/loss") == [(2, 8.0), (4, 6.0)]  # the log steps only (every 2)
    assert values("train/learning_rate") == [(2, 0.002), (4, 0.004)]
    assert values("eval/masked_lm_accuracy") == [(4, 0.25)]
    # TensorBoard's Scalars dashboard shows a tensor summary only under its plugin's name.
    assert reader.SummaryMetadata("train/loss").plugin_data.plugin_name == "scalars"
