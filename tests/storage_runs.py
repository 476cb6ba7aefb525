"""A warm launcher for tests/test_storage_faults.py: one process imports TensorFlow and the entry
points once, then runs each command in a child forked from it (a second of start-up instead of
five), so the fault matrix and its 20 kill -9 moments fit in CI's time.

Started as `python tests/storage_runs.py`; reads one JSON request per line on stdin and answers
one JSON line on stdout, {"status": exit status, or minus the signal that ended the child}:

    {"module": "run_pretraining", "argv": [...flags...], "out": PATH, "err": PATH,
     "kill_at": K,            # SIGKILL the child just before its K-th file-system event
     "events": PATH,          # where the child writes what it was doing when killed
     "fault": {"at_save": N, "kind": "disk_full" | "read_only" | "vanish", "ballast": PATH,
               "leave": BYTES}}   # break the output directory as save N begins

Events are the operations that make a save and a run's bookkeeping: os.replace, os.remove,
os.rename, os.fsync, shutil.rmtree, os.makedirs, SaveV2, and each logged update. The child is
killed the way kill -9 kills it (no finally block, no atexit runs); what it was doing goes to
`events` first: the event, its file, and the save it was inside of, if any. A child that ends
before its K-th event writes {"completed": number of events} there instead.

Forking is safe here only because nothing of TensorFlow's runtime has started in this process
(importing it starts no thread, and OpenBLAS is held to one): the launcher checks that it has a
single thread before each fork.
"""

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# OpenBLAS starts a thread pool when NumPy is imported; with one thread the launcher stays
# single-threaded until it forks (TensorFlow computes with its own Eigen and oneDNN threads).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

MODULES = ("run_pretraining", "run_classifier")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class _Events:
    """Counts the child's file-system events and kills it at the chosen one."""

    def __init__(self, kill_at: int, path: str):
        self.kill_at, self.path, self.count, self.saving = kill_at, path, 0, None

    def hit(self, what: str, target="") -> None:
        self.count += 1
        if self.count == self.kill_at:
            where = f"inside save {self.saving}" if self.saving is not None else "outside saves"
            name = os.path.basename(str(target)) if target else ""
            line = json.dumps({"event": self.count, "what": what, "file": name, "where": where})
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.write(fd, (line + "\n").encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)


def _install_kill(events: _Events) -> None:
    import tensorflow as tf

    from training.checkpointing import Checkpointer
    from training.metrics_log import MetricsLog

    def counted(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            events.hit(name, args[0] if args and isinstance(args[0], (str, bytes, os.PathLike)) else "")
            return original(*args, **kwargs)

        setattr(module, name, wrapper)

    for name in ("replace", "remove", "rename", "fsync", "makedirs"):
        counted(os, name)
    counted(shutil, "rmtree")
    save_v2 = tf.raw_ops.SaveV2

    def saving_v2(*args, **kwargs):
        events.hit("SaveV2", kwargs.get("prefix", ""))
        return save_v2(*args, **kwargs)

    tf.raw_ops.SaveV2 = saving_v2
    record = MetricsLog.record

    def logged(self, step, *args, **kwargs):
        events.hit("update", f"step {step}")
        return record(self, step, *args, **kwargs)

    MetricsLog.record = logged
    save = Checkpointer.save

    def inside(self, step):
        events.saving = step
        try:
            return save(self, step)
        finally:
            events.saving = None

    Checkpointer.save = inside


def _break(fault: dict, output_dir: str) -> None:
    """Breaks `output_dir` the way `fault` says (see the module docstring)."""
    kind = fault["kind"]
    if kind == "disk_full":
        free = shutil.disk_usage(output_dir).free
        with open(fault["ballast"], "wb") as f:
            f.write(b"\0" * max(0, free - fault["leave"]))
    elif kind == "read_only":
        # A read-only mount over the directory: the files the run holds open stay writable (they
        # belong to the mount beneath), every file it opens from now on is refused (EROFS).
        subprocess.run(["mount", "--bind", output_dir, output_dir], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", output_dir], check=True)
    elif kind == "vanish":
        os.rename(output_dir, output_dir + ".gone")
    else:
        raise ValueError(kind)


def _install_fault(fault: dict) -> None:
    from training.checkpointing import Checkpointer

    save = Checkpointer.save

    def breaking(self, step):
        if step == fault["at_save"]:
            _break(fault, self.output_dir)
        return save(self, step)

    Checkpointer.save = breaking


def _child(request: dict) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    code, events = 1, None
    try:
        if request.get("kill_at"):
            events = _Events(request["kill_at"], request["events"])
            _install_kill(events)
        if request.get("fault"):
            _install_fault(request["fault"])
        code = importlib.import_module(request["module"]).main(request["argv"])
        if events is not None:  # not killed: how many events the whole run had
            with open(request["events"], "a") as f:
                f.write(json.dumps({"completed": events.count}) + "\n")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from common.tensorflow_startup import quiet_startup

    quiet_startup()  # as the entry points import TensorFlow: its objects frozen, shared by the forks
    import keras  # noqa: F401
    import tensorflow  # noqa: F401

    for name in MODULES:
        importlib.import_module(name)
    import training.checkpointing  # noqa: F401
    import training.metrics_log  # noqa: F401
    import training.pretraining_job  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if _threads() != 1:
            raise RuntimeError(f"{_threads()} threads in the launcher: forking it would not be safe")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"status": code}), flush=True)


if __name__ == "__main__":
    main()
