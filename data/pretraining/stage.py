"""The TFRecord stage of data preparation: every sentence shard -> one pretraining TFRecord file.

Shards are split over MPI ranks (biggest first to the least-loaded rank) and, within a rank,
over worker processes; each shard gets its own seed (`shard_seed`). The run takes the steps of
every stage (data/stage.py, over the ranks of data/ranks.py: a rank that dies or hangs is named by
the others, which stop): outputs are recorded in the output directory's manifest with the sha256
of their input shard, a re-run skips verified ones, and temporaries of a killed run are removed
first.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import re
import time

from common.errors import UserError
from common.files import ensure_writable_dir, read_json, sha256_file
from data import paths
from data.corpus.parallel import bounded_imap, report_progress
from data.pretraining.instances import InstanceOptions
from data.pretraining.masking import MASKED_LM_PROB
from data.stage import Run, Runtime, Stage

TFRECORD_STAGE = "create_tfrecord_files"
_SHARD_INDEX = re.compile(r"_(\d+)\.txt$")


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


def _tfrecord_worker_init(tokenizer_args: dict, single_threaded: bool) -> None:
    if single_threaded:
        # One worker per core already fills the machine; the Rust tokenizer's own thread pool
        # in every worker would only oversubscribe it. Must be set before tokenizers is used.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from bert.tokenization import build_tokenizer

    _WORKER["tokenizer"] = build_tokenizer(**tokenizer_args)


def _tfrecord_task(task: dict) -> tuple:
    """One shard -> one TFRecord file. Returns (task, stats or None, error message or None)."""
    from data.pretraining.writer import create_training_files

    try:
        stats = create_training_files(
            [task["input"]],
            [task["output"]],
            _WORKER["tokenizer"],
            progress=report_progress,
            random_seed=task["seed"],
            **task["options"],
        )
    except (OSError, ValueError) as e:
        return task, None, f"{task['input']}: {e}"
    return task, stats, None


def _output_rel(rel: str) -> str:
    return os.path.splitext(rel)[0] + ".tfrecord"


def _input_rel(out: str) -> str:
    return os.path.splitext(out)[0] + ".txt"


def _check_settings(vocab_file, spm_model_file, n_processes, *, masking, **instance_options) -> None:
    if masking not in ("static", "dynamic"):
        raise UserError(f"--masking must be static or dynamic (got {masking!r}).")
    if (vocab_file is None) == (spm_model_file is None):
        raise UserError(
            "Give exactly one of --vocab_file or --spm_model_file (or run --action vocab "
            "first so the trained one is found)."
        )
    if n_processes < 1:
        raise UserError(f"--n_processes must be at least 1 (got {n_processes}).")
    InstanceOptions(**instance_options)  # their kinds and rules, before any worker starts


def _tokenizer_args(vocab_file, spm_model_file, do_lower_case) -> dict:
    """build_tokenizer's arguments for the workers, tried once here so that a bad vocabulary fails
    with the file's name, once, rather than in every worker."""
    from bert.tokenization import build_tokenizer

    args = {"vocab_file": vocab_file} if vocab_file else {"spm_model_file": spm_model_file}
    args["do_lower_case"] = do_lower_case
    try:
        build_tokenizer(**args)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    return args


@dataclasses.dataclass(frozen=True)
class _StageJob:
    """The stage's resolved inputs, the same on every rank."""

    shard_dir: str
    output_dir: str
    relpaths: list  # every shard, split/name.txt
    options: dict  # create_training_files' instance options
    random_seed: int
    tokenizer_args: dict
    runtime: Runtime


def _input_current(job: _StageJob):
    """Whether a recorded output was made from the shard as it is now (its sha256 recorded)."""

    def current(out: str, counts: dict) -> bool:
        recorded = counts.get("input_sha256")
        return recorded is not None and recorded == sha256_file(os.path.join(job.shard_dir, _input_rel(out)))

    return current


def _my_shards(job: _StageJob, run: Run) -> tuple[list, list]:
    """This rank's shards (biggest first to the least-loaded rank, whatever is left to do) and,
    of those, the ones whose outputs are to be written; says how many of its outputs verified."""
    ranks = run.ranks
    mine = assign_to_ranks(job.shard_dir, job.relpaths, ranks.world)[ranks.rank]
    redo = set(run.todo)
    todo = [rel for rel in mine if _output_rel(rel) in redo]
    skipped = len(mine) - len(todo)
    if skipped:
        job.runtime.log(
            f"[{TFRECORD_STAGE}] rank {ranks.rank}: {skipped} of {len(mine)} outputs verified; skipped."
        )
    return mine, todo


def _write_tasks(job: _StageJob, stage: Stage, tasks: list, progress) -> list[str]:
    """Writes the TFRecord files of `tasks` over the runtime's worker processes, recording each in
    the manifest as it lands; returns the error sentences of the shards that failed."""
    # Largest shards first: the last worker to finish is not stuck with a big one.
    tasks = sorted(tasks, key=lambda t: -os.path.getsize(t["input"]))
    workers = min(job.runtime.n_processes, len(tasks))
    failures = []
    for task, stats, error in bounded_imap(
        _tfrecord_task,
        tasks,
        workers,
        chunk=1,
        initializer=_tfrecord_worker_init,
        initargs=(job.tokenizer_args, workers > 1),
        progress=progress,
    ):
        if error is not None:
            failures.append(error)
            continue
        counts = {**stats, "input_sha256": task["input_sha256"], "seed": task["seed"]}
        stage.land({_output_rel(task["relpath"]): counts})
        if stats.get("instances", 0) == 0:
            job.runtime.log(
                f"[{TFRECORD_STAGE}] warning: {task['relpath']} produced no instances (too little text)."
            )
    return failures


def _write_my_shards(job: _StageJob, stage: Stage, run: Run) -> tuple[dict, list]:
    """This rank's share of the work; returns the ranks' counts summed, and every rank's errors
    (the same on every rank)."""
    ranks = run.ranks
    if run.removed:
        job.runtime.log(f"[{TFRECORD_STAGE}] removed {run.removed} temporary file(s) of an interrupted run.")
    mine, todo = _my_shards(job, run)
    start = time.monotonic()
    tasks = [
        {
            "relpath": rel,
            "input": os.path.join(job.shard_dir, rel),
            "output": os.path.join(job.output_dir, _output_rel(rel)),
            "input_sha256": sha256_file(os.path.join(job.shard_dir, rel)),
            "seed": shard_seed(job.random_seed, rel),
            "options": job.options,
        }
        for rel in todo
    ]
    failures = []
    if tasks:
        progress = None
        if job.runtime.progress_factory and ranks.rank == 0:
            name = TFRECORD_STAGE if ranks.world == 1 else f"{TFRECORD_STAGE}[{ranks.rank}]"
            progress = job.runtime.progress_factory(name, sum(os.path.getsize(t["input"]) for t in tasks))
        failures = _write_tasks(job, stage, tasks, progress)
        if progress is not None:
            progress.close()
    local = {
        "shards": len(mine),
        "skipped": len(mine) - len(tasks),
        "done": len(tasks) - len(failures),
        "failed": len(failures),
        "seconds": round(time.monotonic() - start, 3),
    }
    gathered = ranks.allgather((local, failures), "after writing its TFRecord files")
    total = {k: sum(g[0][k] for g in gathered) for k in ("shards", "skipped", "done", "failed")}
    total["seconds"] = max(g[0]["seconds"] for g in gathered)
    return total, [e for _, errors in gathered for e in errors]


def create_tfrecord_files(
    shard_dir: str,
    output_dir: str,
    *,
    vocab_file: str | None = None,
    spm_model_file: str | None = None,
    do_lower_case: bool = True,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    masked_lm_prob: float = MASKED_LM_PROB,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 5,
    random_seed: int = 12345,
    do_whole_word_mask: bool = False,
    masking: str = "static",
    runtime: Runtime | None = None,
    **runtime_fields,
) -> dict:
    """Every shard of shard_dir -> output_dir/<split>/<shard>.tfrecord, in parallel, restartable.

    `runtime` (data.stage.Runtime; its fields may be given alone, e.g. `n_processes=2`) says how:
    shards are split over the MPI ranks of its `comm` (None for one process; a rank silent for
    `rank_timeout_s` is named and the stage stops) and, within a rank, over `n_processes` worker
    processes. Returns the summed stats of create_training_files plus shards / skipped / failed
    counts (on every rank).
    """
    runtime = Runtime.of(runtime, **runtime_fields)
    options = {
        "max_seq_length": max_seq_length,
        "max_predictions_per_seq": max_predictions_per_seq,
        "masked_lm_prob": masked_lm_prob,
        "short_seq_prob": short_seq_prob,
        "dupe_factor": dupe_factor,
        "do_whole_word_mask": do_whole_word_mask,
        "masking": masking,
    }
    _check_settings(vocab_file, spm_model_file, runtime.n_processes, **options)
    tokenizer_args = _tokenizer_args(vocab_file, spm_model_file, do_lower_case)
    _check_sharding_complete(shard_dir)
    relpaths = list_shards(shard_dir)
    for split in paths.SPLITS:
        ensure_writable_dir(os.path.join(output_dir, split), "TFRecord output directory")
    params = {
        # Static records' manifests keep the parameters they had before dynamic masking existed,
        # so that a re-run still finds them verified.
        **{k: v for k, v in options.items() if k != "masking" or v != "static"},
        "random_seed": random_seed,
        "do_lower_case": do_lower_case,
        "vocab_sha256": sha256_file(vocab_file or spm_model_file),
        "vocab_kind": "wordpiece" if vocab_file else "sentencepiece",
    }
    job = _StageJob(shard_dir, output_dir, relpaths, options, random_seed, tokenizer_args, runtime)
    stage = Stage(output_dir, TFRECORD_STAGE, params, runtime)
    outputs = [_output_rel(rel) for rel in relpaths]
    run = stage.run_on_ranks(
        outputs,
        lambda run: _write_my_shards(job, stage, run),
        current=_input_current(job),
        folders=paths.SPLITS,
    )
    if run.skipped:
        _my_shards(job, run)  # each rank says its outputs verified, as when some are redone
        n = len(relpaths)
        counts, errors = {"shards": n, "skipped": n, "done": 0, "failed": 0, "seconds": 0.0}, []
    else:
        counts, errors = run.result
    if errors:
        raise UserError(
            f"{len(errors)} shard(s) failed and were left without output (re-run to retry "
            f"them): " + "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else "")
        )
    totals = stage.manifest.totals(out for out in outputs if out in stage.manifest.outputs)
    totals.pop("seed", None)
    totals["worker_seconds"] = round(totals.pop("seconds", 0.0), 3)
    return {**totals, **counts, "output_dir": output_dir}
