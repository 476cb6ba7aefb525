"""MLflow tracking (training/tracking.py) through a real file store: a tiny MRPC fine-tuning's
training metrics, its evaluations under eval_results.json's names, its settings as params; a run
that MLFLOW_RUN_ID names is logged into; without MLFLOW_TRACKING_URI mlflow is never imported."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from finetuning_runs import GLUE, _flags, _json, _log, _ok

mlflow = pytest.importorskip("mlflow")


def _mrpc(model_files, output_dir, *extra):
    """A tiny MRPC run: 2 examples, batch 1, 1 epoch = 2 updates; the dev set scored at step 1
    and after training."""
    return _flags(
        model_files,
        output_dir,
        "--do_train",
        "--do_eval",
        *extra,
        task_name="MRPC",
        data_dir=GLUE,
        num_train_epochs=1,
        eval_every_n_steps=1,
        save_checkpoints_steps=2,
    )


def _history(client, run_id, name):
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A file store as MLFLOW_TRACKING_URI, no run named; the client that reads it."""
    uri = f"file://{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores for tests like this
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    mlflow.set_tracking_uri(uri)
    return mlflow.MlflowClient(uri)


@pytest.mark.process
def test_a_fine_tuning_logs_its_metrics_evaluations_and_settings(model_files, tmp_path, store):
    import run_classifier

    output = tmp_path / "run"
    _ok(run_classifier.main, _mrpc(model_files, output))
    runs = store.search_runs([store.get_experiment_by_name("Default").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"  # started here, so ended here
    assert mlflow.active_run() is None

    logged = [e for e in _log(output) if "eval" not in e]
    assert [e["step"] for e in logged] == [1, 2]
    for name in ("loss", "learning_rate", "sequences_per_second"):
        steps, values = zip(*_history(store, run.info.run_id, f"train/{name}"))
        assert list(steps) == [1, 2]
        assert values == pytest.approx([e[name] for e in logged], rel=1e-6)

    # The final evaluation, under eval_results.json's names at its global step (what an Azure ML
    # sweep's primary_metric reads), after the evaluation during training at step 1.
    results = _json(output / "eval_results.json")
    assert results["global_step"] == 2
    during = next(e["eval"] for e in _log(output) if "eval" in e)
    for name in ("accuracy", "f1"):
        assert _history(store, run.info.run_id, name) == [
            (1, pytest.approx(during[name])),
            (2, pytest.approx(results[name])),
        ]
    assert "global_step" not in run.data.metrics

    params = run.data.params
    assert json.loads(params["task"]) == "MRPC"
    assert json.loads(params["num_train_steps"]) == 2
    assert json.loads(params["output_dir"]) == str(output)


def test_the_run_that_mlflow_run_id_names_is_logged_into_and_left_running(
    model_files, tmp_path, store, monkeypatch
):
    """As in an Azure ML job, whose run exists before the command starts: no new run, and the
    run's end is its owner's."""
    import run_classifier

    experiment = store.create_experiment("sweep")
    existing = store.create_run(experiment).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", existing)
    output = tmp_path / "run"
    _ok(run_classifier.main, _mrpc(model_files, output))

    assert [r.info.run_id for r in store.search_runs([experiment])] == [existing]
    default = store.get_experiment_by_name("Default")
    assert default is None or store.search_runs([default.experiment_id]) == []
    run = store.get_run(existing)
    assert run.info.status == "RUNNING"
    assert run.data.metrics["f1"] == pytest.approx(_json(output / "eval_results.json")["f1"])
    assert [step for step, _ in _history(store, existing, "train/loss")] == [1, 2]


@pytest.mark.process
@pytest.mark.slow  # a process of its own: TensorFlow's import and a run, about 20 s
def test_without_the_variable_mlflow_is_not_imported(model_files, tmp_path):
    code = (
        "import sys, run_classifier\n"
        f"status = run_classifier.main({_mrpc(model_files, tmp_path / 'run')!r})\n"
        "print('mlflow imported:', any(m.split('.')[0] == 'mlflow' for m in sys.modules))\n"
        "sys.exit(status)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(env, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mlflow imported: False" in done.stdout
    assert (tmp_path / "run" / "eval_results.json").exists()
    assert not (tmp_path / "mlruns").exists() and not os.path.exists(os.path.join(ROOT, "mlruns"))


def test_the_variable_without_mlflow_installed_stops_with_one_sentence(monkeypatch):
    from common.errors import UserError
    from training.tracking import MlflowTarget

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    with pytest.raises(UserError) as raised:
        MlflowTarget.from_environ({"MLFLOW_TRACKING_URI": "http://localhost:5000"})
    assert "MLFLOW_TRACKING_URI" in str(raised.value) and "mlflow-skinny" in str(raised.value)
    assert MlflowTarget.from_environ({}) is None


@pytest.mark.process
def test_a_tracking_server_lost_mid_run_is_said_once_and_training_goes_on(
    model_files, tmp_path, store, capsys
):
    """The store's directory vanishes after the run opens: one warning, the local logs complete."""
    import shutil

    import run_classifier
    from training import tracking

    opened = tracking.open_tracker

    def open_then_lose(target, stream):
        tracker = opened(target, stream)
        shutil.rmtree(tmp_path / "mlruns")
        (tmp_path / "mlruns").write_text("not a directory")  # every later write fails
        return tracker

    output = tmp_path / "run"
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracking, "open_tracker", open_then_lose)
        _ok(run_classifier.main, _mrpc(model_files, output))
    out = capsys.readouterr().out
    assert out.count("MLflow tracking stopped") == 1
    assert [e["step"] for e in _log(output) if "eval" not in e] == [1, 2]
    assert _json(output / "eval_results.json")["global_step"] == 2


@pytest.mark.process
@pytest.mark.slow  # a pretraining run with its evaluation, about 20 s
def test_a_pretraining_logs_its_training_metrics_and_its_final_evaluation_once(tmp_path, store):
    """Pretraining's evaluation after training reaches MLflow once, at the final step, under
    eval_results.json's names (Google's masked_lm_accuracy, ...)."""
    import run_pretraining
    from tools import tiny_pretraining as tiny

    output = tmp_path / "run"
    paths = tiny.setup(tmp_path / "data", files=1, per_file=16, eval_per_file=8)
    _ok(run_pretraining.main, tiny.flags(paths, output, use_xla="false", do_eval="true"))
    (run,) = store.search_runs([store.get_experiment_by_name("Default").experiment_id])
    logged = _log(output)
    assert [step for step, _ in _history(store, run.info.run_id, "train/mlm_accuracy")] == [1, 2, 3, 4]
    assert [v for _, v in _history(store, run.info.run_id, "train/loss")] == pytest.approx(
        [e["loss"] for e in logged], rel=1e-6
    )
    results = _json(output / "eval_results.json")
    for name in ("masked_lm_accuracy", "masked_lm_loss"):
        assert _history(store, run.info.run_id, name) == [(4, pytest.approx(results[name]))]
