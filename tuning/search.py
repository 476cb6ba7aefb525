"""Fine-tuning hyperparameter search on Optuna: a search space and a task in; trials (each a
complete fine-tuning run in its own directory), a results table, the best trial and plots out.

run_tune.py turns its flags into `TuneSettings` and calls `run`. Each trial is one run of
run_classifier.py or run_squad.py in a child process (launched through horovodrun when a trial
uses several GPUs), with the trial's parameters as flags and --eval_every_n_steps: the dev
metric it logs while training (log.jsonl's "eval" lines) is reported to Optuna as the trial's
intermediate values, and the pruner stops a trial whose metric lags (the child is terminated).
The trial's value is the official metric of its final dev evaluation (eval_results.json).

The study lives in Optuna's storage: an SQLite file in the output directory by default, or a
database URL (PostgreSQL, MySQL) that several workers (processes, machines) share. Each worker
runs trials until `n_trials` of them have ended complete or pruned, counting every worker's; a
trial whose worker died (its heartbeat stops) is marked failed and re-queued with the same
parameters (`trial_retries` times at most), and any worker runs it again. Re-running the command
continues the study; a storage lost mid-study stops the worker with one sentence, and what the
database committed (every finished trial) stays there. A preemption notice to the worker (SIGTERM,
SIGUSR1, <output_dir>/STOP) passes to its running trial, which stops with a checkpoint; the trial
is queued again to continue in its own directory, and the worker exits 75 (a re-run continues).
A trial that cannot write its checkpoint (a full disk, a read-only directory) is queued again the
same way, and the worker stops at once with the trial's sentence and exit status 2: every other
trial would fail alike until the directory is fixed.
`serve_dashboard` serves optuna-dashboard on the same storage.

    <output_dir>/study.db                  the default storage
    <output_dir>/trial_<n>/                each trial's output_dir (checkpoints, log.jsonl,
                                           eval_results.json) and train.log (its console)
    <output_dir>/trials.tsv                trial, state, parameters, metric, last step, minutes
    <output_dir>/best_trial.json           the best trial's parameters, metric and checkpoint
    <output_dir>/dev_metric_by_step.png|.html, learning_rate_vs_metric.png|.html

The space is tuning/search_space.py, the table and plots tuning/report.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time

from common.cli import check_settings, setting
from common.errors import PREEMPTED_EXIT_STATUS, Preempted, StorageError, UserError
from common.files import ensure_writable_dir, read_json
from training.preemption import StopRequests, request_stop
from tuning.report import best_complete, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")
STORAGE_FILE = "study.db"
# A worker whose trials fail this many times in a row stops: the cause is the setup, not the draw.
MAX_FAILURES_IN_A_ROW = 3


class TrialFailed(Exception):
    """A trial's fine-tuning run exited with an error (the study records it as failed)."""


# --- settings ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """run_tune.py's settings: the study's own, each declared once (kind, default, the help of its
    flag, which run_tune.py and the run_tune.sh launcher read), and what the command line gives
    every trial."""

    output_dir: str
    task_name: str
    space: dict  # name -> Dimension
    trial_flags: tuple = ()  # the fine-tuning flags every trial gets (--data_dir=..., --init_checkpoint=...)
    metric: str | None = setting(
        str, None, "Dev metric to maximise; default the task's main one (MRPC f1, SQuAD f1, CoLA ...)."
    )
    version_2_with_negative: bool = False
    n_trials: int = setting("count", 20, "Trials to finish (complete or pruned), counting every worker's.")
    timeout_seconds: float | None = None  # run_tune.py's --timeout, parsed (parse_timeout)
    sampler: str = setting(SAMPLERS, "tpe", "TPE, or random sampling.")
    sampler_seed: int | None = setting(int, None, "Seed of the sampler (a reproducible sequence of trials).")
    pruner: str = setting(PRUNERS, "median", "Median, successive halving, or none.")
    pruner_startup_trials: int = setting(
        "steps", 5, "The median pruner prunes nothing before this many trials ended."
    )
    pruner_warmup_steps: int = setting("steps", 0, "The median pruner prunes no trial before this update.")
    eval_every_n_steps: int = setting("count", 100)  # a trial's evaluations: its pruning points
    study_name: str | None = setting(str, None, "Optuna study name; default the output directory's name.")
    storage: str | None = setting(
        str, None, "Optuna storage URL (postgresql://, mysql+pymysql://, sqlite:///); default SQLite."
    )
    num_gpus: int = setting(
        "count", 1, "Workers per trial; more than 1 launches each trial through horovodrun."
    )
    # The argv in front of each trial's run_*.py (launch.workers.trial_prefix: horovodrun or mpirun
    # for num_gpus > 1); empty: this Python, one process.
    trial_prefix: tuple[str, ...] = ()
    heartbeat_seconds: int = setting(
        "count", 60, "Trial heartbeat; a trial silent for 3 beats is marked failed."
    )
    trial_retries: int = setting(
        "steps", 2, "Times a trial whose worker died is re-queued with the same parameters."
    )


def validate(s: TuneSettings) -> str:
    """UserError naming the first setting that cannot work; returns the metric to maximise."""
    from training import tasks

    check_settings(s)  # each field's kind
    metrics = tasks.find(s.task_name).metrics(s.task_name, s.version_2_with_negative)
    metric = s.metric or metrics[0]
    if metric not in metrics:
        raise UserError(
            f"--metric {metric!r} is not one of {s.task_name}'s dev metrics: {', '.join(metrics)}."
        )
    if not s.output_dir:
        raise UserError("--output_dir is required (the study's directory).")
    if s.timeout_seconds is not None and not s.timeout_seconds > 0:
        raise UserError(f"--timeout must be positive (got {s.timeout_seconds}).")
    if not s.space:
        raise UserError("The search space is empty.")
    return metric


def parse_timeout(text: str | None) -> float | None:
    """Seconds from '3600', '90m', '2h' or '45s' (None when not given)."""
    if not text:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise UserError(f"--timeout must be a duration such as 3600, 90m or 2h (got {text!r}).")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


# --- storage and study ---------------------------------------------------------------------


def _redacted(url: str) -> str:
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def storage_url(s: TuneSettings) -> str:
    return study_storage_url(s.storage, s.output_dir)


def study_storage_url(storage: str | None, output_dir: str) -> str:
    """`storage`, else the SQLite file in the output directory."""
    return storage or "sqlite:///" + os.path.join(os.path.abspath(output_dir), STORAGE_FILE)


def _driver_url(url: str) -> str:
    """SQLAlchemy reads postgresql:// as psycopg2, which is not installed: requirements.txt pins
    psycopg (3), the maintained driver with binary wheels, so a bare PostgreSQL URL uses it."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if scheme in ("postgresql", "postgres") and importlib.util.find_spec("psycopg2") is None:
        return f"postgresql+psycopg{sep}{rest}"
    return url


# Errors of two workers creating a new database's tables at the same moment: the loser retries.
SCHEMA_RACE = ("UNIQUE constraint failed", "already exists", "Duplicate entry", "database is locked")


def open_storage(url: str, heartbeat_seconds: int, trial_retries: int = 0, attempts: int = 5):
    """Optuna's RDBStorage at `url` with heartbeats: the trial of a worker that died is marked
    failed after 3 missed heartbeats and re-queued with the same parameters, `trial_retries` times
    at most. One clear sentence when the storage cannot be reached."""
    import optuna

    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(1, attempts + 1):
        try:
            with _quiet_experimental():
                return optuna.storages.RDBStorage(
                    _driver_url(url),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_seconds,
                    grace_period=3 * heartbeat_seconds,
                    # Optuna 5's name for RetryFailedTrialCallback (deprecated there): a WAITING
                    # copy of the stale trial, which the next free worker runs first.
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=trial_retries
                    ),
                )
        except ImportError as e:  # Optuna wraps the driver's ModuleNotFoundError
            missing = getattr(e.__cause__, "name", None) or getattr(e, "name", None) or "its database driver"
            raise UserError(
                f"--storage {_redacted(url)} needs the Python module {missing!r}; pip install it."
            ) from None
        except Exception as e:  # sqlalchemy's errors: bad URL, refused connection, wrong password
            if attempt < attempts and any(race in str(e) for race in SCHEMA_RACE):
                time.sleep(0.5 * attempt)
                continue
            raise UserError(f"Cannot open the study storage {_redacted(url)}: {_reason(e)}") from None


def _reason(error: BaseException) -> str:
    """The first line of a database error (SQLAlchemy appends its help links on later lines),
    with any URL's password hidden; Optuna's StorageInternalError wraps the driver's error."""
    cause = error.__cause__ if type(error).__name__ == "StorageInternalError" and error.__cause__ else error
    text = str(cause).strip()
    line = text.splitlines()[0] if text else type(cause).__name__
    return _redacted(re.sub(r"^\([\w.]+\)\s*", "", line))  # SQLAlchemy's "(psycopg.OperationalError) "


def _storage_errors() -> tuple:
    """What Optuna's RDBStorage raises when its database stops answering mid-study."""
    import optuna
    import sqlalchemy.exc

    return (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError)


def _storage_error_in(error: BaseException) -> BaseException | None:
    """The database error in an exception's chain: when the storage goes away mid-trial, Optuna 5's
    _run_trial, failing to record the trial's end, raises an UnboundLocalError of its own over it."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, _storage_errors()):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class _HeartbeatWatch:
    """Optuna beats each trial's heartbeat in a thread of its own; when the database goes away
    that thread dies with a traceback on stderr and the trial runs on until its next report. This
    hook keeps the thread's error instead, for the trial's poll loop to raise at once."""

    def __init__(self):
        import threading

        self.lost: BaseException | None = None
        self._previous = threading.excepthook

    def __enter__(self):
        import threading

        def hook(args):
            if isinstance(args.exc_value, _storage_errors()):
                self.lost = args.exc_value
            else:
                self._previous(args)

        threading.excepthook = hook
        return self

    def __exit__(self, *exc):
        import threading

        threading.excepthook = self._previous


def create_study(s: TuneSettings, metric: str, storage):
    import optuna

    sampler = (
        optuna.samplers.RandomSampler(seed=s.sampler_seed)
        if s.sampler == "random"
        else optuna.samplers.TPESampler(seed=s.sampler_seed)
    )
    pruner = {
        "median": lambda: optuna.pruners.MedianPruner(
            n_startup_trials=s.pruner_startup_trials, n_warmup_steps=s.pruner_warmup_steps
        ),
        "halving": lambda: optuna.pruners.SuccessiveHalvingPruner(),
        "none": lambda: optuna.pruners.NopPruner(),
    }[s.pruner]()
    name = s.study_name or os.path.basename(os.path.abspath(s.output_dir))
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        direction="maximize",
        load_if_exists=True,
    )
    wanted = {"task": s.task_name.lower(), "metric": metric}
    for key, value in wanted.items():
        held = study.user_attrs.get(key)
        if held is None:
            study.set_user_attr(key, value)
        elif held != value:
            raise UserError(
                f"Study {name!r} in {_redacted(storage_url(s))} was run with {key} {held!r}, not {value!r}: "
                "pass another --study_name or --output_dir."
            )
    return study


def _counts(study) -> dict[str, int]:
    counts = {state: 0 for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    counts["finished"] = counts["COMPLETE"] + counts["PRUNED"]
    return counts


# --- one trial -----------------------------------------------------------------------------


def trial_command(s: TuneSettings, params: dict, trial_dir: str) -> list[str]:
    """The fine-tuning command of one trial: [launcher ...] python run_classifier.py|run_squad.py
    <the study's trial flags> <the trial's parameters> --output_dir --do_train --do_eval
    --eval_every_n_steps. Several GPUs start through `trial_prefix`, which run_tune.py takes from
    the launcher engine, so trials start as the fine-tuning launchers start their workers."""
    from training import tasks

    entry = os.path.join(ROOT, tasks.find(s.task_name).entry_point)
    launch = list(s.trial_prefix) or [sys.executable]
    flags = [
        f"--{name}={value!r}" if isinstance(value, float) else f"--{name}={value}"
        for name, value in params.items()
    ]
    return [
        *launch,
        entry,
        *s.trial_flags,
        *flags,
        f"--output_dir={trial_dir}",
        "--do_train",
        "--do_eval",
        "--nodo_predict",
        f"--eval_every_n_steps={s.eval_every_n_steps}",
    ]


def _die_with_parent() -> None:
    """In the child: SIGKILL when the worker dies (Linux prctl PR_SET_PDEATHSIG), so a killed
    worker leaves no orphan trial running."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def _stop(child: subprocess.Popen) -> None:
    """Terminates a trial's process group (the launcher's workers too)."""
    if child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            kept = [line.rstrip() for line in f.readlines() if line.strip()][-lines:]
    except OSError:
        return ""
    return " | ".join(kept)


_FAILED_SAVE = re.compile(r"error: (Could not write checkpoint .*)$")


def _failed_save(console: str) -> str | None:
    """The sentence of a trial that stopped because its checkpoint could not be written
    (common.errors.StorageError), from its console; None for any other failure."""
    try:
        with open(console, encoding="utf-8", errors="replace") as f:
            found = [m.group(1) for m in map(_FAILED_SAVE.search, f.read().splitlines()) if m]
    except OSError:
        return None
    return found[-1] if found else None


def _final_value(trial_dir: str, metric: str) -> float:
    from training.loop import EVAL_RESULTS_NAME

    results = read_json(os.path.join(trial_dir, EVAL_RESULTS_NAME), "eval results")
    if metric not in results:  # MNLI: keyed by split, matched first
        results = next(iter(results.values()))
    return float(results[metric])


class Objective:
    """Optuna's objective: runs one trial's fine-tuning, reports its dev metric as it is logged,
    prunes it when the pruner says so, returns the final dev metric."""

    def __init__(self, s: TuneSettings, metric: str, say, poll_seconds: float = 1.0, watch=None, stop=None):
        self.s = s
        self.metric = metric
        self.say = say
        self.poll_seconds = poll_seconds
        self.watch = watch  # a _HeartbeatWatch: the storage lost by the heartbeat thread
        self.stop = stop  # training.preemption.StopRequests: this worker's preemption notices
        self.last_number = None  # the trial this worker ran last

    def __call__(self, trial) -> float:
        import optuna
        from optuna.trial import TrialState

        from training.metrics_log import LOG_NAME, LogFollower

        s = self.s
        self.last_number = trial.number
        trials = trial.study.get_trials(deepcopy=False)
        earlier = [t for t in trials if t.number < trial.number and t.state != TrialState.FAIL]
        # A re-queued trial (its worker died) carries the number it retries.
        retried = next((t.system_attrs.get("failed_trial") for t in trials if t.number == trial.number), None)
        if len(earlier) >= s.n_trials:  # another worker started the last trial at the same moment
            trial.set_user_attr("surplus", True)
            raise TrialFailed(f"not run: {s.n_trials} trials were already started")
        params = {name: dim.suggest(trial) for name, dim in s.space.items()}
        # A trial stopped for a preemption is queued again to continue in its own directory, from
        # its checkpoint (its process had exited; a heartbeat retry starts afresh instead, as the
        # worker it lost may still be writing).
        trial_dir = trial.user_attrs.get("resume_dir") or os.path.join(
            os.path.abspath(s.output_dir), f"trial_{trial.number:03d}"
        )
        os.makedirs(trial_dir, exist_ok=True)
        trial.set_user_attr("output_dir", trial_dir)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        for name, value in params.items():
            trial.set_user_attr(name, value)  # fixed values too (Optuna keeps only drawn ones)
        shown = "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
        again = f" (trial {retried} again: its worker died)" if retried is not None else ""
        self.say(f"trial {trial.number}: {shown}  -> {trial_dir}{again}")
        log = LogFollower(os.path.join(trial_dir, LOG_NAME))
        console = os.path.join(trial_dir, "train.log")
        reported: set[int] = set()
        last_step = 0
        stopping = None  # the notice passed on to the trial
        with open(console, "ab") as out:
            child = subprocess.Popen(
                trial_command(s, params, trial_dir),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            try:
                while True:
                    if self.watch is not None and self.watch.lost is not None:
                        raise self.watch.lost
                    done = child.poll() is not None
                    if not done and stopping is None and self.stop is not None and self.stop.local():
                        stopping = self.stop.reason()
                        request_stop(trial_dir)  # the trial stops at its next update, with a checkpoint
                        self.say(f"trial {trial.number}: stopping for a preemption notice ({stopping})")
                    for entry in log.new_entries():
                        last_step = max(last_step, int(entry.get("step", 0)))
                        value = entry.get("eval", {}).get(self.metric)
                        if value is None or entry["step"] in reported:
                            continue
                        reported.add(entry["step"])
                        trial.report(float(value), entry["step"])
                        self.say(
                            f"trial {trial.number} step {entry['step']}: {self.metric} {float(value):.4f}"
                        )
                        if trial.should_prune():
                            _stop(child)
                            trial.set_user_attr("last_step", entry["step"])
                            self.say(f"trial {trial.number} pruned at step {entry['step']}")
                            raise optuna.TrialPruned(
                                f"{self.metric} {float(value):.4f} at step {entry['step']}"
                            )
                    if done:
                        break
                    time.sleep(self.poll_seconds)
            finally:
                _stop(child)
        trial.set_user_attr("last_step", last_step)
        if child.returncode == PREEMPTED_EXIT_STATUS:
            trial.set_user_attr("preempted", True)
            trial.study.enqueue_trial(params, user_attrs={"resume_dir": trial_dir})
            raise Preempted(
                f"Stopped for a preemption notice ({stopping or 'to the trial'}): trial {trial.number} left a "
                f"checkpoint in {trial_dir} and is queued again to continue from it; re-running the same "
                "command continues the study."
            )
        if child.returncode != 0:
            error = f"fine-tuning exited with status {child.returncode}: {_tail(console)}"
            trial.set_user_attr("error", error[-2000:])
            failed_save = _failed_save(console)
            if failed_save:
                # A full disk or a read-only directory fails every trial alike: the worker stops
                # now rather than after MAX_FAILURES_IN_A_ROW trials, and this trial continues from
                # its last intact checkpoint once the directory is fixed, as a preempted one does.
                trial.study.enqueue_trial(params, user_attrs={"resume_dir": trial_dir})
                raise StorageError(
                    f"Trial {trial.number} could not save and is queued again to continue in {trial_dir}: "
                    f"{failed_save}"
                )
            raise TrialFailed(error)
        value = _final_value(trial_dir, self.metric)
        if last_step and last_step not in reported:
            trial.report(value, last_step)
        self.say(f"trial {trial.number} complete: {self.metric} {value:.4f}")
        return value


# --- the worker ----------------------------------------------------------------------------


def run(s: TuneSettings, stream=None, poll_seconds: float = 1.0) -> dict:
    """Runs trials of the study until n_trials have ended complete or pruned (every worker's
    count) or the timeout; returns {"rows", "best", "plots", "study"}. Problems the user can
    fix raise UserError before any trial starts; a storage lost mid-study raises UserError naming
    it (the running trial is stopped; its heartbeat stops and it is retried once the database is
    back)."""
    import optuna

    stream = stream if stream is not None else sys.stdout
    metric = validate(s)
    ensure_writable_dir(s.output_dir, "--output_dir")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url(s)
    storage = open_storage(url, s.heartbeat_seconds, s.trial_retries)
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[tune {time.monotonic() - started:7.0f}s] {line}", file=stream, flush=True)

    try:
        with _HeartbeatWatch() as watch, StopRequests(s.output_dir) as stop:
            stop.clear_stale_file()
            study = create_study(s, metric, storage)
            objective = Objective(s, metric, say, poll_seconds, watch, stop)
            _optimize(s, metric, study, storage, url, objective, say)
            results = report(s.output_dir, s.space, study, metric, stream)
    except (UserError, Preempted):
        raise
    except Exception as e:
        lost = _storage_error_in(e)
        if lost is None:
            raise
        raise UserError(
            f"Lost the study storage {_redacted(url)} ({_reason(lost)}): the trials it recorded stay "
            "there; run the same command again when it answers, and the study continues."
        ) from None
    return {**results, "study": study}


def beat_once_for_others(storage, study, seen: set) -> None:
    """One heartbeat for each running trial this worker has not seen before. Optuna marks a trial
    failed only once it has a heartbeat gone stale: a worker killed after creating its trial but
    before the trial's first heartbeat leaves it running for ever, and every worker then waits for
    it. One beat from an onlooker gives it a heartbeat to go stale; the trial of a live worker
    beats on by itself, and a dead one's failure comes at most one grace period later than it
    would have (once per onlooking worker)."""
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial._trial_id not in seen:
            seen.add(trial._trial_id)
            storage.record_heartbeat(trial._trial_id)


def _optimize(s: TuneSettings, metric: str, study, storage, url: str, objective: Objective, say) -> None:
    """This worker's loop: one trial at a time while the study needs more."""
    import optuna

    say(
        f"study {study.study_name!r} in {_redacted(url)}: {s.n_trials} trials of {s.task_name}, maximising dev "
        f"{metric}; sampler {s.sampler}, pruner {s.pruner}"
    )
    for dim in s.space.values():
        say(f"  {dim.name}: {dim.describe()}")
    started = time.monotonic()
    waited = False
    failures = 0  # this worker's trials failed in a row
    seen = set()  # the running trials of other workers given one heartbeat
    while True:
        with _quiet_experimental():
            optuna.storages.fail_stale_trials(study)
            beat_once_for_others(storage, study, seen)
        counts = _counts(study)
        if counts["finished"] >= s.n_trials:
            break
        if s.timeout_seconds is not None and time.monotonic() - started >= s.timeout_seconds:
            say(f"timeout: no new trial after {s.timeout_seconds:g} s")
            break
        if counts["finished"] + counts["RUNNING"] >= s.n_trials:
            if not waited:
                say(
                    f"waiting for {counts['RUNNING']} trial(s) running elsewhere (a trial whose worker "
                    f"died is marked failed {3 * s.heartbeat_seconds} s after its last heartbeat)"
                )
                waited = True
            time.sleep(min(s.heartbeat_seconds, 10))
            continue
        waited = False
        if objective.stop is not None and objective.stop.local():
            raise Preempted(
                f"Stopped for a preemption notice ({objective.stop.reason()}) between trials; re-running the "
                "same command continues the study."
            )
        with _quiet_experimental():
            study.optimize(objective, n_trials=1, catch=(TrialFailed,))
        mine = next(t for t in study.get_trials(deepcopy=False) if t.number == objective.last_number)
        if mine.state.name == "FAIL" and not mine.user_attrs.get("surplus"):
            failures += 1
            console = os.path.join(mine.user_attrs.get("output_dir", ""), "train.log")
            say(f"trial {mine.number} failed: see {console}")
            if failures >= MAX_FAILURES_IN_A_ROW:
                raise UserError(
                    f"{failures} trials in a row failed, the last with: {mine.user_attrs.get('error')} "
                    f"(full output: {console})"
                )
        else:
            failures = 0
        counts, best = _counts(study), best_complete(study)
        shown = f"best {metric} {best.value:.4f} (trial {best.number})" if best else "no complete trial yet"
        say(
            f"{counts['finished']}/{s.n_trials} trials done ({counts['COMPLETE']} complete, "
            f"{counts['PRUNED']} pruned), {counts['FAIL']} failed; {shown}"
        )


# --- the dashboard -------------------------------------------------------------------------


def serve_dashboard(url: str, host: str, port: int, stream=None) -> None:
    """Serves optuna-dashboard (its web page and its JSON API under /api/) on the study storage at
    `url` until interrupted; every worker's trials appear live, as the database holds them."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    stream = stream if stream is not None else sys.stdout
    try:
        import optuna_dashboard
    except ImportError:
        raise UserError(
            "--dashboard needs optuna-dashboard; install it with bash scripts/setup.sh (requirements.txt)."
        ) from None
    storage = open_storage(url, heartbeat_seconds=60)

    # optuna_dashboard.run_server is bottle's single-threaded server that logs every request; a
    # browser's parallel polls want threads, and the console wants only the address.
    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    try:
        server = make_server(
            host, port, optuna_dashboard.wsgi(storage), server_class=Server, handler_class=Quiet
        )
    except OSError as e:
        raise UserError(f"--dashboard_port {port} on {host} cannot be served: {e.strerror or e}.") from None
    print(
        f"optuna-dashboard on {_redacted(url)}: http://{host}:{server.server_port}/dashboard "
        "(Ctrl-C stops it)",
        file=stream,
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()


@contextlib.contextmanager
def _quiet_experimental():
    """Optuna's fail_stale_trials and heartbeats are marked experimental; the warning is noise here."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield
