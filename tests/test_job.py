"""training/update.py and training/job.py: the update every job builds (workers applied once), the
resolved report."""

import io
import json

import pytest

from training import job
from training.update import Update


def test_the_worker_count_multiplies_the_batch_and_the_rate_once():
    update = Update(
        batch_size=8, accumulation_steps=4, learning_rate=7.5e-4, workers=8, optimizer_type="lamb"
    )
    assert update.global_batch_size == 8 * 4 * 8
    assert update.peak_learning_rate == pytest.approx(6e-3)
    assert update.describe() == {
        "workers": 8,
        "num_accumulation_steps": 4,
        "global_batch_size": 256,
        "effective_learning_rate": pytest.approx(6e-3),
    }


@pytest.mark.parametrize(
    "optimizer_type, decay_power, power", [("lamb", None, 0.5), ("adamw", None, 1.0), ("lamb", 1.0, 1.0)]
)
def test_the_schedule_peaks_at_the_scaled_rate_with_the_optimizers_decay(optimizer_type, decay_power, power):
    update = Update(2, 1, 1e-3, 4, optimizer_type, decay_power=decay_power)
    schedule = update.learning_rate_schedule(warmup_steps=10, train_steps=100)
    assert (schedule.peak_learning_rate, schedule.warmup_steps, schedule.total_steps) == (4e-3, 10, 100)
    assert schedule.power == power
    assert float(schedule(10)) == pytest.approx(4e-3 * (1 - 10 / 100) ** power)
    assert update.learning_rate_schedule(warmup_steps=10, train_steps=0) == 4e-3  # no training: constant


def test_report_prints_sorted_settings_and_writes_them(tmp_path):
    stream = io.StringIO()
    path = tmp_path / "resolved_config.json"
    job.report("pretraining", {"workers": 2, "b": None}, stream, str(path))
    assert stream.getvalue() == "Resolved pretraining settings:\n  b        null\n  workers  2\n"
    assert json.loads(path.read_text()) == {"workers": 2, "b": None}
    job.report("fine-tuning", {"a": 1}, stream, None)
    assert stream.getvalue().endswith("Resolved fine-tuning settings:\n  a  1\n")
