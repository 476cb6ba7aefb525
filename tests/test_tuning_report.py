"""The study's report (tuning/report.py) from a study built by hand: the table holds
every trial with its state, parameters and metric (a pruned trial's last reported value), the best
trial is the best complete one with its checkpoint, and the plots are real PNG and HTML files."""

import io
import json
import os

import optuna
import pytest
import tensorflow as tf

from tuning import report as tuning_report
from tuning import search_space

LR = optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)


def _trial(state, lr, curve, value=None, output_dir=None, **attrs):
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params={"learning_rate": lr},
        distributions={"learning_rate": LR},
        intermediate_values=curve,
        user_attrs={"output_dir": output_dir, "train_batch_size": 32, **attrs},
    )


@pytest.fixture
def study(tmp_path):
    states = optuna.trial.TrialState
    best_dir = tmp_path / "trial_001"
    variable = tf.Variable(1.0)
    tf.train.Checkpoint(v=variable).write(str(best_dir / "ckpt-40"))
    (best_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-40"\n')
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        _trial(states.COMPLETE, 1e-4, {20: 0.7, 40: 0.8}, 0.8, str(tmp_path / "trial_000"), last_step=40)
    )
    study.add_trial(_trial(states.COMPLETE, 1e-3, {20: 0.8, 40: 0.9}, 0.9, str(best_dir), last_step=40))
    study.add_trial(_trial(states.PRUNED, 1e-6, {20: 0.5}, None, str(tmp_path / "trial_002"), last_step=20))
    study.add_trial(_trial(states.FAIL, 1e-2, {}, None, str(tmp_path / "trial_003")))
    study.add_trial(_trial(states.FAIL, 1e-5, {}, None, None, surplus=True))  # never ran: not listed
    return study


def test_table_best_trial_and_plots(study, tmp_path):
    space = {"learning_rate": search_space.Dimension("learning_rate", low=1e-6, high=1e-2, log=True)}
    space["train_batch_size"] = search_space.Dimension("train_batch_size", choices=(32,))
    printed = io.StringIO()
    result = tuning_report.report(str(tmp_path), space, study, "accuracy", printed)

    with open(tmp_path / "trials.tsv", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    assert rows[0] == [
        "trial",
        "state",
        "learning_rate",
        "train_batch_size",
        "accuracy",
        "last_step",
        "minutes",
    ]
    assert [r[:6] for r in rows[1:]] == [
        ["0", "complete", "0.0001", "32", "0.8", "40"],
        ["1", "complete", "0.001", "32", "0.9", "40"],
        ["2", "pruned", "1e-06", "32", "0.5", "20"],  # its last reported value
        ["3", "fail", "0.01", "32", "", ""],
    ]
    best = json.load(open(tmp_path / "best_trial.json"))
    assert best == result["best"]
    assert best["trial"] == 1 and best["value"] == 0.9
    assert best["params"] == {"learning_rate": 1e-3, "train_batch_size": 32}
    assert best["checkpoint"] == os.path.join(str(tmp_path / "trial_001"), "ckpt-40")
    text = printed.getvalue()
    assert "Best: trial 1  accuracy 0.9000  learning_rate=0.001  train_batch_size=32" in text
    assert text.splitlines()[0].split() == rows[0]

    assert sorted(os.path.basename(p) for p in result["plots"]) == sorted(
        f"{stem}.{ext}" for stem in tuning_report.PLOTS for ext in ("png", "html")
    )
    for path in result["plots"]:
        with open(path, "rb") as f:
            head = f.read(64)
        assert head.startswith(b"\x89PNG") if path.endswith(".png") else b"<html" in head.lower()
    curves = (tmp_path / "dev_metric_by_step.html").read_text(encoding="utf-8")
    assert "trial 2 (pruned)" in curves and "trial 3" not in curves  # a failed trial reported nothing
    assert '"dash":"dash"' in curves.replace(" ", "")


def test_no_complete_trial_writes_no_best(tmp_path):
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(optuna.trial.TrialState.PRUNED, 1e-6, {20: 0.5}, None, None))
    printed = io.StringIO()
    result = tuning_report.report(str(tmp_path), {}, study, "f1", printed)
    assert result["best"] is None and not (tmp_path / "best_trial.json").exists()
    assert "No trial completed." in printed.getvalue()
