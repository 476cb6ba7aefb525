"""The data preparation path at scale: a generated Wikipedia dump -> phase-1 and phase-2 TFRecords,
each stage timed with 1 and 2 processes, statically masked records (NVIDIA's dupe 5) beside
unmasked ones (dynamic masking, dupe 1), and a projection of the full English dump on 16 cores.

    .venv/bin/python -m bench prep_scale --xml_mb 50              # a look (~40 s on 2 cores)
    .venv/bin/python -m bench prep_scale --xml_mb 100             # the RSS comparison size (~2.5 min)
    .venv/bin/python -m bench prep_scale --xml_mb 1000            # 1 GB (~10 min + 2 to generate)
    .venv/bin/python -m bench prep_scale --xml_mb 30 --processes 1,2,4 --cores 32

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
      static                  recipe: seq 128 / 20 predictions and 512 / 80, dupe_factor 5,
                              masked_lm_prob 0.15, seed 12345), bert-base-uncased vocabulary
    tfrecords_phase1/2     -> the same with --masking=dynamic: each instance once (dupe_factor 1),
      dynamic                 unmasked; the input pipeline masks it every epoch (training/masking.py)

and the outputs of every process count are compared by sha256 (they must be the same bytes).
(--maskings static or dynamic runs one of the two.)

Static dupe 5 against dynamic: the seconds, CPU seconds and bytes of each TFRecord stage side by
side, measured in the same run on the same shards, and their ratios against TARGET_RATIO (>= 4x
less time and bytes with dynamic masking). The bytes drop by more than 5x (one copy instead of
five, and no masked_lm_* features); the time does not drop 5x, and a second table says why: one
child process runs the writer (data/pretraining/writer.py, the code each stage's workers run) on
the first --breakdown_mb of training shards, its CPU seconds (not moved by other load) in three
steps told apart by the writer's own log lines:
- tokenize: reading and WordPiece-tokenizing the shards, the same work whatever the dupe factor
  (and done again by the phase-2 stage on the same text);
- instances: the pairs, truncation and the masking draws, once per copy (dynamic records still
  make the draws of Google's first copy, so that their pairs are exactly the static ones);
- write: serializing and framing the records, once per copy.
Static dupe 1 is there to tell the draws (made by both) from the masked features (static only).
The results and what they say are in docs/performance.md ("Dynamic masking").

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
the bytes per word measured here. The whole path is projected for each masking: formatting,
sharding and that masking's two TFRecord stages (the target with dynamic masking: under 20
minutes on one 16-core node).
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
from bench.fixtures import CACHE_DIR, DATASET, bert_base_vocab, prepare_data_argv  # noqa: E402
from common.progress import Progress  # noqa: E402
from data import paths  # noqa: E402

# The full English Wikipedia, as the projection assumes it.
FULL = {"bz2_bytes": 24e9, "xml_bytes": 100e9, "articles": 7e6, "words": 2.5e9}
TEXT_STAGES = ("text_formatting", "sharding")
MASKINGS = ("static", "dynamic")
PHASES = (("phase1", paths.PHASE1), ("phase2", paths.PHASE2))
TEST_FRACTION = paths.DEFAULT_FRACTION_TEST
STATIC_DUPE = paths.DEFAULT_TFRECORD_PARAMS["dupe_factor"]


def dupe_factor(masking: str) -> int:
    """NVIDIA's 5 static copies, or the one unmasked copy of dynamic masking."""
    return STATIC_DUPE if masking == "static" else 1


def tfrecord_stage(phase: str, masking: str) -> str:
    return f"tfrecords_{phase} {masking}"


def stages(maskings) -> list[str]:
    """Every stage's name in the order run: the text stages, then each masking's two phases."""
    return [*TEXT_STAGES, *(tfrecord_stage(phase, m) for m in maskings for phase, _ in PHASES)]


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
    instances = re.findall(r"\] done: .*?\binstances=([0-9,]+)", done.stderr)
    return {
        "instances": int(instances[-1].replace(",", "")) if instances else None,
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


def _tfrecord_args(phase, data_dir, masking="static"):
    recipe = paths.DEFAULT_TFRECORD_PARAMS
    settings = {**phase, **{k: recipe[k] for k in ("masked_lm_prob", "random_seed")}}
    settings.update(dupe_factor=dupe_factor(masking), masking=masking)
    out = os.path.join(data_dir, f"tfrecord_seq{phase['max_seq_length']}_{masking}")
    args = ["--vocab_file", bert_base_vocab(), "--do_lower_case", "--output_dir", out]
    return args + [f"--{k}={v}" for k, v in settings.items()], out


def _digest(files) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        with open(path, "rb") as f:  # in blocks: the stages' children start from this process
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:12]


def run_pipeline(
    dump: str, data_dir: str, n_processes: int, shard_mb: float, shards=None, maskings=MASKINGS
) -> dict:
    """Every stage in order, each one child process; returns stage -> measurements (and the
    bytes each wrote)."""
    results = {}

    def stage(name, argv, outputs):
        measured = run_measured(argv, f"{name} ({n_processes} processes)")
        written = outputs()
        results[name] = {
            **measured,
            "digest": _digest(written),
            "bytes": sum(os.path.getsize(path) for path in written),
        }
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
    for masking in maskings:
        for phase_name, phase in PHASES:
            args, out = _tfrecord_args(phase, data_dir, masking)
            stage(
                tfrecord_stage(phase_name, masking),
                _prep(data_dir, "create_tfrecord_files", n_processes, shards, *args),
                lambda out=out: glob.glob(os.path.join(out, "*", "*.tfrecord")),
            )
    with open(formatted, "rb") as f:
        words = sum(len(line.split()) for line in f)
    results["_sizes"] = {"formatted_bytes": os.path.getsize(formatted), "words": words, "shards": shards}
    results["_shard_files"] = sorted(glob.glob(os.path.join(shard_dir, "training", "*.txt")))
    return results


def stage_names(runs: dict) -> list[str]:
    """The stages a run measured, in the order they ran."""
    return [name for name in runs[1] if not name.startswith("_")]


def maskings_of(runs: dict) -> list[str]:
    return [m for m in MASKINGS if tfrecord_stage(PHASES[0][0], m) in runs[1]]


def projection(xml_bytes, formatted_bytes, words, runs, cores):
    """stage -> projected seconds for the full dump: one process, `cores` processes by Amdahl on
    the wall times of 1 and 2 processes, and `cores` processes by the CPU model (see the module
    docstring); plus the full formatted text's bytes."""
    full_text = FULL["words"] * formatted_bytes / words
    many = max(runs)
    rows = {}
    for name in stage_names(runs):
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
            "full_bytes": one["bytes"] * scale,
        }
    return rows, full_text


def _hms(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--xml_mb", type=float, default=30.0, help="size of the generated dump's XML in MB")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated dump")
    parser.add_argument(
        "--processes",
        type=harness.comma_list(int),
        default="1,2",
        help="process counts to run, comma-separated (1 first)",
    )
    parser.add_argument("--cores", type=int, default=16, help="cores of the node the projection is for")
    parser.add_argument("--shard_mb", type=float, default=1.0, help="formatted text per shard, MB")
    parser.add_argument(
        "--maskings",
        type=harness.comma_list(choices=MASKINGS, allow_empty=False),
        default="static,dynamic",
        help=f"TFRecord stages to run: static (dupe {STATIC_DUPE}), dynamic (dupe 1), or both",
    )
    parser.add_argument(
        "--breakdown_mb",
        type=float,
        default=8.0,
        help="training shards (MB of text) the writer's steps are timed on; 0: no breakdown",
    )
    parser.add_argument(
        "--cache_dir",
        default=CACHE_DIR,
        help="where generated dumps are cached",
    )
    parser.add_argument("--work_dir", default=None, help="where the stages write (default: a temporary dir)")
    args = parser.parse_args(argv)
    if not args.processes or args.processes[0] != 1 or any(p < 1 for p in args.processes):
        parser.error("--processes must start with 1 (the projection divides by one process's times)")
    args.maskings = [m for m in MASKINGS if m in args.maskings]  # in the stages' order, once each
    return args


def run_counts(
    dump: str,
    counts: list[int],
    shard_mb: float,
    work_dir: str | None,
    maskings=MASKINGS,
    breakdown_mb: float = 0.0,
) -> dict:
    """The whole pipeline once per process count, in a fresh data directory each; returns
    {count: run_pipeline's result}, and under "_breakdown" the writer's steps timed on the
    first run's shards (writer_breakdown) when breakdown_mb > 0."""
    work = work_dir or tempfile.mkdtemp(prefix="prep-scale-")
    runs, shards = {}, None
    try:
        for n in counts:
            data_dir = os.path.join(work, f"p{n}")
            shutil.rmtree(data_dir, ignore_errors=True)
            runs[n] = run_pipeline(dump, data_dir, n, shard_mb, shards, maskings)
            shards = runs[n]["_sizes"]["shards"]  # the same shards for every count: same outputs
            if n == counts[0] and breakdown_mb > 0:
                runs["_breakdown"] = writer_breakdown(runs[n]["_shard_files"], breakdown_mb, maskings)
            if not work_dir:  # a given --work_dir keeps every count's outputs to look at
                shutil.rmtree(data_dir, ignore_errors=True)
    finally:
        if not work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return runs


# ------------------------------------------------------------------ where a TFRecord stage's time goes

BREAKDOWN_CONFIGS = (("static", STATIC_DUPE), ("static", 1), ("dynamic", 1))


def writer_breakdown(shard_files: list[str], megabytes: float, maskings) -> list[dict]:
    """The writer's steps (tokenize, instances, write) timed in one child process on the first
    `megabytes` of `shard_files`, for each phase and BREAKDOWN_CONFIGS entry of `maskings`: CPU
    seconds of the process (one thread does the work), which other load on the machine does not
    inflate as it does wall seconds."""
    files, total = [], 0
    for path in shard_files:
        if files and total >= megabytes * 1e6:
            break
        files.append(path)
        total += os.path.getsize(path)
    configs = [c for c in BREAKDOWN_CONFIGS if c[0] in maskings]
    spec = {"files": files, "configs": configs}
    harness.log(f"writer breakdown on {len(files)} shards ({total / 1e6:.1f} MB)")
    with harness.Child(harness.child_argv(__file__, spec)) as child:
        event = child.next_event(timeout_s=3600)
    return event["rows"]


def _time_writer(spec: dict) -> None:
    """The child's side of writer_breakdown: emits {"rows": [...]}."""
    from bert.tokenization import build_tokenizer
    from data.pretraining.writer import create_training_files

    tokenizer = build_tokenizer(bert_base_vocab(), do_lower_case=True)
    recipe = paths.DEFAULT_TFRECORD_PARAMS
    rows = []
    with tempfile.TemporaryDirectory(prefix="prep-scale-writer-") as tmp:
        # Untimed: the process's first call loads the C helpers and builds the tokenizer's tables.
        create_training_files(
            spec["files"][:1], [os.path.join(tmp, "warm-up.tfrecord")], tokenizer, dupe_factor=1
        )
        for phase_name, phase in PHASES:
            for masking, dupe in spec["configs"]:
                marks = []
                out = os.path.join(tmp, f"{phase_name}-{masking}-{dupe}.tfrecord")
                start = time.process_time()
                stats = create_training_files(
                    spec["files"],
                    [out],
                    tokenizer,
                    **phase,
                    masked_lm_prob=recipe["masked_lm_prob"],
                    random_seed=recipe["random_seed"],
                    dupe_factor=dupe,
                    masking=masking,
                    log=lambda message: marks.append((time.process_time() - start, message)),
                )
                seconds = time.process_time() - start
                # The writer logs "read ..." once tokenized and "pass k/N ..." after each copy's
                # instances; what follows the last pass is serializing and writing.
                read = next(t for t, m in marks if m.startswith("read "))
                passes = [t for t, m in marks if m.startswith("pass ")]
                instances_done = passes[-1] if passes else read
                rows.append(
                    {
                        "phase": phase_name,
                        "masking": masking,
                        "dupe": dupe,
                        "input_bytes": sum(os.path.getsize(p) for p in spec["files"]),
                        "instances": stats["instances"],
                        "tokenize": read,
                        "instances_s": instances_done - read,
                        "write": seconds - instances_done,
                        "seconds": seconds,
                        "bytes": os.path.getsize(out),
                    }
                )
                os.remove(out)
    harness.emit({"event": "result", "rows": rows})


# ------------------------------------------------------------------------------------ the tables


def stage_table(generated: dict, runs: dict, counts: list[int]) -> str:
    """What was generated and formatted, then one row per stage: each count's seconds, CPU and
    peak RSS, the speed-ups over one process, the bytes written, and whether every count wrote
    the same bytes."""
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
    header = ["stage", "input MB", "output MB"]
    for n in counts:
        header += [f"{n}p seconds", f"{n}p CPU s parent + workers", f"{n}p peak RSS MB parent / worker"]
    header += [f"{n}p speed-up" for n in counts[1:]] + ["same bytes"]
    rows = []
    for name in stage_names(runs):
        row = [
            name,
            f"{xml_mb if name == 'text_formatting' else text_mb:,.1f}",
            f"{runs[1][name]['bytes'] / 1e6:,.1f}",
        ]
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


TARGET_RATIO = 4.0  # the dynamic-masking target: its TFRecord stages take >= 4x less time and bytes


def _ratio(static: float, dynamic: float) -> str:
    return f"{static / dynamic:.2f}x" if dynamic > 0 else "-"


def comparison_table(runs: dict, counts: list[int]) -> str:
    """Static dupe 5 against dynamic, per TFRecord phase and both together: bytes, instances,
    each count's seconds and CPU seconds (parent + workers), and their ratios."""
    header = ["TFRecord stages", "MB static / dynamic", "bytes ratio", "instances static / dynamic"]
    for n in counts:
        header += [f"{n}p seconds static / dynamic", f"{n}p time ratio"]
    header += [f"{counts[-1]}p CPU s static / dynamic", "CPU ratio", f">= {TARGET_RATIO:g}x: bytes, time"]
    rows = []
    for label, phases in (
        ("phase 1 (seq 128)", [PHASES[0][0]]),
        ("phase 2 (seq 512)", [PHASES[1][0]]),
        ("both phases", [p for p, _ in PHASES]),
    ):

        def total(n, masking, key):
            return sum(runs[n][tfrecord_stage(p, masking)][key] for p in phases)

        def cpu(n, masking):
            return total(n, masking, "parent_cpu") + total(n, masking, "workers_cpu")

        b_static, b_dynamic = total(1, "static", "bytes"), total(1, "dynamic", "bytes")
        row = [
            label,
            f"{b_static / 1e6:,.1f} / {b_dynamic / 1e6:,.1f}",
            _ratio(b_static, b_dynamic),
            f"{total(1, 'static', 'instances'):,} / {total(1, 'dynamic', 'instances'):,}",
        ]
        for n in counts:
            s, d = total(n, "static", "seconds"), total(n, "dynamic", "seconds")
            row += [f"{s:.1f} / {d:.1f}", _ratio(s, d)]
        s, d = cpu(counts[-1], "static"), cpu(counts[-1], "dynamic")
        time_ratios = [total(n, "static", "seconds") / total(n, "dynamic", "seconds") for n in counts]
        row += [
            f"{s:.1f} / {d:.1f}",
            _ratio(s, d),
            f"{'yes' if b_static >= TARGET_RATIO * b_dynamic else 'no'}, "
            f"{'yes' if min(time_ratios) >= TARGET_RATIO else 'no'}",
        ]
        rows.append(row)
    title = (
        f"static masking (dupe {STATIC_DUPE}) against dynamic masking (dupe 1), the same shards, "
        "measured side by side in this run"
    )
    return f"{title}\n{harness.markdown_table(header, rows)}"


def breakdown_table(rows: list[dict]) -> str:
    """Where a TFRecord stage's time goes (writer_breakdown's rows)."""
    header = [
        "phase",
        "records",
        "instances",
        "tokenize CPU s",
        "instances CPU s",
        "write CPU s",
        "total CPU s",
        "tokenize share",
        "output MB",
        f"time / static dupe {STATIC_DUPE}",
    ]
    base = {r["phase"]: r for r in rows if (r["masking"], r["dupe"]) == BREAKDOWN_CONFIGS[0]}
    table = []
    for r in rows:
        table.append(
            [
                r["phase"],
                f"{r['masking']}, dupe {r['dupe']}",
                f"{r['instances']:,}",
                f"{r['tokenize']:.2f}",
                f"{r['instances_s']:.2f}",
                f"{r['write']:.2f}",
                f"{r['seconds']:.2f}",
                f"{r['tokenize'] / r['seconds']:.0%}",
                f"{r['bytes'] / 1e6:,.1f}",
                _ratio(r["seconds"], base[r["phase"]]["seconds"]) if r["phase"] in base else "-",
            ]
        )
    first = rows[0]
    title = (
        f"where a TFRecord stage's time goes: data/pretraining/writer.py's CPU seconds in one process on "
        f"{first['input_bytes'] / 1e6:.1f} MB of training shards (tokenize: reading and WordPiece, "
        "once whatever the dupe factor; instances: pairs and masking draws, per copy; write: "
        "serializing, per copy)"
    )
    notes = []
    for phase, static in base.items():
        dynamic = next((r for r in rows if r["phase"] == phase and r["masking"] == "dynamic"), None)
        if dynamic:
            notes.append(
                f"{phase}: the writer's CPU {_ratio(static['seconds'], dynamic['seconds'])} less with "
                f"dynamic masking; tokenizing, the same work for both, is {dynamic['tokenize'] / dynamic['seconds']:.0%} "
                f"of dynamic's; were every other step free, dynamic could not beat "
                f"{_ratio(static['seconds'], dynamic['tokenize'])}"
            )
    return "\n".join([title, harness.markdown_table(header, table), *notes])


def projection_table(generated: dict, runs: dict, cores: int) -> str:
    """The full English dump's projected stage times on `cores` cores (see the module docstring),
    and the whole path for each masking."""
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
        "output GB",
    ]
    table = [
        [
            name,
            _hms(r["full1"]),
            f"{r['serial']:.2f}",
            _hms(r["amdahl"]),
            f"{r['parent_share']:.2f}",
            _hms(r["cpu_model"]),
            f"{r['full_bytes'] / 1e9:,.1f}" if name.startswith("tfrecords") else "",
        ]
        for name, r in rows.items()
    ]
    for masking in maskings_of(runs):
        path = [*TEXT_STAGES, *(tfrecord_stage(p, masking) for p, _ in PHASES)]
        totals = [sum(rows[name][k] for name in path) for k in ("full1", "amdahl", "cpu_model", "full_bytes")]
        label = f"whole path, {masking} (dupe {dupe_factor(masking)})"
        table.append(
            [label, _hms(totals[0]), "", _hms(totals[1]), "", _hms(totals[2]), f"{totals[3] / 1e9:,.1f}"]
        )
    return f"{title}\n{harness.markdown_table(header, table)}"


def main(argv=None):
    if len(sys.argv) > 2 and sys.argv[1] == harness.CHILD_FLAG:
        harness.serve(_time_writer, sys.argv[2])
        return
    args = parse_args(argv)
    dump, generated = dump_path(args.cache_dir, args.xml_mb, args.seed)
    runs = run_counts(dump, args.processes, args.shard_mb, args.work_dir, args.maskings, args.breakdown_mb)
    breakdown = runs.pop("_breakdown", None)
    print(stage_table(generated, runs, args.processes))
    if len(args.maskings) == 2:
        print()
        print(comparison_table(runs, args.processes))
    if breakdown:
        print()
        print(breakdown_table(breakdown))
    print()
    print(projection_table(generated, runs, args.cores))


if __name__ == "__main__":
    main()
