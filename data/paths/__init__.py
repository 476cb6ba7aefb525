"""Where every data stage reads and writes: the one place that defines the on-disk layout.

The root is `BERT_DATA_DIR` (default `<repo>/data_dir`). Entry points resolve it with
`data_root(os.environ)`; library code takes the resolved path. The layout follows NVIDIA's
bertPrep so its users find things where they expect them:

    <root>/download/<dataset>/...                                 raw downloads (+ manifest.json)
    <root>/formatted/<dataset>/<dataset>_one_article_per_line.txt  one document per line
    <root>/sharded_training_shards_<N>_test_shards_<M>_fraction_<F>/<dataset>/{training,test}/
                                                                  <dataset>_{training,test}_<i>.txt
    <root>/vocab/<dataset>/vocab.txt   (or spm.model)             a vocabulary trained on the shards
    <root>/tfrecord/lower_case_<0|1>_seq_len_<S>_max_pred_<P>_masked_lm_prob_<p>_random_seed_<r>_
        dupe_factor_<d>[_masking_dynamic]_shard_<N>_test_split_<pct>/<dataset>/{training,test}/<shard>.tfrecord

This is also the one place for NVIDIA's recipe values that the launchers share (shard counts,
test fraction, phase 1 = 128/20 and phase 2 = 512/80, dupe_factor, masking, seed):
`python -m data.paths` prints the default locations and `python -m data.paths recipe` the
values, as `name=value` lines; launch/data.py (scripts/data_download.sh) takes its defaults from here.
"""

from __future__ import annotations

import os

from data.pretraining.masking import MASKED_LM_PROB

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA_DIR_ENV = "BERT_DATA_DIR"
DEFAULT_DATA_DIR = os.path.join(REPO_ROOT, "data_dir")

# NVIDIA's recipe, which the launchers default to.
DEFAULT_DATASET = "wikicorpus_en"
DEFAULT_TRAINING_SHARDS = 256
DEFAULT_TEST_SHARDS = 16
DEFAULT_FRACTION_TEST = 0.1
PHASE1 = {"max_seq_length": 128, "max_predictions_per_seq": 20}
PHASE2 = {"max_seq_length": 512, "max_predictions_per_seq": 80}
DEFAULT_TFRECORD_PARAMS = {
    "do_lower_case": True,
    "masked_lm_prob": MASKED_LM_PROB,
    "random_seed": 12345,
    "dupe_factor": 5,
}
SPLITS = ("training", "test")
# (max_seq_length, max_predictions_per_seq) per phase number: PHASE1 and PHASE2 as one table.
PHASE_SHAPES = {
    n: (shape["max_seq_length"], shape["max_predictions_per_seq"]) for n, shape in ((1, PHASE1), (2, PHASE2))
}

# The quickstart's offline recipe (scripts/quickstart.sh; the benches that rebuild its data): the
# installed Python's prose, a WordPiece vocab trained on it, 4 + 1 shards, 2 masked copies.
QUICKSTART_DATASET = "python_docs"
QUICKSTART_VOCAB_SIZE = 2048
QUICKSTART_SHARDS = {"n_training_shards": 4, "n_test_shards": 1, "fraction_test_set": 0.05}
QUICKSTART_DUPE_FACTOR = 2


def data_root(environ=None, explicit=None) -> str:
    """The data root: `explicit` if given, else $BERT_DATA_DIR from `environ`, else <repo>/data_dir."""
    if explicit:
        return os.path.abspath(explicit)
    value = (environ or {}).get(DATA_DIR_ENV)
    return os.path.abspath(value) if value else DEFAULT_DATA_DIR


def download_dir(root: str, dataset: str) -> str:
    return os.path.join(root, "download", dataset)


def python_docs_file(root: str) -> str:
    """The offline corpus built from the installed Python's prose (data/corpus/stdlib_text.py)."""
    return os.path.join(download_dir(root, "python_docs"), "python_docs.txt")


def python_qa_dir(root: str) -> str:
    """The offline question-answering set in SQuAD v1.1 format: train.json, dev.json
    (data/corpus/stdlib_qa.py)."""
    return download_dir(root, "python_qa")


def formatted_file(root: str, dataset: str) -> str:
    return os.path.join(root, "formatted", dataset, f"{dataset}_one_article_per_line.txt")


def format_fraction(fraction: float) -> str:
    # repr keeps 0.1 as "0.1" (not "0.10000000000000001"), and 0.0 as "0.0".
    return repr(float(fraction))


def sharded_dir(
    root: str, dataset: str, n_training_shards: int, n_test_shards: int, fraction_test: float
) -> str:
    name = (
        f"sharded_training_shards_{n_training_shards}_test_shards_{n_test_shards}"
        f"_fraction_{format_fraction(fraction_test)}"
    )
    return os.path.join(root, name, dataset)


def shard_name(dataset: str, split: str, index: int, ext: str = "txt") -> str:
    return f"{dataset}_{split}_{index}.{ext}"


def vocab_dir(root: str, dataset: str) -> str:
    return os.path.join(root, "vocab", dataset)


def tfrecord_dir(
    root: str,
    dataset: str,
    *,
    do_lower_case: bool,
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    random_seed: int,
    dupe_factor: int,
    n_training_shards: int,
    fraction_test: float,
    masking: str = "static",
) -> str:
    """NVIDIA's directory name for one set of TFRecord parameters (its launchers glob <this>/training/*);
    unmasked records (masking "dynamic") add `_masking_dynamic` after the dupe factor."""
    name = (
        f"lower_case_{int(bool(do_lower_case))}_seq_len_{max_seq_length}"
        f"_max_pred_{max_predictions_per_seq}_masked_lm_prob_{format_fraction(masked_lm_prob)}"
        f"_random_seed_{random_seed}_dupe_factor_{dupe_factor}"
        + ("_masking_dynamic" if masking == "dynamic" else "")
        + f"_shard_{n_training_shards}_test_split_{int(round(fraction_test * 100))}"
    )
    return os.path.join(root, "tfrecord", name, dataset)


def default_pretraining_dirs(
    root: str,
    dataset: str = DEFAULT_DATASET,
    n_training_shards: int = DEFAULT_TRAINING_SHARDS,
    fraction_test: float = DEFAULT_FRACTION_TEST,
    **overrides,
) -> dict:
    """{'phase1': dir, 'phase2': dir}: the TFRecord dirs of NVIDIA's recipe (each has training/ and test/).

    `overrides` replace entries of DEFAULT_TFRECORD_PARAMS (do_lower_case, masked_lm_prob,
    random_seed, dupe_factor) or name the masking ("dynamic": unmasked records).
    """
    settings = {**DEFAULT_TFRECORD_PARAMS, **overrides}
    return {
        phase: tfrecord_dir(
            root,
            dataset,
            n_training_shards=n_training_shards,
            fraction_test=fraction_test,
            **params,
            **settings,
        )
        for phase, params in (("phase1", PHASE1), ("phase2", PHASE2))
    }


def recipe() -> dict:
    """NVIDIA's data recipe as flat {name: value}: what the shell launchers default to."""
    values = {
        "dataset": DEFAULT_DATASET,
        "n_training_shards": DEFAULT_TRAINING_SHARDS,
        "n_test_shards": DEFAULT_TEST_SHARDS,
        "fraction_test_set": DEFAULT_FRACTION_TEST,
        **{k: int(v) if isinstance(v, bool) else v for k, v in DEFAULT_TFRECORD_PARAMS.items()},
    }
    for phase, params in (("phase1", PHASE1), ("phase2", PHASE2)):
        values.update({f"{phase}_{k}": v for k, v in params.items()})
    return values


def quickstart_records(root: str, phase: int, masking: str = "static") -> str:
    """The TFRecord dir (training/ and test/) of the quickstart's recipe for `phase` (1 or 2) under
    the data root `root`; unmasked records ("dynamic") are one copy, as data_download.sh writes them."""
    shards = QUICKSTART_SHARDS
    dirs = default_pretraining_dirs(
        root,
        QUICKSTART_DATASET,
        shards["n_training_shards"],
        shards["fraction_test_set"],
        dupe_factor=QUICKSTART_DUPE_FACTOR if masking == "static" else 1,
        masking=masking,
    )
    return dirs[f"phase{phase}"]


def quickstart_vocab(root: str) -> str:
    """The vocab.txt the quickstart's recipe trains under the data root `root`."""
    return os.path.join(vocab_dir(root, QUICKSTART_DATASET), "vocab.txt")
