"""Fine-tuning search across machines (run_tune.py, scripts/run_tune.sh) on a real PostgreSQL
server (tests/postgres_server.py: started on 127.0.0.1 in a temporary directory, stopped after),
with real worker processes, each in an output directory of its own as on its own machine:

- three workers finish exactly n_trials between them, no trial number twice, a worker's pruner cuts
  a trial on other workers' values, and every worker's table and best trial equal what Optuna reads
  from the database; the same through scripts/run_tune.sh, with optuna-dashboard (started by
  `run_tune.sh -- --dashboard`) serving the study's trials live over its HTTP API;
- kill -9 of one of three workers mid-trial: its trial is failed by heartbeat and re-queued with
  its parameters, the others run it and finish; all workers killed, then started again: the study
  resumes without re-running a finished trial;
- the database going away mid-study stops the worker with one sentence naming the storage (no
  password), and every finished trial is still there when the database is back.
"""

import json
import os
import signal
import statistics
import sys
import time
import urllib.error

import optuna
import pytest

import postgres_server
import run_tune
from conftest import LAUNCH_ENV, ROOT, logged_steps, worker_env
from tuning import search
from tuning_workers import (
    BAD,
    GOOD,
    console,
    get_json,
    read_table,
    start,
    start_worker,
    started_trial,
    stop_all,
    stop_group,
    trials_that_ran,
    tune_argv,
    wait_ok,
)

pytestmark = pytest.mark.process

HEARTBEAT = 2  # seconds: a killed worker's trial is failed 6 s after its last beat


@pytest.fixture(scope="module")
def bin_dir():
    found = postgres_server.install()
    if found is None:  # CI runs as root and installs it; only a user without root gets here
        pytest.skip("PostgreSQL is not installed and only root can apt-get it (apt-get install postgresql).")
    return found


@pytest.fixture(scope="module")
def postgres(bin_dir):
    server = postgres_server.PostgresServer(bin_dir)
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def task(word_order_task):
    return word_order_task


@pytest.fixture(autouse=True)
def _no_leftover_workers():
    yield
    stop_all()


_STORAGES = {}  # one storage (one connection pool) per server: polling must not open a pool a call


def _study(postgres, name):
    url = postgres.url()
    if url not in _STORAGES:
        _STORAGES[url] = optuna.storages.RDBStorage(url)
    return optuna.load_study(study_name=name, storage=_STORAGES[url])


def _trials(postgres, name):
    """The study's trials so far ([] before a worker created it)."""
    try:
        return _study(postgres, name).trials
    except KeyError:
        return []


def _short_trials(task, out, postgres, name, **values):
    """run_tune.py's flags for 100-update trials scored at 50 and 100, no pruning."""
    values = {
        "storage": postgres.url(),
        "study_name": name,
        "n_trials": 3,
        "learning_rate_range": "5e-4,2e-3",
        "num_train_epochs": 2,
        "eval_every_n_steps": 50,
        "pruner": "none",
        "heartbeat_seconds": HEARTBEAT,
        **values,
    }
    return tune_argv(task, out, **values)


def _assert_one_run_each(study):
    """Every trial that ran has its own directory, written by one fine-tuning run. A trial whose
    worker was killed right after creating it has none (it ran nothing) and was failed."""
    started = [t for t in trials_that_ran(study.trials) if "output_dir" in t.user_attrs]
    assert all(t.state.name == "FAIL" for t in trials_that_ran(study.trials) if t not in started)
    dirs = [t.user_attrs["output_dir"] for t in started]
    assert len(set(dirs)) == len(dirs)
    for trial in started:
        name = os.path.basename(trial.user_attrs["output_dir"])
        assert name == f"trial_{trial.number:03d}"
        if trial.state.name == "COMPLETE":
            with open(os.path.join(trial.user_attrs["output_dir"], "train.log")) as f:
                assert f.read().count("Resolved fine-tuning settings") == 1


def _assert_tables_match_the_database(out_dirs, study):
    """Each worker's trials.tsv and best_trial.json hold what Optuna's API reads from the DB."""
    expected = []
    for t in trials_that_ran(study.trials):
        last = t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
        expected.append((t.number, t.state.name.lower(), t.value if t.value is not None else last))
    best = study.best_trial
    for out in out_dirs:
        rows = read_table(os.path.join(out, "trials.tsv"))
        got = [(int(r["trial"]), r["state"], float(r["accuracy"]) if r["accuracy"] else None) for r in rows]
        assert got == expected, out
        written = json.load(open(os.path.join(out, "best_trial.json")))
        assert (written["trial"], written["value"]) == (best.number, best.value)
        assert written["output_dir"] == best.user_attrs["output_dir"]


@pytest.mark.slow
def test_three_workers_share_one_study_and_prune_on_each_others_values(task, postgres, tmp_path):
    # Workers a and b fine-tune at the learning rate the task learns with, c at one it never
    # learns with. c starts once a and b have completed the 2 trials the pruner waits for, so each
    # of c's trials is prunable from its start, and only against a's and b's values (had c started
    # with them, its first trial could be one of those 2, complete, and its only one).
    name, n_trials = "three_workers", 6
    machines = [tmp_path / m for m in ("a", "b", "c")]
    workers = {}
    for out, rate in zip(machines, (GOOD, GOOD, BAD)):
        if out.name == "c":
            deadline = time.monotonic() + 300
            while sum(t.state.name == "COMPLETE" for t in _trials(postgres, name)) < 2:
                assert all(w.poll() is None for w in workers.values()), "a worker ended early"
                assert time.monotonic() < deadline, "a and b never completed 2 trials"
                time.sleep(0.5)
        argv = tune_argv(
            task,
            out,
            storage=postgres.url(),
            study_name=name,
            n_trials=n_trials,
            learning_rate=rate,
            pruner="median",
            pruner_startup_trials=2,
            heartbeat_seconds=HEARTBEAT,
        )
        workers[tmp_path / f"{out.name}.log"] = start_worker(argv, tmp_path / f"{out.name}.log")
    wait_ok(workers)

    study = _study(postgres, name)
    ran = trials_that_ran(study.trials)
    assert sorted(t.number for t in ran) == sorted({t.number for t in ran})  # no number twice
    assert [t.state.name for t in ran].count("FAIL") == 0
    assert len(ran) == n_trials  # exactly the requested number, every worker's counted
    _assert_one_run_each(study)
    by_machine = {m.name: [t for t in ran if t.user_attrs["output_dir"].startswith(str(m))] for m in machines}
    assert all(by_machine.values()), {k: len(v) for k, v in by_machine.items()}  # each worker ran trials

    pruned = [t for t in by_machine["c"] if t.state.name == "PRUNED"]
    assert pruned, [(t.number, t.state.name, t.value) for t in by_machine["c"]]
    for trial in pruned:
        step = max(trial.intermediate_values)
        # The median pruner's decision, recomputed from the trials complete when it was taken.
        before = [
            t for t in ran if t.state.name == "COMPLETE" and t.datetime_complete < trial.datetime_complete
        ]
        own = [t for t in before if t in by_machine["c"]]
        assert len(own) < 2 <= len(before)  # it could only see the others' trials
        others = [t.intermediate_values[step] for t in before if step in t.intermediate_values]
        assert trial.intermediate_values[step] < statistics.median(others)
    for trial in by_machine["a"] + by_machine["b"]:
        assert trial.state.name == "COMPLETE" and trial.value >= 0.9
    _assert_tables_match_the_database([str(m) for m in machines], study)


def _launcher_env(task, root, results):
    """scripts/run_tune.sh's environment: the word-order task as GLUE_DIR's SST-2 and a tiny
    random-init BERT saved in Google's layout as BERT_DIR."""
    from bert.checkpoints import save_google
    from bert.encoder import BertEncoder

    bert_dir = root / "bert"
    if not bert_dir.exists():
        save_google(BertEncoder(task["config"]), str(bert_dir), vocab_file=task["vocab_file"])
    env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    return {
        **env,
        "BERT_PYTHON": sys.executable,
        "GLUE_DIR": task["data_dir"],
        "BERT_DIR": str(bert_dir),
        "RESULTS_DIR": str(results),
    }


def _run_tune_sh(task, tmp_path, machine, *flags):
    command = ["bash", os.path.join(ROOT, "scripts", "run_tune.sh"), "SST-2", "3", "1", "tiny", "fp32"]
    command += ["false", "32", "--", *flags]
    # The password in the environment, not in the URL: the launcher prints its command line (and
    # ps shows it to every user), as docs/tuning.md ("Tuning across machines") advises.
    env = {**_launcher_env(task, tmp_path, tmp_path / machine), "PGPASSWORD": postgres_server.PASSWORD}
    return start(command, tmp_path / f"{machine}.log", env)


@pytest.mark.slow
def test_run_tune_sh_workers_on_one_study_while_the_dashboard_serves_it(task, postgres, tmp_path):
    name, url = "launcher_workers", postgres.url(password=None)
    port = postgres_server.free_port()
    dashboard = _run_tune_sh(
        task, tmp_path, "dashboard", f"--storage={url}", "--dashboard", f"--dashboard_port={port}"
    )
    api = f"http://127.0.0.1:{port}/api/studies"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                assert get_json(api)["study_summaries"] is not None
                break
            except (urllib.error.URLError, ConnectionError):
                assert dashboard.poll() is None and time.monotonic() < deadline, console(
                    tmp_path / "dashboard.log"
                )
                time.sleep(0.3)
        shown = console(tmp_path / "dashboard.log")
        assert f"optuna-dashboard on postgresql+psycopg://bert@127.0.0.1:{postgres.port}/optuna:" in shown
        assert postgres_server.PASSWORD not in shown

        flags = [f"--storage={url}", f"--study_name={name}", "--learning_rate=1e-3"]
        flags += ["--num_train_epochs=2", "--eval_every_n_steps=25", "--pruner=none"]
        flags += [
            f"--heartbeat_seconds={HEARTBEAT}",
            "--predict_batch_size=100",
            "--save_checkpoints_steps=100",
        ]
        machines = ("m1", "m2", "m3")
        workers = {tmp_path / f"{m}.log": _run_tune_sh(task, tmp_path, m, *flags) for m in machines}
        # While they run, the dashboard shows running trials and their dev metric as reported.
        live = set()
        while any(w.poll() is None for w in workers.values()):
            studies = {s["study_name"]: s["study_id"] for s in get_json(api)["study_summaries"]}
            if name in studies:
                for trial in get_json(f"{api}/{studies[name]}")["trials"]:
                    if trial["state"] == "Running" and trial["intermediate_values"]:
                        live.add(trial["number"])
            time.sleep(0.5)
        wait_ok(workers, timeout_s=10)
        assert live, "the dashboard never showed a running trial's dev metric"

        study = _study(postgres, name)
        time.sleep(2.5)  # the dashboard caches a study's trials for 2 s
        served = get_json(f"{api}/{study._study_id}")["trials"]
        assert [(t["number"], t["state"], t.get("values")) for t in served] == [
            (t.number, t.state.name.capitalize(), t.values) for t in study.trials
        ]
        assert [{v["step"]: v["value"] for v in t["intermediate_values"]} for t in served] == [
            t.intermediate_values for t in study.trials
        ]
    finally:
        stop_group(dashboard, signal.SIGTERM)
    ran = trials_that_ran(study.trials)
    assert [t.state.name for t in ran] == ["COMPLETE"] * 3 and len({t.number for t in ran}) == 3
    assert live <= {t.number for t in ran}
    _assert_one_run_each(study)
    outs = [str(tmp_path / m / "tune_SST-2_tiny") for m in machines]
    _assert_tables_match_the_database(outs, study)
    for m, out in zip(machines, outs):
        assert f"== run_tune.sh: study in {out} (trials.tsv, best_trial.json, plots) ==" in console(
            tmp_path / f"{m}.log"
        )


def _kill_mid_trial(log_path, worker, out, after=()):
    """Waits until the worker's next trial has trained some updates, then kill -9 (no clean-up;
    its fine-tuning process dies with it); returns the trial's number."""
    number = started_trial(log_path, worker, after=after)
    log = out / f"trial_{number:03d}" / "log.jsonl"
    deadline = time.monotonic() + 180
    while not logged_steps(log):
        assert worker.poll() is None and time.monotonic() < deadline, console(log_path)[-3000:]
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    return number


def _assert_retried(study, failed: list[int], may_wait: bool = False):
    """Each failed trial was re-queued once with its parameters, and the copy completed (or, with
    `may_wait`, still waits: the study had its trials before the copy's turn came)."""
    for number in failed:
        trial = study.trials[number]
        assert trial.state.name == "FAIL"
        copies = [t for t in study.trials if t.system_attrs.get("failed_trial") == number]
        assert len(copies) == 1, [t.system_attrs for t in study.trials]
        # A worker killed right after creating its trial leaves one that drew no parameters (and
        # never beat): its copy draws its own when it runs. Any other copy runs with the same.
        if trial.params:
            assert copies[0].params == trial.params
        assert copies[0].state.name in (("COMPLETE", "WAITING") if may_wait else ("COMPLETE",))


@pytest.mark.slow
def test_a_killed_workers_trial_is_failed_by_heartbeat_and_rerun_by_the_others(task, postgres, tmp_path):
    name = "killed_worker"
    machines = [tmp_path / m for m in ("a", "b", "c")]
    workers = {
        tmp_path / f"{m.name}.log": start_worker(
            _short_trials(task, m, postgres, name), tmp_path / f"{m.name}.log"
        )
        for m in machines
    }
    logs = list(workers)
    killed = _kill_mid_trial(logs[2], workers.pop(logs[2]), machines[2])
    wait_ok(workers)

    study = _study(postgres, name)
    ran = trials_that_ran(study.trials)
    assert [t.state.name for t in ran].count("COMPLETE") == 3  # still what was asked
    assert len(ran) == 4 and [t.number for t in ran if t.state.name == "FAIL"] == [killed]
    _assert_retried(study, [killed])
    retry = next(t for t in ran if t.system_attrs.get("failed_trial") == killed)
    assert not retry.user_attrs["output_dir"].startswith(str(machines[2]))  # run by a survivor
    said = [console(log) for log in logs[:2]]
    assert sum(f"(trial {killed} again: its worker died)" in text for text in said) == 1, said
    _assert_one_run_each(study)


@pytest.mark.slow
def test_all_workers_killed_then_restarted_resume_the_study(task, postgres, tmp_path):
    name = "all_killed"
    machines = [tmp_path / m for m in ("a", "b")]
    # 6 trials of about 7 s each on an idle machine: with 4, both workers could finish before the
    # poll below caught one inside a trial with a step logged.
    argvs = [_short_trials(task, m, postgres, name, n_trials=6) for m in machines]
    logs = [tmp_path / f"{m.name}.log" for m in machines]
    workers = [start_worker(argv, log) for argv, log in zip(argvs, logs)]
    # Kill both once one trial is complete and a worker is inside another one with a step logged.
    # Both inside a trial at once is not waited for: each trial's process starts TensorFlow before
    # its first step, and under load the two workers' stepping phases need not overlap at all.
    deadline = time.monotonic() + 300
    while True:
        ended = [(log.name, w.returncode) for log, w in zip(logs, workers) if w.poll() is not None]
        assert not ended and time.monotonic() < deadline, (ended, [console(log)[-3000:] for log in logs])
        trials = _trials(postgres, name)
        running = [t for t in trials if t.state.name == "RUNNING"]
        complete = [t for t in trials if t.state.name == "COMPLETE"]
        stepping = [
            t for t in running if logged_steps(os.path.join(t.user_attrs.get("output_dir", "/"), "log.jsonl"))
        ]
        if complete and stepping:
            break
        time.sleep(0.2)
    for worker in workers:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    before = {t.number: t for t in _study(postgres, name).trials if t.state.name == "COMPLETE"}
    killed = [t.number for t in _study(postgres, name).trials if t.state.name == "RUNNING"]
    # Under load another trial may finish between the poll and the kill: up to two still run.
    assert 1 <= len(before) <= 4 and len(killed) <= 2

    restarted = {
        log.with_suffix(".again"): start_worker(argv, log.with_suffix(".again"))
        for argv, log in zip(argvs, logs)
    }
    wait_ok(restarted)

    study = _study(postgres, name)
    # A restarted worker may start a new trial before the killed ones are found stale; a copy of
    # one queued after the study had its 6 trials then waits, unrun (trials_that_ran leaves it out).
    ran = trials_that_ran(study.trials)
    assert [t.state.name for t in ran].count("COMPLETE") == 6 and len(ran) == 6 + len(killed), [
        (t.number, t.state.name) for t in study.trials
    ]
    for number, trial in before.items():  # finished work kept, not run again
        again = study.trials[number]
        assert (again.state, again.value, again.datetime_complete) == (
            trial.state,
            trial.value,
            trial.datetime_complete,
        )
    _assert_retried(study, killed, may_wait=True)
    _assert_one_run_each(study)


@pytest.mark.slow
def test_a_database_gone_mid_study_stops_the_worker_with_one_sentence_and_keeps_finished_trials(
    task, bin_dir, tmp_path
):
    server = postgres_server.PostgresServer(bin_dir)  # its own: this test crashes it
    server.start()
    try:
        name, out, log = "outage", tmp_path / "a", tmp_path / "a.log"
        argv = _short_trials(task, out, server, name, n_trials=2, eval_every_n_steps=25)
        worker = start_worker(argv, log)
        second = started_trial(log, worker, timeout_s=300, after=(0,))
        trial_log = out / f"trial_{second:03d}" / "log.jsonl"
        deadline = time.monotonic() + 180
        while not logged_steps(trial_log):
            assert worker.poll() is None and time.monotonic() < deadline, console(log)
            time.sleep(0.05)
        server.stop(crash=True)  # SIGQUIT: the server exits at once, as in a crash
        assert worker.wait(timeout=60) == 2, console(log)[-3000:]
        lines = [line for line in console(log).splitlines() if line.strip()]
        assert lines[-1].startswith(
            f"run_tune: error: Lost the study storage postgresql+psycopg://bert:***@127.0.0.1:{server.port}/optuna ("
        ), lines[-1]
        assert lines[-1].endswith("run the same command again when it answers, and the study continues.")
        assert "Error)" not in lines[-1]  # the driver's reason, not its class names
        assert "Traceback" not in console(log) and postgres_server.PASSWORD not in console(log)
        steps = logged_steps(trial_log)
        time.sleep(2)
        assert logged_steps(trial_log) == steps  # the trial's fine-tuning stopped with its worker

        server.start()
        study = _study(server, name)
        assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]
        first = study.trials[0]
        results = json.load(open(os.path.join(first.user_attrs["output_dir"], "eval_results.json")))
        assert first.value == results["accuracy"]

        # Re-running the command from here resumes as after all workers died (the test above):
        # the RUNNING trial is failed by heartbeat and re-queued.
    finally:
        server.close()


# --- quick checks against the real server ---------------------------------------------------


def test_a_wrong_password_is_one_sentence_without_it(task, postgres, tmp_path, capsys):
    url = postgres.url(password="not-the-password")
    assert run_tune.main(tune_argv(task, tmp_path / "study", storage=url)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"run_tune: error: Cannot open the study storage postgresql+psycopg://bert:***@127.0.0.1:{postgres.port}/"
    )
    assert "password authentication failed" in err and "\n" not in err and "not-the-password" not in err
    assert "Error)" not in err


def test_a_bare_postgresql_url_uses_the_installed_driver(postgres):
    # SQLAlchemy's postgresql:// means psycopg2, which requirements.txt does not install.
    url = postgres.url().replace("postgresql+psycopg://", "postgresql://")
    storage = search.open_storage(url, heartbeat_seconds=60)
    study = optuna.create_study(study_name="bare_url", storage=storage)
    assert optuna.load_study(study_name="bare_url", storage=postgres.url())._study_id == study._study_id


def test_the_dashboard_refuses_a_port_in_use_and_needs_a_storage(postgres, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["--dashboard", f"--storage={postgres.url()}", f"--dashboard_port={port}"]
        assert run_tune.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"run_tune: error: --dashboard_port {port} on 127.0.0.1 cannot be served: Address already in use."
    )
    assert run_tune.main(["--dashboard"]) == 2
    assert "--dashboard needs --storage or --output_dir" in capsys.readouterr().err
