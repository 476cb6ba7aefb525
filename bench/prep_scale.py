"""The data preparation path at scale: a generated Wikipedia dump -> phase-1 and phase-2 TFRecords,
each stage timed with 1 and 2 processes, and a projection of the full English dump on 16 cores.

    .venv/bin/python bench/prep_scale.py --xml_mb 50              # a look (~40 s on 2 cores)
    .venv/bin/python bench/prep_scale.py --xml_mb 100             # the RSS comparison size (~2.5 min)
    .venv/bin/python bench/prep_scale.py --xml_mb 1000            # the issue's size (~10 min + 2 to generate)
    .venv/bin/python bench/prep_scale.py --xml_mb 30 --processes 1,2,4 --cores 32

The dump comes from tests/dump_generator.py (seeded, Wikipedia's multistream layout with its
index, about enwiki's page mix and compression ratio), generated once per size and seed and cached
under --cache_dir. For each process count, a fresh data directory goes through the stages of
prepare_data.py, each one child process measured by bench/harness.py: its own CPU seconds and peak
RSS (VmHWM) apart from those of the worker processes it starts (their CPU seconds together, the
largest one's VmHWM); the stage's seconds are those of its summary line (interpreter start-up left
out):

    text_formatting        the multistream dump (by its index) -> one article per line
    sharding               -> training and test shards (about --shard_mb each)
    tfrecords_phase1/2     -> create_tfrecord_files with NVIDIA's recipe (python -m data.paths
                              recipe: seq 128 / 20 predictions and 512 / 80, dupe_factor 5,
                              masked_lm_prob 0.15, seed 12345), bert-base-uncased vocabulary

and the outputs of every process count are compared by sha256 (they must be the same bytes).

The projection scales one process's time to the full English dump by the stage's input size and
gives two estimates for N cores:
- Amdahl on the stage seconds of 1 and n (the largest count run) processes: tn = t1 (s + (1 - s) / n),
  so s = (n tn / t1 - 1) / (n - 1) (clipped to [0, 1]) and t(N) = t1_full (s + (1 - s) / N). Right on an idle machine; on a shared one the 2-process run
  competes with other load and s comes out too high.
- the CPU model, which load does not move: in the n-process run the parent (reading, handing out
  work, writing in order) and the workers report their CPU seconds apart; the parent is the one
  serial pipeline stage and overlaps the workers, so t(N) = scale * max(parent, (parent +
  workers) / N). It counts the parent's fixed start-up as if it grew with the input
  (conservative).
Assumed sizes of the full English dump (printed with the table): 24 GB of bz2, 100 GB of XML, 7
million articles, 2,500 M words of article text (the BERT paper's count); formatting scales with
the XML bytes, the later stages with the formatted text, whose full size is 2,500 M words times
the bytes per word measured here.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "tests"))  # tests/dump_generator.py, beside the tests using it

import dump_generator  # noqa: E402  (after the path insert)
from bench import harness  # noqa: E402
from bench.prep_throughput import DATASET, prepare_data_argv, vocab_file  # noqa: E402
from common.progress import Progress  # noqa: E402
from data import paths  # noqa: E402

# The full English Wikipedia, as the projection assumes it.
FULL = {"bz2_bytes": 24e9, "xml_bytes": 100e9, "articles": 7e6, "words": 2.5e9}
STAGES = ("text_formatting", "sharding", "tfrecords_phase1", "tfrecords_phase2")
TEST_FRACTION = paths.DEFAULT_FRACTION_TEST


def dump_path(cache_dir: str, xml_mb: float, seed: int) -> tuple[str, dict]:
    """The generated dump of `xml_mb` MB of XML (made once per size and seed) and its counts."""
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"enwiki-gen{seed}-{xml_mb:g}MB-pages-articles-multistream.xml.bz2")
    info = path + ".json"
    if not (os.path.exists(path) and os.path.exists(info)):
        start = time.perf_counter()
        with Progress(f"generating {os.path.basename(path)}", int(xml_mb * 1e6)) as progress:
            stats = dump_generator.generate_dump(path, int(xml_mb * 1e6), seed=seed, progress=progress)
        stats["seconds"] = round(time.perf_counter() - start, 1)
        with open(info, "w", encoding="utf-8") as f:
            json.dump(stats, f)
    with open(info, encoding="utf-8") as f:
        return path, json.load(f)


def run_measured(argv: list, name: str) -> dict:
    """Runs one stage's command as a measured child; returns wall seconds, the stage's own seconds
    (its summary line: start-up and imports left out), and the parent's and the workers' CPU
    seconds and peak RSS (the largest worker's; None without any)."""
    done = harness.run(argv, name)
    stage = re.findall(r"\] done: .*?\bseconds=([0-9.,]+)", done.stderr)
    return {
        "wall": done.seconds,
        "seconds": float(stage[-1].replace(",", "")) if stage else done.seconds,
        "parent_cpu": done.cpu_s - done.children_cpu_s,
        "parent_rss_mb": done.peak_rss_mb,
        "workers_cpu": done.children_cpu_s,
        "workers_rss_mb": done.children_peak_rss_mb,
    }


def _prep(data_dir, action, n_processes, shards, *extra):
    return prepare_data_argv(
        action, data_dir, shards, TEST_FRACTION, "--n_processes", str(n_processes), *extra
    )


def _tfrecord_args(phase, data_dir):
    recipe = paths.DEFAULT_TFRECORD_PARAMS
    settings = {**phase, **{k: recipe[k] for k in ("masked_lm_prob", "random_seed", "dupe_factor")}}
    out = os.path.join(data_dir, f"tfrecord_seq{phase['max_seq_length']}")
    args = ["--vocab_file", vocab_file(), "--do_lower_case", "--output_dir", out]
    return args + [f"--{k}={v}" for k, v in settings.items()], out


def _digest(files) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        with open(path, "rb") as f:  # in blocks: the stages' children start from this process
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:12]


def run_pipeline(dump: str, data_dir: str, n_processes: int, shard_mb: float, shards=None) -> dict:
    """Every stage in order, each one child process; returns stage -> measurements."""
    results = {}

    def stage(name, argv, outputs):
        measured = run_measured(argv, f"{name} ({n_processes} processes)")
        results[name] = {**measured, "digest": _digest(outputs())}
        print(
            f"done: {name} with {n_processes} processes: {measured['seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    formatted = paths.formatted_file(data_dir, DATASET)
    # The shard counts follow the formatted size, so each shard (and each TFRecord task) holds
    # about shard_mb whatever the dump's size: memory per process must follow the shard.
    probe = (1, 1)
    stage(
        "text_formatting",
        _prep(data_dir, "text_formatting", n_processes, probe, "--input_files", dump),
        lambda: [formatted],
    )
    if shards is None:
        training = max(2, round(os.path.getsize(formatted) * (1 - TEST_FRACTION) / 1e6 / shard_mb))
        shards = (training, max(1, round(training * TEST_FRACTION)))
    shard_dir = paths.sharded_dir(data_dir, DATASET, shards[0], shards[1], TEST_FRACTION)
    stage(
        "sharding",
        _prep(data_dir, "sharding", n_processes, shards),
        lambda: glob.glob(os.path.join(shard_dir, "*", "*.txt")),
    )
    for name, phase in (("tfrecords_phase1", paths.PHASE1), ("tfrecords_phase2", paths.PHASE2)):
        args, out = _tfrecord_args(phase, data_dir)
        stage(
            name,
            _prep(data_dir, "create_tfrecord_files", n_processes, shards, *args),
            lambda out=out: glob.glob(os.path.join(out, "*", "*.tfrecord")),
        )
    with open(formatted, "rb") as f:
        words = sum(len(line.split()) for line in f)
    results["_sizes"] = {"formatted_bytes": os.path.getsize(formatted), "words": words, "shards": shards}
    return results


def projection(xml_bytes, formatted_bytes, words, runs, cores):
    """stage -> projected seconds for the full dump: one process, `cores` processes by Amdahl on
    the wall times of 1 and 2 processes, and `cores` processes by the CPU model (see the module
    docstring); plus the full formatted text's bytes."""
    full_text = FULL["words"] * formatted_bytes / words
    many = max(runs)
    rows = {}
    for name in STAGES:
        one, two = runs[1][name], runs[many][name]
        scale = FULL["xml_bytes"] / xml_bytes if name == "text_formatting" else full_text / formatted_bytes
        full1 = one["seconds"] * scale
        amdahl = serial = None
        if many > 1:
            # t_n = t_1 (s + (1 - s) / n)  =>  s = (n t_n / t_1 - 1) / (n - 1)
            serial = min(1.0, max(0.0, (many * two["seconds"] / one["seconds"] - 1) / (many - 1)))
            amdahl = full1 * (serial + (1 - serial) / cores)
        parent, total = two["parent_cpu"], two["parent_cpu"] + two["workers_cpu"]
        cpu_model = scale * max(parent, total / cores) if many > 1 else None
        rows[name] = {
            "serial": serial,
            "parent_share": parent / total if many > 1 else None,
            "full1": full1,
            "amdahl": amdahl,
            "cpu_model": cpu_model,
        }
    return rows, full_text


def _hms(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xml_mb", type=float, default=30.0, help="size of the generated dump's XML in MB")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated dump")
    parser.add_argument("--processes", default="1,2", help="process counts to run, comma-separated (1 first)")
    parser.add_argument("--cores", type=int, default=16, help="cores of the node the projection is for")
    parser.add_argument("--shard_mb", type=float, default=1.0, help="formatted text per shard, MB")
    parser.add_argument(
        "--cache_dir",
        default=os.path.join(tempfile.gettempdir(), "bert-tf2-bench"),
        help="where generated dumps are cached",
    )
    parser.add_argument("--work_dir", default=None, help="where the stages write (default: a temporary dir)")
    args = parser.parse_args(argv)
    args.counts = [int(p) for p in args.processes.split(",") if p]
    if not args.counts or args.counts[0] != 1 or any(p < 1 for p in args.counts):
        parser.error("--processes must start with 1 (the projection divides by one process's times)")
    return args


def run_counts(dump: str, counts: list[int], shard_mb: float, work_dir: str | None) -> dict:
    """The whole pipeline once per process count, in a fresh data directory each; returns
    {count: run_pipeline's result}."""
    work = work_dir or tempfile.mkdtemp(prefix="prep-scale-")
    runs, shards = {}, None
    try:
        for n in counts:
            data_dir = os.path.join(work, f"p{n}")
            shutil.rmtree(data_dir, ignore_errors=True)
            runs[n] = run_pipeline(dump, data_dir, n, shard_mb, shards)
            shards = runs[n]["_sizes"]["shards"]  # the same shards for every count: same outputs
            if not work_dir:  # a given --work_dir keeps every count's outputs to look at
                shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        if not work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return runs


def stage_table(generated: dict, runs: dict, counts: list[int]) -> str:
    """What was generated and formatted, then one row per stage: each count's seconds, CPU and
    peak RSS, the speed-ups over one process, and whether every count wrote the same bytes."""
    sizes = runs[1]["_sizes"]
    shards = sizes["shards"]
    xml_mb, text_mb = generated["xml_bytes"] / 1e6, sizes["formatted_bytes"] / 1e6
    title = (
        f"generated dump: {xml_mb:,.1f} MB XML, {generated['bz2_bytes'] / 1e6:,.1f} MB bz2, "
        f"{generated['pages']:,} pages ({generated['article']:,} articles, {generated['redirect']:,} "
        f"redirects, {generated['disambiguation']:,} disambiguation, {generated['other_namespace']:,} other "
        f"namespaces), {generated['streams']:,} bz2 streams; formatted {text_mb:,.1f} MB, "
        f"{sizes['words']:,} words; {shards[0]} training + {shards[1]} test shards; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    header = ["stage", "input MB"]
    for n in counts:
        header += [f"{n}p seconds", f"{n}p CPU s parent + workers", f"{n}p peak RSS MB parent / worker"]
    header += [f"{n}p speed-up" for n in counts[1:]] + ["same bytes"]
    rows = []
    for name in STAGES:
        row = [name, f"{xml_mb if name == 'text_formatting' else text_mb:,.1f}"]
        for n in counts:
            r = runs[n][name]
            row += [
                f"{r['seconds']:.1f}",
                f"{r['parent_cpu']:.1f} + {r['workers_cpu']:.1f}",
                f"{harness.mb_cell(r['parent_rss_mb'])} / {harness.mb_cell(r['workers_rss_mb'])}",
            ]
        row += [f"{runs[1][name]['seconds'] / runs[n][name]['seconds']:.2f}x" for n in counts[1:]]
        row.append("yes" if len({runs[n][name]["digest"] for n in counts}) == 1 else "NO")
        rows.append(row)
    return f"{title}\n{harness.markdown_table(header, rows)}"


def projection_table(generated: dict, runs: dict, cores: int) -> str:
    """The full English dump's projected stage times on `cores` cores (see the module docstring)."""
    sizes = runs[1]["_sizes"]
    rows, full_text = projection(
        generated["xml_bytes"], sizes["formatted_bytes"], sizes["words"], runs, cores
    )
    many = max(runs)
    title = (
        f"projection for the full English dump on {cores} cores: assumed {FULL['bz2_bytes'] / 1e9:.0f} GB "
        f"bz2, {FULL['xml_bytes'] / 1e9:.0f} GB XML, {FULL['articles'] / 1e6:.0f} M articles, "
        f"{FULL['words'] / 1e9:,.1f} G words = {full_text / 1e9:,.1f} GB of formatted text at the "
        f"{sizes['formatted_bytes'] / sizes['words']:.2f} bytes per word measured here"
    )
    if many == 1:
        return f"{title}\n(only one process count ran: no serial fraction, no projection)"
    header = [
        "stage",
        "1 process, full dump",
        f"serial fraction (Amdahl, 1p vs {many}p)",
        f"{cores} cores (Amdahl)",
        f"parent's CPU share ({many}p)",
        f"{cores} cores (CPU model)",
    ]
    table = [
        [
            name,
            _hms(r["full1"]),
            f"{r['serial']:.2f}",
            _hms(r["amdahl"]),
            f"{r['parent_share']:.2f}",
            _hms(r["cpu_model"]),
        ]
        for name, r in rows.items()
    ]
    totals = [sum(r[k] for r in rows.values()) for k in ("full1", "amdahl", "cpu_model")]
    table.append(["whole path", _hms(totals[0]), "", _hms(totals[1]), "", _hms(totals[2])])
    return f"{title}\n{harness.markdown_table(header, table)}"


def main(argv=None):
    args = parse_args(argv)
    dump, generated = dump_path(args.cache_dir, args.xml_mb, args.seed)
    runs = run_counts(dump, args.counts, args.shard_mb, args.work_dir)
    print(stage_table(generated, runs, args.counts))
    print()
    print(projection_table(generated, runs, args.cores))


if __name__ == "__main__":
    main()
