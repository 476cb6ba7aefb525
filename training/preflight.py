"""Pre-flight: before anything is built, every worker shows that it can do its part, or the run
stops within --worker_timeout_seconds with one sentence naming the worker, its host and what is
wrong. Never a hang at start-up, never a problem found by one worker while the others wait.

    joining = Joining(output_dir, timeout_s, rank, world)   # before Horovod starts (hvd.init)
    with joining, job.worker(...) as (dist, out):
        check_task(s, task, dist, out, joining)   # check(dist, joining, inputs=..., ...)

Each worker looks for itself, then every worker gets every worker's findings (one gather of text,
which also shows that the collective answers); rank 0 prints one line, or every worker raises the
same UserError (exit status 2):

- the files the run reads: each flag's file, directory or glob is there and readable, and every
  worker sees as many files of as many bytes as rank 0 (a half-synchronised copy on one host would
  otherwise train another data order, silently);
- the output directory is one directory for every worker: rank 0 writes a file with a fresh token
  into it, and every worker reads the token back (a node-local disk under the same path fails);
- room for two checkpoints where rank 0 writes them (an estimate from the model's size);
- GPUs: a worker that sees any must see at least one per worker of its host.

A worker that does not join: `Joining` beats this worker's heartbeat in <output_dir>/heartbeat/
(common/heartbeat.py, the watchdog's) from before Horovod starts, and when the gather has not
answered within the timeout, names the workers whose heartbeat never came (not started, or
another output directory) or went stale (stuck, with their host), and ends the process with exit
status 2, which makes the launcher stop the others.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import socket
import sys
import time

from common.errors import UserError
from common.files import expand_globs, format_bytes, free_bytes, write_text
from common.heartbeat import Heartbeat

PREFLIGHT_EXIT_STATUS = 2  # as for the UserError it is (common/cli.py)
TOKEN_NAME = ".preflight"  # rank 0's token in the output directory, removed once read
HEARTBEAT_DIR = "heartbeat"  # training/watchdog.py's too


class Joining:
    """The watch over start-up: from `__enter__` (before Horovod's init) until `done()`, this
    worker's heartbeat beats, and after `timeout_s` without `done()` the process ends naming the
    workers that did not join. Only with several workers (`world` > 1)."""

    def __init__(self, output_dir: str, timeout_s: float, rank: int, world: int, stream=None):
        self.output_dir = output_dir
        self.timeout_s = timeout_s
        self.rank, self.world = rank, world
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self._done = False
        self.heartbeat = None
        if world > 1:
            period = min(1.0, timeout_s / 4)
            self.heartbeat = Heartbeat(
                os.path.join(output_dir, HEARTBEAT_DIR),
                rank,
                world,
                interval_s=period,
                stale_s=3 * period,
                each_beat=self._watch,
                name="bert-preflight",
            )

    def __enter__(self) -> "Joining":
        if self.heartbeat is not None:
            try:
                self.heartbeat.__enter__()
            except OSError:  # the output directory cannot be made here: check() names it
                self.heartbeat = None
            else:
                self.heartbeat.look()  # from now on, a worker that never beats goes stale too
        return self

    def __exit__(self, *exc) -> bool:
        self.done()
        return False

    def done(self) -> None:
        """Every worker answered: the watch ends."""
        self._done = True
        if self.heartbeat is not None:
            self.heartbeat.__exit__(None, None, None)
            self.heartbeat = None

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def _watch(self) -> None:
        """In the heartbeat's thread, after each beat: gives up once the timeout passed."""
        if self._done or self.seconds() < self.timeout_s:
            return
        print(f"Pre-flight: {self.not_joined()}", file=self.stream, flush=True)
        os._exit(PREFLIGHT_EXIT_STATUS)

    def not_joined(self) -> str:
        """The sentence naming the workers that did not answer within the timeout."""
        stale = {beat.rank: beat for beat in self.heartbeat.stale()} if self.heartbeat else {}
        silent = []
        for rank, beat in sorted(stale.items()):
            if beat.host == "an unknown host":
                silent.append(
                    f"worker {rank} never beat in {os.path.join(self.output_dir, HEARTBEAT_DIR)} "
                    "(not started, or it sees another --output_dir)"
                )
            else:
                silent.append(f"worker {rank} on host {beat.host} (pid {beat.pid}) stopped beating")
        why = (
            "; ".join(silent)
            if silent
            else "every worker's heartbeat is fresh, so they run but cannot reach each other: check "
            "the network between their hosts (HOROVOD_GLOO_IFACE, NCCL_SOCKET_IFNAME)"
        )
        return (
            f"worker {self.rank} on host {socket.gethostname()} waited {self.timeout_s:g} s "
            f"(--worker_timeout_seconds) for the {self.world} workers to answer: {why}."
        )


def _files_of(value: str) -> tuple[list[str], str | None]:
    """(the local files a flag's value names: comma-separated files and globs as
    common.files.expand_globs reads them, directories (their files) and checkpoint prefixes
    (ckpt-N: its ckpt-N.* files); a problem, or None). Remote paths (gs://, s3://, ...) are left
    to the job, which reads them through TensorFlow."""
    found = []
    for pattern in (os.path.expanduser(p.strip()) for p in value.split(",") if p.strip()):
        if "://" in pattern:
            continue
        prefixed = sorted(glob.glob(glob.escape(pattern) + ".*"))
        if os.path.isdir(pattern):
            matches = [os.path.join(pattern, name) for name in sorted(os.listdir(pattern))]
            found += [m for m in matches if os.path.isfile(m)]
        elif prefixed and not glob.has_magic(pattern) and not os.path.exists(pattern):
            found += prefixed
        else:
            try:
                found += expand_globs(pattern)
            except UserError:
                return found, f"{pattern} matches no file"
    unreadable = [path for path in found if not os.access(path, os.R_OK)]
    if unreadable:
        return found, f"{unreadable[0]} cannot be read (permission)"
    return found, None


def checkpoint_bytes(config) -> int:
    """About the bytes of one training checkpoint of a BERT of `config` (a BertConfig) with the
    pretraining heads: every weight in float32 and the optimizer's two slots (LAMB, Adam)."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    embeddings = (v + config.max_position_embeddings + config.type_vocab_size) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    heads = (h * h + h) + (h * h + 3 * h + v) + (2 * h + 2)  # pooler, masked LM (tied), NSP
    return 3 * 4 * (embeddings + config.num_hidden_layers * layer + heads)


def _look(inputs, output_dir: str, token: str, checkpoint_size, rank: int, gpus: int) -> dict:
    """This worker's findings (a JSON-able dict). token: worker 0's, "" when it could not write
    it; checkpoint_size: () -> about the bytes of a checkpoint, or None when not known."""
    problems, seen = [], {}
    for flag, value in inputs:
        files, problem = _files_of(value)
        if problem:
            problems.append(f"cannot read {flag}: {problem}")
        if files or problem:  # remote files alone: nothing seen here to compare
            seen[flag] = [len(files), sum(os.path.getsize(f) for f in files)]
    if token:
        try:
            with open(os.path.join(output_dir, TOKEN_NAME), encoding="utf-8") as f:
                found = f.read().strip()
        except OSError:
            found = ""
        if found != token:
            problems.append(
                f"does not see worker 0's --output_dir {output_dir} (a file worker 0 wrote there "
                f"{'holds another token' if found else 'is not there'}): every worker must see one "
                "shared directory, or a resumed run would read other checkpoints on each host"
            )
    room = None
    size = checkpoint_size() if rank == 0 else None
    if size:
        free = free_bytes(output_dir)
        if free is not None and free < 2 * size:
            problems.append(
                f"has {format_bytes(free)} free in --output_dir {output_dir}, but two checkpoints "
                f"need about {format_bytes(2 * size)}"
            )
        room = [free, 2 * size]
    return {"host": socket.gethostname(), "problems": problems, "seen": seen, "gpus": gpus, "room": room}


def _gpu_problems(reports: list[dict]) -> dict[int, str]:
    """rank -> the GPU problem of a worker that sees fewer GPUs than its host has workers."""
    per_host = {}
    for report in reports:
        per_host[report["host"]] = per_host.get(report["host"], 0) + 1
    return {
        rank: f"sees {r['gpus']} GPU(s) for the {per_host[r['host']]} workers of its host: start at most "
        f"{r['gpus']} a host, or make every GPU visible (CUDA_VISIBLE_DEVICES)"
        for rank, r in enumerate(reports)
        if 0 < r["gpus"] < per_host[r["host"]]
    }


def _differences(reports: list[dict]) -> list[str]:
    """Sentences for each worker that sees another number of files (or bytes) than worker 0."""
    differ = []
    for rank, report in enumerate(reports[1:], start=1):
        for flag, (count, size) in report["seen"].items():
            want = reports[0]["seen"].get(flag)
            if want is not None and count and [count, size] != want:  # none: named as unreadable
                differ.append(
                    f"worker {rank} on host {report['host']} sees {count} file(s) of "
                    f"{format_bytes(size)} for {flag} where worker 0 sees {want[0]} of "
                    f"{format_bytes(want[1])}"
                )
    return differ


def check(dist, joining: Joining, *, inputs, output_dir: str, checkpoint_size, gpus: int, stream) -> list:
    """Runs the pre-flight on every worker (see the module docstring); rank 0 prints one line.
    inputs: ("--flag", value) pairs of the files every worker reads (values may be globs,
    comma-separated, directories or checkpoint prefixes); with one worker the job's own checks
    read them. checkpoint_size: () -> about the bytes of one checkpoint, or None when the model
    files do not say (the job's own checks then name what is wrong with them). gpus: the GPUs this worker sees (0 on a CPU). Returns every worker's findings
    in rank order; UserError on every worker when any has a problem."""
    started = time.monotonic()
    token, unwritable = "", None
    if dist.is_chief and dist.size > 1:
        token = secrets.token_hex(8)
        try:
            os.makedirs(output_dir, exist_ok=True)
            write_text(os.path.join(output_dir, TOKEN_NAME), token + "\n")
        except OSError as error:
            token, unwritable = "", f"cannot write in --output_dir {output_dir} ({error.strerror or error})"
    token = dist.gather_texts(token)[0]  # worker 0's, on every worker
    mine = _look(inputs if dist.size > 1 else [], output_dir, token, checkpoint_size, dist.rank, gpus)
    if unwritable:
        mine["problems"].append(unwritable)
    reports = [json.loads(text) for text in dist.gather_texts(json.dumps(mine))]
    joining.done()
    if token and dist.is_chief:
        try:
            os.remove(os.path.join(output_dir, TOKEN_NAME))
        except OSError:
            pass
    problems = [
        f"worker {rank} on host {r['host']} {problem}"
        for rank, r in enumerate(reports)
        for problem in r["problems"]
    ]
    problems += [
        f"worker {rank} on host {reports[rank]['host']} {p}" for rank, p in _gpu_problems(reports).items()
    ]
    problems += _differences(reports)
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise UserError(f"Pre-flight: {problems[0]}{more}.")
    if dist.is_chief:
        hosts = sorted({r["host"] for r in reports})
        room = "the model's size is not known yet"
        if reports[0]["room"]:
            free, needed = reports[0]["room"]
            room = f"two checkpoints need about {format_bytes(needed)}" + (
                f", {format_bytes(free)} are free" if free is not None else ""
            )
        files = ", ".join(f"{count} file(s) for {flag}" for flag, (count, _) in reports[0]["seen"].items())
        sees = f"each sees {files} and worker 0's output directory; " if dist.size > 1 else ""
        print(
            f"Pre-flight in {time.monotonic() - started:.2f} s: {dist.size} worker(s) on {len(hosts)} "
            f"host(s) ({', '.join(hosts[:4])}{' ...' if len(hosts) > 4 else ''}) answered "
            f"{joining.seconds():.1f} s after starting; {sees}{room}.",
            file=stream,
            flush=True,
        )
    return reports


def check_task(s, task, dist, out, joining: Joining) -> None:
    """`check` for a training.job run of `task` with settings `s` (within
    --worker_timeout_seconds of the start, `joining` watching): the model files, --init_checkpoint
    and the task's inputs, the output directory, room for two checkpoints of the task's model,
    GPUs."""
    from training.checkpointing import latest_checkpoint
    from training.distributed import visible_gpus

    def checkpoint_size() -> int | None:
        try:
            resume_from = latest_checkpoint(s.output_dir) if os.path.isdir(s.output_dir) else None
            config, _ = task.model_files(s, resume_from)
            return checkpoint_bytes(config)
        except UserError:
            return None  # the job's plan names what is wrong, on every worker alike

    check(
        dist,
        joining,
        inputs=[
            (f"--{name}", value)
            for name in ("bert_config_file", "vocab_file", "init_checkpoint")
            if (value := getattr(s, name))
        ]
        + task.inputs(s),
        output_dir=s.output_dir,
        checkpoint_size=checkpoint_size,
        gpus=visible_gpus(),
        stream=out,
    )
