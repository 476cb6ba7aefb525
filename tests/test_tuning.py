"""Fine-tuning hyperparameter search (run_tune.py, tuning/search.py) on Optuna, with real
trials: each is a run_classifier.py process fine-tuning a tiny BERT from random init on the
word-order task (tests/word_order.py), which a learning rate of 1e-3 learns within 150 updates
(bias-corrected AdamW, epsilon 1e-8, the decay from the end of warmup: dev accuracy 0.97-1.0 at
200 for each of 7 seeds tried) and 1e-7 never does (0.5).

- a 6-trial study: the median pruner cuts the failing learning rate's trials, the table, the
  best trial (with its checkpoint) and both plots are written, and what Optuna recorded equals
  what the trials logged; re-running the finished study runs nothing;
- two workers sharing one SQLite study run exactly n_trials trials between them; a worker killed
  mid-trial and re-run leaves its trial marked failed and the study complete;
- bad input (empty or inverted range, unknown task or metric, unreachable storage, a bad space
  file) is one sentence and exit status 2 before any trial starts.
"""

import dataclasses
import json
import os
import signal
import sqlite3
import sys
import time

import optuna
import pytest
import tensorflow as tf

import run_tune
from conftest import ROOT, logged_steps
from launch.workers import trial_prefix
from tuning import report as tuning_report
from tuning import search, search_space
from tuning_workers import (
    BAD,
    GOOD,
    UPDATES,
    console,
    read_table,
    start_worker,
    started_trial,
    trials_that_ran,
    tune_argv,
)
from word_order import write_model_files


@pytest.fixture(scope="module")
def task(word_order_task):
    return word_order_task


_argv = tune_argv


def _rows(output_dir):
    return read_table(os.path.join(output_dir, "trials.tsv"))


def _study(output_dir, name=None):
    return optuna.load_study(
        study_name=name or os.path.basename(output_dir), storage=f"sqlite:///{output_dir}/study.db"
    )


def _evals(trial_dir):
    """{step: dev accuracy} from a trial's log.jsonl eval lines."""
    with open(os.path.join(trial_dir, "log.jsonl"), encoding="utf-8") as f:
        entries = [json.loads(line) for line in f]
    return {e["step"]: e["eval"]["accuracy"] for e in entries if "eval" in e}


@pytest.mark.process
@pytest.mark.slow
def test_six_trials_prune_the_failing_learning_rate_and_report(task, tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(f"learning_rate: [{GOOD}, {BAD}]\n", encoding="utf-8")
    out = tmp_path / "study"
    # Sampler seed 6 draws good, good, bad, good, bad, bad (checked below); pruning starts
    # after two complete trials, whose median at update 75 is 1.0.
    argv = _argv(
        task,
        out,
        search_space=space,
        n_trials=6,
        sampler_seed=6,
        pruner="median",
        pruner_startup_trials=2,
    )
    assert run_tune.main(argv) == 0
    printed = capsys.readouterr().out

    rows = _rows(out)
    assert [int(r["trial"]) for r in rows] == list(range(6))
    drawn = [float(r["learning_rate"]) for r in rows]
    assert drawn == [GOOD, GOOD, BAD, GOOD, BAD, BAD]
    for row in rows:
        if float(row["learning_rate"]) == GOOD:
            assert row["state"] == "complete" and float(row["accuracy"]) >= 0.9
            assert int(row["last_step"]) == UPDATES
        else:
            # Cut at its first evaluation below the median (update 75 or 100), long before 200.
            assert row["state"] == "pruned", row
            assert float(row["accuracy"]) == pytest.approx(0.5, abs=0.06)
            assert int(row["last_step"]) < UPDATES
    assert sum(r["state"] == "pruned" for r in rows) == 3

    # What Optuna holds is what each trial's fine-tuning logged.
    study = _study(str(out))
    for trial in study.trials:
        logged = _evals(trial.user_attrs["output_dir"])
        reported = dict(trial.intermediate_values)
        if trial.state == optuna.trial.TrialState.COMPLETE:
            final = json.load(open(os.path.join(trial.user_attrs["output_dir"], "eval_results.json")))
            assert trial.value == final["accuracy"] and reported.pop(UPDATES) == final["accuracy"]
        assert reported == {step: logged[step] for step in reported}
        assert sorted(reported) == sorted(logged)[: len(reported)]

    best = json.load(open(out / "best_trial.json"))
    assert best["params"]["learning_rate"] == GOOD and best["value"] >= 0.9
    assert best["checkpoint"] == tf.train.latest_checkpoint(best["output_dir"])
    assert best["checkpoint"].endswith(f"ckpt-{UPDATES}")
    assert f"Best: trial {best['trial']}  accuracy {best['value']:.4f}" in printed

    for stem in tuning_report.PLOTS:
        with open(out / f"{stem}.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        page = (out / f"{stem}.html").read_text(encoding="utf-8")
        assert 'src="plotly.min.js"' in page and "trial 2" in page
    assert (out / "plotly.min.js").stat().st_size > 1_000_000  # the pages open offline
    assert "(pruned)" in (out / "dev_metric_by_step.html").read_text(encoding="utf-8")

    # The same command on the finished study: no new trial, the same table.
    assert run_tune.main(argv) == 0
    assert len(_study(str(out)).trials) == 6
    assert "6/6" not in capsys.readouterr().out  # nothing ran


def _worker(task, out, log_path, **values):
    values = {
        "n_trials": 3,
        "learning_rate": GOOD,
        "num_train_epochs": 2,
        "eval_every_n_steps": 50,
        "pruner": "none",
        "heartbeat_seconds": 2,
        **values,
    }
    argv = _argv(task, out, **values)
    return start_worker(argv, log_path)


@pytest.mark.process
def test_a_trial_whose_worker_died_before_its_first_heartbeat_is_failed_and_run_again(task, tmp_path):
    """A worker killed between creating its trial and the trial's first heartbeat (the moment
    after its previous trial ended) leaves a running trial that Optuna never finds stale: each
    worker gives such a trial one heartbeat, so it goes stale, is marked failed and re-queued."""
    out = tmp_path / "study"
    first = _worker(task, out, tmp_path / "first.log", n_trials=1)
    assert first.wait(timeout=600) == 0, console(tmp_path / "first.log")
    _study(str(out)).ask()  # what the killed worker left: trial 1 running, never a heartbeat
    again = _worker(task, out, tmp_path / "again.log", n_trials=2)
    assert again.wait(timeout=600) == 0, console(tmp_path / "again.log")
    states = {t.number: t.state.name for t in _study(str(out)).trials}
    assert states == {0: "COMPLETE", 1: "FAIL", 2: "COMPLETE"}, states


@pytest.mark.process
@pytest.mark.slow
def test_two_workers_share_one_sqlite_study_and_a_killed_workers_trial_is_failed(task, tmp_path):
    out = tmp_path / "study"
    a = _worker(task, out, tmp_path / "a.log")
    b = _worker(task, out, tmp_path / "b.log")
    # Kill worker b (SIGKILL: no clean-up) once its trial has trained some updates.
    killed = started_trial(tmp_path / "b.log", b)
    trial_dir = out / f"trial_{killed:03d}"
    deadline = time.monotonic() + 180
    while not logged_steps(trial_dir / "log.jsonl"):
        assert b.poll() is None and time.monotonic() < deadline, console(tmp_path / "b.log")
        time.sleep(0.05)
    b.send_signal(signal.SIGKILL)
    b.wait()
    # Its fine-tuning process dies with it (no orphan writes into the trial directory).
    time.sleep(2)
    steps = logged_steps(trial_dir / "log.jsonl")
    time.sleep(3)
    assert logged_steps(trial_dir / "log.jsonl") == steps

    b = _worker(task, out, tmp_path / "b2.log")  # the same command again
    for worker, log in ((a, "a.log"), (b, "b2.log")):
        assert worker.wait(timeout=600) == 0, console(tmp_path / log)

    study = _study(str(out))
    # Trials that never ran, as the schedule has it (tuning/search.py): a surplus one (a worker drew
    # it as the other started the last one needed: failed, nothing run) and the killed trial's
    # re-queued copy when the study had its n_trials before a worker took it up (left waiting).
    surplus = [t for t in study.trials if t.user_attrs.get("surplus")]
    assert all(t.state.name == "FAIL" for t in surplus), surplus
    waiting = [t for t in study.trials if t.state.name == "WAITING"]
    assert all(t.system_attrs.get("failed_trial") == killed for t in waiting), waiting
    ran = trials_that_ran(study.trials)
    states = {t.number: t.state.name for t in ran}
    assert states[killed] == "FAIL"
    finished = [n for n, state in states.items() if state == "COMPLETE"]
    assert len(finished) == 3 and len(states) == 4  # exactly n_trials ran to the end, plus the killed one
    # No trial ran twice: one directory per trial, each with one run's log.
    assert sorted(os.listdir(out)) == sorted(
        [f"trial_{n:03d}" for n in states]
        + ["study.db", "trials.tsv", "best_trial.json", "plotly.min.js"]
        + [f"{stem}.{ext}" for stem in tuning_report.PLOTS for ext in ("png", "html")]
    )
    for number in finished:
        trial_out = out / f"trial_{number:03d}"
        assert logged_steps(trial_out / "log.jsonl") == [25, 50, 50, 75, 100]  # 50: update and eval
        with open(trial_out / "train.log") as f:
            assert f.read().count("Resolved fine-tuning settings") == 1
    # Both workers finished trials.
    hosts_dirs = {t.user_attrs["output_dir"] for t in ran}
    assert len(hosts_dirs) == 4
    with sqlite3.connect(out / "study.db") as db:
        assert db.execute("select count(*) from trials").fetchone()[0] == 4 + len(surplus) + len(waiting)


# --- bad input: one sentence, exit 2, nothing started --------------------------------------


@pytest.fixture(scope="module")
def mrpc_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mrpc_model")
    return write_model_files(str(root), ["the quick brown fox"])


def _error(argv, capsys):
    assert run_tune.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("run_tune: error: ") and "\n" not in err and "Traceback" not in err
    return err


def _mrpc(files, out, **values):
    values = {
        "task_name": "MRPC",
        "data_dir": os.path.join(ROOT, "tests", "fixtures", "glue", "MRPC"),
        "bert_config_file": files["bert_config_file"],
        "vocab_file": files["vocab_file"],
        "output_dir": str(out),
        "max_seq_length": 64,
        **values,
    }
    return [f"--{k}={v}" for k, v in values.items()]


@pytest.mark.parametrize(
    "values, message",
    [
        ({"learning_rate_range": "1e-4,1e-4"}, "--learning_rate_range: learning_rate's range is empty"),
        ({"learning_rate_range": "1e-3,1e-5"}, "learning_rate's range is inverted (low 0.001 > high 1e-05)"),
        ({"learning_rate_range": "0,1e-3"}, "--learning_rate_range: learning_rate must be > 0"),
        ({"train_batch_size_choices": ""}, "--train_batch_size_choices: train_batch_size has an empty list"),
        ({"warmup_proportion_range": "0.1,1.5"}, "warmup_proportion must lie in [0, 1]"),
        ({"task_name": "MRCP"}, "Unknown --task_name 'MRCP'; choose SQuAD or a GLUE task"),
        ({"metric": "bleu"}, "--metric 'bleu' is not one of MRPC's dev metrics: f1, accuracy."),
        ({"storage": "postgresql://bert:secret@127.0.0.1:1/optuna"}, "Cannot open the study storage"),
        ({"timeout": "soon"}, "--timeout must be a duration"),
        ({"data_dir": "/nonexistent/glue"}, "--data_dir /nonexistent/glue is not a directory."),
    ],
)
def test_bad_input_is_one_sentence_before_any_trial(mrpc_files, tmp_path, capsys, values, message):
    out = tmp_path / "study"
    err = _error(_mrpc(mrpc_files, out, **values), capsys)
    assert message in err
    assert "secret" not in err  # a URL's password is not printed
    assert not out.exists() or not [p for p in os.listdir(out) if p.startswith("trial_")]


def test_bad_space_files_name_the_file_and_the_problem(mrpc_files, tmp_path, capsys):
    cases = {
        "unknown.yaml": ("dropout: [0.1]\n", "unknown parameter 'dropout'"),
        "broken.yaml": ("learning_rate: [1e-5,\n", "line "),
        "list.json": ('["learning_rate"]', "must map parameter names to choices or ranges"),
        "shape.yaml": ("learning_rate: {low: 1e-5}\n", "must be a list, a value or {low, high[, log]}"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        err = _error(_mrpc(mrpc_files, tmp_path / "study", search_space=path), capsys)
        assert message in err and name in err, err
    err = _error(_mrpc(mrpc_files, tmp_path / "study", search_space=tmp_path / "missing.yaml"), capsys)
    assert "missing.yaml does not exist" in err


@pytest.mark.process
@pytest.mark.slow
def test_trials_failing_in_a_row_stop_the_worker_with_the_cause(mrpc_files, tmp_path, capsys):
    # The MRPC fixture has 2 training rows: a batch of 4 fails in every trial, after the checks
    # that run before the study (they do not read the features).
    out = tmp_path / "study"
    err = _error(_mrpc(mrpc_files, out, train_batch_size=4, use_xla="false", n_trials=10), capsys)
    assert f"{search.MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: fine-tuning exited" in err
    assert "fewer than --train_batch_size=4" in err and "trial_002/train.log" in err
    assert [t.state.name for t in _study(str(out)).trials] == ["FAIL"] * search.MAX_FAILURES_IN_A_ROW


@pytest.mark.process
def test_a_trial_that_cannot_save_stops_the_worker_at_once_and_is_queued_to_continue(
    mrpc_files, tmp_path, capsys, monkeypatch
):
    # The trial's fine-tuning run is stood in for by a process that fails as a full disk makes
    # run_classifier.py fail: its one sentence, exit status 2.
    failed = (
        "Could not write checkpoint 4 in {d} (no space left on the device: about "
        "1.0 MiB (1048576 bytes) are needed and 4.0 KiB (4096 bytes) are free); the last intact checkpoint "
        "is {d}/ckpt-2: free space there, then re-run the same command to continue from there."
    )

    def trial_command(s, params, trial_dir):
        sentence = failed.format(d=trial_dir)
        line = "run_classifier: error: " + sentence
        return [sys.executable, "-c", f"import sys; print({line!r}, file=sys.stderr); sys.exit(2)"]

    monkeypatch.setattr(search, "trial_command", trial_command)
    out = tmp_path / "study"
    err = _error(_mrpc(mrpc_files, out, n_trials=5, use_xla="false"), capsys)
    trial_dir = out / "trial_000"
    assert err == (
        f"run_tune: error: Trial 0 could not save and is queued again to continue in {trial_dir}: "
        + failed.format(d=trial_dir)
    )
    trials = _study(str(out)).trials
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]  # one trial run, not three
    assert trials[1].user_attrs["resume_dir"] == str(trial_dir)
    assert trials[1].system_attrs["fixed_params"] == trials[0].params  # the same draw, continued


def test_a_study_run_with_another_metric_is_refused(mrpc_files, tmp_path, capsys):
    out = tmp_path / "study"
    settings = search.TuneSettings(
        output_dir=str(out), task_name="MRPC", space=search_space.build_space(None, {})
    )
    os.makedirs(out)
    search.create_study(settings, "f1", search.open_storage(search.storage_url(settings), 60))
    err = _error(_mrpc(mrpc_files, out, metric="accuracy"), capsys)
    assert "was run with metric 'f1', not 'accuracy'" in err


# --- the trial command ----------------------------------------------------------------------


def test_trial_command_passes_the_studys_flags_and_the_trials_parameters(tmp_path):
    settings = search.TuneSettings(
        output_dir=str(tmp_path),
        task_name="squad",
        space={},
        trial_flags=("--train_file=t.json", "--nouse_xla"),
        num_gpus=2,
        trial_prefix=tuple(trial_prefix(2, {}, sys.executable, ["--gloo", "-H", "localhost:2"])),
        eval_every_n_steps=50,
    )
    command = search.trial_command(settings, {"learning_rate": 3e-5, "train_batch_size": 16}, "/o/trial_001")
    bin_dir = os.path.dirname(sys.executable)
    horovodrun = os.path.join(bin_dir, "horovodrun")
    horovodrun = horovodrun if os.access(horovodrun, os.X_OK) else "horovodrun"
    assert command[:7] == [horovodrun, "-np", "2", "--gloo", "-H", "localhost:2", sys.executable]
    assert command[7] == os.path.join(ROOT, "run_squad.py")
    assert command[8:] == [
        "--train_file=t.json",
        "--nouse_xla",
        "--learning_rate=3e-05",
        "--train_batch_size=16",
        "--output_dir=/o/trial_001",
        "--do_train",
        "--do_eval",
        "--nodo_predict",
        "--eval_every_n_steps=50",
    ]
    one = dataclasses.replace(
        settings, num_gpus=1, trial_prefix=tuple(trial_prefix(1, {}, sys.executable, []))
    )
    one = search.trial_command(one, {}, "/o/trial_002")
    assert one[:2] == [sys.executable, os.path.join(ROOT, "run_squad.py")]
    prefix = trial_prefix(2, {"HOROVOD_LAUNCHER": "mpirun"}, sys.executable, ["--gloo"])
    mpirun = search.trial_command(
        dataclasses.replace(settings, trial_prefix=tuple(prefix)), {}, "/o/trial_003"
    )
    assert os.path.basename(mpirun[0]) == "mpirun" and "-np" in mpirun and "--gloo" in mpirun


@pytest.mark.process
@pytest.mark.slow
def test_a_preempted_worker_checkpoints_its_trial_and_the_rerun_continues_it_there(task, tmp_path):
    from common.errors import PREEMPTED_EXIT_STATUS

    out = tmp_path / "study"
    # 10 epochs (500 updates): the trial must still be training when the notice reaches it (the
    # tuner passes it on at its next poll, up to a second later; 100 updates can end before that).
    worker = _worker(task, out, tmp_path / "a.log", n_trials=1, num_train_epochs=10)
    (first,) = [started_trial(tmp_path / "a.log", worker)]
    trial_dir = out / f"trial_{first:03d}"
    deadline = time.monotonic() + 180
    while not logged_steps(trial_dir / "log.jsonl"):
        assert worker.poll() is None and time.monotonic() < deadline, console(tmp_path / "a.log")
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)  # to the tuner alone: it passes the notice to its trial
    assert worker.wait(timeout=300) == PREEMPTED_EXIT_STATUS, console(tmp_path / "a.log")
    printed = console(tmp_path / "a.log")
    assert f"trial {first}: stopping for a preemption notice (SIGTERM)" in printed
    assert f"trial {first} left a checkpoint in {trial_dir} and is queued again" in printed
    latest = tf.train.latest_checkpoint(str(trial_dir))
    stopped_at = int(latest.rsplit("-", 1)[1])
    assert max(logged_steps(trial_dir / "log.jsonl")) <= stopped_at < 500

    again = _worker(task, out, tmp_path / "b.log", n_trials=1, num_train_epochs=10)  # the same command
    assert again.wait(timeout=600) == 0, console(tmp_path / "b.log")
    study = _study(str(out))
    states = {t.number: t.state.name for t in study.trials}
    assert states == {first: "FAIL", first + 1: "COMPLETE"}  # the preempted trial, then its continuation
    done = next(t for t in study.trials if t.number == first + 1)
    assert done.user_attrs["output_dir"] == str(trial_dir) and done.params == study.trials[first].params
    with open(trial_dir / "train.log") as f:
        assert f"Resuming from {trial_dir}/ckpt-{stopped_at} (step {stopped_at} of 500)." in f.read()
    assert max(logged_steps(trial_dir / "log.jsonl")) == 500  # 1600 rows / batch 32 x 10 epochs
