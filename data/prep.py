"""Corpus preparation, NVIDIA's bertPrep made robust: `python -m data.prep --action ACTION`.

    python -m data.prep --action download --dataset wikicorpus_en        # also squad, glue,
                                                                         # google_pretrained_weights
    python -m data.prep --action text_formatting --dataset wikicorpus_en
    python -m data.prep --action text_formatting --dataset my_notes --input_files notes.jsonl
    python -m data.prep --action sharding --dataset wikicorpus_en --n_training_shards 256
    python -m data.prep --action vocab --dataset wikicorpus_en --vocab_size 30522   # train WordPiece
    python -m data.prep --action vocab --vocab_file vocab.txt                       # check one
    python -m data.prep --action create_tfrecord_files --dataset wikicorpus_en \
        --vocab_file vocab.txt --max_seq_length 128 --max_predictions_per_seq 20 --n_processes 16
    mpirun -np 4 python -m data.prep --action create_tfrecord_files ...    # ranks split the shards

Every path comes from data/paths.py under --data_dir (default $BERT_DATA_DIR, else
<repo>/data_dir). Every stage is restartable: outputs appear under their final names only when
complete, each output directory has a manifest.json (sha256 and counts per output, and the
parameters), and a re-run skips verified outputs and redoes missing or corrupt ones. Errors a
user can cause end the run with one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import queue
import re
import sys
import threading
import time

from data import paths
from data.manifest import Manifest, PrepError, ensure_writable_dir, sha256_file
from data.progress import Progress, summary

ACTIONS = ("download", "text_formatting", "sharding", "vocab", "create_tfrecord_files")
TFRECORD_STAGE = "create_tfrecord_files"
_SHARD_INDEX = re.compile(r"_(\d+)\.txt$")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- create_tfrecord_files -----------------------------------------------------------------------
def shard_seed(random_seed: int, relpath: str) -> int:
    """The seed of one shard: stable under re-runs, different for every shard (sha256 of seed + name).

    Google's script takes one --random_seed per file; with one seed for every shard, all shards
    would draw the same sequence of masks and pairings. To reproduce one output alone, pass the
    `seed` its manifest entry records to `python -m data.create_pretraining_data --random_seed`.
    """
    digest = hashlib.sha256(f"{random_seed}/{relpath}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def list_shards(shard_dir: str) -> list[str]:
    """Relative paths (split/name.txt) of the shard files, training first, in index order."""
    if not os.path.isdir(shard_dir):
        raise PrepError(f"The shard directory {shard_dir!r} does not exist; run --action sharding first "
                        f"(with the same --n_training_shards/--n_test_shards/--fraction_test_set).")
    found = []
    for split in paths.SPLITS:
        files = glob.glob(os.path.join(shard_dir, split, "*.txt"))

        def order(path):
            match = _SHARD_INDEX.search(path)
            return (int(match.group(1)) if match else -1, path)

        found += [f"{split}/{os.path.basename(p)}" for p in sorted(files, key=order)]
    if not found:
        raise PrepError(f"No shards (training/*.txt, test/*.txt) in {shard_dir!r}; run --action sharding.")
    return found


def _check_sharding_complete(shard_dir: str) -> None:
    """Refuses shards from an interrupted sharding run (its manifest is not marked complete)."""
    import json

    path = os.path.join(shard_dir, "manifest.json")
    if not os.path.isfile(path):
        return  # shards the user made by hand: taken as they are
    try:
        with open(path, encoding="utf-8") as f:
            complete = bool(json.load(f).get("complete"))
    except (OSError, ValueError):
        complete = False
    if not complete:
        raise PrepError(f"Sharding into {shard_dir!r} did not finish (its manifest is not complete); "
                        f"re-run --action sharding first.")


def assign_to_ranks(shard_dir: str, relpaths: list[str], world: int) -> list[list[str]]:
    """Splits shards over `world` ranks, biggest first to the least-loaded rank (deterministic)."""
    sizes = {rel: os.path.getsize(os.path.join(shard_dir, rel)) for rel in relpaths}
    loads = [[0, r, []] for r in range(world)]
    for rel in sorted(relpaths, key=lambda r: (-sizes[r], r)):
        target = min(loads, key=lambda item: (item[0], item[1]))
        target[0] += sizes[rel]
        target[2].append(rel)
    return [sorted(item[2]) for item in loads]


_WORKER = {}


def _tfrecord_worker_init(tokenizer_args: dict, progress_queue, single_threaded: bool = False) -> None:
    if single_threaded:
        # One worker per core already fills the machine; the Rust tokenizer's own thread pool
        # in every worker would only oversubscribe it. Must be set before tokenizers is used.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from bert.tokenization import build_tokenizer

    _WORKER["tokenizer"] = build_tokenizer(**tokenizer_args)
    _WORKER["queue"] = progress_queue


def _tfrecord_task(task: dict, report=None) -> tuple:
    """One shard -> one TFRecord file. Returns (relpath, stats or None, error message or None).

    Progress goes to `report` (a callable taking input bytes), else to the queue a pool worker
    was given.
    """
    from data.create_pretraining_data import create_training_files

    progress_queue = _WORKER.get("queue")
    if report is None and progress_queue is not None:
        report = progress_queue.put
    try:
        stats = create_training_files([task["input"]], [task["output"]], _WORKER["tokenizer"],
                                      progress=report, **task["options"])
    except (OSError, ValueError) as e:
        return task["relpath"], None, f"{task['input']}: {e}"
    return task["relpath"], stats, None


def _remove_leftovers(output_dir: str) -> int:
    """Deletes temporary files of interrupted runs (ours: *.tmp; the writer's: .NAME.partial-PID)."""
    removed = 0
    for split in paths.SPLITS:
        for pattern in ("*.tmp", ".*.partial-*"):
            for path in glob.glob(os.path.join(output_dir, split, pattern)):
                try:
                    os.remove(path)
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed


def create_tfrecord_files(shard_dir: str, output_dir: str, *, vocab_file: str | None = None,
                          spm_model_file: str | None = None, do_lower_case: bool = True,
                          max_seq_length: int = 128, max_predictions_per_seq: int = 20,
                          masked_lm_prob: float = 0.15, short_seq_prob: float = 0.1, dupe_factor: int = 5,
                          random_seed: int = 12345, do_whole_word_mask: bool = False, n_processes: int = 1,
                          rank: int = 0, world: int = 1, comm=None, progress_factory=None,
                          verify: str = "sha256", log=_log) -> dict:
    """Every shard of shard_dir -> output_dir/<split>/<shard>.tfrecord, in parallel, restartable.

    Shards are split over `world` MPI ranks (`comm` is an mpi4py communicator, or None for one
    process) and, within a rank, over `n_processes` worker processes. Returns the summed stats
    of create_training_files plus shards / skipped / failed counts (on every rank).
    """
    import multiprocessing

    from bert.tokenization import build_tokenizer

    if (vocab_file is None) == (spm_model_file is None):
        raise PrepError("Give exactly one of --vocab_file or --spm_model_file (or run --action vocab "
                        "first so the trained one is found).")
    if n_processes < 1:
        raise PrepError(f"--n_processes must be at least 1 (got {n_processes}).")
    if max_seq_length < 5 or max_predictions_per_seq < 1 or not 0 < masked_lm_prob < 1 or dupe_factor < 1:
        raise PrepError(f"Invalid instance settings: --max_seq_length {max_seq_length} (>= 5), "
                        f"--max_predictions_per_seq {max_predictions_per_seq} (>= 1), --masked_lm_prob "
                        f"{masked_lm_prob} (in (0, 1)), --dupe_factor {dupe_factor} (>= 1).")
    tokenizer_args = ({"vocab_file": vocab_file} if vocab_file else {"spm_model_file": spm_model_file})
    tokenizer_args["do_lower_case"] = do_lower_case
    try:
        # Fails here, once, with the file's name, rather than in every worker.
        build_tokenizer(**tokenizer_args)
    except (FileNotFoundError, ValueError) as e:
        raise PrepError(str(e)) from None

    _check_sharding_complete(shard_dir)
    relpaths = list_shards(shard_dir)
    for split in paths.SPLITS:
        ensure_writable_dir(os.path.join(output_dir, split), "TFRecord output directory")
    options = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq,
               "masked_lm_prob": masked_lm_prob, "short_seq_prob": short_seq_prob,
               "dupe_factor": dupe_factor, "do_whole_word_mask": do_whole_word_mask}
    params = {**options, "random_seed": random_seed, "do_lower_case": do_lower_case,
              "vocab_sha256": sha256_file(vocab_file or spm_model_file),
              "vocab_kind": "wordpiece" if vocab_file else "sentencepiece"}

    # Every rank decides what is left to do from the same files, before anyone writes.
    manifest = Manifest.load(output_dir, TFRECORD_STAGE, params)
    mine = assign_to_ranks(shard_dir, relpaths, world)[rank]
    input_sha = {rel: sha256_file(os.path.join(shard_dir, rel)) for rel in mine}
    if comm is not None:
        comm.Barrier()
    if world > 1:
        manifest = Manifest.load(output_dir, TFRECORD_STAGE, params, part=f"rank{rank}")
    if rank == 0:
        removed = _remove_leftovers(output_dir)
        if removed:
            log(f"[{TFRECORD_STAGE}] removed {removed} temporary file(s) of an interrupted run.")
    if comm is not None:
        comm.Barrier()

    def output_rel(rel):
        return os.path.splitext(rel)[0] + ".tfrecord"

    todo, skipped = [], 0
    for rel in mine:
        out = output_rel(rel)
        if manifest.verified(out, verify) and manifest.counts(out).get("input_sha256") == input_sha[rel]:
            skipped += 1
            continue
        manifest.forget(out)
        todo.append({"relpath": rel, "input": os.path.join(shard_dir, rel),
                     "output": os.path.join(output_dir, out),
                     "options": {**options, "random_seed": shard_seed(random_seed, rel)}})
    if skipped:
        log(f"[{TFRECORD_STAGE}] rank {rank}: {skipped} of {len(mine)} outputs verified; skipped.")

    start = time.monotonic()
    failures = []
    total_bytes = sum(os.path.getsize(t["input"]) for t in todo)
    progress = progress_factory(TFRECORD_STAGE if world == 1 else f"{TFRECORD_STAGE}[{rank}]",
                                total_bytes) if (progress_factory and todo) else None

    def finished(rel, stats, error):
        out = output_rel(rel)
        if error is not None:
            failures.append(error)
            return
        counts = {**stats, "input_sha256": input_sha[rel], "seed": shard_seed(random_seed, rel)}
        manifest.record(out, counts)
        if stats.get("instances", 0) == 0:
            log(f"[{TFRECORD_STAGE}] warning: {rel} produced no instances (too little text).")

    if todo and n_processes == 1:
        _tfrecord_worker_init(tokenizer_args, None)
        for task in todo:
            finished(*_tfrecord_task(task, progress))
    elif todo:
        ctx = multiprocessing.get_context("spawn")
        progress_queue = ctx.Queue() if progress else None
        stop = threading.Event()

        def drain():
            while not stop.is_set() or not progress_queue.empty():
                try:
                    progress.update(progress_queue.get(timeout=0.1))
                except queue.Empty:
                    continue

        drainer = threading.Thread(target=drain, daemon=True) if progress else None
        if drainer:
            drainer.start()
        # Largest shards first: the last process to finish is not stuck with a big one.
        todo.sort(key=lambda t: -os.path.getsize(t["input"]))
        try:
            with ctx.Pool(min(n_processes, len(todo)), initializer=_tfrecord_worker_init,
                          initargs=(tokenizer_args, progress_queue, True)) as pool:
                for rel, stats, error in pool.imap_unordered(_tfrecord_task, todo):
                    finished(rel, stats, error)
        finally:
            stop.set()
            if drainer:
                drainer.join()
    if progress is not None:
        progress.close()

    local = {"shards": len(mine), "skipped": skipped, "done": len(todo) - len(failures),
             "failed": len(failures), "seconds": round(time.monotonic() - start, 3)}
    errors = failures
    if comm is not None:
        gathered = comm.allgather((local, failures))
        errors = [e for _, errs in gathered for e in errs]
        comm.Barrier()
        if rank == 0:
            manifest.merge_parts()
        comm.Barrier()
        local = {k: sum(g[0][k] for g in gathered) for k in ("shards", "skipped", "done", "failed")}
        local["seconds"] = max(g[0]["seconds"] for g in gathered)
    if errors:
        raise PrepError(f"{len(errors)} shard(s) failed and were left without output (re-run to retry "
                        f"them): " + "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else ""))
    manifest = Manifest.load(output_dir, TFRECORD_STAGE, params)  # every rank's records
    if rank == 0 and all(manifest.verified(output_rel(rel), "size") for rel in relpaths):
        manifest.mark_complete()
    totals = manifest.totals(output_rel(rel) for rel in relpaths if output_rel(rel) in manifest.outputs)
    totals.pop("seed", None)
    totals["worker_seconds"] = round(totals.pop("seconds", 0.0), 3)
    return {**totals, **local, "output_dir": output_dir}


# --- command line --------------------------------------------------------------------------------
def _mpi_context(environ):
    """(comm, rank, world, local_size): mpi4py only when the environment says we run under MPI."""
    world = int(environ.get("OMPI_COMM_WORLD_SIZE") or environ.get("PMI_SIZE") or 1)
    if world <= 1:
        return None, 0, 1, 1
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise PrepError(f"Launched under MPI ({world} ranks) but mpi4py cannot be imported ({e}); "
                        f"install it (bash scripts/setup.sh) or run without mpirun.") from None
    comm = MPI.COMM_WORLD
    local = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or environ.get("MPI_LOCALNRANKS") or 1)
    return comm, comm.Get_rank(), comm.Get_size(), local


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data.prep", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--action", required=True, choices=ACTIONS)
    p.add_argument("--dataset", default=paths.DEFAULT_DATASET,
                   help="wikicorpus_en, squad, glue, google_pretrained_weights (download), or any name "
                        "for your own corpus (formatting onwards)")
    p.add_argument("--data_dir", default=None, help=f"root of all data (default ${paths.DATA_DIR_ENV} or "
                                                    f"{paths.DEFAULT_DATA_DIR})")
    p.add_argument("--input_files", default=None,
                   help="comma-separated inputs: raw corpora (text_formatting) or formatted files "
                        "(sharding); default: the dataset's files under --data_dir")
    p.add_argument("--input_format", default="auto", choices=("auto", "wikipedia", "text", "jsonl"))
    p.add_argument("--text_key", default="text", help="JSONL field holding the document")
    p.add_argument("--one_document_per_line", action="store_true",
                   help="plain text: every line is a document (default: blank lines separate documents)")
    p.add_argument("--n_training_shards", type=int, default=paths.DEFAULT_TRAINING_SHARDS)
    p.add_argument("--n_test_shards", type=int, default=paths.DEFAULT_TEST_SHARDS)
    p.add_argument("--fraction_test_set", type=float, default=paths.DEFAULT_FRACTION_TEST)
    p.add_argument("--max_sentence_chars", type=int, default=2048,
                   help="sentences longer than this are cut at spaces (counted)")
    p.add_argument("--vocab_file", default=None, help="an existing WordPiece vocab.txt")
    p.add_argument("--spm_model_file", default=None, help="an existing SentencePiece model")
    p.add_argument("--vocab_type", default="wordpiece", choices=("wordpiece", "sentencepiece"))
    p.add_argument("--vocab_size", type=int, default=30522)
    p.add_argument("--vocab_min_frequency", type=int, default=2)
    p.add_argument("--unused_tokens", type=int, default=0, help="[unusedN] slots after the specials")
    p.add_argument("--do_lower_case", type=int, default=1, choices=(0, 1))
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--max_predictions_per_seq", type=int, default=20)
    p.add_argument("--masked_lm_prob", type=float, default=0.15)
    p.add_argument("--short_seq_prob", type=float, default=0.1)
    p.add_argument("--random_seed", type=int, default=12345)
    p.add_argument("--dupe_factor", type=int, default=5)
    p.add_argument("--do_whole_word_mask", action="store_true")
    p.add_argument("--output_dir", default=None, help="create_tfrecord_files: override the output "
                                                      "directory named from the parameters")
    p.add_argument("--n_processes", type=int, default=None, help="default: all cores (per MPI rank: "
                                                                 "cores / ranks on the node)")
    p.add_argument("--verify", default="sha256", choices=("sha256", "size"),
                   help="how a re-run checks existing outputs")
    p.add_argument("--glue_tasks", default="all", help="comma-separated GLUE tasks, or all")
    p.add_argument("--wiki_dump", default="latest", help="Wikipedia dump date (YYYYMMDD) or latest")
    p.add_argument("--google_models", default="uncased_L-12_H-768_A-12")
    p.add_argument("--mirror", default=None, help="download: replace the scheme and host of every URL")
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--no_progress", action="store_true", help="no progress bar / periodic lines")
    return p


def _default_vocab(args, root):
    """--vocab_file / --spm_model_file, else what --action vocab trained for this dataset."""
    if args.vocab_file or args.spm_model_file:
        return args.vocab_file, args.spm_model_file
    from data import vocab as vocab_stage

    directory = paths.vocab_dir(root, args.dataset)
    for name, is_spm in ((vocab_stage.VOCAB_FILE, False), (vocab_stage.SPM_MODEL_FILE, True)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return (None, path) if is_spm else (path, None)
    raise PrepError(f"No vocabulary: pass --vocab_file (e.g. Google's vocab.txt) or --spm_model_file, or "
                    f"run --action vocab --dataset {args.dataset} to train one into {directory}.")


def run(args, environ) -> dict:
    root = paths.data_root(environ, args.data_dir)
    comm, rank, world, local_size = _mpi_context(environ)
    n_processes = args.n_processes or max(1, (os.cpu_count() or 1) // local_size)
    progress_factory = None
    if not args.no_progress:
        def progress_factory(desc, total):
            return Progress(desc, total)
    inputs = [p for p in (args.input_files or "").split(",") if p]
    shard_dir = paths.sharded_dir(root, args.dataset, args.n_training_shards, args.n_test_shards,
                                  args.fraction_test_set)
    action = args.action
    if action != "create_tfrecord_files" and world > 1:
        raise PrepError(f"--action {action} runs in one process; only create_tfrecord_files uses MPI ranks.")

    if action == "download":
        from data import download

        options = {}
        if args.dataset == "glue":
            tasks = download.GLUE_TASKS if args.glue_tasks == "all" else tuple(args.glue_tasks.split(","))
            options["glue_tasks"] = tasks
        elif args.dataset == "wikicorpus_en":
            options["wiki_dump"] = args.wiki_dump
        elif args.dataset == "google_pretrained_weights":
            options["google_models"] = tuple(args.google_models.split(","))
        return download.download_dataset(args.dataset, root, mirror=args.mirror, timeout=args.timeout,
                                         retries=args.retries, progress_factory=progress_factory,
                                         **options)

    if action == "text_formatting":
        from data import text_formatting

        if not inputs:
            if args.dataset != "wikicorpus_en":
                raise PrepError(f"Pass --input_files for dataset {args.dataset!r} (plain text, JSONL or a "
                                f"MediaWiki XML dump).")
            inputs = [os.path.join(paths.download_dir(root, "wikicorpus_en"), "wikicorpus_en.xml.bz2")]
        return text_formatting.format_corpus(
            inputs, paths.formatted_file(root, args.dataset), input_format=args.input_format,
            n_processes=n_processes, text_key=args.text_key, one_document_per_line=args.one_document_per_line,
            progress_factory=progress_factory, verify=args.verify)

    if action == "sharding":
        from data import sharding

        return sharding.shard_corpus(
            inputs or [paths.formatted_file(root, args.dataset)], shard_dir, args.dataset,
            n_training_shards=args.n_training_shards, n_test_shards=args.n_test_shards,
            fraction_test=args.fraction_test_set, n_processes=n_processes,
            max_sentence_chars=args.max_sentence_chars, progress_factory=progress_factory, verify=args.verify)

    if action == "vocab":
        from data import vocab

        if args.vocab_file or args.spm_model_file:
            if args.spm_model_file:
                from bert.tokenization import build_tokenizer
                try:
                    tokenizer = build_tokenizer(spm_model_file=args.spm_model_file,
                                                do_lower_case=bool(args.do_lower_case))
                except (FileNotFoundError, ValueError) as e:
                    raise PrepError(str(e)) from None
                return {"spm_model_file": args.spm_model_file, "size": tokenizer.vocab_size}
            info = vocab.validate_vocab(args.vocab_file, bool(args.do_lower_case))
            for warning in info["warnings"]:
                _log(f"[vocab] warning: {warning}")
            return info
        training = sorted(glob.glob(os.path.join(shard_dir, "training", "*.txt")))
        if not training:
            raise PrepError(f"No training shards in {shard_dir}; run --action sharding first (with the "
                            f"same shard settings).")
        return vocab.build_vocab(training, paths.vocab_dir(root, args.dataset), kind=args.vocab_type,
                                 vocab_size=args.vocab_size, do_lower_case=bool(args.do_lower_case),
                                 min_frequency=args.vocab_min_frequency, unused_tokens=args.unused_tokens,
                                 verify=args.verify)

    # create_tfrecord_files
    vocab_file, spm_model_file = _default_vocab(args, root)
    output_dir = args.output_dir or paths.tfrecord_dir(
        root, args.dataset, do_lower_case=bool(args.do_lower_case), max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, masked_lm_prob=args.masked_lm_prob,
        random_seed=args.random_seed, dupe_factor=args.dupe_factor,
        n_training_shards=args.n_training_shards, fraction_test=args.fraction_test_set)
    return create_tfrecord_files(
        shard_dir, output_dir, vocab_file=vocab_file, spm_model_file=spm_model_file,
        do_lower_case=bool(args.do_lower_case), max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob, dupe_factor=args.dupe_factor, random_seed=args.random_seed,
        do_whole_word_mask=args.do_whole_word_mask, n_processes=n_processes, rank=rank, world=world,
        comm=comm, progress_factory=progress_factory if rank == 0 or world == 1 else None,
        verify=args.verify)


def main(argv=None, environ=None) -> int:
    args = build_parser().parse_args(argv)
    environ = os.environ if environ is None else environ
    start = time.monotonic()
    try:
        stats = run(args, environ)
    except PrepError as e:
        print(f"[{args.action}] error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"[{args.action}] interrupted; completed outputs are kept, re-run to continue.",
              file=sys.stderr, flush=True)
        return 130
    rank = int(environ.get("OMPI_COMM_WORLD_RANK") or environ.get("PMI_RANK") or 0)
    if rank == 0:
        stats = {k: v for k, v in stats.items() if not isinstance(v, (dict, list))}
        stats["seconds"] = round(time.monotonic() - start, 2)
        summary(args.action, stats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
