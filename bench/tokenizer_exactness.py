"""Tokenizer and TFRecord-writer throughput of the working tree against an earlier revision, side
by side: does Google-exact tokenization on every input keep the old speed on ordinary text?

    .venv/bin/python -m bench tokenizer_exactness                        # quickstart corpus, 5 rounds
    .venv/bin/python -m bench tokenizer_exactness --baseline HEAD~1 --corpus_mb 20 --repeats 3

The corpus is the quickstart's (data.corpus.stdlib_text: the installed Python's prose, one
sentence per line, a blank line between documents; 4 MB by default, as scripts/quickstart.sh
builds it), cached under --cache_dir. The library as it was at git revision --baseline (default
HEAD, the code the working tree changes; once those changes are committed, HEAD~1) is extracted
with `git archive` (bert/, data/, common/) into a temporary directory; nothing in the checkout
or its git state changes.

Every measurement is one child process (bench/harness.py) that imports the library from one of
the two trees and times, in this order, with the bert-base-uncased vocabulary, lower-casing:

  encode_batch           WordPieceTokenizer.encode_batch over the corpus's stripped non-blank
                         lines, 4096 lines a call (the Rust path, and the new per-line check)
  tokenize_batch         the same with token strings (what the GLUE reader calls)
  read_documents         the pretraining reader's whole tokenization step, C mirror where it builds
  create_training_files  the TFRecord writer end to end: seq 128, 20 predictions, dupe_factor 5,
                         masked_lm_prob 0.15, seed 12345 (NVIDIA's phase 1)

Children run in interleaved rounds (old, new, then new, old, ...), after one untimed warm-up child
per tree (compiles the C helper, fills the character-table cache); each times every step --calls
times in a row, and for at least a second (the short steps get more calls). The table gives the
median (min-max) wall seconds over all calls, the median CPU seconds (user + system of the
process, all threads), MB/s and the new/old ratio of the medians; under it, how many corpus lines
get other ids than before and whether the two trees write the same TFRecord bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import fixtures, harness  # noqa: E402  (after the path insert)

SETTINGS = fixtures.PHASE1_WRITER
CHUNK_LINES = 4096
MIN_STEP_S = 1.0  # a child times each step for at least this long
STEPS = ("encode_batch", "tokenize_batch", "read_documents", "create_training_files")
TREES = ("old", "new")


# ----------------------------------------------------------------------------- child process


def _lines(corpus):
    with open(corpus, encoding="utf-8") as f:
        return [s for s in (line.strip() for line in f.read().split("\n")) if s]


def _child(spec):
    """Times the steps with the library of spec["root"], each at least spec["calls"] times and
    MIN_STEP_S seconds in a row; emits {step: [[wall, cpu] per call]} and digests."""
    import numpy as np

    sys.path.insert(0, spec["root"])
    from bert.tokenization import build_tokenizer
    from data.pretraining import writer

    tokenizer = build_tokenizer(vocab_file=fixtures.bert_base_vocab(), do_lower_case=True)
    corpus, output = spec["corpus"], spec["output"]
    if spec.get("warmup"):  # the C helper and its character table, built and cached
        writer.read_documents([corpus], tokenizer, fast=True)
        harness.emit({"event": "result", "times": {}})
        return
    lines = _lines(corpus)
    chunks = [lines[i : i + CHUNK_LINES] for i in range(0, len(lines), CHUNK_LINES)]

    def encode():
        return [ids for chunk in chunks for ids in tokenizer.encode_batch(chunk)]

    def tokenize():
        return [tokens for chunk in chunks for tokens in tokenizer.tokenize_batch(chunk)]

    steps = {
        "encode_batch": encode,
        "tokenize_batch": tokenize,
        "read_documents": lambda: writer.read_documents([corpus], tokenizer, fast=True),
        "create_training_files": lambda: writer.create_training_files(
            [corpus], [output], tokenizer, **SETTINGS
        ),
    }
    times, results = {name: [] for name in STEPS}, {}
    for name in STEPS:
        # At least `calls` calls and MIN_STEP_S seconds: the short steps get more samples.
        while len(times[name]) < spec["calls"] or sum(w for w, _ in times[name]) < MIN_STEP_S:
            cpu = time.process_time()
            wall, results[name] = harness.timed(steps[name])
            times[name].append([wall, time.process_time() - cpu])
    ids = results["encode_batch"]
    if spec.get("ids_file"):  # each line's ids, for the parent to compare the trees line by line
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter((i for line in ids for i in line), np.int64, int(lengths.sum()))
        np.savez(spec["ids_file"], lengths=lengths, flat=flat)
    with open(output, "rb") as f:
        record_digest = hashlib.sha256(f.read()).hexdigest()
    harness.emit(
        {
            "event": "result",
            "times": times,
            "tokens": int(sum(map(len, ids))),
            "instances": int(results["create_training_files"]["instances"]),
            "records_sha256": record_digest,
        }
    )


# ---------------------------------------------------------------------------- parent process


def extract_revision(revision, directory):
    """bert/, data/ and common/ as they were at `revision`, under `directory`; the short sha."""
    short = harness.short_revision(revision)
    archive = os.path.join(directory, "baseline.tar")
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", ROOT, "archive", short, "bert", "data", "common"], check=True, stdout=f)
    with tarfile.open(archive) as tar:
        tar.extractall(directory, filter="data")
    os.remove(archive)
    return short


def run_child(spec):
    with harness.Child(harness.child_argv(__file__, spec)) as child:
        result = child.next_event()
        child.wait()
    return result


def measure(roots, corpus, work_dir, repeats, calls):
    """{tree: [result of each round]}, rounds interleaved, after an untimed warm-up per tree."""
    output = os.path.join(work_dir, "out.tfrecord")
    for tree in TREES:
        run_child({"root": roots[tree], "corpus": corpus, "output": output, "warmup": True})
    results = {tree: [] for tree in TREES}
    for r, tree in harness.interleaved(TREES, repeats):
        spec = {"root": roots[tree], "corpus": corpus, "output": output, "calls": calls}
        if r == 0:
            spec["ids_file"] = os.path.join(work_dir, f"ids-{tree}.npz")
        results[tree].append(run_child(spec))
        harness.log(f"done: {tree} round {r + 1}/{repeats}")
    return results


def lines_differing(work_dir):
    import numpy as np

    def per_line(tree):
        with np.load(os.path.join(work_dir, f"ids-{tree}.npz")) as f:
            cuts = np.cumsum(f["lengths"])[:-1]
            return [tuple(x) for x in np.split(f["flat"], cuts)]

    old, new = per_line("old"), per_line("new")
    return sum(a != b for a, b in zip(old, new)) + abs(len(old) - len(new)), len(new)


def table(results, mb, labels):
    """One row per step and tree: every call of every round pooled."""
    rows = []
    for step in STEPS:
        walls = {t: [call[0] for r in results[t] for call in r["times"][step]] for t in TREES}
        cpus = {t: statistics.median(call[1] for r in results[t] for call in r["times"][step]) for t in TREES}
        medians = {t: statistics.median(walls[t]) for t in TREES}
        for tree in TREES:
            ratio = f"{medians['old'] / medians['new']:.3f}" if tree == "new" else ""
            cpu_ratio = f"{cpus['old'] / cpus['new']:.3f}" if tree == "new" else ""
            rows.append(
                [
                    step,
                    labels[tree],
                    harness.median_range(walls[tree], "{:.3f}"),
                    f"{cpus[tree]:.3f}",
                    f"{mb / medians[tree]:.2f}",
                    ratio,
                    cpu_ratio,
                ]
            )
    headers = ["step", "code", "seconds", "CPU s", "MB/s", "speed new/old", "CPU speed new/old"]
    return harness.markdown_table(headers, rows)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="HEAD", help="git revision of the old code (default HEAD)")
    parser.add_argument(
        "--corpus_mb", type=float, default=4.0, help="quickstart corpus size in MB (default 4)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--calls", type=int, default=3, help="timed calls of each step per round (default 3)")
    parser.add_argument(
        "--cache_dir",
        default=fixtures.CACHE_DIR,
        help="where the corpus is cached",
    )
    parser.add_argument(harness.CHILD_FLAG, help=argparse.SUPPRESS)  # a measuring child
    args = parser.parse_args(argv)
    if not args._child and (args.repeats < 1 or args.calls < 1 or args.corpus_mb <= 0):
        parser.error("--repeats and --calls must be at least 1 and --corpus_mb positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args._child:
        return harness.serve(_child, args._child)
    corpus = fixtures.stdlib_corpus(args.cache_dir, args.corpus_mb)
    mb = os.path.getsize(corpus) / 1e6
    work_dir = tempfile.mkdtemp(prefix="tokenizer-bench-")
    try:
        old_root = os.path.join(work_dir, "baseline")
        os.makedirs(old_root)
        short = extract_revision(args.baseline, old_root)
        roots = {"old": old_root, "new": ROOT}
        labels = {"old": f"{args.baseline} ({short})", "new": "working tree"}
        harness.log(f"{mb:.1f} MB corpus, {args.repeats} rounds: {labels['old']} against the working tree")
        results = measure(roots, corpus, work_dir, args.repeats, args.calls)
        differing, n_lines = lines_differing(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    digests = {t: {r["records_sha256"] for r in results[t]} for t in TREES}
    same = "the same" if digests["old"] == digests["new"] and len(digests["new"]) == 1 else "different"
    print(
        f"Tokenization and the TFRecord writer on the {mb:.1f} MB quickstart corpus, bert-base-uncased "
        f"vocab, median (min-max) of {args.repeats} interleaved rounds x at least {args.calls} calls, "
        f"{harness.cpu_name()}"
    )
    print(table(results, mb, labels))
    tokens = {t: results[t][0]["tokens"] for t in TREES}
    instances = {t: results[t][0]["instances"] for t in TREES}
    print(
        f"\n{differing:,} of {n_lines:,} lines get other ids than before ({tokens['old']:,} -> "
        f"{tokens['new']:,} tokens); {instances['old']:,} -> {instances['new']:,} instances; "
        f"TFRecord bytes {same} in both trees"
    )


if __name__ == "__main__":
    main()
