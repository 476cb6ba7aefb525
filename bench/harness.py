"""How the benchmarks measure: a child process, its peak memory, timing, repeats and the table.

Every bench script measures through this module, so a figure means the same in every table.

A measured child (`Child`, `run`) is one command started from the repository root in its own
process group (its workers are paused and ended with it), TF's C++ logs quiet unless the
environment says otherwise. Its stdout is kept, and each "RESULT {json}" line on it (what `emit`
prints in the child) is an event for the parent as it comes; its stderr's "[bench]" lines are
passed on to ours live and the rest kept to explain a failure. Each wait takes a timeout; a child
that runs past it (it is killed), reports an error event or dies before its result raises
ChildFailed with the reason.

Peak memory is VmHWM, the kernel's high-water mark of a process's resident set, read from
/proc/<pid>/status while the process runs: of the child, and apart of every process below it
(the largest, as the workers' peak). It is read every POLL_S, so what a process adds in its last
POLL_S is not seen (peaks come during the work, not at the exit), nor a worker that lives less.
Not ru_maxrss: Linux folds into it the peak of the process that called exec (under vfork, the
bench's own) and starts a forked worker's at its parent's size, so wait4's figure is never below
the starter's.

CPU seconds are wait4's at the exit (user + system, the child's own and those of the descendants
it reaped). The descendants' share is read while they run (/proc/<pid>/stat): the child's count of
those it has reaped (cutime + cstime) or, where larger (a pool reaped at the exit), the sum of each
descendant's own as last read.

Flags: every script's comma-separated options go through `comma_list` (an argparse type), so a
list is split, converted and checked alike everywhere, and a bad item stops the run with its name.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL_S = 0.05  # how often the VmHWM of the child and the processes below it is read
RESULT = "RESULT "  # an event line on a child's stdout: RESULT {json}
CHILD_FLAG = "--_child"  # a bench script run as its own measuring child: SCRIPT --_child SPEC_JSON
_TICKS = os.sysconf("SC_CLK_TCK")


def _quiet_tensorflow_startup() -> None:
    """A bench process (a script, or a measuring child of one) starts TensorFlow as the entry
    points do (common/tensorflow_startup.py): without its start-up notes, and without Keras'
    optional integrations (seconds of CPU each). The module is loaded from its file under a name
    of its own, so no library package is imported from this checkout: a --baseline child of
    pretrain_throughput imports the library from an earlier revision."""
    import importlib.util

    path = os.path.join(ROOT, "common", "tensorflow_startup.py")
    spec = importlib.util.spec_from_file_location("_bench_tensorflow_startup", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.quiet_startup()


_quiet_tensorflow_startup()


def log(message: str) -> None:
    """A progress line on stderr; a parent passes its children's on."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ peak memory


def _status_kb(pid: int | str, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None  # gone, or a zombie (its memory is already released)


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """VmHWM of process `pid` (this one by default) in MB; None once it has exited."""
    kb = _status_kb(pid, "VmHWM")
    return None if kb is None else kb / 1024


def rss_mb(pid: int | str = "self") -> float | None:
    """VmRSS (the resident set now) of process `pid` in MB; None once it has exited."""
    kb = _status_kb(pid, "VmRSS")
    return None if kb is None else kb / 1024


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]; utime is [11], cutime [13]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()


class _ProcessTree:
    """The processes below one process, found by listing /proc (not every kernel lists a process's
    children); each process's parent is read once, when it is first seen, so a look costs about a
    listing of /proc (0.1 ms), not a read of every process's stat (1.5 ms for 80)."""

    def __init__(self, root: int):
        self.root = root
        self._parents: dict[int, int] = {}

    def below(self) -> set[int]:
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        self._parents = {pid: ppid for pid, ppid in self._parents.items() if pid in pids}
        for pid in pids - self._parents.keys():
            fields = _stat_fields(pid)
            if fields:
                self._parents[pid] = int(fields[1])
        children = collections.defaultdict(list)
        for pid, ppid in self._parents.items():
            children[ppid].append(pid)
        found, todo = set(), [self.root]
        while todo:
            for child in children.get(todo.pop(), ()):
                found.add(child)
                todo.append(child)
        return found


# ------------------------------------------------------------------------------ child process


class ChildFailed(Exception):
    """A child that timed out, reported an error event, died before its result or exited non-zero."""


@dataclasses.dataclass(frozen=True)
class Exit:
    """What a child left at its exit."""

    returncode: int
    seconds: float  # wall, from its start to its exit
    cpu_s: float  # user + system: its own and its reaped descendants' (wait4)
    children_cpu_s: float  # the descendants' part of cpu_s (the module docstring says how)
    peak_rss_mb: float | None  # its VmHWM
    children_peak_rss_mb: float | None  # the largest VmHWM below it; None where none was seen
    stdout: str
    stderr: str  # all but the "[bench]" lines, which went to ours


class Child:
    """One measured child process (the module docstring says how it is run and measured).

    Use it as a context manager: leaving the block kills the child and its process group if it
    still runs (a failure or Ctrl-C in the bench leaves nothing behind)."""

    def __init__(self, argv: list[str], *, env: dict | None = None, cwd: str = ROOT):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: workers included in pause and kill
        )
        self.events: queue.Queue = queue.Queue()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._exited = threading.Event()
        self._ended = self._usage = None
        self._peak_kb = self._children_peak_kb = None
        self._children_cpu_s = 0.0
        self._threads = [
            threading.Thread(target=target, daemon=True)
            for target in (self._read_stdout, self._read_stderr, self._reap, self._watch)
        ]
        self._stderr_reader = self._threads[1]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    # --- what the parent calls

    def next_event(self, timeout_s: float | None = None) -> dict:
        """The child's next event; ChildFailed (and the child killed) on an error event, when it
        exits without one, or when none comes within timeout_s."""
        try:
            event = self.events.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise ChildFailed(f"timed out after {timeout_s:.0f}s") from None
        if event["event"] == "error":
            self.kill()
            raise ChildFailed(event["error"])
        if event["event"] == "eof":
            self.events.put(event)  # every later call fails alike
            if not self._exited.wait(60):  # stdout closed, the process still there
                self.kill()
            # Its last stderr lines name the cause: read them to the pipe's end first.
            self._stderr_reader.join(timeout=30)
            raise ChildFailed(self._crash_cause())
        return event

    def wait(self, timeout_s: float | None = None) -> Exit:
        """Waits for the exit and returns what the child left; ChildFailed (killed) past timeout_s."""
        if not self._exited.wait(timeout_s):
            self.kill()
            raise ChildFailed(f"timed out after {timeout_s:.0f}s")
        for thread in self._threads:  # a pipe ends when the last process holding it does
            thread.join(timeout=30)
        kb = 1024.0
        return Exit(
            returncode=self.proc.returncode,
            seconds=self._ended - self.started,
            cpu_s=self._usage.ru_utime + self._usage.ru_stime,
            children_cpu_s=self._children_cpu_s,
            peak_rss_mb=None if self._peak_kb is None else self._peak_kb / kb,
            children_peak_rss_mb=None if self._children_peak_kb is None else self._children_peak_kb / kb,
            stdout="".join(self._stdout),
            stderr="".join(self._stderr),
        )

    def pause(self) -> None:
        """Stops the whole process group (SIGSTOP): a child waiting between its timed repeats still
        runs threads (tf.data, Horovod's background loop) that take cores from the one timed."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kills the whole process group, if the child still runs, and reaps the child."""
        self._signal(signal.SIGKILL)
        self._exited.wait()

    # --- inside

    def _signal(self, signum: int) -> None:
        if not self._exited.is_set():
            try:
                os.killpg(self.proc.pid, signum)  # the group the child leads
            except ProcessLookupError:
                pass

    def _reap(self) -> None:
        # wait4 gives this child's own rusage (RUSAGE_CHILDREN would mix in earlier children).
        _, status, usage = os.wait4(self.proc.pid, 0)
        self._ended = time.perf_counter()
        self._usage = usage
        self.proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        self._exited.set()

    def _watch(self) -> None:
        tree = _ProcessTree(self.proc.pid)
        below_cpu_s: dict[int, float] = {}  # each process below as last read, gone ones included
        while not self._exited.is_set():
            own = _status_kb(self.proc.pid, "VmHWM")
            if own is not None:
                self._peak_kb = max(own, self._peak_kb or 0)
            fields = _stat_fields(self.proc.pid)
            reaped = (int(fields[13]) + int(fields[14])) / _TICKS if fields else 0.0  # cutime + cstime
            for pid in tree.below():
                kb, fields = _status_kb(pid, "VmHWM"), _stat_fields(pid)
                if kb is not None:
                    self._children_peak_kb = max(kb, self._children_peak_kb or 0)
                if fields:
                    below_cpu_s[pid] = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
            self._children_cpu_s = max(self._children_cpu_s, reaped, sum(below_cpu_s.values()))
            self._exited.wait(POLL_S)

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._stdout.append(line)
            at = line.find(RESULT)  # anywhere: horovodrun puts the rank before each line
            if at >= 0:
                self.events.put(json.loads(line[at + len(RESULT) :]))
        self.events.put({"event": "eof"})

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            at = line.find("[bench]")
            if at >= 0:
                sys.stderr.write(line[at:])
                sys.stderr.flush()
            else:
                self._stderr.append(line)

    def _crash_cause(self) -> str:
        # A C++ abort leaves no Python exception: the last fatal or check line on stderr names it.
        code = self.proc.returncode
        for line in reversed(self._stderr):
            if any(key in line for key in ("Check failed", "F0000", "Fatal", "Error", "error:")):
                return f"exit {code}: {line.strip()}"
        return f"process exited with code {code} and no result"


def run(argv: list[str], name: str, *, env: dict | None = None, timeout_s: float | None = None) -> Exit:
    """Runs one measured child to its exit; ChildFailed naming `name`, with the end of its stderr,
    when it exits non-zero or runs past timeout_s."""
    with Child(argv, env=env) as child:
        done = child.wait(timeout_s)
    if done.returncode != 0:
        raise ChildFailed(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done


# The child's side: a bench script that measures in a child of its own runs as
# `SCRIPT --_child SPEC_JSON` (child_argv) and hands its measuring function to `serve`.


def child_argv(script: str, spec) -> list[str]:
    """The command that runs bench script `script` as a measuring child of JSON-able `spec`."""
    return [sys.executable, os.path.abspath(script), CHILD_FLAG, json.dumps(spec)]


def emit(event: dict) -> None:
    """Sends one event ({"event": kind, ...}) to the parent: a RESULT line on stdout."""
    print(RESULT + json.dumps(event), flush=True)


def serve(measure: Callable[[dict], None], spec_json: str) -> None:
    """Runs measure(spec), which emits its events; an exception becomes an error event, which the
    parent reports in its table instead of stopping the whole run."""
    try:
        measure(json.loads(spec_json))
    except Exception as err:
        emit({"event": "error", "error": f"{type(err).__name__}: {err}"})


def error_cell(text: str, width: int = 200) -> str:
    """The first informative line of an error, cut to `width`, for a table cell (markdown-safe)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else "unknown error"
    for marker in ("Detected at node", "\tStack trace", " [Op:"):
        line = line.split(marker)[0].strip()
    line = " ".join(line.split()).replace("|", "/")
    return line if len(line) <= width else line[: width - 3] + "..."


# ------------------------------------------------------------------------ timing and repeats


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """Wall seconds of one call (perf_counter) and what it returned."""
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def timed_calls(call: Callable[[], object], count: int, warmup: int = 0) -> list[float]:
    """Wall seconds of each of `count` calls, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    return [timed(call)[0] for _ in range(count)]


def calls_per_second(call: Callable[[], object], seconds: float, warmup: int = 0) -> float:
    """Calls per second over about `seconds` of calls back to back, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        calls += 1
    return calls / (time.perf_counter() - start)


def interleaved(names: Iterable[T], repeats: int) -> Iterator[tuple[int, T]]:
    """(repeat, name): every name once per repeat, in order on even repeats and reversed on odd
    ones, so a slow minute on a shared machine falls on every name alike and none is always first."""
    names = list(names)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            yield repeat, name


def min_max(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def median_range(values: list[float], fmt: str = "{:.2f}") -> str:
    """'median (min-max)' of repeated measurements."""
    return f"{fmt.format(statistics.median(values))} ({min_max(values, fmt)})"


# ------------------------------------------------------------------------ tables and machine


def markdown_table(headers: list[str], rows: Iterable[Iterable]) -> str:
    """The table every bench script prints: a markdown table, one row per configuration."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def mb_cell(value: float | None) -> str:
    """A memory figure in MB for a table: '-' where it was not measured."""
    return "-" if value is None else f"{value:,.0f}"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def short_revision(revision: str) -> str:
    """The short sha of git revision `revision` of this repository (a bench's --baseline);
    SystemExit naming it when git knows no such commit."""
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", f"{revision}^{{commit}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"--baseline: git knows no revision {revision!r} ({err.stderr.strip()}).") from None


def cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return cpu


def package_version(*names: str) -> str:
    """The installed version of the first of `names` (distribution names) installed."""
    # From the package metadata: importing TF for its version would spin up its thread pools.
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


# ------------------------------------------------------------------------------ records


class _Tee:
    """Writes to a stream and keeps a copy (the tables a benchmark prints, for its record)."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def recorded(name: str, options: list[str], main: Callable[[list[str]], int | None]) -> int:
    """Runs benchmark `name`'s main(options) and saves what it printed as its record under
    bench/results/ (bench/records.py), replacing the record of the same options; a failed run
    records nothing."""
    from bench import records

    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        code = main(options) or 0
    finally:
        sys.stdout = tee.stream
    if code == 0:
        record = records.make_record(name, options, "".join(tee.parts))
        if not record["tables"]:
            log(f"{name} printed no table: nothing recorded")
            return 1
        log(f"recorded in {os.path.relpath(records.save(record), ROOT)}")
    return code


# ------------------------------------------------------------------------------------- flags

_KIND_NAMES = {int: "an integer", float: "a number"}  # what comma_list says a bad item is not


def comma_list(
    kind: Callable[[str], T] = str, choices: Iterable | None = None, *, allow_empty: bool = True
) -> Callable[[str], list[T]]:
    """An argparse `type=` for a comma-separated flag: "a, b,,c" -> [kind("a"), kind("b"), kind("c")]
    (blanks stripped, empty items skipped). An item that `kind` cannot convert or that is not among
    `choices` (compared after conversion), or no item at all unless allow_empty, raises
    argparse.ArgumentTypeError naming it, which argparse reports with the flag's name (exit 2).
    A `kind` may raise ArgumentTypeError itself to say what it takes (positive_int does)."""
    allowed = None if choices is None else tuple(choices)
    listing = None if allowed is None else ", ".join(map(str, allowed))
    what = _KIND_NAMES.get(kind, f"a valid {getattr(kind, '__name__', 'value')}")

    def parse(text: str) -> list[T]:
        values = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            try:
                value = kind(item)
            except (TypeError, ValueError):
                raise argparse.ArgumentTypeError(f"{item!r} is not {what}.") from None
            if allowed is not None and value not in allowed:
                raise argparse.ArgumentTypeError(f"{item!r} is not one of {listing}.")
            values.append(value)
        if not values and not allow_empty:
            of = f" of {listing}" if listing else ""
            raise argparse.ArgumentTypeError(f"no value given; give at least one{of}.")
        return values

    return parse


def positive_int(text: str) -> int:
    """An argparse `type=` (or a comma_list kind) for an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer.")
    return value
