"""Corpus preparation, NVIDIA's bertPrep made robust: `python prepare_data.py --action ACTION`.

    python prepare_data.py --action download --dataset wikicorpus_en     # also squad, glue,
                                                                         # google_pretrained_weights
    python prepare_data.py --action download --dataset python_docs --corpus_mb 8  # offline corpus
    python prepare_data.py --action download --dataset python_qa   # offline SQuAD-format QA set
    python prepare_data.py --action text_formatting --dataset wikicorpus_en
    python prepare_data.py --action text_formatting --dataset my_notes --input_files notes.jsonl
    python prepare_data.py --action sharding --dataset wikicorpus_en --n_training_shards 256
    python prepare_data.py --action vocab --dataset wikicorpus_en --vocab_size 30522  # train WordPiece
    python prepare_data.py --action vocab --vocab_file vocab.txt                      # check one
    python prepare_data.py --action create_tfrecord_files --dataset wikicorpus_en \\
        --vocab_file vocab.txt --max_seq_length 128 --max_predictions_per_seq 20 --n_processes 16
    mpirun -np 4 python prepare_data.py --action create_tfrecord_files ...   # ranks split the shards
    mpirun --hostfile hosts -np 8 python prepare_data.py --action text_formatting ...  # and the input

Every path comes from data/paths.py under --data_dir (default $BERT_DATA_DIR, else
<repo>/data_dir). Every stage is restartable: outputs appear under their final names only when
complete, each output directory has a manifest.json (sha256 and counts per output, and the
parameters), and a re-run skips verified outputs and redoes missing or corrupt ones. Errors a
user can cause end the run with one sentence on stderr and exit status 2.

text_formatting, sharding and create_tfrecord_files also run as MPI ranks (mpirun, on one host
or many sharing the data directory): every rank takes its share with its own
--n_processes workers, and the outputs are byte for byte those of one process. A rank that dies
stops the stage (mpirun ends every rank and names it; a rank that hangs is named by the others
after --rank_timeout_seconds); the same command run again resumes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable

from common import cli
from common.errors import UserError
from common.progress import Progress, summary
from data import paths
from data.settings import PrepSettings
from training.distributed import launched_world

PROG = "prepare_data"
PYTHON_DOCS = "python_docs"
PYTHON_QA = "python_qa"


def define_flags(fv) -> None:
    from absl import flags

    from data.ranks import DEFAULT_TIMEOUT_S

    flag = cli.Flags(fv)

    flag(
        "action",
        "The stage to run: " + "; ".join(f"{name}: {action.help}" for name, action in ACTIONS.items()) + ".",
        list(ACTIONS),
        default=None,
    )
    flag(
        "dataset",
        "wikicorpus_en, squad, glue, google_pretrained_weights, python_docs and python_qa "
        "(download, built offline from the installed Python), or "
        "any name for your own corpus (formatting onwards).",
        str,
        default=paths.DEFAULT_DATASET,
    )
    flag(
        "corpus_mb",
        "download --dataset python_docs: megabytes of text to build from the "
        "installed Python's documentation and docstrings (offline).",
        "positive",
        default=8.0,
    )
    flag(
        "data_dir",
        f"Root of all data (default ${paths.DATA_DIR_ENV} or {paths.DEFAULT_DATA_DIR}).",
        str,
        default=None,
    )
    flag(
        "input_files",
        "Comma-separated inputs: raw corpora (text_formatting) or formatted files "
        "(sharding); default: the dataset's files under --data_dir.",
        str,
        default=None,
    )
    flag(
        "input_format",
        "Corpus format (auto: from the file name).",
        ["auto", "wikipedia", "text", "jsonl"],
        default="auto",
    )
    flag("text_key", "JSONL field holding the document.", str, default="text")
    flag(
        "one_document_per_line",
        "Plain text: every line is a document (default: blank lines separate documents).",
        bool,
        default=False,
    )
    shared = cli.Flags(fv, PrepSettings)  # declared once with scripts/data_download.sh's settings
    shared("n_training_shards")
    shared("n_test_shards")
    shared("fraction_test_set")
    flag(
        "max_sentence_chars", "Sentences longer than this are cut at spaces (counted).", "count", default=2048
    )
    flag("vocab_file", "An existing WordPiece vocab.txt.", str, default=None)
    flag("spm_model_file", "An existing SentencePiece model.", str, default=None)
    flag("vocab_type", "Vocabulary to train.", ["wordpiece", "sentencepiece"], default="wordpiece")
    flag("vocab_size", "Size of a trained vocabulary.", "count", default=30522)
    flag("vocab_min_frequency", "WordPiece training: minimum pair frequency.", "count", default=2)
    flag("unused_tokens", "[unusedN] slots after the specials.", "steps", default=0)
    import create_pretraining_data

    create_pretraining_data.define_instance_flags(
        flag,
        max_seq_length=paths.PHASE1["max_seq_length"],
        max_predictions_per_seq=paths.PHASE1["max_predictions_per_seq"],
        masked_lm_prob=paths.DEFAULT_TFRECORD_PARAMS["masked_lm_prob"],
        random_seed=paths.DEFAULT_TFRECORD_PARAMS["random_seed"],
        dupe_factor=paths.DEFAULT_TFRECORD_PARAMS["dupe_factor"],
    )
    flag(
        "output_dir",
        "create_tfrecord_files: override the output directory named from the parameters.",
        str,
        default=None,
    )
    shared("n_processes")
    flag(
        "rank_timeout_seconds",
        "Under mpirun/srun: a rank waiting for the others stops the stage, naming the rank, when "
        "that rank's heartbeat stood still this long (it died or hangs).",
        "positive",
        default=DEFAULT_TIMEOUT_S,
    )
    flag("verify", "How a re-run checks existing outputs.", ["sha256", "size"], default="sha256")
    flag("glue_tasks", "Comma-separated GLUE tasks, or all.", str, default="all")
    flag("wiki_dump", "Wikipedia dump date (YYYYMMDD) or latest.", str, default="latest")
    flag("google_models", "Google checkpoints to download.", str, default="uncased_L-12_H-768_A-12")
    flag("mirror", "download: replace the scheme and host of every URL.", str, default=None)
    flag("retries", "Download retries.", "steps", default=5)
    flag("timeout", "Download timeout in seconds.", "positive", default=60.0)
    flag(
        "progress",
        "Progress bar on a terminal / periodic lines in logs (--noprogress or --no_progress turns it off).",
        bool,
        default=True,
    )
    flags.mark_flag_as_required("action", flag_values=fv)


def _default_vocab(F, root):
    """--vocab_file / --spm_model_file, else what --action vocab trained for this dataset."""
    if F.vocab_file or F.spm_model_file:
        return F.vocab_file, F.spm_model_file
    from data.corpus import vocab as vocab_stage

    directory = paths.vocab_dir(root, F.dataset)
    for name, is_spm in ((vocab_stage.VOCAB_FILE, False), (vocab_stage.SPM_MODEL_FILE, True)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return (None, path) if is_spm else (path, None)
    raise UserError(
        f"No vocabulary: pass --vocab_file (e.g. Google's vocab.txt) or --spm_model_file, or "
        f"run --action vocab --dataset {F.dataset} to train one into {directory}."
    )


@dataclasses.dataclass(frozen=True)
class Context:
    """What every action derives from the flags and the environment the same way."""

    root: str
    inputs: list
    shard_dir: str
    runtime: object  # data.stage.Runtime: how every stage runs (processes, ranks, verify, progress)


def _build_python_docs(F, ctx: Context) -> dict:
    from data.corpus import stdlib_text

    if F.corpus_mb <= 0:
        raise UserError(f"--corpus_mb must be positive (got {F.corpus_mb}).")
    target = paths.python_docs_file(ctx.root)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isfile(target) and abs(os.path.getsize(target) / 1e6 - F.corpus_mb) < 0.1:
        return {"path": target, "bytes": os.path.getsize(target), "skipped": True}
    with Progress(PYTHON_DOCS, int(F.corpus_mb * 1e6), enabled=F.progress) as progress:
        return {"path": target, **stdlib_text.build_corpus(target, F.corpus_mb, progress=progress)}


def _build_python_qa(F, ctx: Context) -> dict:
    from data.corpus import stdlib_qa

    return stdlib_qa.build_qa_set(paths.python_qa_dir(ctx.root))


# Datasets built offline from the installed Python instead of fetched.
OFFLINE_DATASETS = {PYTHON_DOCS: _build_python_docs, PYTHON_QA: _build_python_qa}


def _download(F, ctx: Context) -> dict:
    if F.dataset in OFFLINE_DATASETS:
        return OFFLINE_DATASETS[F.dataset](F, ctx)
    from data.corpus import download

    options = {}
    if F.dataset == "glue":
        tasks = download.GLUE_TASKS if F.glue_tasks == "all" else tuple(F.glue_tasks.split(","))
        options["glue_tasks"] = tasks
    elif F.dataset == "wikicorpus_en":
        options["wiki_dump"] = F.wiki_dump
    elif F.dataset == "google_pretrained_weights":
        options["google_models"] = tuple(F.google_models.split(","))
    return download.download_dataset(
        F.dataset,
        ctx.root,
        mirror=F.mirror,
        timeout=F.timeout,
        retries=F.retries,
        progress_factory=ctx.runtime.progress_factory,
        **options,
    )


def _text_formatting(F, ctx: Context) -> dict:
    from data.corpus import text_formatting

    inputs = ctx.inputs
    if not inputs and F.dataset == PYTHON_DOCS:
        inputs = [paths.python_docs_file(ctx.root)]
    if not inputs:
        if F.dataset != "wikicorpus_en":
            raise UserError(
                f"Pass --input_files for dataset {F.dataset!r} (plain text, JSONL or a MediaWiki XML dump)."
            )
        inputs = [os.path.join(paths.download_dir(ctx.root, "wikicorpus_en"), "wikicorpus_en.xml.bz2")]
    return text_formatting.format_corpus(
        inputs,
        paths.formatted_file(ctx.root, F.dataset),
        input_format=F.input_format,
        text_key=F.text_key,
        one_document_per_line=F.one_document_per_line,
        runtime=ctx.runtime,
    )


def _sharding(F, ctx: Context) -> dict:
    from data.corpus import sharding

    return sharding.shard_corpus(
        ctx.inputs or [paths.formatted_file(ctx.root, F.dataset)],
        ctx.shard_dir,
        F.dataset,
        n_training_shards=F.n_training_shards,
        n_test_shards=F.n_test_shards,
        fraction_test=F.fraction_test_set,
        max_sentence_chars=F.max_sentence_chars,
        runtime=ctx.runtime,
    )


def _check_vocab(F) -> dict:
    from data.corpus import vocab

    if F.spm_model_file:
        from bert.tokenization import build_tokenizer

        try:
            tokenizer = build_tokenizer(spm_model_file=F.spm_model_file, do_lower_case=F.do_lower_case)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(str(e)) from None
        return {"spm_model_file": F.spm_model_file, "size": tokenizer.vocab_size}
    info = vocab.validate_vocab(F.vocab_file, F.do_lower_case)
    for warning in info["warnings"]:
        print(f"[vocab] warning: {warning}", file=sys.stderr, flush=True)
    return info


def _vocab(F, ctx: Context) -> dict:
    if F.vocab_file or F.spm_model_file:
        return _check_vocab(F)
    import glob

    from data.corpus import vocab

    training = sorted(glob.glob(os.path.join(ctx.shard_dir, "training", "*.txt")))
    if not training:
        raise UserError(
            f"No training shards in {ctx.shard_dir}; run --action sharding first (with the same shard settings)."
        )
    return vocab.build_vocab(
        training,
        paths.vocab_dir(ctx.root, F.dataset),
        kind=F.vocab_type,
        vocab_size=F.vocab_size,
        do_lower_case=F.do_lower_case,
        min_frequency=F.vocab_min_frequency,
        unused_tokens=F.unused_tokens,
        runtime=ctx.runtime,
    )


def _create_tfrecord_files(F, ctx: Context) -> dict:
    from create_pretraining_data import dupe_factor, instance_options
    from data.pretraining.stage import create_tfrecord_files

    vocab_file, spm_model_file = _default_vocab(F, ctx.root)
    output_dir = F.output_dir or paths.tfrecord_dir(
        ctx.root,
        F.dataset,
        do_lower_case=F.do_lower_case,
        max_seq_length=F.max_seq_length,
        max_predictions_per_seq=F.max_predictions_per_seq,
        masked_lm_prob=F.masked_lm_prob,
        random_seed=F.random_seed,
        dupe_factor=dupe_factor(F),
        n_training_shards=F.n_training_shards,
        fraction_test=F.fraction_test_set,
        masking=F.masking,
    )
    return create_tfrecord_files(
        ctx.shard_dir,
        output_dir,
        vocab_file=vocab_file,
        spm_model_file=spm_model_file,
        do_lower_case=F.do_lower_case,
        **instance_options(F),
        runtime=ctx.runtime,
    )


@dataclasses.dataclass(frozen=True)
class Action:
    run: Callable[[object, Context], dict]
    help: str
    uses_mpi_ranks: bool = False


ACTIONS = {
    "download": Action(_download, "fetch and verify a dataset (python_docs, python_qa: build it offline)"),
    "text_formatting": Action(
        _text_formatting, "raw corpus -> one clean document per line", uses_mpi_ranks=True
    ),
    "sharding": Action(
        _sharding, "formatted corpus -> sentence-per-line training and test shards", uses_mpi_ranks=True
    ),
    "vocab": Action(_vocab, "check --vocab_file / --spm_model_file, or train one on the training shards"),
    "create_tfrecord_files": Action(
        _create_tfrecord_files, "every shard -> one pretraining TFRecord file", uses_mpi_ranks=True
    ),
}


def run(F, environ) -> dict:
    from data.stage import Runtime
    from training.distributed import mpi_ranks

    try:
        comm, _, world, local_size = mpi_ranks(environ)
    except RuntimeError as e:
        raise UserError(str(e)) from None
    action = ACTIONS[F.action]
    if world > 1 and not action.uses_mpi_ranks:
        ranked = ", ".join(name for name, a in ACTIONS.items() if a.uses_mpi_ranks)
        raise UserError(f"--action {F.action} runs in one process; {ranked} use MPI ranks.")
    root = paths.data_root(environ, F.data_dir)
    ctx = Context(
        root=root,
        inputs=[p for p in (F.input_files or "").split(",") if p],
        shard_dir=paths.sharded_dir(
            root, F.dataset, F.n_training_shards, F.n_test_shards, F.fraction_test_set
        ),
        runtime=Runtime(
            n_processes=F.n_processes or max(1, (os.cpu_count() or 1) // local_size),
            comm=comm,
            rank_timeout_s=F.rank_timeout_seconds,
            verify=F.verify,
            progress_factory=Progress if F.progress else None,
        ),
    )
    return action.run(F, ctx)


def _spelled_for_absl(argv) -> list:
    # --no_progress is the name NVIDIA's bertPrep users type; absl spells a false bool --noprogress.
    return ["--noprogress" if a == "--no_progress" else a for a in argv]


def parse_flags(argv):
    """The parsed flags of `argv` (without the program name)."""
    return cli.parse(define_flags, [PROG, *_spelled_for_absl(argv)])


def main(argv=None, environ=None) -> int:
    """Runs one stage; argv without the program name (sys.argv[1:] when None)."""
    environ = os.environ if environ is None else environ
    argv = _spelled_for_absl(sys.argv[1:] if argv is None else argv)

    def body(F):
        start = time.monotonic()
        try:
            stats = run(F, environ)
        except UserError as e:
            print(f"[{F.action}] error: {e}", file=sys.stderr, flush=True)
            return 2
        if launched_world(environ)[1] == 0:  # one summary, from the first rank
            stats = {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}
            stats["seconds"] = round(time.monotonic() - start, 2)
            summary(F.action, stats)
        return 0

    return cli.main(define_flags, body, [PROG, *argv], doc=__doc__, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
