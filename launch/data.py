"""scripts/data_download.sh: BERT data the way NVIDIA's users expect it, as a plan of restartable
`prepare_data.py --action ...` stages.

    wiki_only (default)  Wikipedia (or --corpus) -> formatted text -> shards -> vocab -> TFRecords
                         for phase 1 (seq 128, 20 predictions) and phase 2 (seq 512, 80 predictions)
    squad / glue         SQuAD v1.1 and v2.0 / the GLUE tasks
    all                  all of the above

The defaults are NVIDIA's recipe as data/paths holds it; the TFRecords land where
scripts/run_pretraining_lamb.sh looks by default. Each stage verifies and keeps what a previous
run finished, so re-running the same command continues.
"""

from __future__ import annotations

import os
import re

from common.errors import UserError
from data import paths as data_paths
from data.settings import PrepSettings
from launch.engine import Launcher, PathOption, Plan, Setting, Step, absolute
from launch.workers import UsageError

RECIPE = data_paths.recipe()
TARGETS = ("wiki_only", "squad", "glue", "all")
# Where prepare_data.py --action download --dataset google_pretrained_weights puts the vocab.
GOOGLE_VOCAB = ("download", "google_pretrained_weights", "uncased_L-12_H-768_A-12", "vocab.txt")


def _vocab_size(text: str) -> str:
    if not (re.fullmatch(r"[0-9]+", text) and int(text) >= 100):
        raise ValueError("an integer >= 100")
    return text


def _dataset_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError("a plain name (letters, digits, _ . -)")
    return text


def _phases(text: str) -> str:
    phases = text.replace(",", " ").split()
    if not phases or any(p not in ("1", "2") for p in phases):
        raise ValueError('1 and/or 2 ("1 2", "1" or "2")')
    return " ".join(dict.fromkeys(phases))


def _wiki_dump(text: str) -> str:
    if not (text == "latest" or re.fullmatch(r"[0-9]{8}", text)):
        raise ValueError("'latest' or a date YYYYMMDD")
    return text


def _named(name: str, default: str, kind: str, help_text: str, parse=None) -> Setting:
    return Setting(name, default, kind, help_text, parse=parse, positional=False)


SETTINGS = (
    Setting(
        "target", "wiki_only", "choice", "what to prepare: wiki_only, squad, glue or all", choices=TARGETS
    ),
    _named(
        "dataset",
        "",
        "custom",
        "the prepared corpus' name (default wikicorpus_en; corpus with --corpus)",
        _dataset_name,
    ),
    _named(
        "train_vocab", "", "custom", "train a WordPiece vocab of this many entries on the shards", _vocab_size
    ),
    Setting.of_field(PrepSettings, "n_training_shards", passed_on=False),
    Setting.of_field(PrepSettings, "n_test_shards", passed_on=False),
    Setting.of_field(PrepSettings, "fraction_test_set", passed_on=False),
    Setting(
        "masking",
        "static",
        "choice",
        "static: masks written into the TFRecords (NVIDIA's recipe, dupe_factor copies); dynamic: "
        "each pair once, unmasked, masked anew every epoch as training reads it",
        choices=("static", "dynamic"),
        positional=False,
    ),
    _named(
        "dupe_factor",
        "",
        "count",
        f"copies of the data with different masks (default {RECIPE['dupe_factor']}; 1 with --masking dynamic)",
    ),
    _named("phases", "1 2", "custom", 'TFRecord phases to build: "1 2", "1" or "2"', _phases),
    Setting.of_field(PrepSettings, "n_processes", default="", passed_on=False),
    _named("mirror", "", "text", "download from a mirror with the same paths (a URL)"),
    _named("wiki_dump", "latest", "custom", "Wikipedia dump: latest or YYYYMMDD", _wiki_dump),
    _named("glue_tasks", "all", "text", "comma-separated GLUE tasks, or all"),
)

PATHS = (
    PathOption("data_dir", "BERT_DATA_DIR", "root of all data (default <repo>/data_dir)"),
    PathOption(
        "corpus", None, "FILE[,FILE]: your corpus (text, JSONL or MediaWiki XML) instead of Wikipedia"
    ),
    PathOption("vocab_file", None, "an existing vocab.txt (default: Google's uncased vocab)"),
)


def _corpus(launch) -> list:
    """--corpus's files, absolute (a comma-separated list: each file made absolute on its own)."""
    given = launch.request.paths.get("corpus", "")
    files = [absolute(f) for f in given.split(",") if f]
    if files:
        launch.paths["corpus"] = (",".join(files), "--corpus")
    return files


# The launcher's own prepare_data.py flags and the setting or path behind each: a flag after --
# may not contradict them ("": always set).
FLAG_ORIGIN = {
    "action": "",
    "data_dir": "data_dir",
    "dataset": "dataset",
    "input_files": "corpus",
    "n_training_shards": "n_training_shards",
    "n_test_shards": "n_test_shards",
    "fraction_test_set": "fraction_test_set",
    "n_processes": "n_processes",
    "vocab_size": "train_vocab",
    "vocab_file": "vocab_file",
    "max_seq_length": "phases",
    "max_predictions_per_seq": "phases",
    "dupe_factor": "dupe_factor",
    "masking": "masking",
    "wiki_dump": "wiki_dump",
    "glue_tasks": "glue_tasks",
    "mirror": "mirror",
}


def _pretraining_data(t: dict, root: str, corpus: list, vocab_file: str, command) -> list:
    """wiki_only's stages: `command(label, *flags)` for each, and their descriptions."""
    dataset, shards, tests, fraction = (
        t[n] for n in ("dataset", "n_training_shards", "n_test_shards", "fraction_test_set")
    )
    download = ["--mirror", t["mirror"]] if t["mirror"] else []
    common = ["--dataset", dataset, "--n_training_shards", shards, "--n_test_shards", tests]
    common += ["--fraction_test_set", fraction]
    if t["n_processes"]:
        common += ["--n_processes", t["n_processes"]]
    if corpus:
        described = [f"format your corpus ({','.join(corpus)}) as dataset '{dataset}'"]
        formatting = ["--action", "text_formatting", "--dataset", dataset]
        command("text_formatting", *formatting, "--input_files", ",".join(corpus))
    else:
        described = [f"download the Wikipedia dump ({t['wiki_dump']}) and format it as dataset '{dataset}'"]
        dump = os.path.join(data_paths.download_dir(root, "wikicorpus_en"), "wikicorpus_en.xml.bz2")
        command(
            "download wikicorpus_en",
            *("--action", "download", "--dataset", "wikicorpus_en", "--wiki_dump", t["wiki_dump"], *download),
        )
        command("text_formatting", "--action", "text_formatting", "--dataset", dataset, "--input_files", dump)
    described.append(f"split it into {shards} training + {tests} test shards (test fraction {fraction})")
    command("sharding", "--action", "sharding", *common)
    google_vocab = os.path.join(root, *GOOGLE_VOCAB)
    if t["train_vocab"]:  # create_tfrecord_files then finds the trained vocab itself
        described.append(
            f"vocabulary: train a WordPiece vocab of {t['train_vocab']} entries on the training shards"
        )
        command("vocab", "--action", "vocab", *common, "--vocab_size", t["train_vocab"])
        vocab_flags = []
    elif vocab_file:
        described.append(f"vocabulary: use {vocab_file}")
        vocab_flags = ["--vocab_file", vocab_file]
    else:
        described.append(f"vocabulary: Google's uncased vocab ({google_vocab})")
        command(
            "download google_pretrained_weights",
            *("--action", "download", "--dataset", "google_pretrained_weights", *download),
        )
        vocab_flags = ["--vocab_file", google_vocab]
    masking = ["--masking", t["masking"]] if t["masking"] != "static" else []
    outputs = data_paths.default_pretraining_dirs(
        root, dataset, int(shards), float(fraction), dupe_factor=int(t["dupe_factor"]), masking=t["masking"]
    )
    for phase in t["phases"].split():
        shape = data_paths.PHASE1 if phase == "1" else data_paths.PHASE2
        seq, predictions = shape["max_seq_length"], shape["max_predictions_per_seq"]
        described.append(
            f"phase {phase} TFRecords (seq {seq}, {predictions} predictions, dupe_factor {t['dupe_factor']}"
            f"{', unmasked: masked as read' if masking else ''}) -> {outputs[f'phase{phase}']}"
        )
        command(
            f"phase {phase} TFRecords",
            *("--action", "create_tfrecord_files", *common, *vocab_flags),
            *("--max_seq_length", str(seq), "--max_predictions_per_seq", str(predictions)),
            *("--dupe_factor", t["dupe_factor"], *masking),
        )
    return described


def plan(launch) -> Plan:
    """The target's prepare_data.py commands, in order, with what each does; the input checks."""
    t = launch.text
    target = t["target"]
    root = launch.path("data_dir", data_paths.data_root({}), "<repo>/data_dir")
    corpus = _corpus(launch)
    vocab_file = launch.path("vocab_file", "")
    if vocab_file and t["train_vocab"]:
        raise UsageError("give --vocab_file or --train_vocab, not both.")
    launch.default(
        "dataset",
        "corpus" if corpus else str(RECIPE["dataset"]),
        "--corpus given" if corpus else "NVIDIA's recipe",
    )
    launch.default(
        "dupe_factor",
        "1" if t["masking"] == "dynamic" else str(RECIPE["dupe_factor"]),
        "one unmasked copy" if t["masking"] == "dynamic" else "NVIDIA's recipe",
    )
    launch.flag_origin.update(FLAG_ORIGIN)
    prepare_data = [launch.python, os.path.join(launch.repo_root, "prepare_data.py"), "--data_dir", root]
    download = ["--mirror", t["mirror"]] if t["mirror"] else []
    commands = []

    def command(label: str, *flags) -> None:
        commands.append((label, [*prepare_data, *flags, *launch.request.extra]))

    described = []
    if target in ("wiki_only", "all"):
        described += _pretraining_data(t, root, corpus, vocab_file, command)
    if target in ("squad", "all"):
        described.append(f"download SQuAD v1.1 and v2.0 into {data_paths.download_dir(root, 'squad')}")
        command("download squad", "--action", "download", "--dataset", "squad", *download)
    if target in ("glue", "all"):
        described.append(f"download GLUE ({t['glue_tasks']}) into {data_paths.download_dir(root, 'glue')}")
        command(
            "download glue",
            *("--action", "download", "--dataset", "glue", "--glue_tasks", t["glue_tasks"], *download),
        )
    notes = [f"plan ({target}):", *(f"  {i}. {line}" for i, line in enumerate(described, 1))]

    def prepare(say) -> list:
        if vocab_file and not os.path.isfile(vocab_file):
            raise UserError(f"--vocab_file '{vocab_file}' does not exist.")
        for path in corpus:
            if not os.path.isfile(path):
                raise UserError(f"--corpus file '{path}' does not exist.")
        from common.files import ensure_writable_dir

        ensure_writable_dir(root, what="data directory (--data_dir or BERT_DATA_DIR)")
        return [
            Step(
                argv,
                banner=f"step {i}/{len(commands)}: {label}",
                failure=f"{label} stopped with exit status {{status}} (see above); fix the cause and re-run "
                "the same command: finished stages are verified and kept.",
            )
            for i, (label, argv) in enumerate(commands, 1)
        ]

    return Plan(commands, notes, prepare, done=f"done: {target}")


LAUNCHER = Launcher(
    "data_download",
    "prepare_data.py",
    (
        "Downloads and prepares BERT data, one restartable prepare_data.py stage at a time: wiki_only",
        "(Wikipedia, or --corpus, to phase 1 and phase 2 TFRecords), squad, glue, or all of them.",
        "Defaults: NVIDIA's recipe (python -m data.paths recipe). Re-running the same command continues.",
    ),
    SETTINGS,
    PATHS,
    plan,
)
