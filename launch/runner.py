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

import os
import signal
import subprocess
import sys
import time

from common.errors import PREEMPTED_EXIT_STATUS
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
            child.send_signal(number)
        except ProcessLookupError:
            pass


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


def requeue(argv, job_id: str) -> int:
    """scripts/run.sub's relay: runs `argv` passing SIGUSR1, SIGTERM and SIGINT on to it, and
    requeues SLURM job `job_id` when it stopped for a preemption (exit status 0 once requeued)."""
    with Notices() as notices:
        status = run_step(Step(list(argv)), notices)
    if status == PREEMPTED_EXIT_STATUS and job_id:
        print(f"[run.sub] stopped for a preemption with a checkpoint: requeueing job {job_id}", flush=True)
        if subprocess.call(["scontrol", "requeue", job_id]) == 0:
            return 0
    return status
