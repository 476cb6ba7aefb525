"""scripts/run_glue.sh (fine-tune on a GLUE task, score dev, write the submission file) and
scripts/run_glue_inference.sh (the same from a fine-tuned model, no training), in NVIDIA's orders."""

from __future__ import annotations

import os

from common.errors import UserError
from launch import finetuning as ft
from launch.engine import Launcher, Setting
from launch.workers import UsageError
from training import tasks

DOC_STRIDE_NOTE = "note: doc_stride={} is accepted for NVIDIA's argument order and unused"


def split_files(task_dir: str, task, skip=()) -> dict:
    """{split: the task's file for it in task_dir}: the first of its names that exists, else its first."""
    files = {}
    for split in task.splits:
        if split.split in skip:
            continue
        candidates = [os.path.join(task_dir, name) for name in split.file_names]
        files[split.split] = next((c for c in candidates if os.path.isfile(c)), candidates[0])
    return files


def _task(launch, root: str):
    from data.glue import get_task

    glue_dir = launch.path("glue_dir", os.path.join(root, "download", "glue"), "under data_dir")
    task = get_task(launch.text["task_name"])
    return task, os.path.join(glue_dir, task.directory)


def _hint(task) -> str:
    return f"run scripts/data_download.sh glue, or set GLUE_DIR (the directory holding {task.directory}/)"


def plan_training(launch):
    ft.check_bin_size(launch)
    t = launch.text
    root, results = ft.common_paths(launch)
    task, task_dir = _task(launch, root)
    if "train" not in task.split_names:
        raise UsageError(
            f"task_name {task.name} has no training data (GLUE's diagnostic set is scored with an MNLI "
            f"model: bash scripts/run_glue_inference.sh {task.name} <fine-tuned MNLI directory>)."
        )
    ft.resolve_bert_dir(launch, root, results)
    ft.resolve_model(launch, launch.paths["bert_dir"][0], "BERT_DIR")
    out = launch.path(
        "output_dir",
        os.path.join(results, f"glue_{task.name}_{t['bert_model']}"),
        "results_dir, task_name, bert_model",
    )
    files = split_files(task_dir, task)
    predict = all(os.path.isfile(f) for s, f in files.items() if s.startswith("test"))
    flags = [
        ("data_dir", task_dir, "glue_dir"),
        ("bert_config_file", launch.paths["bert_config"][0], "bert_config"),
        ("vocab_file", launch.paths["vocab_file"][0], "vocab_file"),
        ("output_dir", out, "output_dir"),
        ("use_horovod", "true" if launch.workers.count > 1 else "false", "num_gpu"),
        ("do_train", "true", ""),
        ("do_eval", "true", ""),
        ("do_predict", "true" if predict else "false", ""),
    ]
    command = launch.command(flags)
    notes = ft.worker_notes(launch) + [f"task {task.name} in {task_dir}:"]
    notes += [f"  {split:18s} = {path}" for split, path in files.items()]
    if not predict:
        notes.append("  (no test file: no --do_predict, no submission file)")
    notes += [
        DOC_STRIDE_NOTE.format(t["doc_stride"]) + ":",
        "      GLUE examples are not split into windows.",
        *ft.continue_note(launch),
    ]

    def check_inputs():
        for split, path in files.items():
            if split == "train" or split.startswith("dev"):
                ft.require_file(path, f"The GLUE {task.name} {split} file", _hint(task))
        ft.require_model_files(launch, ft.bert_dir_hint(t["bert_model"]))

    return ft.fine_tuning_plan(launch, command, notes, check_inputs)


def plan_inference(launch):
    ft.check_bin_size(launch)
    t = launch.text
    root, results = ft.common_paths(launch)
    task, task_dir = _task(launch, root)
    init, model_dir, out, export_dir = ft.inference_model(
        launch,
        root,
        results,
        os.path.join(results, f"glue_{task.name}_{t['bert_model']}"),
        "run_glue.sh",
        f"inference_glue_{task.name}",
        "results_dir, task_name, init_checkpoint",
    )
    files = split_files(task_dir, task, skip=("train",))
    present = {s for s, f in files.items() if os.path.isfile(f)}
    evaluate = any(s.startswith("dev") for s in present)
    predict = any(not s.startswith("dev") for s in present)
    flags = [
        ("data_dir", task_dir, "glue_dir"),
        ("bert_config_file", launch.paths["bert_config"][0], "bert_config"),
        ("vocab_file", launch.paths["vocab_file"][0], "vocab_file"),
        ("output_dir", out, "output_dir"),
        ("use_horovod", "false", ""),
        ("do_train", "false", ""),
        ("do_eval", "true" if evaluate else "false", ""),
        ("do_predict", "true" if predict else "false", ""),
    ]
    if export_dir:
        flags.append(("export_dir", export_dir, "export_dir"))
    command = launch.command(flags)
    notes = ft.worker_notes(launch) + [f"task {task.name} in {task_dir} (a missing file is skipped):"]
    for split, path in files.items():
        state = "missing" if split not in present else "scored" if split.startswith("dev") else "submission"
        notes.append(f"  {split:18s} = {path} ({state})")
    notes.append(DOC_STRIDE_NOTE.format(t["doc_stride"]) + ".")

    def check_inputs():
        if not present:
            first_missing = next(iter(files.values()))
            raise UserError(
                f"The GLUE {task.name} file {first_missing} does not exist (nor any other to predict); {_hint(task)}."
            )
        ft.require_model_files(launch, "give the fine-tuned model: run_glue.sh's output directory")
        ft.require_no_other_checkpoint(launch, model_dir)

    return ft.fine_tuning_plan(launch, command, notes, check_inputs)


GLUE_PATHS = (ft.DATA_DIR, ft.GLUE_DIR)

TRAINING = Launcher(
    "run_glue",
    tasks.GLUE.entry_point,
    (
        "Fine-tunes on a GLUE task's training set, then scores its dev set(s) with the official metrics",
        "and, when the test file is there, writes the submission file (MRPC.tsv, MNLI-m.tsv, ...).",
    ),
    (
        ft.task_setting("CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI (any case)"),
        Setting("batch_size", "16", "count", "training examples per GPU per step", flag="train_batch_size"),
        ft.learning_rate("3e-6"),
        ft.PRECISION,
        ft.USE_XLA,
        ft.NUM_GPU,
        Setting("seq_length", "128", "count", "tokens per example", flag="max_seq_length"),
        ft.DOC_STRIDE_UNUSED,
        ft.bert_model(),
        ft.epochs("3.0"),
        Setting(
            "warmup_proportion",
            "0.1",
            "proportion",
            "share of the updates in linear warmup",
            flag="warmup_proportion",
        ),
        ft.INIT_CHECKPOINT,
        ft.bin_size("32"),
        ft.GROUP_BY_LENGTH,
    ),
    (
        *GLUE_PATHS,
        ft.BERT_DIR,
        ft.BERT_CONFIG,
        ft.VOCAB_FILE,
        ft.RESULTS_DIR,
        ft.output_dir("default <results_dir>/glue_<task_name>_<bert_model>"),
    ),
    plan_training,
    workers="num_gpu",
)

INFERENCE = Launcher(
    "run_glue_inference",
    tasks.GLUE.entry_point,
    (
        "Predicts a GLUE task with a fine-tuned model (no training), in one process: the dev metrics",
        "when the dev file is there, the submission file when the test file is there.",
    ),
    (
        ft.task_setting("CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI AX (any case)"),
        ft.fine_tuned_model("default <results_dir>/glue_<task>_<model>"),
        ft.predict_batch_size("32"),
        ft.PRECISION,
        ft.USE_XLA,
        Setting("seq_length", "128", "count", "tokens per example, as in training", flag="max_seq_length"),
        ft.DOC_STRIDE_UNUSED,
        ft.bert_model("picks BERT_DIR (config and vocab when none is beside the model)"),
        ft.bin_size("32"),
    ),
    (
        *GLUE_PATHS,
        ft.PathOption(
            "bert_dir", "BERT_DIR", "Google's base/large under data_dir, else <results_dir>/phase_2"
        ),
        ft.BERT_CONFIG,
        ft.VOCAB_FILE,
        ft.RESULTS_DIR,
        ft.output_dir("default <results_dir>/inference_glue_<task_name>_<model directory>"),
        ft.EXPORT_DIR,
    ),
    plan_inference,
)
