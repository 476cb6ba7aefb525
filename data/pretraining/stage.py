"""The TFRecord stage of data preparation: every sentence shard -> one pretraining TFRecord file.

Shards are split over MPI ranks (biggest first to the least-loaded rank) and, within a rank,
over worker processes; each shard gets its own seed (`shard_seed`). Restartable: outputs are
recorded in the output directory's manifest with the sha256 of their input shard, a re-run
skips verified ones, and temporaries of a killed run are removed first.
"""

from __future__ import annotations

import glob
import hashlib
import os
import queue
import re
import sys
import threading
import time

from common.errors import UserError
from common.files import ensure_writable_dir, read_json, remove_stale_temporaries, sha256_file
from data import paths
from data.manifest import Manifest

TFRECORD_STAGE = "create_tfrecord_files"
_SHARD_INDEX = re.compile(r"_(\d+)\.txt$")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shard_seed(random_seed: int, relpath: str) -> int:
    """The seed of one shard: stable under re-runs, different for every shard (sha256 of seed + name).

    Google's script takes one --random_seed per file; with one seed for every shard, all shards
    would draw the same sequence of masks and pairings. To reproduce one output alone, pass the
    `seed` its manifest entry records to `create_pretraining_data.py --random_seed`.
    """
    digest = hashlib.sha256(f"{random_seed}/{relpath}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def list_shards(shard_dir: str) -> list[str]:
    """Relative paths (split/name.txt) of the shard files, training first, in index order."""
    if not os.path.isdir(shard_dir):
        raise UserError(
            f"The shard directory {shard_dir!r} does not exist; run --action sharding first "
            f"(with the same --n_training_shards/--n_test_shards/--fraction_test_set)."
        )
    found = []
    for split in paths.SPLITS:
        files = glob.glob(os.path.join(shard_dir, split, "*.txt"))

        def order(path):
            match = _SHARD_INDEX.search(path)
            return (int(match.group(1)) if match else -1, path)

        found += [f"{split}/{os.path.basename(p)}" for p in sorted(files, key=order)]
    if not found:
        raise UserError(f"No shards (training/*.txt, test/*.txt) in {shard_dir!r}; run --action sharding.")
    return found


def _check_sharding_complete(shard_dir: str) -> None:
    """Refuses shards from an interrupted sharding run (its manifest is not marked complete)."""
    path = os.path.join(shard_dir, "manifest.json")
    if not os.path.isfile(path):
        return  # shards the user made by hand: taken as they are
    try:
        complete = bool(read_json(path, "sharding manifest").get("complete"))
    except (UserError, AttributeError):
        complete = False
    if not complete:
        raise UserError(
            f"Sharding into {shard_dir!r} did not finish (its manifest is not complete); "
            f"re-run --action sharding first."
        )


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
    from data.pretraining.writer import create_training_files

    progress_queue = _WORKER.get("queue")
    if report is None and progress_queue is not None:
        report = progress_queue.put
    try:
        stats = create_training_files(
            [task["input"]], [task["output"]], _WORKER["tokenizer"], progress=report, **task["options"]
        )
    except (OSError, ValueError) as e:
        return task["relpath"], None, f"{task['input']}: {e}"
    return task["relpath"], stats, None


def _remove_leftovers(output_dir: str) -> int:
    """Deletes the temporary files of interrupted runs (common.files names them all alike)."""
    return sum(remove_stale_temporaries(os.path.join(output_dir, split)) for split in paths.SPLITS)


def create_tfrecord_files(
    shard_dir: str,
    output_dir: str,
    *,
    vocab_file: str | None = None,
    spm_model_file: str | None = None,
    do_lower_case: bool = True,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 5,
    random_seed: int = 12345,
    do_whole_word_mask: bool = False,
    n_processes: int = 1,
    rank: int = 0,
    world: int = 1,
    comm=None,
    progress_factory=None,
    verify: str = "sha256",
    log=_log,
) -> dict:
    """Every shard of shard_dir -> output_dir/<split>/<shard>.tfrecord, in parallel, restartable.

    Shards are split over `world` MPI ranks (`comm` is an mpi4py communicator, or None for one
    process) and, within a rank, over `n_processes` worker processes. Returns the summed stats
    of create_training_files plus shards / skipped / failed counts (on every rank).
    """
    import multiprocessing

    from bert.tokenization import build_tokenizer

    if (vocab_file is None) == (spm_model_file is None):
        raise UserError(
            "Give exactly one of --vocab_file or --spm_model_file (or run --action vocab "
            "first so the trained one is found)."
        )
    if n_processes < 1:
        raise UserError(f"--n_processes must be at least 1 (got {n_processes}).")
    if max_seq_length < 5 or max_predictions_per_seq < 1 or not 0 < masked_lm_prob < 1 or dupe_factor < 1:
        raise UserError(
            f"Invalid instance settings: --max_seq_length {max_seq_length} (>= 5), "
            f"--max_predictions_per_seq {max_predictions_per_seq} (>= 1), --masked_lm_prob "
            f"{masked_lm_prob} (in (0, 1)), --dupe_factor {dupe_factor} (>= 1)."
        )
    tokenizer_args = {"vocab_file": vocab_file} if vocab_file else {"spm_model_file": spm_model_file}
    tokenizer_args["do_lower_case"] = do_lower_case
    try:
        # Fails here, once, with the file's name, rather than in every worker.
        build_tokenizer(**tokenizer_args)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None

    _check_sharding_complete(shard_dir)
    relpaths = list_shards(shard_dir)
    for split in paths.SPLITS:
        ensure_writable_dir(os.path.join(output_dir, split), "TFRecord output directory")
    options = {
        "max_seq_length": max_seq_length,
        "max_predictions_per_seq": max_predictions_per_seq,
        "masked_lm_prob": masked_lm_prob,
        "short_seq_prob": short_seq_prob,
        "dupe_factor": dupe_factor,
        "do_whole_word_mask": do_whole_word_mask,
    }
    params = {
        **options,
        "random_seed": random_seed,
        "do_lower_case": do_lower_case,
        "vocab_sha256": sha256_file(vocab_file or spm_model_file),
        "vocab_kind": "wordpiece" if vocab_file else "sentencepiece",
    }

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
        todo.append(
            {
                "relpath": rel,
                "input": os.path.join(shard_dir, rel),
                "output": os.path.join(output_dir, out),
                "options": {**options, "random_seed": shard_seed(random_seed, rel)},
            }
        )
    if skipped:
        log(f"[{TFRECORD_STAGE}] rank {rank}: {skipped} of {len(mine)} outputs verified; skipped.")

    start = time.monotonic()
    failures = []
    total_bytes = sum(os.path.getsize(t["input"]) for t in todo)
    progress = (
        progress_factory(TFRECORD_STAGE if world == 1 else f"{TFRECORD_STAGE}[{rank}]", total_bytes)
        if (progress_factory and todo)
        else None
    )

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
            with ctx.Pool(
                min(n_processes, len(todo)),
                initializer=_tfrecord_worker_init,
                initargs=(tokenizer_args, progress_queue, True),
            ) as pool:
                for rel, stats, error in pool.imap_unordered(_tfrecord_task, todo):
                    finished(rel, stats, error)
        finally:
            stop.set()
            if drainer:
                drainer.join()
    if progress is not None:
        progress.close()

    local = {
        "shards": len(mine),
        "skipped": skipped,
        "done": len(todo) - len(failures),
        "failed": len(failures),
        "seconds": round(time.monotonic() - start, 3),
    }
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
        raise UserError(
            f"{len(errors)} shard(s) failed and were left without output (re-run to retry "
            f"them): " + "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else "")
        )
    manifest = Manifest.load(output_dir, TFRECORD_STAGE, params)  # every rank's records
    if rank == 0 and all(manifest.verified(output_rel(rel), "size") for rel in relpaths):
        manifest.mark_complete()
    totals = manifest.totals(output_rel(rel) for rel in relpaths if output_rel(rel) in manifest.outputs)
    totals.pop("seed", None)
    totals["worker_seconds"] = round(totals.pop("seconds", 0.0), 3)
    return {**totals, **local, "output_dir": output_dir}
