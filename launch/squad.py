"""scripts/run_squad.sh (fine-tune, predict and score SQuAD) and scripts/run_squad_inference.sh
(predict and score with a fine-tuned model), in NVIDIA's argument orders."""

from __future__ import annotations

import os

from launch import finetuning as ft
from launch.engine import Launcher, Setting
from training import tasks

BATCH = "training examples per GPU per step"
DOC_STRIDE = Setting(
    "doc_stride", "128", "count", "tokens between the starts of a context's windows", flag="doc_stride"
)
SQUAD_VERSION = Setting("squad_version", "1.1", "choice", "1.1 | 2.0", choices=("1.1", "2.0"))
PREDICT_FILE = ft.PathOption(
    "predict_file", None, "default <squad_dir>/v<squad_version>/dev-v<squad_version>.json"
)


def _squad_files(launch, root: str, splits) -> dict:
    version = launch.text["squad_version"]
    squad_dir = launch.path("squad_dir", os.path.join(root, "download", "squad"), "under data_dir")
    return {
        split: launch.path(
            f"{split}_file",
            os.path.join(squad_dir, f"v{version}", f"{stem}-v{version}.json"),
            "squad_dir, squad_version",
        )
        for split, stem in splits
    }


def _squad_hint(what: str) -> str:
    return f"run scripts/data_download.sh squad, or set SQUAD_DIR (or --{what})"


def plan_training(launch):
    ft.check_doc_stride(launch)
    ft.check_bin_size(launch)
    t, version = launch.text, launch.text["squad_version"]
    root, results = ft.common_paths(launch)
    files = _squad_files(launch, root, (("train", "train"), ("predict", "dev")))
    ft.resolve_bert_dir(launch, root, results)
    ft.resolve_model(launch, launch.paths["bert_dir"][0], "BERT_DIR")
    out = launch.path(
        "output_dir",
        os.path.join(results, f"squad_v{version}_{t['bert_model']}"),
        "results_dir, squad_version, bert_model",
    )
    flags = [
        ("bert_config_file", launch.paths["bert_config"][0], "bert_config"),
        ("vocab_file", launch.paths["vocab_file"][0], "vocab_file"),
        ("train_file", files["train"], "train_file"),
        ("predict_file", files["predict"], "predict_file"),
        ("output_dir", out, "output_dir"),
        ("version_2_with_negative", "true" if version == "2.0" else "false", "squad_version"),
        ("use_horovod", "true" if launch.workers.count > 1 else "false", "num_gpu"),
        ("do_train", "true", ""),
        ("do_predict", "true", ""),
        ("do_eval", "true", ""),
    ]
    command = launch.command(flags)

    def check_inputs():
        ft.require_file(files["train"], "The SQuAD training file", _squad_hint("train_file"))
        ft.require_file(files["predict"], "The SQuAD dev file", _squad_hint("predict_file"))
        ft.require_model_files(launch, ft.bert_dir_hint(t["bert_model"]))

    return ft.fine_tuning_plan(
        launch, command, ft.worker_notes(launch) + ft.continue_note(launch), check_inputs
    )


def plan_inference(launch):
    ft.check_doc_stride(launch)
    ft.check_bin_size(launch)
    t, version = launch.text, launch.text["squad_version"]
    root, results = ft.common_paths(launch)
    files = _squad_files(launch, root, (("predict", "dev"),))
    init, model_dir, out, export_dir = ft.inference_model(
        launch,
        root,
        results,
        os.path.join(results, f"squad_v{version}_{t['bert_model']}"),
        "run_squad.sh",
        f"inference_squad_v{version}",
        "results_dir, squad_version, init_checkpoint",
    )
    flags = [
        ("bert_config_file", launch.paths["bert_config"][0], "bert_config"),
        ("vocab_file", launch.paths["vocab_file"][0], "vocab_file"),
        ("predict_file", files["predict"], "predict_file"),
        ("output_dir", out, "output_dir"),
        ("version_2_with_negative", "true" if version == "2.0" else "false", "squad_version"),
        ("use_horovod", "false", ""),
        ("do_train", "false", ""),
        ("do_predict", "true", ""),
        ("do_eval", "true", ""),
    ]
    if export_dir:
        flags.append(("export_dir", export_dir, "export_dir"))
    command = launch.command(flags)

    def check_inputs():
        ft.require_file(files["predict"], "The SQuAD file to predict", _squad_hint("predict_file"))
        ft.require_model_files(launch, "give the fine-tuned model: run_squad.sh's output directory")
        ft.require_no_other_checkpoint(launch, model_dir)

    return ft.fine_tuning_plan(launch, command, ft.worker_notes(launch), check_inputs)


TRAINING = Launcher(
    "run_squad",
    tasks.SQUAD.entry_point,
    (
        "Fine-tunes on SQuAD's training set, then predicts and scores the dev set (EM, F1).",
        "squad_version 2.0 reads train-v2.0.json / dev-v2.0.json and adds --version_2_with_negative.",
    ),
    (
        Setting("batch_size", "24", "count", BATCH, flag="train_batch_size"),
        ft.learning_rate("5e-6"),
        ft.PRECISION,
        ft.USE_XLA,
        ft.NUM_GPU,
        Setting("seq_length", "384", "count", "tokens per window", flag="max_seq_length"),
        DOC_STRIDE,
        ft.bert_model(),
        SQUAD_VERSION,
        ft.INIT_CHECKPOINT,
        ft.epochs("2.0"),
        ft.bin_size(),
        ft.GROUP_BY_LENGTH,
    ),
    (
        ft.DATA_DIR,
        ft.SQUAD_DIR,
        ft.PathOption("train_file", None, "default <squad_dir>/v<squad_version>/train-v<squad_version>.json"),
        PREDICT_FILE,
        ft.BERT_DIR,
        ft.BERT_CONFIG,
        ft.VOCAB_FILE,
        ft.RESULTS_DIR,
        ft.output_dir("default <results_dir>/squad_v<squad_version>_<bert_model>"),
    ),
    plan_training,
    workers="num_gpu",
)

INFERENCE = Launcher(
    "run_squad_inference",
    tasks.SQUAD.entry_point,
    (
        "Predicts and scores SQuAD's dev set with a fine-tuned model (no training), in one process.",
        "squad_version 2.0 reads dev-v2.0.json and adds --version_2_with_negative.",
    ),
    (
        ft.fine_tuned_model("default <results_dir>/squad_v<ver>_<model>"),
        ft.predict_batch_size("8"),
        ft.PRECISION,
        ft.USE_XLA,
        Setting("seq_length", "384", "count", "tokens per window, as in training", flag="max_seq_length"),
        DOC_STRIDE,
        ft.bert_model("picks BERT_DIR (config and vocab when none is beside the model)"),
        SQUAD_VERSION,
        ft.bin_size(),
    ),
    (
        ft.DATA_DIR,
        ft.SQUAD_DIR,
        PREDICT_FILE,
        ft.PathOption(
            "bert_dir", "BERT_DIR", "Google's base/large under data_dir, else <results_dir>/phase_2"
        ),
        ft.BERT_CONFIG,
        ft.VOCAB_FILE,
        ft.RESULTS_DIR,
        ft.output_dir("default <results_dir>/inference_squad_v<squad_version>_<model directory>"),
        ft.EXPORT_DIR,
    ),
    plan_inference,
)
