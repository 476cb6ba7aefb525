"""launch/engine.py in process: the settings table, parsing of positional and named arguments,
presets and their precedence (defaults < preset < positional < named), the checks against
common/kinds.py, the usage text, the resolved summary, and the plan file it writes.

A toy launcher (below) drives the engine through every kind of setting and path; one test runs
the real pretraining launcher in process to show the same precedence there."""

import io
import json
import os
import re
import shlex

import pytest

from common.errors import UserError
from common.kinds import KINDS
from launch import engine
from launch.engine import Launcher, PathOption, Plan, Setting, Step, plan_launch
from launch.workers import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/nonexistent/bin/python"  # not a file: horovodrun and mpirun are then taken by name
SCRIPT = "toy.sh"
ENTRY = "run_toy.py"
MODELS = ["base", "tiny"]  # the configs/bert_<name>.json of the toy repository


def _letters(text: str) -> str:
    if not text.isalpha():
        raise ValueError("letters only")
    return text.upper()


SETTINGS = (
    Setting("batch_size", "8", "count", "examples per step", flag="train_batch_size"),
    Setting("learning_rate", "5e-4", "rate", "peak learning rate", flag="learning_rate"),
    Setting("precision", "fp16", "precision", "fp16 | fp32 | tf32 | bf16", flag="precision"),
    Setting("num_gpus", "1", "count", "workers"),
    Setting("bert_model", "base", "model", "configs/bert_<name>.json"),
    Setting("task", "mrpc", "choice", "mrpc | sst2", choices=("mrpc", "sst2"), flag="task_name"),
    Setting("init_checkpoint", "", "text", "starting weights", flag="init_checkpoint"),
    Setting("do_eval", "true", "bool", "evaluate at the end", positional=False, flag="do_eval"),
    Setting("tag", "run", "custom", "a name in letters", parse=_letters, positional=False, flag="tag"),
    Setting("note", "", "text", "passed on only when given", positional=False, flag="run_note"),
)
POSITIONAL = [s.name for s in SETTINGS if s.positional]
PATHS = (
    PathOption("data_dir", "TOY_DATA_DIR", "the data root"),
    PathOption("results_dir", None, "outputs"),
)


def toy_launcher(workers="num_gpus", labelled=False):
    """(the toy Launcher, the list of what its plan's prepare() was called with)."""
    prepared = []

    def plan(launch):
        t = launch.text
        data = launch.path("data_dir", "/toy/data", "the toy's root")
        results = launch.path("results_dir", os.path.join(launch.repo_root, "results"), "<repo>/results")
        launch.default("init_checkpoint", os.path.join(results, t["bert_model"]), "results_dir, bert_model")
        command = launch.command([("data_dir", data, "data_dir"), ("do_train", "true", "")])

        def prepare(say):
            say("checking inputs")
            prepared.append(say)
            return [
                Step(
                    command,
                    banner="training",
                    failure="training stopped ({status})",
                    stop_file=os.path.join(results, "STOP"),
                ),
                Step(["echo", "it's done"]),
            ]

        commands = [("train", command), ("report", ["echo", "report"])] if labelled else [(None, command)]
        return Plan(commands, [launch.workers.line(), "a note"], prepare, done="finished")

    launcher = Launcher(
        "toy", ENTRY, ("Trains the toy.", "Second line."), SETTINGS, PATHS, plan, workers=workers
    )
    return launcher, prepared


@pytest.fixture
def repo(tmp_path):
    """A repository root with configs/bert_{base,tiny}.json and two presets of the toy launcher."""
    root = tmp_path / "repo"
    presets = root / "configs" / "presets" / "toy"
    presets.mkdir(parents=True)
    for model in MODELS:
        (root / "configs" / f"bert_{model}.json").write_text("{}")
    (root / "configs" / "README.md").write_text("not a model")
    (presets / "fast.conf").write_text(
        "# a fast toy\nbatch_size=4\nlearning_rate = '1e-3'  # quoted, with a comment\n\n"
        'precision="fp32"\ntask=sst2\n'
    )
    (presets / "wide.json").write_text(json.dumps({"num_gpus": 2, "do_eval": False, "tag": "wide"}))
    return str(root)


def run(repo, *args, environ=None, launcher=None):
    """(exit status, printed text, plan file path, prepare() calls) of one plan_launch."""
    launcher, prepared = launcher or toy_launcher()
    out = io.StringIO()
    plan_file = os.path.join(repo, "toy.plan")
    status = plan_launch(launcher, SCRIPT, plan_file, list(args), environ or {}, repo, PYTHON, out)
    return status, out.getvalue(), plan_file, prepared


def settings_of(text: str) -> dict:
    """{name: (value, source)} of the summary's settings lines (those above its paths)."""
    settings = text.partition("\npaths (")[0]
    return {n: (v, s) for n, v, s in re.findall(r"^  (\w+) += (\S*) +\((.*)\)$", settings, re.M)}


def flags_of(argv) -> dict:
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


# ---- the settings table ----------------------------------------------------------------------


def test_the_table_splits_positional_from_named_only_settings():
    launcher, _ = toy_launcher()
    assert [s.name for s in launcher.positional] == POSITIONAL
    assert [s.name for s in launcher.named_only] == ["do_eval", "tag", "note"]
    assert len(POSITIONAL) == 7


# ---- parsing ---------------------------------------------------------------------------------


def test_arguments_split_into_positional_named_paths_preset_and_the_entry_points_flags():
    launcher, _ = toy_launcher()
    request = engine.parse_arguments(
        launcher,
        [
            "16",
            "--learning_rate=1e-3",
            "--precision",
            "bf16",
            "2e-3",
            "--do-eval=false",  # dashes read as underscores
            "--preset",
            "fast",
            "--dry_run",
            "--data_dir",
            "/d",
            "--results_dir=/r",
            "--",
            "--log_every=5",
            "--batch_size=1",  # after --: not the launcher's
            "-h",
        ],
    )
    assert request.positional == ["16", "2e-3"]
    assert request.named == {"learning_rate": "1e-3", "precision": "bf16", "do_eval": "false"}
    assert request.paths == {"data_dir": "/d", "results_dir": "/r"}
    assert (request.preset, request.dry_run, request.help) == ("fast", True, False)
    assert request.extra == ["--log_every=5", "--batch_size=1", "-h"]
    for flag in ("-h", "--help"):
        assert engine.parse_arguments(launcher, ["4", flag]).help is True


KNOWN = (
    "--preset, --dry_run, --batch_size, --learning_rate, --precision, --num_gpus, --bert_model, "
    "--task, --init_checkpoint, --do_eval, --tag, --note, --data_dir, --results_dir"
)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num_gpu=2"], f"unknown option '--num_gpu'; the named options are {KNOWN}."),
        (["--batch_size"], "--batch_size needs a value (--batch_size=VALUE or --batch_size VALUE)."),
        (["--batch_size", "--precision=fp32"], "--batch_size needs a value"),
        (["--batch_size="], "--batch_size needs a value"),
        (["--data_dir", ""], "--data_dir needs a value (--data_dir=VALUE or --data_dir VALUE)."),
        (["--preset"], "--preset needs a value"),
        (
            ["1", "2", "3", "4", "5", "6", "7", "8"],
            "at most 7 positional arguments are accepted, got 8: 1 2 3 4 5 6 7 8.",
        ),
    ],
)
def test_bad_arguments_are_one_usage_error(repo, args, message):
    with pytest.raises(UsageError) as error:
        run(repo, *args)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_value_given_to_dry_run_is_refused_as_such(repo):
    launcher, _ = toy_launcher()
    with pytest.raises(UsageError) as error:
        engine.parse_arguments(launcher, ["--dry_run=true"])
    assert str(error.value) == "--dry_run takes no value (got --dry_run=true)."


# ---- presets ---------------------------------------------------------------------------------


def test_presets_are_found_by_name_or_path_and_an_unknown_one_lists_the_others(repo, tmp_path):
    launcher, _ = toy_launcher()
    directory = engine.presets_dir(repo, launcher)
    assert directory == os.path.join(repo, "configs", "presets", "toy")
    assert engine.list_presets(directory) == ["fast", "wide"]
    assert engine.list_presets(os.path.join(repo, "nowhere")) == []
    assert engine.preset_path("fast", directory) == os.path.join(directory, "fast.conf")
    assert engine.preset_path("wide", directory) == os.path.join(directory, "wide.json")
    mine = tmp_path / "mine.conf"
    mine.write_text("batch_size=2\n")
    assert engine.preset_path(str(mine), directory) == str(mine)
    with pytest.raises(UsageError, match=r"^no preset 'slow': give a file or one of fast, wide\.$"):
        engine.preset_path("slow", directory)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match=f"one of none yet in {re.escape(str(empty))}"):
        engine.preset_path("fast", str(empty))


def test_preset_files_read_as_strings_of_the_settings_they_name(repo):
    directory = os.path.join(repo, "configs", "presets", "toy")
    names = [s.name for s in SETTINGS]
    assert engine.read_preset(os.path.join(directory, "fast.conf"), names) == {
        "batch_size": "4",
        "learning_rate": "1e-3",
        "precision": "fp32",
        "task": "sst2",
    }
    # JSON numbers and booleans become the text a shell would have given.
    assert engine.read_preset(os.path.join(directory, "wide.json"), names) == {
        "num_gpus": "2",
        "do_eval": "false",
        "tag": "wide",
    }


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "a.conf",
            "batch_size=2\nnum_gpu=2\n",
            "a.conf, line 2: unknown setting 'num_gpu'; a preset sets batch_size",
        ),
        ("a.conf", "num_gpus=2\n# again\nnum_gpus=4\n", "a.conf, line 3: num_gpus is set twice."),
        ("a.conf", "num_gpus 2\n", "a.conf, line 1: expected name=value, got 'num_gpus 2'."),
        ("a.conf", "data_dir=/x\n", "(paths come from environment variables or named options)"),
        ("a.json", '{"num_gpu": 2}', "a.json, key 'num_gpu': unknown setting 'num_gpu'"),
        ("a.json", "[1, 2]", "must hold a JSON object of name: value."),
        ("a.json", "{not json", "is not valid JSON"),
    ],
)
def test_a_bad_preset_file_is_one_sentence_naming_the_file_and_the_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError) as error:
        engine.read_preset(str(path), [s.name for s in SETTINGS])
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_missing_preset_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"Cannot read the preset file .*gone\.conf"):
        engine.read_preset(str(tmp_path / "gone.conf"), ["batch_size"])


# ---- precedence and checks -------------------------------------------------------------------


def test_precedence_is_defaults_then_preset_then_positional_then_named(repo):
    launcher, _ = toy_launcher()
    request = engine.parse_arguments(
        launcher, ["--preset", "fast", "16", "2e-3", "--learning_rate=3e-3", "--task", "mrpc"]
    )
    preset = ("fast", {"batch_size": "4", "learning_rate": "1e-3", "precision": "fp32", "task": "sst2"})
    resolved = engine.resolve(launcher, request, preset, MODELS)
    assert {n: (resolved.text[n], resolved.source[n]) for n in resolved.text} == {
        "batch_size": ("16", "argument 1"),  # positional beats preset
        "learning_rate": ("3e-3", "--learning_rate"),  # named beats positional and preset
        "precision": ("fp32", "preset fast"),  # preset beats default
        "num_gpus": ("1", "default"),
        "bert_model": ("base", "default"),
        "task": ("mrpc", "--task"),  # named beats preset
        "init_checkpoint": ("", "default"),  # computed by the launcher
        "do_eval": ("true", "default"),
        "tag": ("RUN", "default"),  # a custom setting's canonical text
        "note": ("", "default"),
    }
    assert resolved.value == {
        "batch_size": 16,
        "learning_rate": 0.003,
        "precision": "fp32",
        "num_gpus": 1,
        "bert_model": "base",
        "task": "mrpc",
        "init_checkpoint": None,
        "do_eval": True,
        "tag": "RUN",
        "note": None,
    }


def test_the_same_precedence_reaches_the_summary_through_plan_launch(repo):
    status, out, plan_file, prepared = run(
        repo, "--preset", "wide", "16", "--num_gpus=3", "--tag", "mine", "--dry_run"
    )
    assert status == 0
    settings = settings_of(out)
    assert settings["batch_size"] == ("16", "argument 1")
    assert settings["num_gpus"] == ("3", "--num_gpus")  # named beats preset wide's 2
    assert settings["do_eval"] == ("false", "preset wide")
    assert settings["tag"] == ("MINE", "--tag")
    assert settings["learning_rate"] == ("5e-4", "default")


# Every kind of common/kinds.py: a value it refuses, the whole sentence, a value it accepts.
KIND_CASES = {
    "count": ("8", "0", "x (argument 1) must be a positive integer, got '0'.", "3", 3),
    "steps": ("0", "-1", "x (argument 1) must be an integer >= 0, got '-1'.", "0", 0),
    "rate": ("5e-4", "2", "x (argument 1) must be a number in (0, 1] such as 5e-4, got '2'.", "1e-3", 0.001),
    "epochs": ("2.0", "0", "x (argument 1) must be a positive number such as 2.0, got '0'.", ".5", 0.5),
    "positive": ("60", "-1", "x (argument 1) must be a positive number such as 60, got '-1'.", "0.5", 0.5),
    "proportion": (
        "0.1",
        "1.5",
        "x (argument 1) must be a number in [0, 1] such as 0.1, got '1.5'.",
        "1",
        1.0,
    ),
    "fraction": (
        "0.1",
        "1",
        "x (argument 1) must be a number in [0, 1) such as 0.1, got '1'.",
        "0",
        0.0,
    ),
    "bool": ("true", "yes", "x (argument 1) must be true or false, got 'yes'.", "false", False),
    "precision": (
        "fp16",
        "fp8",
        "x (argument 1) must be one of fp16, fp32, tf32, bf16, got 'fp8'.",
        "bf16",
        "bf16",
    ),
}


def test_every_kind_has_a_case():
    assert set(KIND_CASES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_each_kind_refuses_a_bad_value_with_its_rule_and_types_a_good_one(kind):
    default, bad, sentence, good, typed = KIND_CASES[kind]
    setting = Setting("x", default, kind, "help")
    with pytest.raises(UsageError) as error:
        engine.check_value(setting, bad, "argument 1", MODELS)
    assert str(error.value) == sentence
    assert KINDS[kind].rule in sentence  # the launchers' rule is common/kinds.py's
    text, value = engine.check_value(setting, good, "--x", MODELS)
    assert (text, value) == (good, typed) and type(value) is type(typed)


@pytest.mark.parametrize(
    "setting, text, sentence",
    [
        (
            SETTINGS[4],
            "huge",
            "bert_model (--bert_model) must be one of base, tiny (the configs/bert_<name>.json files), "
            "got 'huge'.",
        ),
        (SETTINGS[5], "qnli", "task (--task) must be mrpc or sst2, got 'qnli'."),
        (
            Setting("split", "a", "choice", "", choices=("a", "b", "c")),
            "d",
            "split (--split) must be one of a, b, c, got 'd'.",
        ),
        (SETTINGS[8], "r2d2", "tag (--tag) must be letters only, got 'r2d2'."),
        (SETTINGS[6], "", "init_checkpoint (--init_checkpoint) must be starting weights, got ''."),
    ],
)
def test_models_choices_custom_and_text_settings_are_checked_too(setting, text, sentence):
    with pytest.raises(UsageError) as error:
        engine.check_value(setting, text, f"--{setting.name}", MODELS)
    assert str(error.value) == sentence


def test_a_bad_value_is_refused_before_anything_is_printed_naming_where_it_came_from(repo, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("precision=fp8\n")
    for args, sentence in (
        (["4", "2"], "learning_rate (argument 2) must be a number in (0, 1] such as 5e-4, got '2'."),
        (["--num_gpus=-2"], "num_gpus (--num_gpus) must be a positive integer, got '-2'."),
        (
            ["--preset", str(bad)],
            f"precision (preset {bad}) must be one of fp16, fp32, tf32, bf16, got 'fp8'.",
        ),
    ):
        out = io.StringIO()
        launcher, prepared = toy_launcher()
        with pytest.raises(UsageError) as error:
            plan_launch(launcher, SCRIPT, str(tmp_path / "p"), args, {}, repo, PYTHON, out)
        assert str(error.value) == sentence
        assert out.getvalue() == "" and prepared == [] and not (tmp_path / "p").exists()


# ---- the launch: computed defaults, paths, workers -------------------------------------------


def test_a_computed_default_is_filled_by_the_launcher_unless_given(repo):
    _, out, _, _ = run(repo, "--dry_run", "--results_dir=/r", "--bert_model=tiny")
    assert settings_of(out)["init_checkpoint"] == ("/r/tiny", "default: results_dir, bert_model")
    _, out, _, _ = run(repo, "--dry_run", "4", "1e-3", "fp32", "1", "base", "mrpc", "/mine")
    assert settings_of(out)["init_checkpoint"] == ("/mine", "argument 7")


def test_paths_come_from_the_named_option_then_the_environment_then_the_default(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cases = [
        ([], {}, "/toy/data", "default: the toy's root"),
        ([], {"TOY_DATA_DIR": "/env/data"}, "/env/data", "TOY_DATA_DIR"),
        (["--data_dir=rel"], {"TOY_DATA_DIR": "/env/data"}, str(tmp_path / "rel"), "--data_dir"),
        (["--data_dir", "~/d"], {}, str(tmp_path / "home" / "d"), "--data_dir"),
        (["--data_dir=gs://bucket/d"], {}, "gs://bucket/d", "--data_dir"),  # a URL is kept as given
    ]
    for args, environ, value, source in cases:
        _, out, _, _ = run(repo, "--dry_run", *args, environ=environ)
        assert f"  {'data_dir':18s} = {value} ({source})" in out.splitlines()
        command = shlex.split(out.splitlines()[out.splitlines().index("command:") + 1])
        assert flags_of(command)["data_dir"] == value


def test_workers_start_through_horovodrun_and_a_rank_above_0_prints_nothing(repo):
    _, out, _, _ = run(repo, "--dry_run", "--num_gpus=2")
    command = shlex.split(out.splitlines()[out.splitlines().index("command:") + 1])
    assert command[:6] == ["horovodrun", "-np", "2", "--gloo", PYTHON, os.path.join(repo, ENTRY)]
    assert "workers: 2 (horovodrun -np 2)" in out.splitlines()
    # Rank 1 of 2 that mpirun started: plans its own command, prints nothing.
    environ = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}
    status, out, plan_file, prepared = run(repo, "--num_gpus=2", environ=environ)
    assert status == 0 and out == "" and len(prepared) == 1
    steps, _ = engine.read_steps(plan_file)
    assert steps[0].argv[:2] == [PYTHON, os.path.join(repo, ENTRY)]
    with pytest.raises(UsageError, match=r"^num_gpus=2 but 4 worker processes were started"):
        run(repo, "--num_gpus=2", environ={"OMPI_COMM_WORLD_SIZE": "4"})


# ---- flags after -- --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, sentence",
    [
        (
            "--train_batch_size=4",
            "--train_batch_size after -- would contradict the launcher's own --train_batch_size; "
            "set batch_size (argument 1, or --batch_size=VALUE) instead.",
        ),
        (
            "--do_train=false",
            "--do_train after -- would contradict the launcher's own --do_train: toy.sh always sets it "
            "(run run_toy.py directly for other modes).",
        ),
        (
            "--data_dir=/x",
            "--data_dir after -- would contradict the launcher's own --data_dir; "
            "set --data_dir=PATH or TOY_DATA_DIR instead.",
        ),
        ("--tag=x", "--tag after -- would contradict the launcher's own --tag; set --tag=VALUE instead."),
        (
            "--amp",  # another name for --precision
            "--amp after -- would contradict the launcher's own --precision; "
            "set precision (argument 3, or --precision=VALUE) instead.",
        ),
        (
            "--nodo_eval",  # absl's negative form
            "--nodo_eval after -- would contradict the launcher's own --do_eval; set --do_eval=VALUE instead.",
        ),
    ],
)
def test_flags_after_the_separator_may_not_contradict_the_launchers_own(repo, extra, sentence):
    with pytest.raises(UsageError) as error:
        run(repo, "--dry_run", "--", extra)
    assert str(error.value) == sentence


def test_other_flags_after_the_separator_end_the_command(repo):
    _, out, _, _ = run(repo, "--dry_run", "--", "--log_every=5", "positional")
    command = shlex.split(out.splitlines()[out.splitlines().index("command:") + 1])
    assert command[-2:] == ["--log_every=5", "positional"]


# ---- what is printed -------------------------------------------------------------------------


def test_usage_lists_every_setting_path_preset_and_the_precedence(repo):
    status, out, plan_file, prepared = run(repo, "--help", "--num_gpus=not-checked")
    assert status == 0 and prepared == [] and not os.path.exists(plan_file)
    launcher, _ = toy_launcher()
    assert out.rstrip("\n") == engine.usage(launcher, SCRIPT, MODELS, ["fast", "wide"])
    lines = out.splitlines()
    assert lines[0] == "usage: toy.sh [POSITIONAL ...] [--NAME=VALUE | --NAME VALUE ...] [--preset NAME|FILE]"
    assert lines[3:5] == ["Trains the toy.", "Second line."]
    rows = re.findall(r"^ +(\d+) (\w+) +(\S+) +(.*)$", out, re.M)
    assert rows == [
        ("1", "batch_size", "8", "examples per step (--train_batch_size)"),  # renamed: the flag is named
        ("2", "learning_rate", "5e-4", "peak learning rate"),
        ("3", "precision", "fp16", "fp16 | fp32 | tf32 | bf16"),
        ("4", "num_gpus", "1", "workers"),
        ("5", "bert_model", "base", "configs/bert_<name>.json"),
        ("6", "task", "mrpc", "mrpc | sst2 (--task_name)"),
        ("7", "init_checkpoint", "-", "starting weights"),  # computed: shown as -
    ]
    named = dict(re.findall(r"^     (--\w+) +(.*)$", out, re.M))
    assert named["--do_eval"].split(None, 1) == ["true", "evaluate at the end"]
    assert named["--tag"].split(None, 1) == ["run", "a name in letters"]
    assert named["--preset"] == "a file, or one of: fast, wide"
    assert named["--data_dir"].split(None, 1) == ["TOY_DATA_DIR", "the data root"]
    assert named["--results_dir"] == "outputs"
    assert (
        "Precedence: defaults < preset (configs/presets/toy/) < positional < named.  bert_model: base, tiny"
        in lines
    )
    assert any(line.startswith("Workers: num_gpus > 1 starts horovodrun -np N") for line in lines)
    assert lines[-1] == "Flags after -- go to run_toy.py, except those the launcher sets from its arguments."
    one_process, _ = toy_launcher(workers=None)
    assert "Workers:" not in engine.usage(one_process, SCRIPT, MODELS, [])
    assert "a file, or one of: (none yet)" in engine.usage(one_process, SCRIPT, MODELS, [])


def test_the_usage_line_counts_the_positional_arguments():
    launcher, _ = toy_launcher()
    assert engine.usage_line(launcher, SCRIPT) == (
        "usage: toy.sh [up to 7 positional arguments] [--NAME=VALUE ...] [--preset NAME|FILE] "
        "[--dry_run] [-- run_toy.py FLAGS ...]   (--help lists them)"
    )


def test_a_dry_run_prints_the_resolved_settings_paths_notes_and_command_and_runs_nothing(repo):
    status, out, plan_file, prepared = run(
        repo, "--dry_run", "16", "--data_dir=/my data", "--results_dir=/r", "--", "--log_every=5"
    )
    assert status == 0 and prepared == [] and not os.path.exists(plan_file)
    lines = out.splitlines()
    assert lines[0] == "== toy.sh: resolved settings (defaults < preset < positional < named) =="
    assert lines[1] == "  batch_size      = 16         (argument 1)"
    assert list(settings_of(out)) == [s.name for s in SETTINGS]  # in the table's order
    assert lines[11:14] == [
        "paths (named option > environment variable > default):",
        f"  {'data_dir':18s} = /my data (--data_dir)",
        f"  {'results_dir':18s} = /r (--results_dir)",
    ]
    assert lines[14:16] == ["workers: 1 (one process)", "a note"]
    assert lines[16] == "command:"
    assert shlex.split(lines[17]) == [
        PYTHON,
        os.path.join(repo, ENTRY),
        "--data_dir=/my data",  # the flags the plan computes, then those passed on by their flag
        "--do_train=true",
        "--train_batch_size=16",
        "--learning_rate=5e-4",
        "--precision=fp16",
        "--task_name=mrpc",
        "--init_checkpoint=/r/base",
        "--do_eval=true",
        "--tag=RUN",  # the canonical value; --note, left empty, is not passed on
        "--log_every=5",
    ]
    assert lines[18:] == ["dry run: nothing checked or started."]


def test_a_setting_given_is_passed_on_by_its_flag_and_a_flag_set_twice_is_a_bug(repo):
    _, out, _, _ = run(repo, "--dry_run", "--note=hello", "--task=sst2")
    command = flags_of(shlex.split(out.splitlines()[out.splitlines().index("command:") + 1]))
    assert (command["run_note"], command["task_name"]) == ("hello", "sst2")

    def plan(launch):
        return Plan([(None, launch.command([("precision", "fp32", "")]))], [], lambda say: [])

    twice = Launcher("toy", ENTRY, (), SETTINGS, PATHS, plan)
    with pytest.raises(ValueError, match="toy sets --precision twice"):
        run(repo, "--dry_run", launcher=(twice, []))


def test_several_commands_are_listed_under_their_labels(repo):
    _, out, _, _ = run(repo, "--dry_run", launcher=toy_launcher(labelled=True))
    lines = out.splitlines()
    at = lines.index("commands:")
    assert lines[at + 1].startswith(f"  train: {PYTHON} ")
    assert lines[at + 2] == "  report: echo report"


def test_a_urls_password_is_never_printed():
    assert engine.shown(["run", "--db=postgresql://me:s3cret@host:5432/db", "a b"]) == (
        "run --db=postgresql://me:***@host:5432/db 'a b'"
    )
    assert engine.shown(["--url=http://host/x:y@z"]) == "--url=http://host/x:y@z"  # no user: nothing hidden


# ---- the plan the launcher process runs ------------------------------------------------------


def test_the_plan_file_holds_each_step_its_messages_and_the_end(repo):
    status, out, plan_file, prepared = run(repo, "--data_dir=/it's here", "--results_dir=/r")
    assert status == 0 and len(prepared) == 1
    lines = out.splitlines()
    assert lines.index("checking inputs") > lines.index("command:")  # inputs checked after the summary
    command = shlex.split(lines[lines.index("command:") + 1])
    steps, done = engine.read_steps(plan_file)
    assert steps == [
        Step(command, "toy.sh: training", "toy.sh: error: training stopped ({status})", "/r/STOP"),
        Step(["echo", "it's done"]),
    ]
    assert done == "toy.sh: finished"
    assert "--data_dir=/it's here" in steps[0].argv  # read back whole


def test_a_plan_without_steps_or_done_reads_back_as_written(tmp_path):
    path = str(tmp_path / "plan")
    engine.write_steps(path, SCRIPT, [], "")
    assert engine.read_steps(path) == ([], "")
    engine.write_steps(path, SCRIPT, [Step([1, "a b"])], "")
    assert engine.read_steps(path) == ([Step(["1", "a b"])], "")


def test_models_are_the_configs_bert_json_files(repo):
    assert engine.models_in(repo) == MODELS


# ---- a real launcher -------------------------------------------------------------------------


def test_the_pretraining_launcher_applies_the_same_precedence_in_process(tmp_path):
    from launch import pretraining

    out = io.StringIO()
    args = [
        "--dry_run",
        "--preset",
        "cpu_tiny",
        "16",
        "4",
        "--eval_batch_size=2",
        "--train_batch_size_phase2",
        "2",
    ]
    status = plan_launch(
        pretraining.BOTH, "run_pretraining_lamb.sh", str(tmp_path / "plan"), args, {}, ROOT, PYTHON, out
    )
    assert status == 0
    preset = {}
    with open(os.path.join(ROOT, "configs", "presets", "run_pretraining_lamb", "cpu_tiny.conf")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, value = line.split("=", 1)
                preset[name.strip()] = value.strip()
    settings = settings_of(out.getvalue())
    assert settings["train_batch_size_phase1"] == ("16", "argument 1")
    assert settings["train_batch_size_phase2"] == ("2", "--train_batch_size_phase2")
    assert settings["eval_batch_size"] == ("2", "--eval_batch_size")
    assert settings["bert_model"] == (preset["bert_model"], "preset cpu_tiny")
    assert settings["num_gpus"] == (preset["num_gpus"], "preset cpu_tiny")
    assert settings["do_eval"] == ("true", "default")
    assert not (tmp_path / "plan").exists()
