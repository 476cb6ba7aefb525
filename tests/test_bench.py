"""The benchmarks (bench/): every script run at its smallest settings, so none rots unseen (each
prints its table: the header, one row of numbers per configuration), and the harness they all
measure with (bench/harness.py): peak memory as the child's own VmHWM, its workers' apart; events,
failures and timeouts of a child; the interleaved order of repeats."""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import pytest

from bench import harness
from conftest import xla_default_effort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = re.compile(r"-?[\d,]+(\.\d+)?(x| s)?")  # 1,234 / 0.99 / 1.00x / 0.12 s
NUMBER_RANGE = re.compile(r"[\d,.]+ \([\d,.]+-[\d,.]+\)")  # median (min-max)


def run_bench(script: str, *args: str, env=None) -> str:
    """Runs `python -m bench NAME` (NAME: `script` less .py) with `args` as a user would; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", script.removesuffix(".py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # a guard against a hang: two test processes share the cores
        env={**(env or os.environ), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def tables(stdout: str) -> list[tuple[list[str], list[list[str]]]]:
    """The markdown tables in `stdout`: (header cells, rows of cells) each."""
    found, lines = [], stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---") and i > 0 and lines[i - 1].startswith("| "):
            rows = []
            for row in lines[i + 1 :]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
            found.append(([cell.strip() for cell in lines[i - 1].strip().strip("|").split("|")], rows))
    return found


def assert_numbers(rows: list[list[str]], columns: list[int], pattern=NUMBER) -> None:
    for row in rows:
        for column in columns:
            assert pattern.fullmatch(row[column]), (column, row)


# ------------------------------------------------------------------------------------ harness


PROBE = r"""
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", '''
import time
block = bytearray(150 << 20)  # 150 MB, touched
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
'''])
worker.wait()
block = bytearray(80 << 20)  # 80 MB, touched
time.sleep(0.3)
with open("/proc/self/status") as status:
    print([line.split()[1] for line in status if line.startswith("VmHWM:")][0], flush=True)
"""


@pytest.mark.process
def test_peak_memory_is_the_childs_own_vmhwm_and_its_workers_apart():
    ballast = bytearray(300 << 20)  # the starter's own peak must not show in the child's
    done = harness.run([sys.executable, "-c", PROBE], "probe")
    del ballast
    assert done.returncode == 0
    own_kb = int(done.stdout.split()[0])
    assert done.peak_rss_mb == pytest.approx(own_kb / 1024, abs=1.0)  # what the child read itself
    assert 80 < done.peak_rss_mb < 150
    assert 150 < done.children_peak_rss_mb < 220
    assert 0.4 < done.children_cpu_s <= done.cpu_s  # the worker's busy half second
    assert done.seconds > 0.8


@pytest.mark.process
def test_a_childs_events_come_in_order_and_an_error_or_a_silent_exit_fails_it():
    emit_then_fail = (
        "from bench import harness\n"
        "harness.emit({'event': 'ready', 'rank': 0})\n"
        "def measure(spec):\n"
        "    harness.log('measuring')\n"
        "    raise ValueError(f'no {spec[\"what\"]}')\n"
        'harness.serve(measure, \'{"what": "luck"}\')\n'
    )
    with harness.Child([sys.executable, "-c", emit_then_fail]) as child:
        assert child.next_event(timeout_s=60) == {"event": "ready", "rank": 0}
        with pytest.raises(harness.ChildFailed, match="ValueError: no luck"):
            child.next_event(timeout_s=60)

    crash = "import sys; print('Fatal: out of luck', file=sys.stderr); sys.exit(3)"
    with harness.Child([sys.executable, "-c", crash]) as child:
        with pytest.raises(harness.ChildFailed, match="exit 3: Fatal: out of luck"):
            child.next_event(timeout_s=60)

    with pytest.raises(harness.ChildFailed, match=r"(?s)exiting failed \(exit 3\):.*out of luck"):
        harness.run([sys.executable, "-c", crash], "exiting")


def alive_in_group(group: int) -> list[int]:
    """The processes of process group `group` that are not zombies."""
    alive = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # state, ppid, pgrp, ...
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != b"Z":
            alive.append(int(name))
    return alive


@pytest.mark.process
def test_a_child_past_its_timeout_is_killed_with_its_workers():
    sleeper = (
        "import subprocess, time\n"
        "from bench import harness\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "harness.emit({'event': 'up'})\n"
        "time.sleep(60)\n"
    )
    with harness.Child([sys.executable, "-c", sleeper]) as child:
        assert child.next_event(timeout_s=60) == {"event": "up"}
        group = child.proc.pid
        assert len(alive_in_group(group)) == 2
        started = time.perf_counter()
        with pytest.raises(harness.ChildFailed, match="timed out after 1s"):
            child.wait(timeout_s=1)
        assert time.perf_counter() - started < 5
        assert child.proc.returncode == -9
    deadline = time.monotonic() + 10  # SIGKILL is delivered, not waited for
    while alive_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive_in_group(group) == []  # the worker (sleep) went with it


def test_interleaved_repeats_alternate_the_order():
    assert list(harness.interleaved(["a", "b", "c"], 3)) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c"),
    ]  # fmt: skip
    assert harness.median_range([3.0, 1.0, 2.0]) == "2.00 (1.00-3.00)"


def test_comma_list_converts_each_item_strips_blanks_and_skips_empty_ones():
    assert harness.comma_list()(" a, b,,c ,") == ["a", "b", "c"]
    assert harness.comma_list(int)("1, 8,") == [1, 8]
    assert harness.comma_list(float)("0.2,20") == [0.2, 20.0]
    assert harness.comma_list(int)("") == []
    assert harness.comma_list(choices=("static", "dynamic"))("dynamic, static") == ["dynamic", "static"]
    assert harness.comma_list(int, choices=(1, 2))("2,1") == [2, 1]  # compared after conversion
    assert harness.comma_list(harness.positive_int)("4,1") == [4, 1]


@pytest.mark.parametrize(
    "parse, text, message",
    [
        (harness.comma_list(int), "1,x", "'x' is not an integer."),
        (harness.comma_list(float), "0.5,big", "'big' is not a number."),
        (
            harness.comma_list(choices=("static", "dynamic")),
            "static,bogus",
            "'bogus' is not one of static, dynamic.",
        ),
        (harness.comma_list(int, choices=(1, 2)), "1,3", "'3' is not one of 1, 2."),
        (harness.comma_list(harness.positive_int), "2,0", "'0' is not a positive integer."),
        (harness.comma_list(allow_empty=False), " , ", "no value given; give at least one."),
        (
            harness.comma_list(choices=("on", "off"), allow_empty=False),
            "",
            "no value given; give at least one of on, off.",
        ),
    ],
)
def test_comma_list_rejects_a_bad_item_naming_it_and_what_is_allowed(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse(text)
    assert str(raised.value) == message


def test_bench_list_flags_parse_their_string_defaults_and_given_lists():
    from bench import input_order, prep_scale

    defaults = input_order.parse_args([])
    assert (defaults.phases, defaults.workers) == ([1, 2], [1, 8])
    assert defaults.maskings == ["static", "dynamic", "dynamic_wwm"]
    given = prep_scale.parse_args(["--processes", "1, 4", "--maskings", "dynamic,static"])
    assert given.processes == [1, 4] and given.maskings == ["static", "dynamic"]  # the stages' order


@pytest.mark.process
def test_a_bench_flag_with_an_unknown_name_stops_with_exit_2_and_the_flags_name():
    # prep_scale used to drop an unknown masking silently and run the others.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "prep_scale", "--maskings", "static,bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "argument --maskings: 'bogus' is not one of static, dynamic." in done.stderr


# --------------------------------------------------------------------- the front door


@pytest.mark.process
def test_python_m_bench_lists_every_benchmark_and_refuses_an_unknown_one():
    listed = subprocess.run([sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0
    names = [line.split()[0] for line in listed.stdout.splitlines()[3:]]
    scripts = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "bench")) if f.endswith(".py"))
    assert names == [
        n for n in scripts if n not in ("__init__", "__main__", "harness", "fixtures", "records", "report")
    ]
    assert "padding" in names and "harness" not in names
    unknown = subprocess.run(
        [sys.executable, "-m", "bench", "paddin"], cwd=ROOT, capture_output=True, text=True
    )
    assert unknown.returncode == 2 and "no benchmark named 'paddin'" in unknown.stderr


@pytest.mark.process
def test_a_bench_script_still_runs_by_its_path():
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "input_order.py"), "--help"],
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "--window" in done.stdout


@pytest.mark.process
def test_record_saves_the_printed_table_with_what_produced_it(tmp_path):
    flags = [
        "--models",
        "tiny",
        "--precisions",
        "float32",
        "--xla",
        "off",
        "--seq_length",
        "16",
        "--max_predictions",
        "2",
    ]
    flags += ["--batch_sizes", "2", "--steps", "1", "--repeats", "1", "--warmup", "1"]
    env = {**os.environ, "BENCH_RESULTS_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "model_throughput", "--record", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "recorded in" in done.stderr and "| tiny |" in done.stdout  # still printed as before
    with open(tmp_path / "model_throughput.json", encoding="utf-8") as f:
        [record] = json.load(f)["records"]
    assert record["options"] == flags and record["command"] == "python -m bench model_throughput " + " ".join(
        flags
    )
    [table] = record["tables"]
    assert table["headers"][:3] == ["model", "params (M)", "precision"] and table["rows"][0][:4] == [
        "tiny",
        "4.4",
        "float32",
        "off",
    ]
    assert record["machine"]["cores"] >= 1 and record["machine"]["cpu"] and record["machine"]["gpu"] is None
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]) and re.fullmatch(
        r"[0-9a-f]{7}", record["commit"]
    )
    helped = subprocess.run(
        [sys.executable, "-m", "bench", "model_throughput", "--record", "--help"],
        cwd=ROOT, env={**env, "BENCH_RESULTS_DIR": str(tmp_path / "help")}, capture_output=True, text=True,
    )  # fmt: skip
    assert helped.returncode == 0 and not (tmp_path / "help").exists()


# --------------------------------------------------------------------- every script, smallest


@pytest.mark.process
def test_model_throughput():
    out = run_bench(
        "model_throughput.py",
        *("--models", "tiny", "--precisions", "float32", "--xla", "off", "--seq_length", "16"),
        *("--max_predictions", "2", "--batch_sizes", "2", "--steps", "1", "--repeats", "1", "--warmup", "1"),
    )
    [(header, rows)] = tables(out)
    assert header == [
        "model",
        "params (M)",
        "precision",
        "xla",
        "batch",
        "compile s",
        "seq/s",
        "vs fp32/no-XLA",
    ]
    assert [row[:5] for row in rows] == [["tiny", "4.4", "float32", "off", "2"]]
    assert_numbers(rows, [5, 6])
    assert rows[0][7] == "1.00x"


@pytest.mark.process
def test_pretrain_throughput():
    out = run_bench(
        "pretrain_throughput.py",
        *(
            "--models",
            "tiny",
            "--stacks",
            "ours",
            "--precisions",
            "fp32",
            "--xla",
            "off",
            "--data",
            "synthetic",
        ),
        *("--accumulation", "1", "--seq_lengths", "16", "--batch_size", "2"),
        *("--steps", "1", "--repeats", "1", "--warmup", "1"),
    )
    [(header, rows)] = tables(out)
    assert header == ["config", "stack", "seq/s median", "spread", "ratio vs keras-hub", "peak RSS MB"]
    assert [row[:2] for row in rows] == [["tiny L2/H128 s16 b2 fp32 XLA off synthetic acc1", "ours (LAMB)"]]
    assert_numbers(rows, [2, 5])
    assert int(rows[0][5].replace(",", "")) > 200  # a process that imported TensorFlow and built BERT


def test_pretrain_throughput_has_a_row_of_ours_per_optimizer_each_with_its_ratio_to_keras_hub():
    from bench import pretrain_throughput

    args = ["--models", "tiny", "--seq_lengths", "16", "--precisions", "fp32", "--xla", "on"]
    args += ["--data", "synthetic", "--accumulation", "1"]
    args += ["--optimizers", "lamb,adamw", "--read_every", "1,4"]
    plan = pretrain_throughput.plan_from(pretrain_throughput.parse_args(args))
    [group] = pretrain_throughput.configurations(plan)
    label, specs = pretrain_throughput.group_specs(plan, group, {})
    ours = {name: (s["optimizer"], s["read_every"]) for name, s in specs.items() if name != "keras-hub"}
    assert ours == {
        "ours": ("lamb", 1),
        "ours, reads every 4": ("lamb", 4),
        "ours AdamW": ("adamw", 1),
        "ours AdamW, reads every 4": ("adamw", 4),
    }
    rates = {"ours": [2.0, 3.0], "ours AdamW": [4.0, 6.0], "keras-hub": [4.0, 5.0]}
    optimizer = {"ours": "LAMB", "ours AdamW": "AdamW", "keras-hub": "AdamW"}
    results = {
        name: {"rates": [[r] for r in rates[name]], "rss_mb": 1e3, "workers": 1, "optimizer": optimizer[name]}
        for name in rates
    }
    rows = pretrain_throughput.table_rows(label, 1, results)
    assert [(row[1], row[4]) for row in rows] == [
        ("ours (LAMB)", "0.550 (0.500-0.600)"),
        ("ours (AdamW)", "1.100 (1.000-1.200)"),
        ("keras-hub (AdamW)", "1"),
    ]


@pytest.mark.process
def test_inference():
    out = run_bench("inference.py", "--quick", "--tasks", "glue", "--batch_sizes", "1")
    [(header, rows)] = tables(out)
    assert header == ["task", "seq", "batch", "path", "seq/s", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    assert [row[:4] for row in rows] == [
        ["glue", "128", "1", "savedmodel"],
        ["glue", "128", "1", "keras+xla"],
    ]
    assert_numbers(rows, [4, 5, 6, 7, 8])


@pytest.mark.process
def test_input_order():
    out = run_bench(
        "input_order.py",
        *("--files", "2", "--records", "100", "--workers", "1", "--phases", "1"),
        *("--window", "100", "--seconds", "0.2", "--repeats", "1"),
    )
    [(header, rows)] = tables(out)
    assert header == [
        "input",
        "workers",
        "pipeline",
        "sequences/s of worker 0, median (min-max)",
        "/ per-worker files",
        "x A100",
    ]
    assert [row[:3] for row in rows] == [
        ["phase 1 (s128, b64)", "1", "global order, static"],
        ["phase 1 (s128, b64)", "1", "per-worker files, static"],
        ["phase 1 (s128, b64)", "1", "global order, dynamic"],
        ["phase 1 (s128, b64)", "1", "global order, dynamic, whole words"],
        ["phase 1: first batch from sequence 0", "", "global order, static"],
        ["phase 1: first batch from sequence 117 (mid-epoch)", "", "global order, static"],
    ]
    assert_numbers(rows[:4], [3], NUMBER_RANGE)
    assert_numbers(rows[:4], [4, 5])
    assert rows[1][4] == "1.00"  # the peer is its own unit
    assert_numbers(rows[4:], [3])


@pytest.mark.process
def test_input_order_dynamic_alone():
    # Without static records there is no per-worker-files peer and no ratio to it.
    out = run_bench(
        "input_order.py",
        *("--files", "2", "--records", "40", "--workers", "2", "--phases", "2", "--maskings", "dynamic"),
        *("--window", "40", "--seconds", "0.2", "--repeats", "1"),
    )
    [(header, rows)] = tables(out)
    assert [row[:3] for row in rows] == [
        ["phase 2 (s512, b8)", "2", "global order, dynamic"],
        ["phase 2: first batch from sequence 0", "", "global order, dynamic"],
        ["phase 2: first batch from sequence 27 (mid-epoch)", "", "global order, dynamic"],
    ]
    assert rows[0][4] == "" and NUMBER.fullmatch(rows[0][5])


@pytest.mark.process
def test_optimizer_convergence(tmp_path):
    out = run_bench(
        "optimizer_convergence.py",
        *("--corpus_mb", "0.2", "--vocab_size", "300", "--sequences", "16", "--micro_batch", "8"),
        *("--accumulation", "2", "--eval_batches", "1", "--runs", "a,c", "--xla", "off"),
        *("--cache_dir", str(tmp_path)),
    )
    [(header, rows)] = tables(out)
    assert header == [
        "run",
        "peak lr",
        "updates",
        "train loss",
        "held-out loss",
        "MLM acc",
        "NSP acc",
        "seconds",
    ]
    assert [row[:3] for row in rows] == [
        ["(a) Adam, batch 8", "1.00e-03", "2"],
        ["(c) LAMB, batch 16", "1.77e-02", "1"],
    ]
    assert_numbers(rows, [3, 4, 5, 6, 7])


@pytest.mark.process
def test_prep_throughput(tmp_path):
    out = run_bench("prep_throughput.py", "--sizes", "0.2", "--repeats", "1", "--cache_dir", str(tmp_path))
    runs, tokenization, end_to_end = tables(out)
    header, rows = runs
    assert header == ["run", "input MB", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB"]
    assert [row[0] for row in rows] == [
        "create_pretraining_data",
        "sharding",
        "create_tfrecord_files_x1",
        f"create_tfrecord_files_x{os.cpu_count()}",
        "google reference",
    ]
    assert_numbers(rows, [1, 2, 4, 6])
    assert_numbers([rows[0], *rows[2:4]], [3, 5])  # the runs that write records count them

    header, rows = tokenization
    assert header == ["tokenizer", "what is timed", "seconds", "CPU s", "MB/s", "C mirror speed-up"]
    assert len(rows) == 4
    assert_numbers(rows, [3, 4, 5])
    assert_numbers(rows, [2], NUMBER_RANGE)

    header, rows = end_to_end
    assert header[:7] == ["variant", "what runs", "seconds", "CPU s", "MB/s", "instances/s", "peak RSS MB"]
    assert [row[0] for row in rows] == ["all_native", "rust_tokenizer", "python_instances", "no_native"]
    assert_numbers(rows, [3, 4, 5, 6, 7])
    assert "same bytes written by every variant" in out


@pytest.mark.process
def test_tokenizer_exactness(tmp_path):
    # It compares with the code at HEAD, through git: not in a copy without its history (the image).
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    out = run_bench(
        "tokenizer_exactness.py",
        "--corpus_mb",
        "0.2",
        "--repeats",
        "1",
        "--calls",
        "1",
        "--cache_dir",
        str(tmp_path),
    )
    ((header, rows),) = tables(out)
    assert header == ["step", "code", "seconds", "CPU s", "MB/s", "speed new/old", "CPU speed new/old"]
    steps = ["encode_batch", "tokenize_batch", "read_documents", "create_training_files"]
    assert [row[0] for row in rows] == [step for step in steps for _ in (0, 1)]
    assert [row[1] for row in rows[:2]] == [rows[0][1], "working tree"] and rows[0][1].startswith("HEAD (")
    assert_numbers(rows, [3, 4])
    assert_numbers(rows, [2], NUMBER_RANGE)
    assert_numbers(rows[1::2], [5, 6])
    assert re.search(r"[\d,]+ of [\d,]+ lines get other ids than before", out)


@pytest.mark.process
def test_prep_scale(tmp_path):
    out = run_bench("prep_scale.py", "--xml_mb", "0.5", "--processes", "1,2", "--cache_dir", str(tmp_path))
    stages, comparison, breakdown, projection = tables(out)
    header, rows = stages
    assert header == [
        "stage",
        "input MB",
        "output MB",
        "1p seconds",
        "1p CPU s parent + workers",
        "1p peak RSS MB parent / worker",
        "2p seconds",
        "2p CPU s parent + workers",
        "2p peak RSS MB parent / worker",
        "2p speed-up",
        "same bytes",
    ]
    tfrecord_stages = [
        "tfrecords_phase1 static",
        "tfrecords_phase2 static",
        "tfrecords_phase1 dynamic",
        "tfrecords_phase2 dynamic",
    ]
    assert [row[0] for row in rows] == ["text_formatting", "sharding", *tfrecord_stages]
    assert_numbers(rows, [1, 2, 3, 6, 9])
    for row in rows:
        assert re.fullmatch(r"[\d.]+ \+ [\d.]+", row[4]) and re.fullmatch(r"\d+ / (\d+|-)", row[5]), row
        assert re.fullmatch(r"[\d.]+ \+ [\d.]+", row[7]) and re.fullmatch(r"\d+ / \d+", row[8]), row
        assert row[10] == "yes"  # 1 and 2 processes wrote the same bytes
    written = {row[0]: float(row[2].replace(",", "")) for row in rows}
    for phase in ("phase1", "phase2"):  # five masked copies against one unmasked: well over 4x
        assert written[f"tfrecords_{phase} static"] > 4 * written[f"tfrecords_{phase} dynamic"]

    header, rows = comparison
    assert header[:4] == [
        "TFRecord stages",
        "MB static / dynamic",
        "bytes ratio",
        "instances static / dynamic",
    ]
    assert header[-1] == ">= 4x: bytes, time"
    assert [row[0] for row in rows] == ["phase 1 (seq 128)", "phase 2 (seq 512)", "both phases"]
    for row in rows:
        static, dynamic = (int(n.replace(",", "")) for n in row[3].split(" / "))
        assert 4.5 * dynamic < static < 5.5 * dynamic  # dupe 5 against dupe 1, the same pairs
        assert row[-1].startswith("yes, ")  # the bytes target
    assert_numbers(rows, [2, 5, 7, 9])

    header, rows = breakdown
    assert header[:3] == ["phase", "records", "instances"]
    assert [row[:2] for row in rows] == [
        [phase, records]
        for phase in ("phase1", "phase2")
        for records in ("static, dupe 5", "static, dupe 1", "dynamic, dupe 1")
    ]
    assert_numbers(rows, [2, 3, 4, 5, 6, 8, 9])
    for static1, dynamic1 in ((rows[1], rows[2]), (rows[4], rows[5])):
        assert static1[2] == dynamic1[2]  # dynamic records are the static ones' first copy, unmasked

    header, rows = projection
    assert header[:2] == ["stage", "1 process, full dump"]
    assert [row[0] for row in rows] == [
        "text_formatting",
        "sharding",
        *tfrecord_stages,
        "whole path, static (dupe 5)",
        "whole path, dynamic (dupe 1)",
    ]
    assert all(re.fullmatch(r"\d+:\d\d:\d\d", row[1]) for row in rows)


@pytest.mark.process
@pytest.mark.slow
def test_masking_quality(tmp_path):
    # The quickstart's commands at their smallest: two pretrainings, four evaluations. Without XLA:
    # the table's making is tested, not XLA's compiles (tests/test_quickstart.py runs those).
    out = run_bench(
        "masking_quality.py",
        *("--corpus_mb", "0.3", "--train_steps", "20", "--xla", "off", "--work_dir", str(tmp_path)),
    )
    [(header, rows)] = tables(out)
    assert header[:4] == ["records", "seed", "steps", "held-out MLM acc seq 128"]
    assert [row[:3] for row in rows] == [
        ["static, dupe 2", "12345", "20"],
        ["dynamic, dupe 1", "12345", "20"],
        ["dynamic - static, mean over seeds", "", ""],
    ]
    assert_numbers(rows[:2], [3, 4, 5, 6, 7, 8, 9])
    assert all(re.fullmatch(r"[+-]\d\.\d{3}", cell) for cell in rows[2][3:8]), rows[2]
    assert re.search(r"training records, static \(dupe 2\): seq 128: [\d,]+ records", out)
    assert re.search(r"held out at seq 512: [\d,]+ masked positions", out)


def _quickstart_records(data: str, count: int = 80) -> None:
    """Records of 8 to seq / 2 tokens where the quickstart's data commands put theirs."""
    import random

    from data import paths
    from data.pretraining import schema, tfrecord

    rng = random.Random(0)
    for phase, (seq, predictions) in ((1, (128, 20)), (2, (512, 80))):
        directory = os.path.join(paths.quickstart_records(data, phase), "training")
        os.makedirs(directory)
        with tfrecord.RecordWriter(os.path.join(directory, "part-0.tfrecord")) as writer:
            for _ in range(count):
                n = rng.randrange(8, seq // 2)
                ids = [2] + [rng.randrange(5, 60) for _ in range(n - 2)] + [3]
                features = schema.pad_features(
                    ids, [0] * n, [1, 2], [ids[1], ids[2]], False, seq, predictions
                )
                writer.write(schema.serialize_example(features))


def test_layout_choice_sets_the_pick_beside_a_padding_records_measured_layouts(tmp_path, capsys):
    """bench/layout_choice.py on a padding record of the quickstart's phase 2 (records of 8 to 255
    tokens at 512): the prediction beside each measured row, and per group the pick, the fastest
    and the pick's speed over the fastest's."""
    from bench import layout_choice, records

    data = str(tmp_path / "quickstart" / "data")
    _quickstart_records(data)
    from data import paths

    os.makedirs(os.path.dirname(paths.quickstart_vocab(data)))
    with open(paths.quickstart_vocab(data), "w") as f:
        f.write("".join(f"w{i}\n" for i in range(60)))
    headers = [
        "input",
        "work: batch",
        "bin",
        "real tokens",
        "worker spread",
        "seq/s",
        "vs bin 0",
        "compile s",
    ]
    # (layout, median ratio, seq/s median (min-max)): the best rounds rank packed + 64 first
    measured = [
        ("0", "1.00x", "10.0 (9.0-10.0)"),
        ("64", "1.60x", "16.0 (15.0-16.0)"),
        ("packed", "2.10x", "21.0 (20.0-21.0)"),
        ("packed, 64", "2.05x", "20.5 (20.0-22.0)"),
    ]
    rows = [
        ["quickstart corpus phase 2 (seq 512)", "quickstart: 8 x 4", b, "50%", "-", rate, r, "1"]
        for b, r, rate in measured
    ]
    results = tmp_path / "results"
    results.mkdir()
    tables_printed, _ = records.parse_output("T\n" + harness.markdown_table(headers, rows) + "\n")
    record = {"benchmark": "padding", "options": ["--only", "pretraining"], "date": "2026-12-07"}
    record.update(
        command="python -m bench padding --only pretraining", commit="0000000", tables=tables_printed
    )
    (results / "padding.json").write_text(json.dumps({"records": [record]}))
    layout_choice.main(["--work_dir", str(tmp_path), "--results", str(results), "--detail"])
    (detail_header, detail), (_, summary) = tables(capsys.readouterr().out)
    assert detail_header[-4:] == ["vs padded", "best round vs padded", "predicted vs padded", "auto"]
    assert [row[2] for row in detail] == ["padded", "bins of 64", "packed", "packed, bins of 64"]
    assert [row[5] for row in detail] == [r for _, r, _ in measured]
    assert [row[6] for row in detail] == ["1.00x", "1.60x", "2.10x", "2.20x"]
    predicted = [float(row[7][:-1]) for row in detail]
    assert predicted[0] == 1.0 and min(predicted[1:]) > 1.5  # lengths below 256: two or more a row
    assert 0.2 < float(detail[0][4][:-1]) / 100 < 0.3  # a mean of about 131 of 512 tokens
    (auto,) = [row for row in detail if row[8] == "auto"]
    assert float(auto[7][:-1]) >= max(predicted) / 1.03
    assert summary == [
        [
            "quickstart corpus phase 2 (seq 512)",
            "bert_tiny",
            "quickstart: 8 x 4",
            auto[2],
            "packed (2.10x)",
            f"{float(auto[5][:-1]) / 2.10:.2f}",
            "packed, bins of 64 (2.20x)",
            f"{float(auto[6][:-1]) / 2.20:.2f}",
        ]
    ]


@pytest.mark.process
def test_padding(tmp_path):
    import shutil

    from data import paths

    # The quickstart's layout with small records of varied lengths, so nothing is built.
    data = str(tmp_path / "quickstart" / "data")
    _quickstart_records(data)
    vocab = paths.quickstart_vocab(data)
    os.makedirs(os.path.dirname(vocab))
    with open(vocab, "w") as f:
        # Every id the records hold (5 to 59) is in it: TensorFlow's graphs refuse one that is not.
        f.write(
            "".join(
                f"{t}\n"
                for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(55))]
            )
        )
    qa = paths.python_qa_dir(data)
    os.makedirs(qa)
    for name in ("train.json", "dev.json"):
        shutil.copy(
            os.path.join(ROOT, "tests", "fixtures", "squad", "train-v1.1-tiny.json"), os.path.join(qa, name)
        )
    out = run_bench(
        "padding.py",
        *("--work_dir", str(tmp_path), "--xml_mb", "0", "--recipes", "quickstart", "--bins", "0,64"),
        *("--repeats", "1", "--updates", "1", "--warmup", "1", "--glue_rows", "40"),
        *("--xla", "off"),  # the table's making, not XLA's compile times (about half the time)
        *("--corpus", os.path.join(ROOT, "tests", "fixtures", "sentences.txt")),
    )
    ((header, rows),) = tables(out)
    assert header == [
        "input",
        "work: batch",
        "bin",
        "real tokens",
        "worker spread",
        "seq/s",
        "vs bin 0",
        "compile s",
    ]
    assert [(row[0], row[2]) for row in rows] == [
        *(
            (f"quickstart corpus phase {p} (seq {s})", b)
            for p, s in ((1, 128), (2, 512))
            for b in ("0", "64", "packed", "packed, 64")
        ),
        *(("SQuAD python_qa (seq 384)", b) for _ in range(2) for b in ("0", "64")),
        *(("GLUE SST-2-like (seq 128)", b) for b in ("0", "64")),
    ]
    assert all(row[6] == "1.00x" for row in rows if row[2] == "0")
    assert_numbers(rows, [5], NUMBER_RANGE)
    real = {(row[0], row[1], row[2]): float(row[3].rstrip("%")) for row in rows}
    # Records of at most half the sequence: binned, more of what is computed is real.
    phase2 = "quickstart corpus phase 2 (seq 512)"
    assert real[(phase2, "quickstart: 8 x 4", "64")] > 2 * real[(phase2, "quickstart: 8 x 4", "0")]
    # Packed, rows of 512 hold several of them; cut to bins, the partly filled rows cost less.
    assert real[(phase2, "quickstart: 8 x 4", "packed")] > 2 * real[(phase2, "quickstart: 8 x 4", "0")]
    assert real[(phase2, "quickstart: 8 x 4", "packed, 64")] >= real[(phase2, "quickstart: 8 x 4", "packed")]


def test_finetune_quality_reference_schedule_and_batches_are_what_they_say():
    """bench/finetune_quality.py's Hugging Face side: its two schedules equal the library's
    WarmupPolynomialDecay from step 0 (Google's) and from the end of warmup; Trainer's batches
    (ceil per epoch, the last short) against Google's whole batches; the pair task's rows."""
    from bench import finetune_quality as fq
    from optimization import WarmupPolynomialDecay

    for google in (True, False):
        rate = fq.hf_schedule(google, 5e-5, 9, 90)
        library = WarmupPolynomialDecay(5e-5, 9, 90, 1.0, decay_from_warmup=not google)
        assert [rate(s) for s in range(92)] == pytest.approx([float(library(s)) for s in range(92)], rel=1e-5)
    trainer = fq.hf_batches(707, 16, 2.0, seed=0, whole_batches=False)
    assert len(trainer) == 90 and [len(b) for b in trainer[43:46]] == [16, 3, 16]
    assert sorted(i for b in trainer[:45] for i in b) == list(range(707))
    google = fq.hf_batches(707, 16, 2.0, seed=0, whole_batches=True)
    assert len(google) == 88 and {len(b) for b in google} == {16}

    def qa(i, name):
        return {
            "id": str(i),
            "question": f"Which function of m does this: do {name}?",
            "answers": [{"text": name}],
        }

    squad = {
        "data": [
            {"paragraphs": [{"qas": [qa(0, "f0")]}, {"qas": [qa(1, "f1")]}]},
            {"paragraphs": [{"qas": [qa(2, "alone")]}]},
        ]
    }
    assert fq.first_questions(squad, 1)["data"] == [{"paragraphs": [{"qas": [qa(0, "f0")]}]}]
    assert fq.pair_rows(squad, seed=0) == [
        ("Which function of m does this: do f0?", "f0: Do f0", "entailment"),
        ("Which function of m does this: do f0?", "f1: Do f1", "not_entailment"),
        ("Which function of m does this: do f1?", "f1: Do f1", "entailment"),
        ("Which function of m does this: do f1?", "f0: Do f0", "not_entailment"),
    ]  # "alone" has no other function in its module: left out
    rows = fq.summary_rows(
        ["", "--x"], {1: {"": 29.0, "--x": 31.0, "hf": 30.0}, 2: {"": 28.0, "--x": 33.0, "hf": 34.0}}
    )
    assert rows[-1] == [
        "mean (sd)",
        "28.5 (0.7)",
        "32.0 (1.4)",
        "32.0 (2.8)",
        "+3.5 (3.5); lower in 2 of 2",
        "+0.0 (1.4); lower in 1 of 2",
    ]


@pytest.mark.process
@pytest.mark.slow
def test_finetune_quality(tmp_path):
    out = run_bench(
        "finetune_quality.py",
        *("--seeds", "1", "--tasks", "squad", "--ours=", "--train_questions", "24", "--dev_questions", "12"),
        *("--work_dir", str(tmp_path)),
        env=xla_default_effort(dict(os.environ)),  # all-MiniLM-L6-v2 compiles faster at the default
    )
    [(header, rows)] = tables(out)
    assert header == ["seed", "ours defaults", "Hugging Face", "HF - ours defaults"]
    assert rows[0][0] == "1" and rows[1][0] == "mean (sd)"
    assert_numbers(rows[:1], [1, 2])
