"""What the fine-tuning launchers share: where the model's checkpoint, config and vocab come from,
the input checks, the workers' lines, and the ending that runs the entry point and prints the
metrics it wrote (launch/squad.py, launch/glue.py, launch/tune.py are the launchers)."""

from __future__ import annotations

import json
import os
import shutil

from common.errors import UserError
from data import paths as data_paths
from launch.engine import PathOption, Plan, Setting, Step, absolute
from training.finetuning_job import FineTuningSettings
from training.job import JobSettings
from training.preemption import STOP_FILE_NAME

GOOGLE_MODELS = {"base": "uncased_L-12_H-768_A-12", "large": "uncased_L-24_H-1024_A-16"}

# Settings several launchers take, in the order each launcher's table lists them.
PRECISION = Setting.of_field(JobSettings, "precision", "fp16", positional=True)
USE_XLA = Setting.of_field(JobSettings, "use_xla", positional=True)
NUM_GPU = Setting("num_gpu", "8", "count", "workers, one process per GPU")
DOC_STRIDE_UNUSED = Setting(
    "doc_stride", "64", "count", "accepted for NVIDIA's order; unused by classification"
)
INIT_CHECKPOINT = Setting(
    "init_checkpoint", "", "text", "starting weights (default: BERT_DIR)", flag="init_checkpoint"
)


def epochs(default: str) -> Setting:
    return Setting("epochs", default, "epochs", "passes over the training set", flag="num_train_epochs")


def learning_rate(default: str) -> Setting:
    return Setting(
        "learning_rate", default, "rate", "peak learning rate per GPU (x num_gpu)", flag="learning_rate"
    )


def predict_batch_size(default: str) -> Setting:
    return Setting("batch_size", default, "count", "examples per prediction batch", flag="predict_batch_size")


def fine_tuned_model(help_text: str) -> Setting:
    """An inference launcher's first setting: the model it predicts with."""
    return Setting("init_checkpoint", "", "text", f"fine-tuned model ({help_text})", flag="init_checkpoint")


def bin_size(default: str | None = None) -> Setting:
    """--bin_size for a launcher: SQuAD's windows take the job's 64, GLUE's short sentences 32
    (bench/padding.py: SST-2-length prediction 2.0x at 64, 3.2x at 32)."""
    return Setting.of_field(JobSettings, "bin_size", default)


GROUP_BY_LENGTH = Setting.of_field(FineTuningSettings, "group_by_length")


def check_bin_size(launch) -> None:
    """bin_size (passed on as the entry point's --bin_size) must not exceed seq_length."""
    from launch.workers import UsageError
    from training.length_bins import bin_size_fits

    if not bin_size_fits(launch.value["bin_size"], launch.value["seq_length"]):
        raise UsageError(
            f"bin_size={launch.text['bin_size']} ({launch.source['bin_size']}) must not exceed "
            f"seq_length={launch.text['seq_length']} ({launch.source['seq_length']})."
        )


def bert_model(help_text="picks BERT_DIR: Google's base/large, else <results_dir>/phase_2") -> Setting:
    return Setting("bert_model", "large", "model", help_text)


DATA_DIR = PathOption(
    "data_dir", "BERT_DATA_DIR", "data root of scripts/data_download.sh (default <repo>/data_dir)"
)
SQUAD_DIR = PathOption("squad_dir", "SQUAD_DIR", "holds v1.1/ and v2.0/ (default <data_dir>/download/squad)")
GLUE_DIR = PathOption("glue_dir", "GLUE_DIR", "holds MRPC/, MNLI/, ... (default <data_dir>/download/glue)")
BERT_DIR = PathOption("bert_dir", "BERT_DIR", "the bert_model's checkpoint, bert_config.json and vocab.txt")
BERT_CONFIG = PathOption("bert_config", "BERT_CONFIG", "default: beside init_checkpoint, else BERT_DIR's")
VOCAB_FILE = PathOption("vocab_file", "VOCAB_FILE", "default: beside init_checkpoint, else BERT_DIR's")
RESULTS_DIR = PathOption("results_dir", "RESULTS_DIR", "default <repo>/results")
EXPORT_DIR = PathOption("export_dir", None, "also write a SavedModel here (a new directory)")


def output_dir(help_text: str) -> PathOption:
    return PathOption("output_dir", None, help_text)


def glue_task_name(text: str) -> str:
    """The canonical GLUE task name of `text` (any case, aliases); ValueError(rule) otherwise."""
    from data.glue import TASKS, get_task

    try:
        return get_task(text).name
    except UserError:
        raise ValueError(f"a GLUE task, one of {', '.join(TASKS)} (any case)") from None


def task_setting(help_text: str) -> Setting:
    return Setting("task_name", "MRPC", "custom", help_text, parse=glue_task_name, flag="task_name")


def check_doc_stride(launch) -> None:
    from launch.workers import UsageError

    if launch.value["doc_stride"] >= launch.value["seq_length"]:
        raise UsageError(
            f"doc_stride={launch.text['doc_stride']} ({launch.source['doc_stride']}) must be smaller than "
            f"seq_length={launch.text['seq_length']} ({launch.source['seq_length']})."
        )


def common_paths(launch) -> tuple:
    """(data root, results directory)."""
    root = launch.path("data_dir", data_paths.data_root({}))
    return root, launch.path("results_dir", os.path.join(launch.repo_root, "results"), "<repo>/results")


def resolve_bert_dir(launch, root: str, results_dir: str) -> str:
    """BERT_DIR, the bert_model's checkpoint directory: Google's release where the download puts
    it for base and large, else the pretraining launcher's phase 2 output."""
    model = launch.text["bert_model"]
    if model in GOOGLE_MODELS:
        where = os.path.join(root, "download", "google_pretrained_weights", GOOGLE_MODELS[model])
        return launch.path("bert_dir", where, f"Google's BERT-{model.capitalize()} under data_dir")
    return launch.path(
        "bert_dir", os.path.join(results_dir, "phase_2"), f"run_pretraining_lamb.sh's output for {model}"
    )


def resolve_model(launch, default_init: str, how: str) -> str:
    """init_checkpoint (absolute, default `default_init`), then bert_config and vocab_file: named
    or environment, else the files beside init_checkpoint (a fine-tuned or pretrained output holds
    both; a Hugging Face one has config.json), else BERT_DIR's."""
    launch.default("init_checkpoint", default_init, how)
    init = launch.text["init_checkpoint"] = absolute(launch.text["init_checkpoint"])
    beside = init if os.path.isdir(init) else os.path.dirname(init)
    bert_dir = launch.paths["bert_dir"][0]
    for name, files in (("bert_config", ("bert_config.json", "config.json")), ("vocab_file", ("vocab.txt",))):
        found = next(
            (
                (d, os.path.join(d, f))
                for d in (beside, bert_dir)
                for f in files
                if os.path.isfile(os.path.join(d, f))
            ),
            None,
        )
        if found is None:
            launch.path(name, os.path.join(bert_dir, files[0]), "BERT_DIR")
        else:
            launch.path(name, found[1], "BERT_DIR" if found[0] == bert_dir else "beside init_checkpoint")
    return init


def inference_model(launch, root: str, results: str, trained: str, trained_by: str, output: str, how: str):
    """(init_checkpoint, its directory, output_dir, export_dir) of a prediction launcher: the model
    defaults to the training launcher's output `trained`; the output directory is named `output`_
    <the model's directory name>."""
    resolve_bert_dir(launch, root, results)
    init = resolve_model(launch, trained, f"{trained_by}'s output_dir")
    model_dir = init if os.path.isdir(init) else os.path.dirname(init)
    out = launch.path("output_dir", os.path.join(results, f"{output}_{os.path.basename(model_dir)}"), how)
    return init, model_dir, out, launch.path("export_dir", "", "none")


def bert_dir_hint(model: str) -> str:
    """Where the bert_model's checkpoint comes from, for an error message."""
    if model in GOOGLE_MODELS:
        return (
            "download it (python prepare_data.py --action download --dataset google_pretrained_weights "
            f"--google_models {GOOGLE_MODELS[model]}), set BERT_DIR, or give init_checkpoint"
        )
    return "pretrain it (scripts/run_pretraining_lamb.sh), set BERT_DIR, or give init_checkpoint"


def require_file(path: str, what: str, hint: str) -> None:
    if not os.path.isfile(path):
        raise UserError(f"{what} {path} does not exist; {hint}.")


def require_model_files(launch, hint: str) -> None:
    """init_checkpoint (a directory, a checkpoint prefix or a remote path; `hint` says where one
    comes from), the config and the vocab."""
    init = launch.text["init_checkpoint"]
    if not ("://" in init or os.path.exists(init) or os.path.exists(init + ".index")):
        raise UserError(
            f"init_checkpoint {init} does not exist ({launch.source['init_checkpoint']}); {hint}."
        )
    require_file(
        launch.paths["bert_config"][0], "The BERT config", "set BERT_CONFIG (or --bert_config) or BERT_DIR"
    )
    require_file(
        launch.paths["vocab_file"][0], "The vocab file", "set VOCAB_FILE (or --vocab_file) or BERT_DIR"
    )


def require_no_other_checkpoint(launch, model_dir: str) -> None:
    """The entry points continue from a checkpoint in --output_dir before they look at
    --init_checkpoint, so a prediction's output directory may hold none but the model's own."""
    out = launch.paths["output_dir"][0]
    if os.path.isfile(os.path.join(out, "checkpoint")) and os.path.realpath(out) != os.path.realpath(
        model_dir
    ):
        raise UserError(
            f"output_dir {out} holds a checkpoint of its own, which {launch.launcher.entry} would predict with "
            f"instead of init_checkpoint {launch.text['init_checkpoint']}; give another --output_dir."
        )


def worker_notes(launch, batch_setting: str = "batch_size") -> list:
    """The workers line; with a learning_rate, the global batch and peak rate."""
    notes = [launch.workers.line()]
    if "learning_rate" in launch.text:
        notes += launch.workers.scaling(launch.value[batch_setting], launch.text["learning_rate"])
    return notes


def continue_note(launch) -> list:
    if os.path.isfile(os.path.join(launch.paths["output_dir"][0], "checkpoint")):
        return [
            f"note: output_dir holds a checkpoint: {launch.launcher.entry} continues from it (a finished run only",
            "      predicts again); give --output_dir=NEW for a fresh run.",
        ]
    return []


def require_program(program: str) -> None:
    if not (os.access(program, os.X_OK) if os.path.isabs(program) else shutil.which(program)):
        raise UserError(
            f"{program} is not installed; run scripts/setup.sh (Horovod), or set HOROVOD_LAUNCHER=mpirun."
        )


def fine_tuning_plan(
    launch, command: list, notes: list, check_inputs, report: list | None = None, stop_file: bool = True
) -> Plan:
    """The ending every fine-tuning launcher shares: after the summary, `check_inputs()`, the
    launcher program and the output directory; then the entry point, then (rank 0) the report:
    `report` steps' argv, or by default the metrics the entry point wrote. With `stop_file`, a
    signal to the launcher asks the entry point to stop through the STOP file in its output
    directory (a checkpoint, then exit status 75); without, the signal is passed on."""
    from common.files import ensure_writable_dir
    from launch.engine import started_at

    out = launch.paths["output_dir"][0]
    chief = launch.workers.rank == 0

    def prepare(say) -> list:
        check_inputs()
        require_program(command[0])
        try:
            ensure_writable_dir(out)
        except UserError:
            raise UserError(
                f"cannot write the output directory {out}; set RESULTS_DIR or --output_dir."
            ) from None
        entry = launch.launcher.entry
        steps = [
            Step(
                command,
                stop_file=os.path.join(out, STOP_FILE_NAME) if stop_file else "",
                banner=f"{entry}" if chief else "",
                failure=f"{entry} stopped with exit status {{status}} (see above); re-running the same command "
                f"continues from the latest checkpoint in {out}.",
            )
        ]
        if chief:
            ending = report or [launch.python, "-m", "launch", "report", launch.script, out, started_at()]
            steps.append(Step(ending))
        return steps

    return Plan([(None, command)], notes, prepare)


def report(script: str, output_dir: str, since: float, out) -> int:
    """Prints the metrics in output_dir/eval_results.json when this launch wrote it."""
    results = os.path.join(output_dir, "eval_results.json")
    if not (os.path.isfile(results) and os.path.getmtime(results) >= since):
        print(
            f"== {script}: done; no metrics (the data had no answers or labels): predictions in {output_dir} ==",
            file=out,
        )
        return 0
    print(f"== {script}: results ({results}) ==", file=out)
    with open(results, encoding="utf-8") as f:
        values = json.load(f)

    def numbers(prefix, items):
        for key, value in items.items():
            if isinstance(value, dict):
                yield from numbers(f"{prefix}{key}/", value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                yield prefix + key, value

    exact = values.get("exact_match", values.get("exact"))  # SQuAD v1.1 / v2.0 names
    if exact is not None:
        print(f"  EM {exact:.2f}  F1 {values['f1']:.2f}", file=out)
    for key, value in numbers("", values):
        print(
            f"  {key:28s} = {value:.4f}" if isinstance(value, float) else f"  {key:28s} = {value}", file=out
        )
    return 0
