"""scripts/data_download.sh's launcher (launch/data.py) in process through `python -m launch plan`:
the target and the named options with NVIDIA's recipe as defaults, the checks, the prepare_data.py
commands of each target in order (the lists scripts/data_download.sh ran before it moved into the
engine, written out here), the steps of a real run, and one offline run through the script."""

import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import LAUNCH_ENV
from data import paths
from launch.__main__ import LAUNCHERS, main
from launch.engine import plan_launch, read_steps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/nonexistent/bin/python"
PREPARE = os.path.join(ROOT, "prepare_data.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def plan(tmp_path, *args, environ=None):
    """(exit status, printed text, the plan file's path) of one `python -m launch plan data_download`."""
    out = io.StringIO()
    plan_file = str(tmp_path / "data_download.plan")
    status = plan_launch(
        LAUNCHERS["data_download"],
        "data_download.sh",
        plan_file,
        list(args),
        environ or {},
        ROOT,
        PYTHON,
        out,
    )
    return status, out.getvalue(), plan_file


def commands_of(text: str) -> list:
    """[(label, argv)] of the summary's commands."""
    block = text.split("\ncommands:\n", 1)[1]
    return [(label, shlex.split(command)) for label, command in re.findall(r"^  ([^:]+): (.*)$", block, re.M)]


def settings_of(text: str) -> dict:
    """{name: (value, source)} of the summary's settings lines."""
    block = text.partition("\npaths (")[0]
    return {n: (v, s) for n, v, s in re.findall(r"^  (\w+) += (\S+) +\((.*)\)$", block, re.M)}


def plan_steps(plan_file: str) -> list:
    """[(argv, banner, failure)] of the plan's steps, then ("DONE", the done line, "")."""
    steps, done = read_steps(plan_file)
    return [(step.argv, step.banner, step.failure) for step in steps] + [("DONE", done, "")]


def test_the_dry_run_of_all_lists_the_prepare_data_commands_the_script_ran_before(tmp_path):
    data = str(tmp_path / "data")
    status, out, plan_file = plan(tmp_path, "all", "--dry_run", "--data_dir", data)
    assert status == 0 and not os.path.exists(plan_file) and not os.path.exists(data)
    p = [PYTHON, PREPARE, "--data_dir", data]
    shards = ["--n_training_shards", "256", "--n_test_shards", "16", "--fraction_test_set", "0.1"]
    vocab = f"{data}/download/google_pretrained_weights/uncased_L-12_H-768_A-12/vocab.txt"
    # What `bash scripts/data_download.sh all --dry_run --data_dir DIR` printed before the engine.
    assert [argv for _, argv in commands_of(out)] == [
        [*p, "--action", "download", "--dataset", "wikicorpus_en", "--wiki_dump", "latest"],
        [
            *p,
            *("--action", "text_formatting", "--dataset", "wikicorpus_en"),
            *("--input_files", f"{data}/download/wikicorpus_en/wikicorpus_en.xml.bz2"),
        ],
        [*p, "--action", "sharding", "--dataset", "wikicorpus_en", *shards],
        [*p, "--action", "download", "--dataset", "google_pretrained_weights"],
        [
            *p,
            *(
                "--action",
                "create_tfrecord_files",
                "--dataset",
                "wikicorpus_en",
                *shards,
                "--vocab_file",
                vocab,
            ),
            *("--max_seq_length", "128", "--max_predictions_per_seq", "20", "--dupe_factor", "5"),
        ],
        [
            *p,
            *(
                "--action",
                "create_tfrecord_files",
                "--dataset",
                "wikicorpus_en",
                *shards,
                "--vocab_file",
                vocab,
            ),
            *("--max_seq_length", "512", "--max_predictions_per_seq", "80", "--dupe_factor", "5"),
        ],
        [*p, "--action", "download", "--dataset", "squad"],
        [*p, "--action", "download", "--dataset", "glue", "--glue_tasks", "all"],
    ]
    assert [label for label, _ in commands_of(out)] == [
        "download wikicorpus_en",
        "text_formatting",
        "sharding",
        "download google_pretrained_weights",
        "phase 1 TFRecords",
        "phase 2 TFRecords",
        "download squad",
        "download glue",
    ]
    expected = paths.default_pretraining_dirs(data)
    assert re.findall(r"^  \d\. (.*)$", out, re.M) == [
        "download the Wikipedia dump (latest) and format it as dataset 'wikicorpus_en'",
        "split it into 256 training + 16 test shards (test fraction 0.1)",
        f"vocabulary: Google's uncased vocab ({vocab})",
        f"phase 1 TFRecords (seq 128, 20 predictions, dupe_factor 5) -> {expected['phase1']}",
        f"phase 2 TFRecords (seq 512, 80 predictions, dupe_factor 5) -> {expected['phase2']}",
        f"download SQuAD v1.1 and v2.0 into {data}/download/squad",
        f"download GLUE (all) into {data}/download/glue",
    ]
    assert out.rstrip().endswith("dry run: nothing checked or started.")


def test_a_corpus_a_trained_vocab_and_the_other_options_give_the_commands_they_gave_before(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # relative corpus files are made absolute, each on its own
    data = str(tmp_path / "data")
    status, out, _ = plan(
        tmp_path,
        *("--dry_run", "--data_dir", data, "--corpus", "a.txt,sub/b.jsonl", "--train_vocab", "500"),
        *("--phases", "2", "--n_processes=3", "--mirror", "http://m.example", "--dupe_factor", "2"),
    )
    assert status == 0
    p = [PYTHON, PREPARE, "--data_dir", data]
    common = ["--dataset", "corpus", "--n_training_shards", "256", "--n_test_shards", "16"]
    common += ["--fraction_test_set", "0.1", "--n_processes", "3"]
    corpus = f"{tmp_path}/a.txt,{tmp_path}/sub/b.jsonl"
    assert commands_of(out) == [
        (
            "text_formatting",
            [*p, "--action", "text_formatting", "--dataset", "corpus", "--input_files", corpus],
        ),
        ("sharding", [*p, "--action", "sharding", *common]),
        ("vocab", [*p, "--action", "vocab", *common, "--vocab_size", "500"]),
        (
            "phase 2 TFRecords",
            [
                *(*p, "--action", "create_tfrecord_files", *common),
                *("--max_seq_length", "512", "--max_predictions_per_seq", "80", "--dupe_factor", "2"),
            ],
        ),
    ]
    assert settings_of(out)["dataset"] == ("corpus", "default: --corpus given")
    assert f"  corpus             = {corpus} (--corpus)" in out


def test_an_existing_vocab_a_dated_dump_and_a_mirror_reach_every_download(tmp_path):
    data, vocab = str(tmp_path / "data"), str(tmp_path / "vocab.txt")
    status, out, _ = plan(
        tmp_path,
        *("all", "--dry_run", f"--data_dir={data}", "--vocab_file", vocab, "--wiki_dump", "20240101"),
        *("--glue_tasks", "MRPC,CoLA", "--dataset", "mine", "--mirror", "http://m.example"),
    )
    assert status == 0
    commands = dict(commands_of(out))
    p = [PYTHON, PREPARE, "--data_dir", data]
    mirror = ["--mirror", "http://m.example"]
    assert "download google_pretrained_weights" not in commands
    assert commands["download wikicorpus_en"] == [
        *(*p, "--action", "download", "--dataset", "wikicorpus_en", "--wiki_dump", "20240101", *mirror)
    ]
    assert commands["download squad"] == [*p, "--action", "download", "--dataset", "squad", *mirror]
    assert commands["download glue"] == [
        *(*p, "--action", "download", "--dataset", "glue", "--glue_tasks", "MRPC,CoLA", *mirror)
    ]
    assert commands["phase 1 TFRecords"][-8:-6] == ["--vocab_file", vocab]
    assert "--dataset mine" in shlex.join(commands["text_formatting"])


def test_defaults_are_nvidias_recipe_and_the_data_root_comes_from_bert_data_dir(tmp_path):
    status, out, _ = plan(tmp_path, "--dry_run", environ={"BERT_DATA_DIR": str(tmp_path / "root")})
    assert status == 0
    recipe = paths.recipe()
    settings = settings_of(out)
    assert settings["target"] == ("wiki_only", "default")
    for name in ("n_training_shards", "n_test_shards", "fraction_test_set"):
        assert settings[name] == (str(recipe[name]), "default")
    assert settings["dupe_factor"] == (str(recipe["dupe_factor"]), "default: NVIDIA's recipe")
    assert settings["masking"] == ("static", "default")
    assert settings["dataset"] == (recipe["dataset"], "default: NVIDIA's recipe")
    assert settings["n_processes"] == ("-", "default")
    assert f"  data_dir           = {tmp_path / 'root'} (BERT_DATA_DIR)" in out
    assert [label for label, _ in commands_of(out)][-1] == "phase 2 TFRecords"  # wiki_only: no squad


def test_dynamic_masking_writes_one_unmasked_copy_where_the_pretraining_launcher_looks(tmp_path):
    data = str(tmp_path / "data")
    status, out, _ = plan(tmp_path, "--dry_run", "--data_dir", data, "--masking", "dynamic")
    assert status == 0
    assert settings_of(out)["dupe_factor"] == ("1", "default: one unmasked copy")
    commands = dict(commands_of(out))
    expected = paths.default_pretraining_dirs(data, masking="dynamic", dupe_factor=1)
    for phase in ("1", "2"):
        assert commands[f"phase {phase} TFRecords"][-4:] == ["--dupe_factor", "1", "--masking", "dynamic"]
        assert f"unmasked: masked as read) -> {expected['phase' + phase]}" in out
    assert expected["phase1"].endswith("_dupe_factor_1_masking_dynamic_shard_256_test_split_10/wikicorpus_en")
    # A dupe factor given stays; the static default directory is not the dynamic one.
    status, out, _ = plan(
        tmp_path, "--dry_run", "--data_dir", data, "--masking", "dynamic", "--dupe_factor", "2"
    )
    assert status == 0 and dict(commands_of(out))["phase 1 TFRecords"][-4:-2] == ["--dupe_factor", "2"]
    assert paths.default_pretraining_dirs(data)["phase1"] != expected["phase1"]


@pytest.mark.parametrize(
    "args, sentence",
    [
        (["books"], "target (argument 1) must be one of wiki_only, squad, glue, all, got 'books'."),
        (
            ["--n_training_shards", "many"],
            "n_training_shards (--n_training_shards) must be a positive integer",
        ),
        (["--n_test_shards=-1"], "n_test_shards (--n_test_shards) must be an integer >= 0, got '-1'."),
        (["--dupe_factor", "0"], "dupe_factor (--dupe_factor) must be a positive integer, got '0'."),
        (["--fraction_test_set", "1"], "fraction_test_set (--fraction_test_set) must be a number in [0, 1)"),
        (["--train_vocab", "99"], "train_vocab (--train_vocab) must be an integer >= 100, got '99'."),
        (["--n_processes", "0"], "n_processes (--n_processes) must be a positive integer, got '0'."),
        (["--phases", "1 3"], "phases (--phases) must be 1 and/or 2"),
        (["--wiki_dump", "2024-01-01"], "wiki_dump (--wiki_dump) must be 'latest' or a date YYYYMMDD"),
        (["--dataset", "../x"], "dataset (--dataset) must be a plain name (letters, digits, _ . -)"),
        (["--vocab_file", "v.txt", "--train_vocab", "500"], "give --vocab_file or --train_vocab, not both."),
        (["--", "--dataset=other"], "--dataset after -- would contradict the launcher's own --dataset"),
        (["--books", "1"], "unknown option '--books'"),
    ],
)
def test_bad_arguments_stop_with_one_sentence_and_the_usage(tmp_path, capsys, args, sentence):
    plan_file = str(tmp_path / "plan")
    assert main(["plan", "data_download", plan_file, PYTHON, *args], environ={}) == 2
    err = capsys.readouterr().err
    assert f"data_download.sh: error: {sentence}" in err
    assert "usage: data_download.sh [up to 1 positional arguments]" in err
    assert not os.path.exists(plan_file)


def test_missing_inputs_stop_a_real_run_before_any_step(tmp_path, capsys):
    plan_file = str(tmp_path / "plan")
    for args, sentence in (
        (
            ["--vocab_file", str(tmp_path / "none.txt")],
            f"--vocab_file '{tmp_path / 'none.txt'}' does not exist.",
        ),
        (
            ["--corpus", str(tmp_path / "gone.txt")],
            f"--corpus file '{tmp_path / 'gone.txt'}' does not exist.",
        ),
    ):
        assert main(["plan", "data_download", plan_file, PYTHON, *args], environ={}) == 2
        assert f"data_download.sh: error: {sentence}" in capsys.readouterr().err
        assert not os.path.exists(plan_file)


def test_a_real_run_plans_each_stage_as_a_step_with_its_banner_and_the_done_line(tmp_path):
    data = str(tmp_path / "data")
    args = ["glue", "--data_dir", data, "--glue_tasks=MRPC", "--", "--no_progress"]
    status, out, plan_file = plan(tmp_path, *args)
    assert status == 0 and os.path.isdir(data)  # checked writable (created) before the steps run
    (argv, banner, failure), done = plan_steps(plan_file)
    p = [PYTHON, PREPARE, "--data_dir", data]
    assert argv == [*p, "--action", "download", "--dataset", "glue", "--glue_tasks", "MRPC", "--no_progress"]
    assert banner == "data_download.sh: step 1/1: download glue"
    assert failure.startswith("data_download.sh: error: download glue stopped with exit status {status}")
    assert done == ("DONE", "data_download.sh: done: glue", "")


@pytest.mark.process
def test_the_script_prepares_a_corpus_offline_and_ends_with_the_done_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env["BERT_PYTHON"] = sys.executable
    data = tmp_path / "data"
    result = subprocess.run(
        [
            *("bash", os.path.join(ROOT, "scripts", "data_download.sh")),
            *("--data_dir", str(data), "--corpus", os.path.join(FIXTURES, "domain_corpus.jsonl")),
            *("--dataset", "notes", "--train_vocab", "300", "--n_training_shards", "2"),
            *("--n_test_shards", "1", "--fraction_test_set", "0.2", "--dupe_factor", "2", "--phases", "1"),
            *("--", "--no_progress"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    banners = re.findall(r"^== data_download\.sh: (step \d/\d: [\w ]+) starts \(", result.stdout, re.M)
    assert banners == [
        "step 1/4: text_formatting",
        "step 2/4: sharding",
        "step 3/4: vocab",
        "step 4/4: phase 1 TFRecords",
    ]
    assert re.search(r"^== data_download\.sh: done: wiki_only \(.*\) ==$", result.stdout, re.M)
    records = paths.default_pretraining_dirs(str(data), "notes", 2, 0.2, dupe_factor=2)["phase1"]
    with open(os.path.join(records, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["complete"] and sorted(manifest["outputs"]) == [
        "test/notes_test_0.tfrecord",
        "training/notes_training_0.tfrecord",
        "training/notes_training_1.tfrecord",
    ]
    assert not os.path.exists(
        paths.default_pretraining_dirs(str(data), "notes", 2, 0.2, dupe_factor=2)["phase2"]
    )
