"""Runs a launch: `python -m launch run NAME ARGS...` (what every scripts/ launcher execs) plans in a
child process, `python -m launch plan ...` (its imports and input checks stay out of this process,
which only relays); then it runs the plan's steps in order, each a child process,
and stops at the first that fails, with its failure message and exit status.

Preemption: SIGTERM, SIGUSR1 or SIGINT to the launcher is relayed as the tuner relays a notice to
its trial (training/preemption.py: StopRequests takes the signal, request_stop writes the STOP
file): the running step's STOP file is written, so every worker stops at the same update with a
checkpoint and exits 75 (horovodrun and mpirun are not signalled: they would kill the workers
mid-save); a step without a STOP file gets the signal itself. The launcher then exits 75 and
starts no further step: re-running the same command continues. scripts/run.sub's batch shell
execs into the same relay (`python -m launch requeue COMMAND...`), one step with no STOP file.

A launcher killed outright (SIGKILL) relays nothing: its steps' workers find it gone
(BERT_LAUNCHER names it to them; training/launcher_watch.py) and stop as for a notice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

from common.errors import PREEMPTED_EXIT_STATUS
from common.files import write_json
from launch.engine import Step, read_steps
from training.launcher_watch import LAUNCHER_ENV, launcher_id
from training.preemption import StopRequests, request_stop

POLL_SECONDS = 0.1  # how soon a signal taken between two looks at the step is relayed


class Notices(StopRequests):
    """The launcher's preemption notices: StopRequests' SIGTERM and SIGUSR1, and SIGINT too (a
    launcher's user is at a terminal); every signal is kept, in order, to be relayed once each."""

    def __init__(self):
        super().__init__(os.devnull)  # only signals reach a launcher: it has no STOP file of its own
        self.pending = []

    def __enter__(self):
        super().__enter__()
        self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, number, frame) -> None:
        super()._on_signal(number, frame)
        self.pending.append(number)


def _leave_sigint_to_the_launcher() -> None:
    """In a step, before it execs: Ctrl-C reaches the terminal's whole foreground group, and it is
    the launcher's notice to relay, not the step's to act on (as bash starts a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _relay(notices: Notices, step: Step, child: subprocess.Popen) -> None:
    """Each signal taken: the step's STOP file when it has one that can be written, else the
    signal itself to the step."""
    while notices.pending:
        number = notices.pending.pop(0)
        if step.stop_file:
            try:
                request_stop(os.path.dirname(step.stop_file))
                continue
            except OSError:
                pass
        try:
            child.send_signal(_forwarded(number, step.argv))
        except ProcessLookupError:
            pass


def _forwarded(number: int, argv: list) -> int:
    """The signal to give the step for notice `number`: srun ends its step at once on SIGTERM
    ("forcing job termination": its tasks are killed without a checkpoint) but passes SIGUSR1 on to
    every task, which takes it as the same notice; so srun gets a SIGTERM as SIGUSR1."""
    if number == signal.SIGTERM and os.path.basename(argv[0]) == "srun":
        return signal.SIGUSR1
    return number


def run_step(step: Step, notices: Notices) -> int:
    """Runs one step to its end, relaying notices; its exit status (128 + N when signal N ended it,
    as a shell reports it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The step's workers watch this process as their launcher (training/launcher_watch.py).
    env = {**os.environ, LAUNCHER_ENV: launcher_id()}
    child = subprocess.Popen(step.argv, env=env, preexec_fn=_leave_sigint_to_the_launcher)
    while True:
        _relay(notices, step, child)
        try:
            status = child.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            continue
        return 128 - status if status < 0 else status


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _stopped(script: str, notices: Notices) -> int:
    reason = notices.received or "a notice to the workers"
    print(
        f"== {script}: stopped for a preemption ({reason}): re-run the same command to continue ==",
        file=sys.stderr,
    )
    return PREEMPTED_EXIT_STATUS


def run_steps(script: str, steps, done: str, notices: Notices) -> int:
    """Runs `steps` in order: a step's banner first; the first that fails ends the launch with its
    failure message and exit status; a preemption ends it with 75 and no further step."""
    for i, step in enumerate(steps):
        if notices.received:
            return _stopped(script, notices)
        if step.banner:
            print(f"== {step.banner} starts ({_now()}) ==", flush=True)
        status = run_step(step, notices)
        if status == PREEMPTED_EXIT_STATUS or (status == 0 and notices.received and i < len(steps) - 1):
            return _stopped(script, notices)
        if status != 0:
            if step.failure:
                print(step.failure.replace("{status}", str(status)), file=sys.stderr)
            return status
    if done:
        print(f"== {done} ({_now()}) ==", flush=True)
    return 0


def launch(name: str, args, python: str) -> int:
    """`python -m launch run NAME ARGS...`: plans in a child (`python -m launch plan`), then runs
    its steps. `python` runs the planner and the plan's Python steps."""
    import tempfile

    script = f"{name}.sh"
    fd, plan_file = tempfile.mkstemp(prefix="bert-launch-plan.", suffix=".json")
    os.close(fd)
    try:
        with Notices() as notices:
            status = run_step(Step([python, "-m", "launch", "plan", name, plan_file, python, *args]), notices)
            if status != 0:
                return _stopped(script, notices) if notices.received else status
            if os.path.getsize(plan_file) == 0:
                return 0  # --help or --dry_run: printed, nothing to run
            steps, done = read_steps(plan_file)
            return run_steps(script, steps, done, notices)
    finally:
        os.remove(plan_file)


# Runs of one job in a row that may stop for a preemption without a new checkpoint before the relay
# stops requeueing: the first may be a genuine preemption during start-up, the second is a time
# limit that the notice, the start-up and one checkpoint do not fit in (it would requeue forever).
IDLE_RUNS_LIMIT = 2
REQUEUE_RESULTS_ENV = "BERT_REQUEUE_RESULTS"  # run.sub: the host directory the job's outputs go under
EARLY_NOTICES_ENV = "BERT_EARLY_NOTICES"  # run.sub: the signals its batch shell got before the relay
NOTICE_SECONDS_ENV = "BERT_NOTICE_SECONDS"  # run.sub: how long before the time limit SLURM's notice comes


def newest_checkpoints(results_dir: str) -> dict:
    """{directory under `results_dir` (relative): the newest checkpoint its TensorFlow `checkpoint`
    index file names}, for every output directory there; {} when there is none."""
    found = {}
    for directory, _, files in os.walk(results_dir):
        if "checkpoint" not in files:
            continue
        try:
            with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
                newest = re.search(r'^model_checkpoint_path:\s*"([^"]*)"', f.read(), re.MULTILINE)
        except (OSError, UnicodeDecodeError):
            continue
        if newest:
            found[os.path.relpath(directory, results_dir)] = newest.group(1)
    return found


def _requeue_state(results_dir: str, job_id: str) -> str:
    return os.path.join(results_dir, f".requeue-{job_id}.json")


def _idle_runs_before(state_file: str, restarts: int) -> int:
    """Runs in a row without a new checkpoint up to the previous run of this job: what the relay
    wrote when it requeued that run (SLURM's restart count just below this run's), else 0."""
    try:
        with open(state_file, encoding="utf-8") as f:
            state = json.load(f)
        return int(state["idle_runs"]) if int(state["restarts"]) == restarts - 1 else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _forget(state_file: str) -> None:
    try:
        os.remove(state_file)
    except OSError:
        pass  # none: the job never requeued without a checkpoint (or the directory is gone)


def seconds_left(shown: str) -> int | None:
    """squeue's time left (%L: [[DAYS-]HOURS:]MINUTES:SECONDS) in seconds; None for UNLIMITED,
    NOT_SET or anything else."""
    match = re.fullmatch(r"(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+)", shown.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _job_seconds_left(job_id: str) -> int | None:
    try:
        shown = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return seconds_left(shown.stdout) if shown.returncode == 0 else None


def _time_limit(job_id: str) -> str:
    """SLURM's TimeLimit of the job (`scontrol show job`), e.g. "TimeLimit=00:02:00"; "" when unknown."""
    try:
        shown = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    limit = re.search(r"\bTimeLimit=(\S+)", shown.stdout)
    return f"TimeLimit={limit.group(1)}" if limit else ""


def requeue(argv, job_id: str, environ=None) -> int:
    """scripts/run.sub's relay: runs `argv` passing SIGUSR1, SIGTERM and SIGINT on to it, and
    requeues SLURM job `job_id` when it stopped for a preemption (exit status 0 once requeued).

    A notice that reached run.sub's batch shell before the relay did (BERT_EARLY_NOTICES), or a
    time limit already within the notice (BERT_NOTICE_SECONDS, squeue's time left), stops the run
    before its command starts. Where `environ` (os.environ by default) names the results
    directory (BERT_REQUEUE_RESULTS, which run.sub sets), a run that stops without a new checkpoint
    there counts as idle (SLURM_RESTART_COUNT and a small state file there carry the count from run
    to run); the IDLE_RUNS_LIMIT-th idle run in a row is not requeued: the job ends with exit status
    2 and one sentence naming the time limit to raise, instead of requeueing forever a job whose
    notice always comes first."""
    environ = os.environ if environ is None else environ
    results_dir = environ.get(REQUEUE_RESULTS_ENV, "")
    before = newest_checkpoints(results_dir) if results_dir else {}
    early = environ.get(EARLY_NOTICES_ENV, "").split()
    notice_s = int(environ.get(NOTICE_SECONDS_ENV) or 0)
    with Notices() as notices:
        # Asked once the notice can no longer be lost: one SLURM sent before (as the job starts
        # when its time limit is within the notice) may have come while run.sub ignored it.
        left = _job_seconds_left(job_id) if notice_s and job_id and not early else None
        if early or (left is not None and left <= notice_s):
            # Starting the command only to stop it at once would race its own signal handlers.
            why = f"SIG{early[0]}" if early else f"{left} s left, within the notice's {notice_s} s"
            print(f"[run.sub] {why} before the command started: not starting it", flush=True)
            status = PREEMPTED_EXIT_STATUS
        else:
            status = run_step(Step(list(argv)), notices)
    state_file = _requeue_state(results_dir, job_id) if results_dir and job_id else ""
    if status != PREEMPTED_EXIT_STATUS or not job_id:
        if state_file:
            _forget(state_file)
        return status
    if state_file:
        restarts = int(environ.get("SLURM_RESTART_COUNT") or 0)
        idle = 0 if newest_checkpoints(results_dir) != before else _idle_runs_before(state_file, restarts) + 1
        if idle >= IDLE_RUNS_LIMIT:
            limit = _time_limit(job_id)
            print(
                f"[run.sub] job {job_id} stopped {idle} times in a row without a new checkpoint under "
                f"{results_dir}, so it is not requeued again: its time limit{f' ({limit})' if limit else ''} "
                "leaves no room for run.sub's notice (--signal=B:USR1@120, 120 s before the limit), the "
                "start-up and one checkpoint; raise the limit (sbatch --time=MINUTES, or #SBATCH --time) "
                "and submit it again.",
                file=sys.stderr,
                flush=True,
            )
            _forget(state_file)
            return 2
        if idle:
            print(
                f"[run.sub] no new checkpoint under {results_dir} in this run: one more such run ends the job"
            )
        try:
            os.makedirs(results_dir, exist_ok=True)
            write_json(state_file, {"restarts": restarts, "idle_runs": idle})
        except OSError:
            pass  # an unwritable results directory: nothing to carry, the job requeues as before
    print(f"[run.sub] stopped for a preemption with a checkpoint: requeueing job {job_id}", flush=True)
    if subprocess.call(["scontrol", "requeue", job_id]) == 0:
        return 0
    return status
