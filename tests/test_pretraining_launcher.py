"""scripts/run_pretraining_lamb*.sh: NVIDIA's 15 positional arguments, validated; named overrides
and presets with a fixed precedence; NVIDIA's step arithmetic; the commands each phase runs; the
input checks before phase 1; and the two phases run in order, phase 2 from phase 1's checkpoint.

The launchers run as users run them (bash, subprocess). --dry_run tests read the printed settings
and commands; the end-to-end tests put a stand-in for run_pretraining.py behind BERT_PYTHON that
records its arguments and writes the `checkpoint` file our trainer writes."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import LAUNCH_ENV, preset_file_values, pretraining_workspace
from conftest import PRESETS as ALL_PRESETS
from data import paths as data_paths

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = os.path.join(ALL_PRESETS, "run_pretraining_lamb")
POSITIONAL = [
    "train_batch_size_phase1",
    "train_batch_size_phase2",
    "eval_batch_size",
    "learning_rate_phase1",
    "learning_rate_phase2",
    "precision",
    "use_xla",
    "num_gpus",
    "warmup_steps_phase1",
    "warmup_steps_phase2",
    "train_steps",
    "save_checkpoint_steps",
    "num_accumulation_steps_phase1",
    "num_accumulation_steps_phase2",
    "bert_model",
]
NVIDIA_DEFAULTS = "64 8 8 7.5e-4 5e-4 fp16 true 8 2000 200 7820 100 128 512 large".split()


def launch(*args, script="run_pretraining_lamb.sh", env=None, cwd=None):
    full_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    full_env.setdefault("BERT_PYTHON", sys.executable)
    full_env.update(env or {})
    return subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", script), *args],
        env=full_env,
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def dry_run(*args, **kwargs):
    """(settings {name: (value, source)}, phases {n: {key: value}}, commands {n: argv})."""
    result = launch("--dry_run", *args, **kwargs)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    settings = {
        name: (value, source)
        for name, value, source in re.findall(r"^  (\w+) += (\S+) +\((.*)\)$", out, re.M)
    }
    phases = {}
    for number, body in re.findall(r"^phase (\d): seq .*\n((?:  .*\n)+)", out, re.M):
        phases[int(number)] = dict(re.findall(r"^  ([a-z ]+?) += (\S+)", body, re.M))
    commands = {int(n): shlex.split(cmd) for n, cmd in re.findall(r"^  phase (\d): (.*)$", out, re.M)}
    return settings, phases, commands


def flags(argv):
    """{flag: value} of the --flag=value arguments of a command."""
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ([str(i) for i in range(1, 17)], "at most 15 positional arguments are accepted, got 16"),
        (["sixty-four"], "train_batch_size_phase1 (argument 1) must be a positive integer, got 'sixty-four'"),
        (["64", "8.5"], "train_batch_size_phase2 (argument 2) must be a positive integer, got '8.5'"),
        (["0"], "train_batch_size_phase1 (argument 1) must be a positive integer, got '0'"),
        (["64", "8", "8", "fast"], "learning_rate_phase1 (argument 4) must be a number in (0, 1]"),
        (
            ["64", "8", "8", "7.5e-4", "5e-4", "fp8"],
            "precision (argument 6) must be one of fp16, fp32, tf32, bf16",
        ),
        (["64", "8", "8", "7.5e-4", "5e-4", "fp16", "yes"], "use_xla (argument 7) must be true or false"),
        ([*NVIDIA_DEFAULTS[:14], "huge"], "bert_model (argument 15) must be one of base, large"),
        (["--num_gpus=-2"], "num_gpus (--num_gpus) must be a positive integer, got '-2'"),
        (["--train_batch_size_phase1"], "--train_batch_size_phase1 needs a value"),
        (["--num_gpu=2"], "unknown option '--num_gpu'"),
        (["--preset", "no_such_preset"], "no preset 'no_such_preset'"),
    ],
)
def test_bad_arguments_give_the_usage_and_exit_2(args, message):
    result = launch(*args, "--dry_run")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert "usage: run_pretraining_lamb.sh" in result.stderr
    assert "resolved settings" not in result.stdout  # refused before anything is printed or run


@pytest.mark.parametrize(
    "args, message",
    [
        (["--train_steps=0"], "train_steps (--train_steps) must be a positive integer, got '0'"),
        (["--train_steps=1", "--warmup_steps_phase1=0"], "phase 1 would run 0 steps"),
        # phase-1 global batch 65536, phase-2 64 x 512 x 8 = 262144: (10 - 9) x 65536 // 262144 = 0
        (
            [
                "--train_steps=10",
                "--warmup_steps_phase1=0",
                "--warmup_steps_phase2=0",
                "--train_batch_size_phase2=64",
            ],
            "phase 2 would run 0 steps",
        ),
        (["--train_steps=1000"], "warmup_steps_phase1=2000 exceeds phase 1's 900 steps"),
    ],
)
def test_zero_steps_and_overlong_warmup_are_refused(args, message):
    result = launch(*args, "--dry_run")
    assert result.returncode == 2
    assert message in result.stderr


def test_help_lists_every_argument_in_nvidias_order_with_its_default():
    result = launch("--help")
    assert result.returncode == 0
    rows = re.findall(r"^ +(\d+) (\w+) +(\S+) ", result.stdout, re.M)
    assert [(int(i), name, default) for i, name, default in rows] == list(
        zip(range(1, 16), POSITIONAL, NVIDIA_DEFAULTS)
    )
    for preset in ("nvidia_dgx_a100_8gpu_large", "single_gpu_base", "cpu_tiny"):
        assert preset in result.stdout


# ---- resolution -------------------------------------------------------------------------------


def test_nvidias_defaults_give_7038_then_1564_steps():
    settings, phases, commands = dry_run()
    assert {name: settings[name] for name in POSITIONAL} == {
        name: (value, "default") for name, value in zip(POSITIONAL, NVIDIA_DEFAULTS)
    }
    # 7820 * 9 // 10 = 7038; (7820 - 7038) x (64 x 128 x 8) / (8 x 512 x 8) = 782 x 2 = 1564
    assert phases[1]["steps"] == "7038" and phases[2]["steps"] == "1564"
    assert phases[1]["global batch"] == "65536" and phases[2]["global batch"] == "32768"
    assert phases[1]["peak learning rate"] == "0.006" and phases[2]["peak learning rate"] == "0.004"
    assert phases[1]["warmup steps"] == "2000" and phases[2]["warmup steps"] == "200"
    assert flags(commands[1])["num_train_steps"] == "7038"
    assert flags(commands[2])["num_train_steps"] == "1564"


def test_positional_arguments_reach_the_flags_they_name():
    values = [
        "48",
        "6",
        "4",
        "1e-3",
        "2e-3",
        "bf16",
        "false",
        "2",
        "100",
        "10",
        "1000",
        "50",
        "4",
        "8",
        "base",
    ]
    settings, phases, commands = dry_run(*values)
    assert {name: settings[name] for name in POSITIONAL} == {
        name: (value, f"argument {i}") for i, (name, value) in enumerate(zip(POSITIONAL, values), 1)
    }
    one, two = flags(commands[1]), flags(commands[2])
    for phase, batch, rate, warmup, accumulation in (
        (one, "48", "1e-3", "100", "4"),
        (two, "6", "2e-3", "10", "8"),
    ):
        assert phase["train_batch_size"] == batch and phase["learning_rate"] == rate
        assert phase["num_warmup_steps"] == warmup and phase["num_accumulation_steps"] == accumulation
        assert phase["eval_batch_size"] == "4" and phase["save_checkpoints_steps"] == "50"
        assert phase["precision"] == "bf16" and phase["use_xla"] == "false"
        assert phase["bert_config_file"] == os.path.join(ROOT, "configs", "bert_base.json")
    # 900 phase-1 steps; (1000 - 900) x (48 x 4 x 2) / (6 x 8 x 2) = 100 x 384 / 96 = 400
    assert (one["num_train_steps"], two["num_train_steps"]) == ("900", "400")
    assert phases[1]["peak learning rate"] == "0.002" and phases[2]["peak learning rate"] == "0.004"


@pytest.mark.parametrize("preset", sorted(os.path.splitext(f)[0] for f in os.listdir(PRESETS)))
def test_each_preset_resolves_to_its_values(preset):
    values = preset_file_values(os.path.join(PRESETS, preset + ".conf"))
    assert set(values) >= set(POSITIONAL), "a preset sets every positional setting"
    settings, phases, commands = dry_run("--preset", preset)
    assert {name: settings[name] for name in values} == {
        name: (value, f"preset {preset}") for name, value in values.items()
    }
    # ...and each value reaches the flag it names (NVIDIA's preset functions mis-wired theirs).
    for n in (1, 2):
        cmd = flags(commands[n])
        assert cmd["train_batch_size"] == values[f"train_batch_size_phase{n}"]
        assert cmd["learning_rate"] == values[f"learning_rate_phase{n}"]
        assert cmd["num_warmup_steps"] == values[f"warmup_steps_phase{n}"]
        assert cmd["num_accumulation_steps"] == values[f"num_accumulation_steps_phase{n}"]
        assert cmd["eval_batch_size"] == values["eval_batch_size"]
        assert cmd["precision"] == values["precision"] and cmd["use_xla"] == values["use_xla"]
        assert cmd["save_checkpoints_steps"] == values["save_checkpoint_steps"]
        assert cmd["bert_config_file"].endswith(f"bert_{values['bert_model']}.json")
        assert cmd["use_horovod"] == ("true" if int(values["num_gpus"]) > 1 else "false")
        assert cmd["bin_size"] == values.get("bin_size", "64")
        packed = values.get(f"packing_phase{n}", "false") == "true"
        assert cmd.get("packing") == ("true" if packed else None)
        assert phases[n]["packing"] == ("on" if packed else "off")
    workers = int(values["num_gpus"])
    global_batch = {
        n: int(values[f"train_batch_size_phase{n}"])
        * int(values[f"num_accumulation_steps_phase{n}"])
        * workers
        for n in (1, 2)
    }
    steps1 = int(values["train_steps"]) * 9 // 10
    assert int(phases[1]["steps"]) == steps1
    assert (
        int(phases[2]["steps"]) == (int(values["train_steps"]) - steps1) * global_batch[1] // global_batch[2]
    )


def test_packing_is_set_per_phase_and_reaches_that_phase_alone():
    settings, phases, commands = dry_run("--packing_phase1=true")
    assert (
        settings["packing_phase1"] == ("true", "--packing_phase1")
        and settings["packing_phase2"][0] == "false"
    )
    assert flags(commands[1])["packing"] == "true" and "packing" not in flags(commands[2])
    assert (phases[1]["packing"], phases[2]["packing"]) == ("on", "off")
    _, _, commands = dry_run("--packing_phase2=true")
    assert "packing" not in flags(commands[1]) and flags(commands[2])["packing"] == "true"


def _padding_lines(out):
    return dict(re.findall(r"^phase (\d): seq (?:.*\n)+?  padding += (.*)$", out, re.M))


def test_padding_auto_picks_each_phases_layout_from_its_records_and_given_flags_win(tmp_path):
    """Records of 7 tokens: auto packs both phases (the predicted shares in the summary); a given
    --bin_size or --packing_phaseN fixes the phases it touches, as --padding fixed fixes both."""
    env = pretraining_workspace(tmp_path)
    result = launch("--dry_run", "--preset", "cpu_tiny", env=env)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^  padding +  = auto +\(default\)$", result.stdout, re.M)
    lines = _padding_lines(result.stdout)
    commands = {
        int(n): flags(shlex.split(c)) for n, c in re.findall(r"^  phase (\d): (.*)$", result.stdout, re.M)
    }
    for n in ("1", "2"):
        assert re.match(r"auto: packed(, bins of \d+)? \(predicted real-token share 0\.\d\d, ", lines[n]), (
            lines[n]
        )
        assert f"; padded {7 / (128 if n == '1' else 512):.2f}, bins 32 " in lines[n], lines[n]
        bins = re.match(r"auto: packed, bins of (\d+)", lines[n])
        assert commands[int(n)]["packing"] == "true"
        assert commands[int(n)]["bin_size"] == (bins.group(1) if bins else "0")
    cases = {
        ("--bin_size=32",): {
            1: "bins of 32 (bin_size from --bin_size)",
            2: "bins of 32 (bin_size from --bin_size)",
        },
        ("--packing_phase2=false",): {2: "bins of 64 (packing_phase2 from --packing_phase2)"},
        ("--padding=fixed",): {n: "bins of 64 (padding fixed, from --padding)" for n in (1, 2)},
    }
    for args, expected in cases.items():
        result = launch("--dry_run", "--preset", "cpu_tiny", *args, env=env)
        assert result.returncode == 0, result.stderr
        lines = _padding_lines(result.stdout)
        commands = {
            int(n): flags(shlex.split(c)) for n, c in re.findall(r"^  phase (\d): (.*)$", result.stdout, re.M)
        }
        for n in (1, 2):
            if n in expected:
                assert lines[str(n)] == expected[n], args
                assert "packing" not in commands[n] and commands[n]["bin_size"] == expected[n].split()[2]
            else:
                assert lines[str(n)].startswith("auto: packed"), args


def test_a_flag_after_dashes_that_contradicts_a_phase_setting_names_that_phases_setting():
    result = launch("--dry_run", "--packing_phase2=true", "--", "--packing=false")
    assert result.returncode == 2
    assert (
        "--packing after -- would contradict the launcher's own --packing; set --packing_phase2=VALUE instead."
    ) in result.stderr
    result = launch("--dry_run", "--", "--input_files=other/*")
    assert result.returncode == 2
    assert "set --phase1_data=PATH or PHASE1_DATA instead." in result.stderr, result.stderr


def test_nvidia_preset_is_nvidias_defaults():
    assert [
        preset_file_values(os.path.join(PRESETS, "nvidia_dgx_a100_8gpu_large.conf"))[n] for n in POSITIONAL
    ] == NVIDIA_DEFAULTS


def test_precedence_is_defaults_then_preset_then_positional_then_named():
    settings, _, commands = dry_run(
        "--preset", "cpu_tiny", "16", "4", "--eval_batch_size=2", "--train_batch_size_phase2", "2"
    )
    assert settings["train_batch_size_phase1"] == ("16", "argument 1")  # positional beats preset
    assert settings["train_batch_size_phase2"] == ("2", "--train_batch_size_phase2")  # named beats both
    assert settings["eval_batch_size"] == ("2", "--eval_batch_size")  # named beats preset
    assert settings["bert_model"] == ("tiny", "preset cpu_tiny")
    assert settings["do_eval"] == ("true", "default")
    settings, _, _ = dry_run(*NVIDIA_DEFAULTS, "--num_gpus=2", "--bert_model", "base")
    assert settings["num_gpus"] == ("2", "--num_gpus") and settings["bert_model"] == ("base", "--bert_model")


def test_preset_files_are_strict(tmp_path):
    good = tmp_path / "mine.json"
    good.write_text('{"num_gpus": 2, "use_xla": false, "learning_rate_phase1": "1e-3"}')
    settings, _, _ = dry_run("--preset", str(good))
    assert settings["num_gpus"] == ("2", f"preset {good}") and settings["use_xla"][0] == "false"
    for text, message in (
        ("num_gpu=2\n", "line 1: unknown setting 'num_gpu'"),
        ("num_gpus=2\nnum_gpus=4\n", "line 2: num_gpus is set twice"),
        ("num_gpus 2\n", "line 1: expected name=value"),
        ("precision=fp8\n", "precision (preset"),
    ):
        bad = tmp_path / "bad.conf"
        bad.write_text(text)
        result = launch("--preset", str(bad), "--dry_run")
        assert result.returncode == 2 and message in result.stderr


# ---- commands ---------------------------------------------------------------------------------


def test_dry_run_prints_both_phases_commands(tmp_path):
    env = {
        "PHASE1_DATA": str(tmp_path / "p1"),
        "PHASE2_DATA": str(tmp_path / "p2"),
        "RESULTS_DIR": str(tmp_path / "ignored"),
        "VOCAB_FILE": str(tmp_path / "vocab.txt"),
        "INIT_CHECKPOINT": str(tmp_path / "google"),
    }
    results = tmp_path / "results"
    _, _, commands = dry_run("--results_dir", str(results), "--", "--log_every_n_steps=7", env=env)
    assert set(commands) == {1, 2}
    one, two = flags(commands[1]), flags(commands[2])
    assert commands[1][:2] == [
        os.path.join(os.path.dirname(sys.executable), "horovodrun")
        if os.path.exists(os.path.join(os.path.dirname(sys.executable), "horovodrun"))
        else "horovodrun",
        "-np",
    ]
    assert commands[1][commands[1].index(os.path.join(ROOT, "run_pretraining.py")) - 1] == sys.executable
    assert (one["max_seq_length"], one["max_predictions_per_seq"]) == ("128", "20")
    assert (two["max_seq_length"], two["max_predictions_per_seq"]) == ("512", "80")
    assert one["input_files"] == str(tmp_path / "p1" / "training" / "*")
    assert one["eval_files"] == str(tmp_path / "p1" / "test" / "*")
    assert two["input_files"] == str(tmp_path / "p2" / "training" / "*")
    assert one["output_dir"] == str(results / "phase_1") and two["output_dir"] == str(results / "phase_2")
    assert one["init_checkpoint"] == str(tmp_path / "google")
    assert two["init_checkpoint"] == str(results / "phase_1")  # named --results_dir beat RESULTS_DIR
    assert (one["learning_rate"], two["learning_rate"]) == ("7.5e-4", "5e-4")
    assert (one["num_warmup_steps"], two["num_warmup_steps"]) == ("2000", "200")
    for phase in (one, two):
        assert phase["vocab_file"] == str(tmp_path / "vocab.txt")
        assert phase["optimizer_type"] == "lamb" and phase["do_train"] == "true"
        assert phase["log_every_n_steps"] == "7"  # flags after -- reach every phase
    assert commands[1][-1] == commands[2][-1] == "--log_every_n_steps=7"


def test_default_paths_are_where_data_download_writes(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "data.paths"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, BERT_DATA_DIR=str(tmp_path)),
    )
    expected = dict(line.split("\t") for line in result.stdout.splitlines())
    _, _, commands = dry_run("--do_eval=false", env={"BERT_DATA_DIR": str(tmp_path)})
    one, two = flags(commands[1]), flags(commands[2])
    assert one["input_files"] == os.path.join(expected["phase1"], "training", "*")
    assert two["input_files"] == os.path.join(expected["phase2"], "training", "*")
    assert one["vocab_file"] == expected["vocab"]
    assert one["output_dir"] == os.path.join(ROOT, "results", "phase_1")
    assert "eval_files" not in one and "do_eval" not in one  # --do_eval=false drops both


def test_masking_dynamic_reads_the_unmasked_records_data_download_wrote(tmp_path):
    env = dict(os.environ, BERT_DATA_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "data.paths", "--masking", "dynamic"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    expected = dict(line.split("\t") for line in result.stdout.splitlines())
    settings, _, commands = dry_run(
        "--do_eval=false", "--masking", "dynamic", env={"BERT_DATA_DIR": str(tmp_path)}
    )
    assert settings["masking"] == ("dynamic", "--masking")
    assert flags(commands[1])["input_files"] == os.path.join(expected["phase1"], "training", "*")
    assert flags(commands[2])["input_files"] == os.path.join(expected["phase2"], "training", "*")
    assert "_dupe_factor_1_masking_dynamic_" in expected["phase1"]


@pytest.mark.parametrize(
    "env, workers, program",
    [
        ({}, "2", "horovodrun"),
        ({"HOROVOD_LAUNCHER": "mpirun"}, "2", "mpirun"),
        ({"SLURM_JOB_ID": "7"}, "2", "mpirun"),  # in an allocation, outside a step: OpenMPI reads it
        (
            {"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"},
            "2",
            None,
        ),  # a task of srun
        ({}, "1", None),
    ],
)
def test_workers_start_through_horovodrun_mpirun_or_directly(env, workers, program):
    _, _, commands = dry_run("--num_gpus", workers, env=env)
    for cmd in commands.values():
        if program is None:
            assert cmd[0] == sys.executable and cmd[1] == os.path.join(ROOT, "run_pretraining.py")
        else:
            assert os.path.basename(cmd[0]) == program
            assert cmd[cmd.index("-np") + 1] == workers
        assert flags(cmd)["use_horovod"] == ("true" if workers == "2" else "false")


def test_srun_tasks_must_match_num_gpus():
    result = launch("--num_gpus=8", "--dry_run", env={"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "16"})
    assert result.returncode == 2
    assert "num_gpus=8 but 16 worker processes were started" in result.stderr


def test_phase_scripts_run_one_phase_each(tmp_path):
    env = {"RESULTS_DIR": str(tmp_path)}
    _, phases, commands = dry_run(script="run_pretraining_lamb_phase1.sh", env=env)
    assert set(commands) == {1} and phases[1]["steps"] == "7038"
    _, phases, commands = dry_run(script="run_pretraining_lamb_phase2.sh", env=env)
    assert set(commands) == {2} and phases[2]["steps"] == "1564"
    assert flags(commands[2])["init_checkpoint"] == str(tmp_path / "phase_1")


def test_run_sub_gives_tasks_the_mounted_data_and_results(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    env = {
        "BERT_DRY_RUN": "1",
        "SLURM_JOB_ID": "42",
        "CONT": "img.sqsh",
        "DATADIR": str(data),
        "RESULTSDIR": str(tmp_path / "results"),
    }
    result = subprocess.run(
        ["bash", "scripts/run.sub", "bash", "scripts/run_pretraining_lamb.sh", "--num_gpus=16"],
        cwd=ROOT,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout.strip().splitlines()[-1])
    assert argv[-3:] == ["bash", "scripts/run_pretraining_lamb.sh", "--num_gpus=16"]
    wrapper = argv[argv.index("-c") + 1]
    assert "BERT_DATA_DIR=/data" in wrapper and "RESULTS_DIR=/results" in wrapper


# ---- before and between the phases ------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path):
    """pretraining_workspace's records, vocab and config, and a python stand-in that runs the
    launcher's helper for real but fakes run_pretraining.py: it logs its arguments and writes the
    `checkpoint` file our trainer writes at --num_train_steps."""
    env = pretraining_workspace(tmp_path)
    fake = tmp_path / "python"
    fake.write_text(f"""#!/bin/bash
if [[ "${{1:-}}" == */run_pretraining.py ]]; then
  printf '%s\\n' "$*" >> {tmp_path}/runs.log
  for a in "$@"; do
    case "$a" in --output_dir=*) out="${{a#*=}}";; --num_train_steps=*) steps="${{a#*=}}";; esac
  done
  if [[ "${{FAKE_STATUS:-0}}" != 0 ]]; then exit "$FAKE_STATUS"; fi
  mkdir -p "$out"
  printf 'model_checkpoint_path: "ckpt-%s"\\n' "$((steps - ${{SHORT_BY:-0}}))" > "$out/checkpoint"
  exit 0
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    return tmp_path, {**env, "BERT_PYTHON": str(fake)}


def _runs(tmp_path):
    log = tmp_path / "runs.log"
    return [flags(line.split()) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow  # checking the records imports TensorFlow (seconds)
def test_both_phases_run_in_order_and_a_rerun_skips_them(workspace):
    tmp_path, env = workspace
    result = launch("--preset", "cpu_tiny", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.index("resolved settings") < result.stdout.index("checking inputs")
    assert "phase 1 training: 1 file(s) of seq 128 / 20 predictions" in result.stdout
    assert "phase 2 training: 1 file(s) of seq 512 / 80 predictions" in result.stdout
    one, two = _runs(tmp_path)
    assert (one["max_seq_length"], one["num_train_steps"]) == ("128", "450")
    assert (two["max_seq_length"], two["num_train_steps"]) == ("512", "100")
    assert two["init_checkpoint"] == str(tmp_path / "results" / "phase_1")
    again = launch("--preset", "cpu_tiny", env=env)
    assert again.returncode == 0, again.stderr
    assert "phase 1 is complete" in again.stdout and "phase 2 is complete" in again.stdout
    assert len(_runs(tmp_path)) == 2


@pytest.mark.slow  # checking the records imports TensorFlow (seconds)
def test_tensorflow_stays_out_of_the_launcher_process(workspace):
    """The input checks read a record (TensorFlow) in the planning child; the launcher process,
    which lives as long as the phases, runs them without importing it."""
    tmp_path, env = workspace
    full_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    launcher = (
        "import sys\n"
        "from launch.__main__ import main\n"
        "status = main(['run', 'run_pretraining_lamb', '--preset', 'cpu_tiny'])\n"
        "print('tensorflow in the launcher:', 'tensorflow' in sys.modules)\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", launcher],
        env={**full_env, **env, "PYTHONPATH": ROOT},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "phase 1 training: 1 file(s) of seq 128 / 20 predictions" in result.stdout  # a record was read
    assert len(_runs(tmp_path)) == 2
    assert result.stdout.splitlines()[-1] == "tensorflow in the launcher: False"


@pytest.mark.slow  # checking the records imports TensorFlow (seconds)
def test_phase_2_starts_only_from_phase_1s_final_checkpoint(workspace):
    tmp_path, env = workspace
    failed = launch("--preset", "cpu_tiny", env={**env, "FAKE_STATUS": "3"})
    assert failed.returncode == 3
    assert "phase 1 stopped with exit status 3" in failed.stderr
    assert len(_runs(tmp_path)) == 1  # phase 2 never started
    short = launch("--preset", "cpu_tiny", env={**env, "SHORT_BY": "1"})
    assert short.returncode == 2
    assert "is at step 449, not its final step 450" in short.stderr
    assert len(_runs(tmp_path)) == 2  # phase 1 again, phase 2 still not
    alone = launch(
        "--preset",
        "cpu_tiny",
        script="run_pretraining_lamb_phase2.sh",
        env={**env, "RESULTS_DIR": str(tmp_path / "elsewhere")},
    )
    assert alone.returncode == 2 and "Phase 1 left no checkpoint in" in alone.stderr


def test_a_forgotten_masking_flag_is_named_when_the_other_maskings_records_are_there(workspace):
    tmp_path, env = workspace
    root = tmp_path / "root"
    for d in data_paths.default_pretraining_dirs(str(root), masking="dynamic", dupe_factor=1).values():
        os.makedirs(os.path.join(d, "training"))
    env = {k: v for k, v in env.items() if not k.endswith("_DATA")}
    result = launch("--preset", "cpu_tiny", env={**env, "BERT_DATA_DIR": str(root)})
    assert result.returncode == 2 and _runs(tmp_path) == []
    assert "built dynamic-masking records there: pass --masking dynamic" in result.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t, env: {"PHASE2_DATA": str(t / "empty")}, "phase-2 training data"),
        (
            lambda t, env: {"VOCAB_FILE": str(t / "big_vocab.txt")},
            "has 100 tokens but the model's vocab_size is 64",
        ),
        (
            lambda t, env: {"INIT_CHECKPOINT": str(t / "no_such_checkpoint")},
            "no_such_checkpoint does not exist",
        ),
        pytest.param(
            lambda t, env: {"PHASE1_DATA": str(t / "phase2")},
            "Phase 1 needs seq 128 / 20 predictions",
            marks=pytest.mark.slow,
        ),  # reads a record: imports TensorFlow
    ],
)
def test_inputs_are_checked_before_phase_1(workspace, change, message):
    tmp_path, env = workspace
    (tmp_path / "empty" / "training").mkdir(parents=True)
    (tmp_path / "big_vocab.txt").write_text("".join(f"tok{i}\n" for i in range(100)))
    result = launch("--preset", "cpu_tiny", env={**env, **change(tmp_path, env)})
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert _runs(tmp_path) == []
