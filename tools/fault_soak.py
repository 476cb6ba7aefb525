"""The fault soak: a short tiny-model pretraining through your own launcher, broken on purpose at
seeded moments, restarted as a scheduler restarts it, and compared with the same run left alone.

    python -m tools.fault_soak --work_dir /shared/soak                            # horovodrun, 2 workers
    python -m tools.fault_soak --work_dir /shared/soak --faults 10 --seed 3
    python -m tools.fault_soak --work_dir /shared/soak \\
        --launcher "mpirun -np 8 --hostfile hosts -x PYTHONPATH -x PATH"         # your hosts
    python -m tools.fault_soak --work_dir DIR -- --use_xla=false                  # flags for the runs
    CONT=none python -m tools.fault_soak --work_dir /shared/soak --faults 4 \\
        --slurm "-N 2 --ntasks-per-node=8"                                       # jobs of scripts/run.sub

It writes tiny records (tools/tiny_pretraining.py) under --work_dir, runs run_pretraining.py once
without faults ("uninterrupted"), then the same command again ("soaked") with --faults faults. Each
fault is one of:

    kill_worker     SIGKILL to one worker (the others must stop and name it)
    preempt         SIGTERM to every worker, a scheduler's notice (a checkpoint, exit status 75)
    kill_launcher   SIGKILL to the launcher (its workers must stop, none left running)
    power_loss      SIGKILL to the launcher and every worker at once, and the newest checkpoint's
                    data cut in half, as a lost page cache leaves it (when an older one exists)
    nonfinite       a record whose masked-LM weight is NaN, placed in the data so that its update's
                    loss is not finite (--on_divergence=rollback rolls back past it)

Every kind comes once in each five faults; fault i (from 0) comes after update 10i+5 to 10i+9
(drawn from --seed) and a random delay of up to --max_delay_ms; the run has 10 updates per fault
and 10 more. A process fault ends the launch;
the soak then runs the same command again, as a scheduler requeues a job, until it ends with status
0. The non-finite records are in the uninterrupted run's data too: both runs roll back past them.

It prints a table (each fault, when, how the launch ended, how the run came back, updates redone,
seconds lost until the run was past where it had been), the verdict (the final checkpoints
bit-identical or their largest difference; nothing lost: the last update and the sequences
consumed; no process left running) and goodput: seconds of the updates that reached the final
model over the run's wall time, beside the uninterrupted run's. Exit status 0 when the verdict
holds, 1 when it does not, 2 for a usage error.

Under SLURM (--slurm SBATCH_ARGS) each run is a job of scripts/run.sub submitted from this
checkout (CONT=none: srun's tasks; or HOROVOD_LAUNCHER=mpirun with --launcher "mpirun -np N"), and
the faults are SLURM's: a preemption (SIGTERM) and the time limit's notice (SIGUSR1) sent to the
batch shell with scancel, which run.sub requeues, a killed worker (this host's), after which the
failed job is submitted again, and the non-finite batch.

Kills reach the processes of this host only: with a hostfile, run the soak on the host of rank 0;
workers on other hosts are stopped by the run itself (a lost worker, the launcher gone), and the
check for processes left running covers this host. Kubernetes and Azure ML: see docs/cluster.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("kill_worker", "preempt", "kill_launcher", "power_loss", "nonfinite")
# Under SLURM (--slurm): SIGTERM to the batch shell (a preemption) and SIGUSR1 (the notice before
# the time limit), both requeued by run.sub; a killed worker fails the job, which is submitted again.
SLURM_KINDS = ("preempt", "time_limit", "kill_worker", "nonfinite")
SLURM_SIGNALS = {"preempt": "TERM", "time_limit": "USR1"}
SLURM_ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)
DEFAULT_LAUNCHER = "horovodrun -np 2 -H localhost:2 --gloo"
UPDATES_PER_FAULT, SAVE_EVERY, KEEP, BATCH, WINDOW = 10, 4, 3, 8, 64
WORKERS_GONE_S = 120  # how long the workers of an ended launch may take to stop


class UsageError(Exception):
    pass


@dataclasses.dataclass
class Fault:
    number: int  # from 1 in the plan; 0 for a rollback found in the run, -1 for one repeated
    kind: str
    at: int  # after this update (process faults); the update the NaN record lands in (nonfinite)
    delay_ms: int = 0
    fired_after: int | None = None  # the last update logged when it fired
    reached: int | None = None  # the last update logged before the run came back
    fired_at: float | None = None
    ended: str = ""  # how the launch ended
    came_back: str = ""
    redone: int | None = None
    lost_s: float | None = None


@dataclasses.dataclass
class Launch:
    status: int
    wall_s: float
    stdout: str
    stderr: str
    orphans: list


# ------------------------------------------------------------------------------------ the plan


def schedule(faults: int, seed: int, max_delay_ms: int, kinds_of=KINDS) -> list[Fault]:
    """Fault i: a kind (each of KINDS once in every five), after update 10i+5..10i+9 (from 0), a
    delay of 0..max_delay_ms."""
    rng = random.Random(seed)
    kinds = []
    while len(kinds) < faults:  # every kind once in each len(kinds_of), in a drawn order
        kinds += rng.sample(kinds_of, len(kinds_of))
    plan = []
    for i in range(faults):
        at = UPDATES_PER_FAULT * i + 5 + rng.randrange(5)
        plan.append(Fault(i + 1, kinds[i], at, rng.randint(0, max_delay_ms)))
    return plan


def workers_of(launcher: list[str]) -> int:
    """The worker count of a launcher command (-np N), 1 without a launcher."""
    if not launcher:
        return 1
    for flag in ("-np", "-n", "--np"):
        if flag in launcher:
            value = launcher[launcher.index(flag) + 1]
            if value.isdigit() and int(value) > 0:
                return int(value)
    raise UsageError(f"--launcher '{shlex.join(launcher)}' names no worker count (-np N).")


def write_data(root: str, plan: list[Fault], workers: int, seed: int) -> dict:
    """Tiny records for the whole run and the rollbacks' skips, the NaN records of the nonfinite
    faults placed at their updates' sequences in the data order; returns the run's paths."""
    from tools import tiny_pretraining as tiny

    global_batch = BATCH * workers
    updates = UPDATES_PER_FAULT * (len(plan) + 1)
    needed = global_batch * (updates + (SAVE_EVERY + 1) * len(plan)) + WINDOW
    per_file = -(-needed // 4)
    data = tiny.setup(os.path.join(root, "data"), files=4, per_file=per_file, dropout=False)
    places = [f.at * global_batch - global_batch // 2 for f in plan if f.kind == "nonfinite"]
    if places:
        tiny.poison(sorted(glob.glob(data["input_files"])), places, seed=seed, window=WINDOW)
    return data


def command(
    launcher: list[str], workers: int, data: dict, output_dir: str, plan: list[Fault], seed: int, extra
):
    from tools import tiny_pretraining as tiny

    nonfinite = sum(f.kind == "nonfinite" for f in plan)
    flags = tiny.flags(
        data,
        output_dir,
        num_train_steps=UPDATES_PER_FAULT * (len(plan) + 1),
        save_checkpoints_steps=SAVE_EVERY,
        keep_checkpoints=KEEP,
        train_batch_size=BATCH,
        shuffle_buffer=WINDOW,
        seed=seed,
        use_horovod="true" if workers > 1 else None,
        on_divergence="rollback",
        max_rollbacks=nonfinite + 1,
    )
    return [*launcher, sys.executable, os.path.join(ROOT, "run_pretraining.py"), *flags, *extra]


# ------------------------------------------------------------------------------- one launch


class Watch:
    """One run's log.jsonl and rollbacks.json, read as they change: the last update logged since
    the watch began (a run rewrites its log as it starts), the faults it has passed (`events`,
    their seconds lost set) and its rollbacks (each a row added to `rows` and `events`)."""

    def __init__(self, output_dir: str, events: list, rows: list):
        self.log = os.path.join(output_dir, "log.jsonl")
        self.output_dir, self.events, self.rows = output_dir, events, rows
        self.before = _inode(self.log)
        self.last = 0  # the highest update the current log shows
        # Rollbacks not yet in `rows`: one recorded as a launch was killed is found by the next.
        self.rollbacks = sum(r.kind == "nonfinite" for r in rows)

    def read(self) -> int:
        from training.metrics_log import read_log

        if _inode(self.log) != self.before:
            steps = [e["step"] for e in read_log(self.log) if "rollback" not in e]
            self.last = max(steps, default=0)
        return self.last

    def look(self, fault: Fault | None) -> int:
        """The last update logged, once the events it passed are closed and new rollbacks noted;
        a fired `fault` of this run reaches that update."""
        from training.rollback import read_rollbacks

        last = self.read()
        if fault is not None and fault.fired_at is not None:
            fault.reached = max(fault.reached, last)
        for event in [e for e in self.events if e is not fault and last > e.reached]:
            event.lost_s = time.monotonic() - event.fired_at
            self.events.remove(event)
        records = read_rollbacks(self.output_dir)
        for record in records[self.rollbacks :]:
            self.rows.append(_rolled_back(record))
            self.events.append(self.rows[-1])
        self.rollbacks = len(records)
        return last

    def fired(self, fault: Fault) -> None:
        fault.fired_after = fault.reached = self.read()
        fault.fired_at = time.monotonic()
        self.events.append(fault)


def _inode(path: str):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _workers(process, output_dir: str) -> list:
    import psutil

    found = []
    for child in psutil.Process(process.pid).children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if (
            "run_pretraining.py" in line
            and output_dir in line
            and "python" in os.path.basename(child.cmdline()[0])
        ):
            found.append(child)
    return found


def _left_running(output_dir: str) -> list:
    """Processes of this host whose command line names `output_dir`, after WORKERS_GONE_S."""
    import psutil

    def running():
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            if p.pid != os.getpid() and output_dir in " ".join(p.info["cmdline"] or ()):
                found.append(p)
        return found

    _, alive = psutil.wait_procs(running(), timeout=WORKERS_GONE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [f"{p.pid} {' '.join(p.info['cmdline'] or ())[:80]}" for p in alive]


def _fire(fault: Fault, process, output_dir: str) -> None:
    import psutil

    workers = _workers(process, output_dir)
    if fault.kind == "kill_worker":
        random.Random(fault.number).choice(workers).kill()
    elif fault.kind == "preempt":
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
    elif fault.kind == "kill_launcher":
        process.kill()
    elif fault.kind == "power_loss":
        below = psutil.Process(process.pid).children(recursive=True)
        for p in [psutil.Process(process.pid), *below]:
            try:
                p.kill()
            except psutil.Error:
                pass
        process.wait()  # the launcher reaped here, where its status is read (psutil would take it)
        psutil.wait_procs(below, timeout=30)


def _cut_newest(output_dir: str) -> str:
    """Power loss: the newest checkpoint's data cut in half when an older one exists."""
    from training.checkpointing import committed_checkpoints

    committed = committed_checkpoints(output_dir)
    if len(committed) < 2:
        return "; no older checkpoint, so none was cut"
    newest = committed[-1]
    data = [p for p in os.listdir(output_dir) if p.startswith(os.path.basename(newest) + ".data-")]
    for name in data:
        path = os.path.join(output_dir, name)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    return f"; {os.path.basename(newest)} cut to half"


def launch(
    argv, output_dir: str, log_dir: str, n: int, fault: Fault | None, events: list, rows: list
) -> Launch:
    """Runs `argv` once; fires `fault` when its update comes; `events` (faults whose run has not
    yet passed where it was) are closed as the log passes them; a rollback adds a row to `rows`."""
    watch = Watch(output_dir, events, rows)
    out_path, err_path = (os.path.join(log_dir, f"launch_{n}.{s}") for s in ("stdout", "stderr"))
    started = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        while process.poll() is None:
            last = watch.look(fault)
            if fault and fault.fired_at is None and last >= fault.at:
                time.sleep(fault.delay_ms / 1000)
                watch.fired(fault)
                _fire(fault, process, output_dir)
                if fault.kind == "power_loss":
                    fault.came_back = _cut_newest(output_dir)
            time.sleep(0.02)
    with open(out_path) as out, open(err_path) as err:
        stdout, stderr = out.read(), err.read()
    return Launch(process.returncode, time.monotonic() - started, stdout, stderr, _left_running(output_dir))


def _rolled_back(record: dict) -> Fault:
    """A rollback found in rollbacks.json, as the table's row of its nonfinite fault."""
    skipped, again = record["skipped"], record["skipped"][0] >= record["skipped"][1]
    if again:  # the run met the batch again after coming back from a checkpoint before the rollback's
        came_back = f"ckpt-{record['step']} again, past the data its first rollback skipped"
    else:
        came_back = f"ckpt-{record['step']}, sequences {skipped[0]}-{skipped[1] - 1} skipped"
    return Fault(
        -1 if again else 0,
        "nonfinite",
        record["diverged_step"],
        fired_after=record["diverged_step"] - 1,
        reached=record["diverged_step"] - 1,
        fired_at=time.monotonic(),
        ended="rolled back in the run",
        came_back=came_back,
        redone=record["diverged_step"] - record["step"],
    )


def _resumed_from(stdout: str) -> str:
    for line in stdout.splitlines():
        if "Resuming from " in line:
            return os.path.basename(line.split("Resuming from ", 1)[1].split()[0].rstrip(".:,"))
    return "the start"


# What the workers said, as the table's words for how a launch ended.
SAID = (
    ("Stopped for a preemption notice", "the workers stopped for the notice"),
    ("lost the other workers", "a worker named the lost one"),
)


def _ended(status: int, stderr: str = "") -> str:
    from common.errors import PREEMPTED_EXIT_STATUS

    if status < 0:
        ended = f"killed ({signal.Signals(-status).name})"
    else:
        ended = "exit 75 (preempted)" if status == PREEMPTED_EXIT_STATUS else f"exit {status}"
    return ", ".join([ended, *(words for sentence, words in SAID if sentence in stderr)])


# ---------------------------------------------------------------------------------- the soak


def soak(args) -> int:
    launcher = shlex.split(args.launcher)
    if launcher:
        # The launcher beside this Python first (a virtual environment's horovodrun), then PATH.
        found = shutil.which(
            launcher[0], path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
        )
        if found is None:
            raise UsageError(f"--launcher: {launcher[0]} is not found beside {sys.executable} or on PATH.")
        launcher[0] = found
    sbatch = None if args.slurm is None else shlex.split(args.slurm)
    workers = workers_of(launcher) if sbatch is None else slurm_workers(sbatch)
    plan = schedule(args.faults, args.seed, args.max_delay_ms, KINDS if sbatch is None else SLURM_KINDS)
    root = os.path.abspath(args.work_dir)
    if os.path.exists(root) and os.listdir(root):
        raise UsageError(f"--work_dir {root} is not empty: the soak starts from nothing; name a new folder.")
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    how = (
        args.launcher or "one process"
        if sbatch is None
        else f"sbatch {args.slurm} scripts/run.sub {args.launcher}"
    )
    title = f"{args.faults} faults from seed {args.seed} on {workers} worker(s), {how}"
    _progress(f"Soak: {title}")
    data = write_data(root, plan, workers, args.seed)
    runs = {}
    for name in ("uninterrupted", "soaked"):
        output_dir = os.path.join(root, name)
        argv = command(launcher, workers, data, output_dir, plan, args.seed, args.extra)
        faults = plan if name == "soaked" else []
        if sbatch is None:
            runs[name] = _run(name, argv, output_dir, root, faults, args.max_launches)
        else:
            runs[name] = _run_slurm(name, [*sbatch, "scripts/run.sub", *argv], output_dir, root, faults, args)
        if not runs[name]["finished"]:
            print(f"The {name} run did not finish: see {root}/logs/.", file=sys.stderr)
            return 1
    return report(
        plan, runs, workers, title, os.path.join(root, "uninterrupted"), os.path.join(root, "soaked")
    )


def _run(name, argv, output_dir, root, plan, max_launches) -> dict:
    """Launches `argv` until it ends with status 0, firing `plan`'s process faults in turn."""
    log_dir = os.path.join(root, "logs", name)
    os.makedirs(log_dir, exist_ok=True)
    pending = [f for f in plan if f.kind != "nonfinite"]
    events, rows, launches, previous = [], [], [], None
    started = time.monotonic()
    while len(launches) < max_launches:
        fault = pending[0] if pending else None
        result = launch(argv, output_dir, log_dir, len(launches) + 1, fault, events, rows)
        launches.append(result)
        if previous is not None:  # how the fault before came back: where this launch resumed
            resumed = _resumed_from(result.stdout)
            previous.came_back = f"resumed from {resumed}{previous.came_back}"
            step = int(resumed[5:]) if resumed.startswith("ckpt-") else 0
            previous.redone = max(0, previous.reached - step)
        fired = fault is not None and fault.fired_at is not None
        _progress(
            f"  {name} launch {len(launches)}: {_ended(result.status)} after {result.wall_s:.1f} s"
            + (f", {fault.kind} after update {fault.fired_after}" if fired else "")
        )
        if result.status == 0 or not fired:
            break
        pending.pop(0)
        fault.ended, previous = _ended(result.status, result.stderr), fault
        rows.append(fault)
    return _ran(
        launches[-1].status == 0,
        len(launches),
        rows,
        started,
        pending,
        sum((r.orphans for r in launches), []),
    )


def _ran(finished: bool, launches: int, rows: list, started: float, undelivered: list, orphans: list) -> dict:
    return {
        "finished": finished,
        "launches": launches,
        "rows": sorted(rows, key=lambda r: r.fired_at or 0),
        "wall_s": time.monotonic() - started,
        "undelivered": undelivered,
        "orphans": orphans,
    }


# ------------------------------------------------------------------------------------ SLURM


def slurm_workers(sbatch: list[str]) -> int:
    """The worker count of sbatch arguments: --ntasks, else nodes x --ntasks-per-node (run.sub's 8)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-N", "--nodes", type=int, default=1)
    parser.add_argument("-n", "--ntasks", type=int)
    parser.add_argument("--ntasks-per-node", type=int, default=8)
    try:
        known, _ = parser.parse_known_args(sbatch)
    except SystemExit:
        raise UsageError(
            f"--slurm '{shlex.join(sbatch)}': -N, -n and --ntasks-per-node take a number."
        ) from None
    return known.ntasks or known.nodes * known.ntasks_per_node


class SlurmJob:
    """One sbatch submission of scripts/run.sub from this checkout, and what scontrol says of it."""

    def __init__(self, argv: list, output_dir: str, log: str):
        env = dict(os.environ, RESULTSDIR=output_dir)
        done = subprocess.run(
            ["sbatch", "--parsable", f"--output={log}", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise UsageError(f"sbatch refused the soak's job: {done.stderr.strip()}")
        self.id = done.stdout.strip().split(";")[0]

    def fields(self) -> dict:
        import re

        done = subprocess.run(["scontrol", "-o", "show", "job", self.id], capture_output=True, text=True)
        return dict(re.findall(r"(\S+?)=(\S*)", done.stdout)) if done.returncode == 0 else {}

    def signal(self, name: str) -> None:
        subprocess.run(["scancel", "--batch", f"--signal={name}", self.id], check=True, capture_output=True)


def _kill_a_worker(output_dir: str, number: int) -> None:
    """SIGKILL to one training process of this host writing to `output_dir`."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or ())
        if "run_pretraining.py" in line and f"--output_dir={output_dir}" in line:
            found.append(p)
    if not found:
        raise UsageError(
            f"kill_worker: no worker of {output_dir} runs on this host; run the soak on a node of the job."
        )
    random.Random(number).choice(sorted(found, key=lambda p: p.pid)).kill()


def _run_slurm(name, argv, output_dir, root, plan, args) -> dict:
    """Submits `argv` (sbatch's arguments) and fires `plan`'s faults at the job: signals that
    run.sub requeues on, or a killed worker, after which the failed job is submitted again."""
    log = os.path.join(root, "logs", f"{name}.out")
    pending = [f for f in plan if f.kind != "nonfinite"]
    events, rows, previous, mark = [], [], None, 0
    started = time.monotonic()
    job, launches, restarts = SlurmJob(argv, output_dir, log), 1, 0
    watch, fields, next_look = Watch(output_dir, events, rows), {}, 0.0
    while True:
        if time.monotonic() >= next_look:  # scontrol twice a second, the log fifty times
            fields, next_look = job.fields(), time.monotonic() + 0.5
        state = fields.get("JobState", "")
        fault = pending[0] if pending else None
        last = watch.look(fault)
        fired = fault is not None and fault.fired_at is not None
        if previous is not None and os.path.exists(log):
            with open(log, errors="replace") as f:
                text = f.read()[mark:]
            if "Resuming from " in text:
                resumed = _resumed_from(text)
                previous.came_back = f"resumed from {resumed}"
                step = int(resumed[5:]) if resumed.startswith("ckpt-") else 0
                previous.redone, previous = max(0, previous.reached - step), None
        again = state in SLURM_ENDED and state != "COMPLETED"
        if int(fields.get("Restarts", 0) or 0) > restarts or (
            again and fired and launches < args.max_launches
        ):
            if not fired:
                break  # requeued or failed without a fault of ours
            if again:
                fault.ended = f"job {state} (exit {fields.get('ExitCode', '?')}), submitted again"
                job, restarts = SlurmJob(argv, output_dir, log), 0
            else:
                restarts += 1
                fault.ended = f"requeued by run.sub (restart {restarts})"
            launches += 1
            _progress(f"  {name}: {fault.kind} after update {fault.fired_after}: {fault.ended}")
            rows.append(fault)
            previous, watch, next_look = pending.pop(0), Watch(output_dir, events, rows), 0.0
            continue
        if state in SLURM_ENDED:
            break
        if fault is not None and not fired and state == "RUNNING" and last >= fault.at:
            time.sleep(fault.delay_ms / 1000)
            watch.fired(fault)
            mark = os.path.getsize(log) if os.path.exists(log) else 0
            if fault.kind == "kill_worker":
                _kill_a_worker(output_dir, fault.number)
            else:
                job.signal(SLURM_SIGNALS[fault.kind])
        time.sleep(0.02)
    _progress(f"  {name}: job {job.id} {state} after {time.monotonic() - started:.1f} s")
    return _ran(state == "COMPLETED", launches, rows, started, pending, _left_running(output_dir))


def _update_seconds(output_dir: str, global_batch: int) -> list[float]:
    from training.metrics_log import read_log

    log = read_log(os.path.join(output_dir, "log.jsonl"))
    return [global_batch / e["sequences_per_second"] for e in log if "sequences_per_second" in e]


def _compare(straight: str, soaked: str) -> tuple[list[str], bool]:
    """The verdict's lines on the two runs' final checkpoints, and whether they are the same."""
    import numpy as np
    import tensorflow as tf

    from training.checkpointing import latest_checkpoint, read_run_state

    want_prefix, got_prefix = latest_checkpoint(straight), latest_checkpoint(soaked)
    if got_prefix is None:
        return ["the soaked run wrote no checkpoint"], False
    want, got = tf.train.load_checkpoint(want_prefix), tf.train.load_checkpoint(got_prefix)
    names = sorted(want.get_variable_to_shape_map())
    if set(names) != set(got.get_variable_to_shape_map()):
        return [f"the final checkpoints hold different tensors ({want_prefix}, {got_prefix})"], False
    largest, where = 0.0, ""
    for name in names:
        a, b = np.asarray(want.get_tensor(name)), np.asarray(got.get_tensor(name))
        if a.shape != b.shape:
            return [f"{name} has shape {b.shape}, not {a.shape}"], False
        if a.dtype.kind in "fiu" and a.size:
            d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            if d > largest or np.isnan(d):
                largest, where = d, name
        elif not np.array_equal(a, b):
            largest, where = float("inf"), name
    same = largest == 0.0
    lines = [
        f"bit-identical: all {len(names)} tensors of {os.path.basename(got_prefix)} equal the uninterrupted run's"
        if same
        else f"NOT identical: the largest difference is {largest:.3g}, in {where}"
    ]
    a, b = read_run_state(want_prefix), read_run_state(got_prefix)
    kept = (a.step, a.sequences) == (b.step, b.sequences)
    lines.append(
        f"nothing lost: both end at update {b.step} with {b.sequences:,} sequences consumed"
        if kept
        else f"LOST: the soaked run ends at update {b.step} ({b.sequences:,} sequences), "
        f"the uninterrupted one at {a.step} ({a.sequences:,})"
    )
    return lines, same and kept


def _progress(line: str) -> None:
    """A line of progress, on stderr (stdout holds the tables)."""
    print(line, file=sys.stderr, flush=True)


def report(plan, runs, workers, title, straight, soaked) -> int:
    """Prints the tables and the verdict; 0 when the verdict holds."""
    soak = runs["soaked"]
    print(f"\n{title}: each fault, how the run came back and what it cost:")
    print("\n| # | fault | when | the launch | came back | updates redone | seconds lost |")
    print("|---|---|---|---|---|---|---|")
    for i, row in enumerate(soak["rows"], 1):
        when = f"update {row.at}" if row.kind == "nonfinite" else f"after update {row.fired_after}"
        lost = "-" if row.lost_s is None else f"{row.lost_s:.1f}"
        redone = "-" if row.redone is None else str(row.redone)
        print(f"| {i} | {row.kind} | {when} | {row.ended} | {row.came_back} | {redone} | {lost} |")
    lines, holds = _compare(straight, soaked)
    orphans = soak["orphans"]
    lines.append(
        "no process left running" if not orphans else f"{len(orphans)} process(es) left running: {orphans}"
    )
    rolled = sum(r.kind == "nonfinite" and r.number == 0 for r in soak["rows"])
    expected = sum(f.kind == "nonfinite" for f in plan)
    if soak["undelivered"] or rolled != expected:
        lines.append(
            f"NOT every fault was met: {len(soak['undelivered'])} process fault(s) never fired, "
            f"{rolled} of {expected} non-finite batch(es) rolled back"
        )
        holds = False
    holds = holds and not orphans
    print(
        "\nThe runs; goodput: the seconds of the updates that reached the final model (updates x "
        "median update time) over the run's wall time, start-up and compilation included:"
    )
    print("\n| run | launches | wall s | updates | median update s | goodput |")
    print("|---|---|---|---|---|---|")
    for name, output_dir in (("uninterrupted", straight), ("soaked", soaked)):
        run = runs[name]
        seconds = _update_seconds(output_dir, BATCH * workers)
        updates = len(seconds)
        median = statistics.median(seconds) if seconds else 0.0
        print(
            f"| {name} | {run['launches']} | {run['wall_s']:.1f} | {updates} | {median:.3f} | "
            f"{updates * median / run['wall_s']:.2f} |"
        )
    print("\nVerdict: " + "; ".join(lines) + ".")
    return 0 if holds else 1


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(
        prog="python -m tools.fault_soak",
        description=__doc__.split("\n\n")[0],
        epilog="Flags after -- go to every run_pretraining.py run, e.g. -- --use_xla=false.",
    )
    parser.add_argument("--work_dir", required=True, help="an empty or new folder (shared by every host)")
    parser.add_argument("--faults", type=int, default=10, help="how many faults (default 10)")
    parser.add_argument(
        "--seed", type=int, default=1, help="draws the faults, their moments and the data order"
    )
    parser.add_argument(
        "--launcher",
        help=f"the command that starts the workers (default '{DEFAULT_LAUNCHER}'; with --slurm '', "
        "srun's tasks; '' for one process)",
    )
    parser.add_argument(
        "--slurm",
        metavar="SBATCH_ARGS",
        help="submit each run as `sbatch SBATCH_ARGS scripts/run.sub ...` from this checkout (e.g. "
        "'-N 2 --ntasks-per-node=8'; CONT=none or HOROVOD_LAUNCHER=mpirun as for run.sub)",
    )
    parser.add_argument("--max_delay_ms", type=int, default=500, help="a fault's delay after its update")
    parser.add_argument(
        "--max_launches", type=int, default=0, help="give up after this many (default 2 x faults + 3)"
    )
    parser.add_argument("extra", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.faults < 1:
        raise UsageError(f"--faults must be at least 1, got {args.faults}.")
    args.max_launches = args.max_launches or 2 * args.faults + 3
    if args.launcher is None:
        args.launcher = DEFAULT_LAUNCHER if args.slurm is None else ""
    return args


def main(argv=None) -> int:
    from common.tensorflow_startup import quiet_startup

    quiet_startup()
    try:
        return soak(parse(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
