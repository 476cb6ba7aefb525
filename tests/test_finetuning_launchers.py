"""scripts/run_squad.sh, run_glue.sh, run_squad_inference.sh, run_glue_inference.sh: NVIDIA's
positional arguments in NVIDIA's order with NVIDIA's defaults, each reaching the flag it names;
named overrides beating them; bad values refused with the usage (exit 2); paths from the
environment; workers through horovodrun / mpirun as for pretraining; the inputs checked before
anything starts; and one real fine-tuning run followed by prediction from its output directory.

The launchers run as users run them (bash, subprocess); --dry_run prints the resolved settings and
the command, which the tests read back."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import LAUNCH_ENV, PRESETS, preset_file_values

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_BIN = os.path.dirname(sys.executable)
GLUE_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "glue")
GOOGLE = "google_pretrained_weights"
LARGE, BASE = "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12"

# NVIDIA's TF1 scripts: positional names and defaults in their order ("" = computed: a path).
NVIDIA = {
    "run_squad.sh": [
        ("batch_size", "24"),
        ("learning_rate", "5e-6"),
        ("precision", "fp16"),
        ("use_xla", "true"),
        ("num_gpu", "8"),
        ("seq_length", "384"),
        ("doc_stride", "128"),
        ("bert_model", "large"),
        ("squad_version", "1.1"),
        ("init_checkpoint", ""),
        ("epochs", "2.0"),
    ],
    "run_glue.sh": [
        ("task_name", "MRPC"),
        ("batch_size", "16"),
        ("learning_rate", "3e-6"),
        ("precision", "fp16"),
        ("use_xla", "true"),
        ("num_gpu", "8"),
        ("seq_length", "128"),
        ("doc_stride", "64"),
        ("bert_model", "large"),
        ("epochs", "3.0"),
        ("warmup_proportion", "0.1"),
        ("init_checkpoint", ""),
    ],
    "run_squad_inference.sh": [
        ("init_checkpoint", ""),
        ("batch_size", "8"),
        ("precision", "fp16"),
        ("use_xla", "true"),
        ("seq_length", "384"),
        ("doc_stride", "128"),
        ("bert_model", "large"),
        ("squad_version", "1.1"),
    ],
    "run_glue_inference.sh": [
        ("task_name", "MRPC"),
        ("init_checkpoint", ""),
        ("batch_size", "32"),
        ("precision", "fp16"),
        ("use_xla", "true"),
        ("seq_length", "128"),
        ("doc_stride", "64"),
        ("bert_model", "large"),
    ],
}


def launch(script, *args, env=None, cwd=None, timeout=120):
    full_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    full_env.setdefault("BERT_PYTHON", sys.executable)
    full_env.update(env or {})
    return subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", script), *args],
        env=full_env,
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dry_run(script, *args, env=None):
    """({name: (value, source)} of the settings and paths, the command's argv)."""
    result = launch(script, "--dry_run", *args, env=env)
    assert result.returncode == 0, result.stderr
    settings = {
        name: (value, source)
        for name, value, source in re.findall(r"^  (\w+) += (.*?) +\(([^()]*)\)$", result.stdout, re.M)
    }
    command = re.search(r"^command:\n  (.*)$", result.stdout, re.M).group(1)
    return settings, shlex.split(command)


def flags(argv):
    """{flag: value} of the --flag=value arguments of a command."""
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


# ---- defaults and positional arguments --------------------------------------------------------


@pytest.mark.parametrize("script", sorted(NVIDIA))
def test_defaults_are_nvidias(script, tmp_path):
    settings, argv = dry_run(script, env={"BERT_DATA_DIR": str(tmp_path), "RESULTS_DIR": str(tmp_path / "r")})
    for name, default in NVIDIA[script]:
        if default:
            assert settings[name] == (default, "default"), name
    cmd = flags(argv)
    google_large = str(tmp_path / "download" / GOOGLE / LARGE)
    assert settings["bert_dir"] == (google_large, "default: Google's BERT-Large under data_dir")
    assert cmd["bert_config_file"] == os.path.join(google_large, "bert_config.json")
    assert cmd["vocab_file"] == os.path.join(google_large, "vocab.txt")
    assert cmd["precision"] == "fp16" and cmd["use_xla"] == "true"
    if script in ("run_squad.sh", "run_glue.sh"):
        assert settings["init_checkpoint"] == (google_large, "default: BERT_DIR")
        assert os.path.basename(argv[0]) == "horovodrun" and argv[1:3] == ["-np", "8"]
        assert cmd["do_train"] == "true" and cmd["use_horovod"] == "true"
    else:  # prediction: one process, from the matching training launcher's output directory
        assert argv[0] == sys.executable and cmd["do_train"] == "false"
        trained = "squad_v1.1_large" if script == "run_squad_inference.sh" else "glue_MRPC_large"
        assert cmd["init_checkpoint"] == str(tmp_path / "r" / trained)
    if script == "run_squad.sh":
        assert (cmd["train_batch_size"], cmd["learning_rate"], cmd["num_train_epochs"]) == (
            "24",
            "5e-6",
            "2.0",
        )
        assert (cmd["max_seq_length"], cmd["doc_stride"]) == ("384", "128")
        assert cmd["version_2_with_negative"] == "false"
        assert cmd["output_dir"] == str(tmp_path / "r" / "squad_v1.1_large")
    if script == "run_glue.sh":
        assert (cmd["task_name"], cmd["train_batch_size"], cmd["learning_rate"]) == ("MRPC", "16", "3e-6")
        assert (cmd["num_train_epochs"], cmd["warmup_proportion"], cmd["max_seq_length"]) == (
            "3.0",
            "0.1",
            "128",
        )
        assert cmd["data_dir"] == str(tmp_path / "download" / "glue" / "MRPC")
    if script == "run_squad_inference.sh":
        assert (cmd["predict_batch_size"], cmd["max_seq_length"], cmd["doc_stride"]) == ("8", "384", "128")
    if script == "run_glue_inference.sh":
        assert (cmd["predict_batch_size"], cmd["max_seq_length"]) == ("32", "128")


CKPT = "/models/fine-tuned"
# (script, distinct positional values, the flags they must produce). A None flag value: absent.
POSITIONAL_TABLE = [
    (
        "run_squad.sh",
        ["7", "3e-5", "bf16", "false", "1", "256", "96", "base", "2.0", CKPT, "1.5"],
        {
            "train_batch_size": "7",
            "learning_rate": "3e-5",
            "precision": "bf16",
            "use_xla": "false",
            "use_horovod": "false",
            "max_seq_length": "256",
            "doc_stride": "96",
            "bert_config_file": f"/{GOOGLE}/{BASE}/bert_config.json",
            "version_2_with_negative": "true",
            "train_file": "/v2.0/train-v2.0.json",
            "predict_file": "/v2.0/dev-v2.0.json",
            "init_checkpoint": CKPT,
            "num_train_epochs": "1.5",
        },
    ),
    (
        "run_glue.sh",
        ["sst-2", "5", "4e-5", "tf32", "false", "1", "200", "32", "base", "1.5", "0.25", CKPT],
        {
            "task_name": "SST-2",
            "data_dir": "/glue/SST-2",
            "train_batch_size": "5",
            "learning_rate": "4e-5",
            "precision": "tf32",
            "use_xla": "false",
            "use_horovod": "false",
            "max_seq_length": "200",
            "doc_stride": None,  # accepted, unused: classification has no windows
            "bert_config_file": f"/{GOOGLE}/{BASE}/bert_config.json",
            "num_train_epochs": "1.5",
            "warmup_proportion": "0.25",
            "init_checkpoint": CKPT,
        },
    ),
    (
        "run_squad_inference.sh",
        [CKPT, "5", "bf16", "false", "256", "96", "base", "2.0"],
        {
            "init_checkpoint": CKPT,
            "predict_batch_size": "5",
            "precision": "bf16",
            "use_xla": "false",
            "max_seq_length": "256",
            "doc_stride": "96",
            "bert_config_file": f"/{GOOGLE}/{BASE}/bert_config.json",  # none beside CKPT
            "version_2_with_negative": "true",
            "predict_file": "/v2.0/dev-v2.0.json",
            "train_batch_size": None,
        },
    ),
    (
        "run_glue_inference.sh",
        ["qnli", CKPT, "5", "bf16", "false", "256", "32", "base"],
        {
            "task_name": "QNLI",
            "data_dir": "/glue/QNLI",
            "init_checkpoint": CKPT,
            "predict_batch_size": "5",
            "precision": "bf16",
            "use_xla": "false",
            "max_seq_length": "256",
            "doc_stride": None,
            "bert_config_file": f"/{GOOGLE}/{BASE}/bert_config.json",
        },
    ),
]


@pytest.mark.parametrize("script, values, expected", POSITIONAL_TABLE, ids=[t[0] for t in POSITIONAL_TABLE])
def test_each_positional_argument_reaches_the_flag_it_names(script, values, expected):
    settings, argv = dry_run(script, *values)
    names = [name for name, _ in NVIDIA[script]]
    canonical = {"sst-2": "SST-2", "qnli": "QNLI"}
    assert {name: settings[name] for name in names} == {
        name: (canonical.get(value, value), f"argument {i}")
        for i, (name, value) in enumerate(zip(names, values), 1)
    }
    cmd = flags(argv)
    for flag, value in expected.items():
        if value is None:
            assert flag not in cmd, flag
        elif value.startswith("/") and flag not in ("init_checkpoint",):
            assert cmd[flag].endswith(value), (flag, cmd[flag])
        else:
            assert cmd[flag] == value, flag
    assert argv[0] == sys.executable  # num_gpu 1 (or inference): one process, no launcher


def test_named_overrides_beat_positionals():
    settings, argv = dry_run("run_squad.sh", "24", "5e-6", "--batch_size=4", "--num_gpu", "2", "--epochs=3")
    assert settings["batch_size"] == ("4", "--batch_size")
    assert settings["learning_rate"] == ("5e-6", "argument 2")
    assert settings["num_gpu"] == ("2", "--num_gpu") and settings["epochs"] == ("3", "--epochs")
    cmd = flags(argv)
    assert (cmd["train_batch_size"], cmd["learning_rate"], cmd["num_train_epochs"]) == ("4", "5e-6", "3")
    assert argv[argv.index("-np") + 1] == "2"
    settings, argv = dry_run("run_glue.sh", "MRPC", "--task_name=cola", "--init_checkpoint", "/elsewhere")
    assert settings["task_name"] == ("CoLA", "--task_name")
    assert flags(argv)["init_checkpoint"] == "/elsewhere"


def test_the_resolved_settings_show_the_global_batch_and_peak_learning_rate():
    result = launch("run_squad.sh", "--dry_run", "32", "1e-5", "fp16", "true", "4")
    assert result.returncode == 0, result.stderr
    assert "global batch       = 128 (32 per worker x 4 workers)" in result.stdout
    assert "peak learning rate = 4e-05 (1e-5 per worker x 4 workers)" in result.stdout
    assert result.stdout.rstrip().endswith("dry run: nothing checked or started.")


# ---- presets -----------------------------------------------------------------------------------

# The flag each setting reaches in the training launchers' commands.
FLAG_OF = {
    "run_squad.sh": {
        "batch_size": "train_batch_size",
        "learning_rate": "learning_rate",
        "precision": "precision",
        "use_xla": "use_xla",
        "seq_length": "max_seq_length",
        "doc_stride": "doc_stride",
        "epochs": "num_train_epochs",
    },
    "run_glue.sh": {
        "task_name": "task_name",
        "batch_size": "train_batch_size",
        "learning_rate": "learning_rate",
        "precision": "precision",
        "use_xla": "use_xla",
        "seq_length": "max_seq_length",
        "epochs": "num_train_epochs",
        "warmup_proportion": "warmup_proportion",
    },
}
PRESET_FILES = [
    (script, os.path.join(PRESETS, script[: -len(".sh")], name))
    for script in (
        "run_squad.sh",
        "run_glue.sh",
        "run_squad_inference.sh",
        "run_glue_inference.sh",
        "run_tune.sh",
    )
    for name in sorted(os.listdir(os.path.join(PRESETS, script[: -len(".sh")])))
]


@pytest.mark.parametrize(
    "script, path", PRESET_FILES, ids=[f"{s}-{os.path.basename(p)}" for s, p in PRESET_FILES]
)
def test_each_preset_resolves_to_its_values(script, path, tmp_path):
    preset = os.path.splitext(os.path.basename(path))[0]
    values = preset_file_values(path)
    settings, argv = dry_run(script, "--preset", preset, env={"BERT_DATA_DIR": str(tmp_path)})
    assert {name: settings[name] for name in values} == {
        name: (value, f"preset {preset}") for name, value in values.items()
    }
    cmd = flags(argv)
    for name, flag in FLAG_OF.get(script, {}).items():
        assert cmd[flag] == values[name], name
    if script in FLAG_OF:  # a training preset sets every setting but the checkpoint
        assert set(values) == {name for name, _ in NVIDIA[script]} - {"init_checkpoint"}
        workers = int(values["num_gpu"])
        assert cmd["use_horovod"] == ("true" if workers > 1 else "false")
        if workers > 1:
            assert argv[argv.index("-np") + 1] == values["num_gpu"]
        else:
            assert argv[0] == sys.executable
        google = {"base": BASE, "large": LARGE}.get(values["bert_model"])
        expected = (
            str(tmp_path / "download" / GOOGLE / google)
            if google
            else os.path.join(ROOT, "results", "phase_2")
        )
        assert cmd["init_checkpoint"] == expected
    if "squad_version" in values:
        assert cmd["version_2_with_negative"] == ("true" if values["squad_version"] == "2.0" else "false")


@pytest.mark.parametrize("script", ["run_squad.sh", "run_glue.sh"])
def test_nvidia_presets_are_nvidias_defaults(script):
    values = preset_file_values(
        os.path.join(PRESETS, script[: -len(".sh")], "nvidia_dgx_a100_8gpu_large.conf")
    )
    assert values == {name: default for name, default in NVIDIA[script] if default}


def test_presets_rank_below_positional_and_named_arguments():
    settings, argv = dry_run("run_glue.sh", "--preset", "cpu_tiny", "SST-2", "8", "--epochs=1.5")
    assert settings["task_name"] == ("SST-2", "argument 1") and settings["batch_size"] == ("8", "argument 2")
    assert settings["epochs"] == ("1.5", "--epochs") and settings["bert_model"] == ("tiny", "preset cpu_tiny")
    assert settings["doc_stride"] == ("64", "preset cpu_tiny")
    assert (flags(argv)["task_name"], flags(argv)["learning_rate"]) == ("SST-2", "1e-3")
    result = launch("run_squad.sh", "--preset", "cpu_tiny_typo", "--dry_run")
    assert result.returncode == 2
    assert (
        "no preset 'cpu_tiny_typo': give a file or one of cpu_tiny, nvidia_dgx_a100_8gpu_large"
        in result.stderr
    )


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "run_squad.sh",
            ["twenty-four"],
            "batch_size (argument 1) must be a positive integer, got 'twenty-four'",
        ),
        ("run_squad.sh", ["0"], "batch_size (argument 1) must be a positive integer, got '0'"),
        ("run_squad.sh", ["24", "fast"], "learning_rate (argument 2) must be a number in (0, 1]"),
        (
            "run_squad.sh",
            ["24", "5e-6", "fp8"],
            "precision (argument 3) must be one of fp16, fp32, tf32, bf16",
        ),
        ("run_squad.sh", ["24", "5e-6", "fp16", "yes"], "use_xla (argument 4) must be true or false"),
        (
            "run_squad.sh",
            ["--squad_version=3"],
            "squad_version (--squad_version) must be 1.1 or 2.0, got '3'",
        ),
        ("run_squad.sh", ["--bert_model", "huge"], "bert_model (--bert_model) must be one of base, large"),
        ("run_squad.sh", ["--epochs=0"], "epochs (--epochs) must be a positive number"),
        (
            "run_squad.sh",
            ["--doc_stride=384"],
            "doc_stride=384 (--doc_stride) must be smaller than seq_length=384",
        ),
        ("run_squad.sh", [str(i) for i in range(12)], "at most 11 positional arguments are accepted, got 12"),
        ("run_squad.sh", ["--num_gpus=2"], "unknown option '--num_gpus'"),
        ("run_squad.sh", ["--batch_size"], "--batch_size needs a value"),
        (
            "run_squad.sh",
            ["--", "--train_batch_size=3"],
            "--train_batch_size after -- would contradict the launcher's own --train_batch_size; set "
            "batch_size (argument 1, or --batch_size=VALUE) instead",
        ),
        ("run_squad.sh", ["--", "--amp"], "set precision (argument 3"),
        (
            "run_glue.sh",
            ["NoSuchTask"],
            "task_name (argument 1) must be a GLUE task, one of CoLA, SST-2, MRPC",
        ),
        ("run_glue.sh", ["AX"], "task_name AX has no training data"),
        (
            "run_glue.sh",
            ["MRPC", "--warmup_proportion=1.5"],
            "warmup_proportion (--warmup_proportion) must be",
        ),
        ("run_glue.sh", ["--num_gpu=0"], "num_gpu (--num_gpu) must be a positive integer, got '0'"),
        (
            "run_squad_inference.sh",
            ["/m", "x"],
            "batch_size (argument 2) must be a positive integer, got 'x'",
        ),
        (
            "run_squad_inference.sh",
            ["--squad_version", "3"],
            "squad_version (--squad_version) must be 1.1 or 2.0",
        ),
        ("run_glue_inference.sh", ["unknown"], "task_name (argument 1) must be a GLUE task"),
        ("run_glue_inference.sh", ["MRPC", "/m", "8", "fp8"], "precision (argument 4) must be one of"),
    ],
)
def test_bad_arguments_give_the_usage_and_exit_2(script, args, message):
    result = launch(script, *args, "--dry_run")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert f"usage: {script}" in result.stderr
    assert "resolved settings" not in result.stdout  # refused before anything is printed or run


def test_help_lists_every_argument_in_nvidias_order_with_its_default():
    for script, table in NVIDIA.items():
        result = launch(script, "--help")
        assert result.returncode == 0
        rows = re.findall(r"^ +(\d+) (\w+) +(\S+) ", result.stdout, re.M)
        assert rows == [(str(i), name, default or "-") for i, (name, default) in enumerate(table, 1)]


# ---- paths ------------------------------------------------------------------------------------


def test_environment_paths_are_used_and_named_paths_beat_them(tmp_path):
    env = {
        "BERT_DATA_DIR": str(tmp_path / "data"),
        "SQUAD_DIR": str(tmp_path / "squad"),
        "BERT_DIR": str(tmp_path / "bert"),
        "RESULTS_DIR": str(tmp_path / "results"),
        "VOCAB_FILE": str(tmp_path / "my_vocab.txt"),
    }
    settings, argv = dry_run("run_squad.sh", env=env)
    cmd = flags(argv)
    assert cmd["train_file"] == str(tmp_path / "squad" / "v1.1" / "train-v1.1.json")
    assert cmd["predict_file"] == str(tmp_path / "squad" / "v1.1" / "dev-v1.1.json")
    assert cmd["init_checkpoint"] == str(tmp_path / "bert")
    assert cmd["bert_config_file"] == str(tmp_path / "bert" / "bert_config.json")
    assert cmd["vocab_file"] == str(tmp_path / "my_vocab.txt") and settings["vocab_file"][1] == "VOCAB_FILE"
    assert cmd["output_dir"] == str(tmp_path / "results" / "squad_v1.1_large")
    assert settings["squad_dir"] == (str(tmp_path / "squad"), "SQUAD_DIR")
    _, argv = dry_run("run_squad.sh", "--results_dir", str(tmp_path / "mine"), "--bert_dir=bert2", env=env)
    assert flags(argv)["output_dir"] == str(tmp_path / "mine" / "squad_v1.1_large")
    assert flags(argv)["init_checkpoint"] == os.path.join(ROOT, "bert2")  # relative to where it ran

    _, argv = dry_run("run_glue.sh", "QQP", env={"GLUE_DIR": str(tmp_path / "glue")})
    assert flags(argv)["data_dir"] == str(tmp_path / "glue" / "QQP")


def test_defaults_are_where_data_download_writes(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "data.paths", "root"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, BERT_DATA_DIR=str(tmp_path)),
    )
    root = result.stdout.strip()
    _, argv = dry_run("run_squad.sh", "--bert_model=base", env={"BERT_DATA_DIR": str(tmp_path)})
    cmd = flags(argv)
    assert cmd["train_file"] == os.path.join(root, "download", "squad", "v1.1", "train-v1.1.json")
    assert cmd["init_checkpoint"] == os.path.join(root, "download", GOOGLE, BASE)
    assert cmd["output_dir"] == os.path.join(ROOT, "results", "squad_v1.1_base")
    # Models Google did not release in the download start from the pretraining launcher's output.
    settings, argv = dry_run("run_glue.sh", "--bert_model=tiny", env={"RESULTS_DIR": str(tmp_path / "r")})
    assert flags(argv)["init_checkpoint"] == str(tmp_path / "r" / "phase_2")


def test_squad_version_2_switches_files_and_adds_version_2_with_negative(tmp_path):
    env = {"SQUAD_DIR": str(tmp_path)}
    for script, args in (
        ("run_squad.sh", ["--squad_version=2.0"]),
        ("run_squad_inference.sh", ["--squad_version=2.0"]),
    ):
        _, argv = dry_run(script, *args, env=env)
        cmd = flags(argv)
        assert cmd["version_2_with_negative"] == "true"
        assert cmd["predict_file"] == str(tmp_path / "v2.0" / "dev-v2.0.json")
        if script == "run_squad.sh":
            assert cmd["train_file"] == str(tmp_path / "v2.0" / "train-v2.0.json")
            assert cmd["output_dir"].endswith("squad_v2.0_large")


def test_config_and_vocab_come_from_beside_init_checkpoint(tmp_path):
    model = tmp_path / "pretrained"
    model.mkdir()
    (model / "bert_config.json").write_text("{}")
    (model / "vocab.txt").write_text("[PAD]\n")
    settings, argv = dry_run(
        "run_glue.sh", "--init_checkpoint", str(model), env={"BERT_DIR": str(tmp_path / "x")}
    )
    assert settings["bert_config"] == (str(model / "bert_config.json"), "default: beside init_checkpoint")
    assert flags(argv)["vocab_file"] == str(model / "vocab.txt")
    settings, _ = dry_run("run_glue.sh", "--init_checkpoint", str(model), env={"BERT_CONFIG": "/c.json"})
    assert settings["bert_config"] == ("/c.json", "BERT_CONFIG")  # the environment beats both


def test_flags_after_the_separator_go_to_the_entry_point():
    _, argv = dry_run("run_squad.sh", "--", "--max_query_length=32", "--save_checkpoints_steps=500")
    assert argv[-2:] == ["--max_query_length=32", "--save_checkpoints_steps=500"]
    assert argv[argv.index(os.path.join(ROOT, "run_squad.py")) - 1] == sys.executable


# ---- workers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, program",
    [
        ({}, "horovodrun"),
        ({"HOROVOD_LAUNCHER": "mpirun"}, "mpirun"),
        ({"SLURM_JOB_ID": "7"}, "mpirun"),  # in an allocation, outside a step
        ({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"}, None),  # a task of srun
    ],
)
@pytest.mark.parametrize("script", ["run_squad.sh", "run_glue.sh"])
def test_num_gpu_2_starts_two_workers_as_the_pretraining_launcher_does(script, env, program):
    _, argv = dry_run(script, "--num_gpu=2", env=env)
    if program is None:
        assert argv[0] == sys.executable
    else:
        expected = os.path.join(PYTHON_BIN, program)
        assert argv[0] == (expected if os.path.exists(expected) else program)
        assert argv[argv.index("-np") + 1] == "2"
        assert sys.executable in argv[argv.index("-np") + 2 :]
    assert flags(argv)["use_horovod"] == "true"


def test_started_workers_must_match_num_gpu():
    result = launch(
        "run_squad.sh", "--num_gpu=8", "--dry_run", env={"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "16"}
    )
    assert result.returncode == 2
    assert "num_gpu=8 but 16 worker processes were started" in result.stderr


# ---- input checks -----------------------------------------------------------------------------


def _fake_python(tmp_path):
    """A python stand-in that records entry-point runs instead of training (the launcher's own
    helpers still run for real)."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!/bin/bash\n"
        f'if [[ "${{1:-}}" == *run_*.py ]]; then echo "$*" >> {tmp_path}/runs.log; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    return str(fake)


def test_missing_inputs_stop_before_the_entry_point_starts(tmp_path):
    squad = tmp_path / "squad" / "v1.1"
    squad.mkdir(parents=True)
    bert = tmp_path / "bert"
    bert.mkdir()
    env = {
        "BERT_PYTHON": _fake_python(tmp_path),
        "SQUAD_DIR": str(tmp_path / "squad"),
        "BERT_DIR": str(bert),
        "RESULTS_DIR": str(tmp_path / "results"),
    }
    args = ("--num_gpu=1",)
    result = launch("run_squad.sh", *args, env=env)
    assert result.returncode == 2
    assert f"The SQuAD training file {squad}/train-v1.1.json does not exist" in result.stderr
    assert "resolved settings" in result.stdout  # printed first, then checked
    (squad / "train-v1.1.json").write_text("{}")
    (squad / "dev-v1.1.json").write_text("{}")
    result = launch("run_squad.sh", *args, env=env)
    assert result.returncode == 2
    assert f"The BERT config {bert}/bert_config.json does not exist" in result.stderr
    (bert / "bert_config.json").write_text("{}")
    result = launch("run_squad.sh", *args, env=env)
    assert f"The vocab file {bert}/vocab.txt does not exist" in result.stderr
    (bert / "vocab.txt").write_text("[PAD]\n")
    assert not (tmp_path / "runs.log").exists()
    result = launch("run_squad.sh", *args, env=env)
    assert result.returncode == 0, result.stderr
    assert "no metrics" in result.stdout  # the stand-in wrote no eval_results.json
    assert "--do_train=true --do_predict=true --do_eval=true" in (tmp_path / "runs.log").read_text()
    result = launch("run_squad.sh", *args, "--init_checkpoint", str(tmp_path / "gone"), env=env)
    assert result.returncode == 2 and f"init_checkpoint {tmp_path}/gone does not exist" in result.stderr


def test_inference_refuses_an_output_directory_holding_another_checkpoint(tmp_path):
    model, out = tmp_path / "model", tmp_path / "out"
    for directory in (model, out):
        directory.mkdir()
        (directory / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    (model / "bert_config.json").write_text("{}")
    (model / "vocab.txt").write_text("[PAD]\n")
    env = {"BERT_PYTHON": _fake_python(tmp_path), "GLUE_DIR": GLUE_FIXTURES}
    result = launch("run_glue_inference.sh", "MRPC", str(model), "--output_dir", str(out), env=env)
    assert result.returncode == 2
    assert f"output_dir {out} holds a checkpoint of its own" in result.stderr
    result = launch("run_glue_inference.sh", "MRPC", str(model), "--output_dir", str(model), env=env)
    assert result.returncode == 0, result.stderr


# ---- end to end -------------------------------------------------------------------------------


@pytest.mark.slow  # two TensorFlow processes: fine-tuning, then prediction (about 30 s on 2 cores)
def tiny_pretrained(tmp_path, text_files) -> dict:
    """A tiny BERT saved as Google's checkpoint under tmp_path/pretrained with a vocab of the words
    of `text_files` (split on whitespace, lower-cased), and the launcher environment that points
    at it (BERT_DIR) and at tmp_path/results (RESULTS_DIR)."""
    from bert.checkpoints import save_google
    from bert.config import BertConfig
    from bert.encoder import BertEncoder
    from bert.tokenization import SPECIAL_TOKENS
    from tools.tiny_pretraining import CONFIG

    words = set()
    for path in text_files:
        with open(path, encoding="utf-8") as f:
            words.update(w.lower() for w in f.read().split())
    vocab = list(dict.fromkeys([*SPECIAL_TOKENS, *sorted(words)]))
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    bert_dir = tmp_path / "pretrained"
    save_google(
        BertEncoder(BertConfig(**{**CONFIG, "vocab_size": len(vocab)})),
        str(bert_dir),
        vocab_file=str(tmp_path / "vocab.txt"),
    )
    return {"BERT_DIR": str(bert_dir), "RESULTS_DIR": str(tmp_path / "results"), "TF_CPP_MIN_LOG_LEVEL": "2"}


def _mrpc_pretrained(tmp_path) -> dict:
    """tiny_pretrained with the MRPC fixture's words; GLUE_DIR the GLUE fixtures."""
    mrpc = os.path.join(GLUE_FIXTURES, "MRPC")
    files = [os.path.join(mrpc, name) for name in os.listdir(mrpc)]
    return {**tiny_pretrained(tmp_path, files), "GLUE_DIR": GLUE_FIXTURES}


def test_run_glue_then_predict_from_its_output_directory(tmp_path):
    env = _mrpc_pretrained(tmp_path)
    trained = launch(
        "run_glue.sh",
        "MRPC",
        "2",
        "1e-3",
        "fp32",
        "false",
        "1",
        "64",
        "32",
        "tiny",
        "1",
        env=env,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    output = tmp_path / "results" / "glue_MRPC_tiny"
    results = json.loads((output / "eval_results.json").read_text())
    assert results["global_step"] == 1 and results["examples"] == 2  # 2 examples / batch 2 x 1 epoch
    assert f"accuracy                     = {results['accuracy']:.4f}" in trained.stdout
    assert (output / "MRPC.tsv").is_file()  # the fixture has a test file: --do_predict

    predicted = launch(
        "run_glue_inference.sh", "MRPC", str(output), "8", "fp32", "false", "64", env=env, timeout=600
    )
    assert predicted.returncode == 0, predicted.stdout[-3000:] + predicted.stderr[-3000:]
    assert f"Initialised the encoder and the head from {output}" in predicted.stdout
    inference = tmp_path / "results" / "inference_glue_MRPC_glue_MRPC_tiny"
    again = json.loads((inference / "eval_results.json").read_text())
    assert {k: again[k] for k in ("accuracy", "f1")} == {k: results[k] for k in ("accuracy", "f1")}
    assert (inference / "MRPC.tsv").read_text() == (output / "MRPC.tsv").read_text()
    assert not (inference / "checkpoint").exists()  # predicted, not trained


# ---- run_tune.sh ------------------------------------------------------------------------------


def test_run_tune_defaults_and_squad_tasks():
    settings, command = dry_run("run_tune.sh")
    assert {
        k: v[0] for k, v in settings.items() if k in ("task_name", "n_trials", "num_gpu", "seq_length")
    } == {
        "task_name": "MRPC",
        "n_trials": "20",
        "num_gpu": "1",
        "seq_length": "128",
    }
    assert command[1] == os.path.join(ROOT, "run_tune.py")  # one process: trials launch their own workers
    assert flags(command)["output_dir"] == os.path.join(ROOT, "results", "tune_MRPC_large")
    settings, command = dry_run("run_tune.sh", "squad2", "4", "2", "--", "--learning_rate_range=1e-5,1e-4")
    got = flags(command)
    assert got["task_name"] == "squad" and got["version_2_with_negative"] == "true"
    assert got["train_file"].endswith("/squad/v2.0/train-v2.0.json") and got["max_seq_length"] == "384"
    assert got["num_gpus"] == "2" and got["learning_rate_range"] == "1e-5,1e-4"
    result = launch(
        "run_tune.sh", "--dry_run", "--", "--storage=postgresql://bert:s3cret@db-host:5432/optuna"
    )
    assert result.returncode == 0 and "s3cret" not in result.stdout  # a printed command keeps no password
    assert "--storage=postgresql://bert:***@db-host:5432/optuna" in result.stdout
    bad = launch("run_tune.sh", "FOO")
    assert bad.returncode == 2 and "must be SQuAD, SQuAD2 or a GLUE task" in bad.stderr


@pytest.mark.slow
def test_run_tune_runs_a_study_on_the_glue_fixture(tmp_path):
    env = _mrpc_pretrained(tmp_path)
    args = ["MRPC", "2", "1", "tiny", "fp32", "false", "64", "--", "--train_batch_size=2"]
    args += ["--num_train_epochs_choices=1", "--learning_rate_range=1e-4,1e-3", "--eval_every_n_steps=1"]
    result = launch("run_tune.sh", *args, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = tmp_path / "results" / "tune_MRPC_tiny"
    best = json.loads((study / "best_trial.json").read_text())
    assert 1e-4 <= best["params"]["learning_rate"] <= 1e-3 and best["checkpoint"].endswith("ckpt-1")
    assert "2/2 trials done (2 complete, 0 pruned), 0 failed" in result.stdout
    assert f"== run_tune.sh: study in {study} (trials.tsv, best_trial.json, plots) ==" in result.stdout
