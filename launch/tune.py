"""scripts/run_tune.sh: a fine-tuning hyperparameter search (run_tune.py) on SQuAD, SQuAD2 or a
GLUE task, with the data and model found as the fine-tuning launchers find them. The tuner is one
process; each trial starts its own workers (num_gpu per trial)."""

from __future__ import annotations

import os

from launch import finetuning as ft
from launch.engine import Launcher, Setting
from training import tasks
from tuning import search

SQUAD_NAMES = {"1.1": "SQuAD", "2.0": "SQuAD2"}  # the canonical name of each version


def tune_task_name(text: str) -> str:
    """SQuAD, SQuAD2 or the canonical GLUE task name; ValueError(rule) otherwise."""
    version = tasks.squad_version(text)
    if version:
        return SQUAD_NAMES[version]
    try:
        return ft.glue_task_name(text)
    except ValueError as e:
        raise ValueError(f"SQuAD, SQuAD2 or {e}") from None


def plan(launch):
    t = launch.text
    task = t["task_name"]
    kind = tasks.find(task)
    squad_version = tasks.squad_version(task)
    launch.default("seq_length", "384" if squad_version else "128", "SQuAD's" if squad_version else "GLUE's")
    root, results = ft.common_paths(launch)
    ft.resolve_bert_dir(launch, root, results)
    ft.resolve_model(launch, launch.paths["bert_dir"][0], "BERT_DIR")
    out = launch.path(
        "output_dir",
        os.path.join(results, f"tune_{task}_{t['bert_model']}"),
        "results_dir, task_name, bert_model",
    )
    if squad_version:
        squad_dir = launch.path("squad_dir", os.path.join(root, "download", "squad"), "under data_dir")
        v = squad_version
        inputs = [os.path.join(squad_dir, f"v{v}", f"{stem}-v{v}.json") for stem in ("train", "dev")]
        flags = [("task_name", "squad", "task_name"), ("train_file", inputs[0], "squad_dir")]
        flags.append(("predict_file", inputs[1], "squad_dir"))
        if v == "2.0":
            flags.append(("version_2_with_negative", "true", "task_name"))
        env = "SQUAD_DIR"
    else:
        from data.glue import get_task
        from launch.glue import split_files

        glue_dir = launch.path("glue_dir", os.path.join(root, "download", "glue"), "under data_dir")
        glue_task = get_task(task)
        task_dir = os.path.join(glue_dir, glue_task.directory)
        files = split_files(task_dir, glue_task)
        inputs = [f for s, f in files.items() if s == "train" or s.startswith("dev")]
        flags = [("task_name", task, "task_name"), ("data_dir", task_dir, "glue_dir")]
        env = "GLUE_DIR"
    flags += [
        ("bert_config_file", launch.paths["bert_config"][0], "bert_config"),
        ("vocab_file", launch.paths["vocab_file"][0], "vocab_file"),
        ("output_dir", out, "output_dir"),
    ]
    if launch.environ.get("LAUNCHER_ARGS"):
        flags.append(("launcher_args", launch.environ["LAUNCHER_ARGS"], "num_gpu"))
    command = launch.command(flags)
    notes = [f"each trial: {kind.entry_point} on", "  " + " ".join(inputs)]
    if os.path.isfile(os.path.join(out, "study.db")):
        notes.append("note: output_dir holds a study (study.db): this run continues it.")

    def check_inputs():
        for path in inputs:
            ft.require_file(path, f"The {task} file", f"run scripts/data_download.sh, or set {env}")
        ft.require_model_files(launch, ft.bert_dir_hint(t["bert_model"]))

    ending = ["echo", f"== {launch.script}: study in {out} (trials.tsv, best_trial.json, plots) =="]
    return ft.fine_tuning_plan(launch, command, notes, check_inputs, report=ending, stop_file=False)


LAUNCHER = Launcher(
    "run_tune",
    "run_tune.py",
    (
        "Searches the learning rate, batch size and epochs of a fine-tuning (Optuna; trials pruned when",
        "their dev metric lags), then prints the trials, the best parameters and its checkpoint.",
    ),
    (
        Setting(
            "task_name", "MRPC", "custom", "SQuAD, SQuAD2 or a GLUE task (any case)", parse=tune_task_name
        ),
        Setting.of_field(search.TuneSettings, "n_trials", positional=True),
        Setting("num_gpu", "1", "count", "GPUs per trial, horovodrun -np", flag="num_gpus"),
        ft.bert_model(),
        ft.PRECISION,
        ft.USE_XLA,
        Setting(
            "seq_length", "", "count", "tokens per example (default 128; SQuAD 384)", flag="max_seq_length"
        ),
        ft.INIT_CHECKPOINT,
    ),
    (
        ft.DATA_DIR,
        ft.GLUE_DIR,
        ft.SQUAD_DIR,
        ft.BERT_DIR,
        ft.BERT_CONFIG,
        ft.VOCAB_FILE,
        ft.RESULTS_DIR,
        ft.output_dir("default <results_dir>/tune_<task_name>_<bert_model>"),
    ),
    plan,
)
