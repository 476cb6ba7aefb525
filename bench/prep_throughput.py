"""Throughput and peak memory of the data-preparation steps, as a table.

    .venv/bin/python -m bench prep_throughput                 # the 20 MB corpus, every run
    .venv/bin/python -m bench prep_throughput --sizes 20,200  # also a 200 MB corpus
    .venv/bin/python -m bench prep_throughput --runs create_pretraining_data --sizes 2
    .venv/bin/python -m bench prep_throughput --runs native_parts --sizes 20 --repeats 3

The corpus is real English text built offline from this machine's Python installation:
docstrings of the standard library and site-packages modules and their .rst/.txt/.md
documentation, one document per file, segmented one sentence per line with a blank line
between documents (the input format of create_pretraining_data). It is built once per size
and cached under the temporary directory (--cache_dir). Larger sizes repeat the smaller
text when the installation has too little (the reported MB are those of the input file).

Every run is one child process, measured from outside (bench/harness.py): wall seconds, CPU
seconds (user + system, less sensitive than wall time to other load on a shared machine) and
peak RSS (VmHWM; for a run that starts worker processes: CPU summed over them, the largest
VmHWM of the run and its workers). Add a run by appending a `Run` to RUNS: a name, its command (a
function of the corpus path and an output directory) and the TFRecord files to count
instances in.

The native_parts run prints two more tables: what each part of the C fast path of
create_pretraining_data (the C WordPiece mirror of the tokenizer; instance creation, masking
and serialization) saves against the path it replaces, measured by switching that part off
alone (see NATIVE_VARIANTS), in interleaved rounds with median and min-max.

Settings are NVIDIA's phase 1 (bench/fixtures.py's PHASE1_WRITER): bert-base-uncased vocabulary,
seq 128, 20 predictions, dupe_factor 5, masked_lm_prob 0.15, seed 12345. The reference row is
Google's script as measured once on the development machine (it needs TF1 and cannot run here).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shutil
import statistics
import sys
import tempfile
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import fixtures, harness  # noqa: E402  (after the path insert)
from common.files import atomic_write  # noqa: E402

SETTINGS = fixtures.PHASE1_WRITER
# Google's create_pretraining_data.py (TF1, which cannot run here) on a ~20 MB corpus of this kind,
# measured once on the 2-core development machine (docs/performance.md, "Data preparation").
REFERENCE = dict(name="google reference", mb=20.0, seconds=161.0, instances_per_s=2040, peak_rss_mb=1680.0)


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
        f"--vocab_file={fixtures.bert_base_vocab()}",
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
    return fixtures.prepare_data_argv(action, data_dir, (_n_shards(corpus), 0), 0, *extra)


def _sharding_command(corpus, out_dir):
    return _prep_argv("sharding", out_dir, corpus, "--input_files", _formatted(corpus), "--n_processes", "1")


def _shards_for(corpus):
    """Shards of `corpus` (made once, not measured) under a data dir cached beside the corpus."""
    data_dir = corpus[: -len(".txt")] + "-prep"
    harness.run(_prep_argv("sharding", data_dir, corpus, "--input_files", _formatted(corpus)), "sharding")
    return data_dir


def _tfrecord_command(processes):
    def command(corpus, out_dir):
        settings = [f"--{k}={v}" for k, v in SETTINGS.items()]
        return _prep_argv(
            "create_tfrecord_files",
            _shards_for(corpus),
            corpus,
            "--vocab_file",
            fixtures.bert_base_vocab(),
            "--do_lower_case",
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


# --- the native fast path, part by part: what each part earns -----------------------------------
# Each part of the C path is switched off alone inside one child process, the rest kept as
# create_training_files runs it: the C WordPiece mirror (FastWordPiece, whose per-character
# table comes from bert/tokenization.py's rules) against the tokenizer call it replaces, and
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

    return build_tokenizer(vocab_file=fixtures.bert_base_vocab(), do_lower_case=True)


def _child_create(spec):
    """One create_training_files run with the variant's parts switched off; emits its stats."""
    import hashlib

    native, writer = _pretraining_modules()
    patches = NATIVE_VARIANTS[spec["variant"]][1]
    if "no_mirror" in patches:  # read_documents then tokenizes with tokenizer.encode_batch
        native.FastWordPiece.for_tokenizer = classmethod(lambda cls, lib, tokenizer: None)
    if "python_instances" in patches:  # as --engine=python: Python instances, masks, protobufs
        native.supports = lambda rng: False
    if "no_native" in patches:  # as without a C compiler: nothing is built or loaded
        native.load = lambda required=True: None
    stats = writer.create_training_files([spec["corpus"]], [spec["output"]], _tokenizer(), **SETTINGS)
    with open(spec["output"], "rb") as f:
        stats["sha256"] = hashlib.sha256(f.read()).hexdigest()
    harness.emit({"event": "result", **stats})


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


def _child_tokenize(spec):
    """Times the tokenization step both ways, interleaved, in this process; emits the times.

    step: read_documents(fast=True / False), the whole tokenization step of create_pretraining_data
      (file read, tokenization, sentence and document offsets; the C side builds its vocabulary
      hash table each time, as a fresh process does; the character table comes from its disk cache).
    kernel: bytes -> ids only: FastWordPiece.tokenize_block on each block, against decoding,
      stripping and tokenizer.encode_batch on the non-blank lines (what read_documents does
      on its Rust path)."""
    import time

    import numpy as np

    corpus = spec["corpus"]
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
    for _, name in harness.interleaved(cases, spec["repeats"]):
        cpu = time.process_time()  # process time: all threads
        wall, results[name] = harness.timed(cases[name])
        times[name].append((wall, time.process_time() - cpu))
    c, rust = results["step_c"], results["step_rust"]
    same = all(np.array_equal(getattr(c, k), getattr(rust, k)) for k in ("tokens", "sent_off", "doc_sent"))
    same = same and c.invalid_utf8_lines == rust.invalid_utf8_lines
    # The C kernel leaves fallback lines out of its ids; without any, both kernels give every id.
    same = same and (fallback > 0 or results["kernel_c"] == results["kernel_rust"] == len(c.tokens))
    harness.emit(
        {
            "event": "result",
            "times": times,
            "identical": bool(same),
            "tokens": int(len(c.tokens)),
            "kernel_tokens": [results["kernel_c"], results["kernel_rust"]],
            "lines": lines,
            "fallback_lines": fallback,
        }
    )


def _child(spec):
    (_child_create if spec["kind"] == "create" else _child_tokenize)(spec)


# ---------------------------------------------------------------------------- parent process


@dataclasses.dataclass(frozen=True)
class Measured:
    """A run as the tables report it."""

    seconds: float
    cpu_s: float
    peak_rss_mb: float | None  # the largest VmHWM: of the run or of one of its workers
    stdout: str

    @classmethod
    def of(cls, done: harness.Exit) -> Measured:
        peaks = [p for p in (done.peak_rss_mb, done.children_peak_rss_mb) if p is not None]
        return cls(done.seconds, done.cpu_s, max(peaks) if peaks else None, done.stdout)


def child_result(spec) -> tuple[Measured, dict]:
    """This script run as a measuring child of `spec`: its measurement and its result event."""
    with harness.Child(harness.child_argv(__file__, spec)) as child:
        result = child.next_event()
        measured = Measured.of(child.wait())
    return measured, result


def measure(run, corpus, work_dir) -> tuple[Measured, int | None]:
    """Runs one child process; returns its measurement and the instances it wrote."""
    out_dir = tempfile.mkdtemp(dir=work_dir)
    try:
        measured = Measured.of(harness.run(run.command(corpus, out_dir), run.name))
        print(measured.stdout.strip(), file=sys.stderr)
        return measured, _count_records(run.outputs(out_dir)) if run.outputs else None
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def native_parts(corpus, work_dir, repeats, variants) -> str:
    """The tokenization table and the end-to-end table of `variants` on `corpus`."""
    mb = os.path.getsize(corpus) / 1e6
    harness.log(f"native parts: tokenization of the {mb:.1f} MB corpus ({repeats} rounds) ...")
    _, tok = child_result({"kind": "tokenize", "corpus": corpus, "repeats": repeats})
    runs, digests = end_to_end(corpus, work_dir, repeats, variants)
    return tokenization_table(tok, mb, repeats) + end_to_end_table(runs, digests, variants, mb, repeats)


def end_to_end(corpus, work_dir, repeats, variants):
    """Every variant's create_training_files run, interleaved: ({variant: [(Measured, instances)]},
    {output sha256: [variants]})."""
    runs = {name: [] for name in variants}
    digests = {}
    for r, name in harness.interleaved(variants, repeats):
        out_dir = tempfile.mkdtemp(dir=work_dir)
        output = os.path.join(out_dir, "out.tfrecord")
        try:
            measured, stats = child_result(
                {"kind": "create", "variant": name, "corpus": corpus, "output": output}
            )
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        digests.setdefault(stats["sha256"], []).append(name)
        runs[name].append((measured, stats["instances"]))
        print(f"done: {name} round {r + 1}/{repeats}: {measured.seconds:.1f} s", file=sys.stderr, flush=True)
    return runs, digests


def tokenization_table(tok, mb, repeats) -> str:
    title = (
        f"C WordPiece mirror vs the Rust `tokenizers` call: tokenization of {mb:.1f} MB, "
        f"median of {repeats} interleaved rounds (min-max); ids identical: {tok['identical']} "
        f"({tok['tokens']:,} tokens; {tok['fallback_lines']:,} of {tok['lines']:,} lines left by C "
        f"to the Rust tokenizer)"
    )
    what = {"step": "read_documents (the whole tokenization step)", "kernel": "bytes -> ids only"}
    rows = []
    for part in ("step", "kernel"):
        rust_median = statistics.median([w for w, _ in tok["times"][f"{part}_rust"]])
        for engine, label in (("c", "C mirror (FastWordPiece)"), ("rust", "Rust tokenizers (encode_batch)")):
            walls = [w for w, _ in tok["times"][f"{part}_{engine}"]]
            cpus = [c for _, c in tok["times"][f"{part}_{engine}"]]
            wall = statistics.median(walls)
            ratio = f"{rust_median / wall:.2f}x" if engine == "c" else "1.00x"
            cpu = f"{statistics.median(cpus):.2f}"
            rows.append([label, what[part], harness.median_range(walls), cpu, f"{mb / wall:.2f}", ratio])
    headers = ["tokenizer", "what is timed", "seconds", "CPU s", "MB/s", "C mirror speed-up"]
    return f"\n{title}\n{harness.markdown_table(headers, rows)}\n"


def end_to_end_table(runs, digests, variants, mb, repeats) -> str:
    same = "same bytes written by every variant"
    if len(digests) > 1:
        same = f"OUTPUTS DIFFER: {list(digests.values())}"
    title = (
        f"create_training_files end to end on {mb:.1f} MB, one part of the native path off at a time, "
        f"median of {repeats} interleaved rounds (min-max); {same}"
    )

    def median_seconds(name):
        return statistics.median([m.seconds for m, _ in runs[name]])

    base = median_seconds(variants[0])
    rows = []
    for name in variants:
        seconds = [m.seconds for m, _ in runs[name]]
        med = median_seconds(name)
        cpu = statistics.median([m.cpu_s for m, _ in runs[name]])
        rss = max((m.peak_rss_mb for m, _ in runs[name] if m.peak_rss_mb is not None), default=None)
        instances = runs[name][0][1]
        rows.append(
            [
                name,
                NATIVE_VARIANTS[name][0],
                harness.median_range(seconds, "{:.1f}"),
                f"{cpu:.1f}",
                f"{mb / med:.2f}",
                f"{instances / med:,.0f}",
                harness.mb_cell(rss),
                f"{med / base:.2f}x",
            ]
        )
    headers = ["variant", "what runs", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB"]
    text = f"\n{title}\n{harness.markdown_table([*headers, f'time / {variants[0]}'], rows)}\n"
    if "rust_tokenizer" in runs and variants[0] == "all_native":
        without = median_seconds("rust_tokenizer")
        text += (
            f"\nthe C mirror saves {without - base:.1f} s of {without:.1f} s end to end "
            f"({100 * (without - base) / without:.0f}% of the run; {without / base:.2f}x)\n"
        )
    return text


def runs_table(rows) -> str:
    """The main table: one row per run and corpus size, then Google's reference row."""
    cells = []
    for name, mb, m, instances in rows:
        per_s = "" if instances is None else f"{instances / m.seconds:,.0f}"
        rate = f"{mb / m.seconds:.2f}"
        cells.append(
            [
                name,
                f"{mb:.1f}",
                f"{m.seconds:.1f}",
                f"{m.cpu_s:.1f}",
                rate,
                per_s,
                harness.mb_cell(m.peak_rss_mb),
            ]
        )
    r = REFERENCE
    rate = f"{r['mb'] / r['seconds']:.2f}"
    per_s = f"{r['instances_per_s']:,.0f}"
    cells.append(
        [
            r["name"],
            f"{r['mb']:.1f}",
            f"{r['seconds']:.1f}",
            "",
            rate,
            per_s,
            harness.mb_cell(r["peak_rss_mb"]),
        ]
    )
    headers = ["run", "input MB", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB"]
    title = f"settings: {SETTINGS}, bert-base-uncased vocab, one process"
    return f"{title}\n{harness.markdown_table(headers, cells)}"


def parse_args(argv=None) -> argparse.Namespace:
    """The flags, with --runs as the RUNS entries it names (and a `parts` flag: whether the
    native_parts run is wanted)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=harness.comma_list(float),
        default="20",
        help="corpus sizes in MB, comma-separated (default 20)",
    )
    names = [r.name for r in RUNS] + [NATIVE_PARTS_RUN]
    parser.add_argument(
        "--runs",
        type=harness.comma_list(choices=names, allow_empty=False),
        default=",".join(names),
        help=f"runs to do, comma-separated, of: {', '.join(names)}",
    )
    parser.add_argument(
        "--cache_dir",
        default=fixtures.CACHE_DIR,
        help="where the corpora are cached",
    )
    parser.add_argument("--repeats", type=int, default=3, help=f"rounds of the {NATIVE_PARTS_RUN} tables")
    parser.add_argument(
        "--native_variants",
        type=harness.comma_list(choices=NATIVE_VARIANTS, allow_empty=False),
        default=",".join(NATIVE_VARIANTS),
        help=f"end-to-end variants of the {NATIVE_PARTS_RUN} table (the first is the "
        f"baseline), of: {', '.join(NATIVE_VARIANTS)}",
    )
    parser.add_argument(harness.CHILD_FLAG, help=argparse.SUPPRESS)  # a measuring child
    args = parser.parse_args(argv)
    if args._child:
        return args
    args.parts = NATIVE_PARTS_RUN in args.runs
    args.runs = [r for r in RUNS if r.name in args.runs]  # in RUNS' order, once each
    return args


def main(argv=None):
    args = parse_args(argv)
    if args._child:
        return harness.serve(_child, args._child)
    rows, tables = [], []
    work_dir = tempfile.mkdtemp(prefix="prep-bench-")
    try:
        for size in args.sizes:
            corpus = fixtures.stdlib_corpus(args.cache_dir, size)
            mb = os.path.getsize(corpus) / 1e6
            for run in args.runs:
                measured, instances = measure(run, corpus, work_dir)
                rows.append((run.name, mb, measured, instances))
                print(f"done: {run.name} on {mb:.1f} MB", file=sys.stderr, flush=True)
            if args.parts:
                tables.append(native_parts(corpus, work_dir, args.repeats, args.native_variants))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    if args.runs:
        print(runs_table(rows))
    for table in tables:
        print(table, end="")


if __name__ == "__main__":
    main()
