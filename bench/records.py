"""Results as data: one JSON file per benchmark under bench/results/, one record per set of options.

`python -m bench NAME --record [options]` runs the benchmark, reads the markdown tables it prints
(`parse_output`) and saves them with what produced them (`make_record`): the benchmark, its
options and command, the commit, the date and the machine (CPU model, cores, ISA flags, the GPU
where there is one). A newer record of the same benchmark and options replaces the older one
(`save`); git keeps the history. `python -m bench report` writes docs/performance.md from these
files (bench/report.py).

A record (one item of the file's "records" list):

    benchmark     str, the bench script's name (or a run that is not one, such as "quickstart")
    options       list[str], its flags as given; with `benchmark` the record's identity
    command       str, the command that reproduces it
    commit        str, the short sha it ran at ("a..b" for a range); working_tree: true when
                  tracked files differed from that commit
    date          "YYYY-MM-DD" (UTC)
    machine       {"cpu": str|None, "cores": int|None, "isa": [str]|None, "gpu": str|None,
                   "note": str (optional: load, what else ran)}
    tables        [{"title": str, "headers": [str], "rows": [[str]]}], every row as long as headers
    notes         [str], the other lines the benchmark printed (optional)
    carried_over  str (optional): where a figure measured before records existed was copied from;
                  its machine then holds what that page said, and None where it said nothing

Plain Python, no TensorFlow: the page's test reads these files in a second.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# BENCH_RESULTS_DIR: elsewhere than bench/results/ (the tests' records).
RESULTS_DIR = os.environ.get("BENCH_RESULTS_DIR") or os.path.join(HERE, "results")

# The CPU flags that decide which kernels a figure ran on (TensorFlow's and XLA's CPU paths).
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve",
)  # fmt: skip
KEYS = ("benchmark", "options", "command", "commit", "date", "machine", "tables")
COMMIT = re.compile(r"^[0-9a-f]{7,40}(\.\.[0-9a-f]{7,40})?$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# ------------------------------------------------------------------------- what produced it


def machine() -> dict:
    """This machine as a record names it: CPU model, usable cores, ISA flags, the GPUs' names."""
    cpu, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and cpu is None:
                    cpu = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {"cpu": cpu, "cores": cores, "isa": [f for f in ISA_FLAGS if f in flags], "gpu": gpu_name()}


def gpu_name() -> str | None:
    """The GPUs' names as nvidia-smi gives them ("2 x NVIDIA H100 80GB HBM3"); None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if not names:
        return None
    return names[0] if len(names) == 1 else f"{len(names)} x {names[0]}"


def commit() -> tuple[str, bool]:
    """(short sha of HEAD, whether tracked files differ from it)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short=7", "HEAD") or "unknown", bool(
        git("status", "--porcelain", "--untracked-files=no")
    )


# ------------------------------------------------------------------------- what it printed


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_output(text: str) -> tuple[list[dict], list[str]]:
    """The markdown tables in a benchmark's output, each titled by the last line printed before it,
    and the other lines (notes)."""
    tables, notes, pending = [], [], []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1].strip()) <= set("|-: "):
            headers, rows = _cells(line), []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                row = _cells(lines[i])
                rows.append((row + [""] * len(headers))[: len(headers)])
                i += 1
            title = pending.pop() if pending else f"table {len(tables) + 1}"
            notes += pending
            pending = []
            tables.append({"title": title.rstrip(":"), "headers": headers, "rows": rows})
            continue
        if line:
            pending.append(line)
        i += 1
    return tables, notes + pending


def make_record(benchmark: str, options: list[str], output: str, *, date: str | None = None) -> dict:
    """A record of one run of `python -m bench BENCHMARK OPTIONS` that printed `output`."""
    sha, dirty = commit()
    tables, notes = parse_output(output)
    record = {
        "benchmark": benchmark,
        "options": list(options),
        "command": " ".join(["python -m bench", benchmark, *options]),
        "commit": sha,
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": machine(),
        "tables": tables,
    }
    if dirty:
        record["working_tree"] = True
    if notes:
        record["notes"] = notes
    return record


# ------------------------------------------------------------------------- the files


def path_of(benchmark: str, directory: str = RESULTS_DIR) -> str:
    return os.path.join(directory, f"{benchmark}.json")


def load(benchmark: str, directory: str = RESULTS_DIR) -> list[dict]:
    path = path_of(benchmark, directory)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)["records"]


def load_all(directory: str = RESULTS_DIR) -> dict[str, list[dict]]:
    """Every benchmark's records, by benchmark name."""
    if not os.path.isdir(directory):
        return {}
    names = sorted(name[: -len(".json")] for name in os.listdir(directory) if name.endswith(".json"))
    return {name: load(name, directory) for name in names}


def save(record: dict, directory: str = RESULTS_DIR) -> str:
    """Writes `record` into its benchmark's file, replacing the record of the same options; the
    file's path. ValueError naming the problems when the record is malformed."""
    problems = check(record)
    if problems:
        raise ValueError("not a valid record: " + "; ".join(problems))
    kept = [r for r in load(record["benchmark"], directory) if r["options"] != record["options"]]
    os.makedirs(directory, exist_ok=True)
    path = path_of(record["benchmark"], directory)
    text = json.dumps({"records": [*kept, record]}, indent=1, ensure_ascii=False) + "\n"
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path


def check(record: dict) -> list[str]:
    """What is wrong with a record (empty when nothing is)."""
    problems = [f"no {key!r}" for key in KEYS if key not in record]
    if problems:
        return problems
    if not isinstance(record["options"], list) or not all(isinstance(o, str) for o in record["options"]):
        problems.append("'options' is not a list of strings")
    if not COMMIT.match(str(record["commit"])):
        problems.append(f"commit {record['commit']!r} is not a short sha (or a range a..b)")
    if not DATE.match(str(record["date"])):
        problems.append(f"date {record['date']!r} is not YYYY-MM-DD")
    machine_ = record["machine"]
    for key in ("cpu", "cores", "isa", "gpu"):
        if not isinstance(machine_, dict) or key not in machine_:
            problems.append(f"machine has no {key!r}")
        elif machine_[key] is None and key in ("cpu", "cores", "isa") and "carried_over" not in record:
            problems.append(f"machine's {key!r} is unknown in a record measured here")
    if not record["tables"]:
        problems.append("no tables")
    for table in record["tables"]:
        width = len(table.get("headers", []))
        if not table.get("title") or not width:
            problems.append("a table without a title or headers")
        elif any(len(row) != width for row in table.get("rows", [])):
            problems.append(f"table {table['title']!r} has a row that is not {width} cells wide")
    return problems
