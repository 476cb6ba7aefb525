"""Training checkpoints: Google-named, atomic, resumable exactly, the last few kept.

Layout of an output directory (rank 0 writes everything but the worker states):

    checkpoint                      TF's index: tf.train.latest_checkpoint(output_dir) reads it
    ckpt-<step>.index / .data-*     weights under Google's names (bert/encoder/layer_0/...,
                                    cls/predictions/...), optimizer slots as <name>/adam_m and
                                    <name>/adam_v (NVIDIA's names), global_step, and
                                    training_state/* (optimizer iterations, loss scale, the
                                    sequences of the data order consumed, the global batch, the
                                    worker count and the one the learning rate was scaled for)
    worker_state/ckpt-<step>-rank-<r>-of-<n>/
                                    each worker's dropout seed state
    ckpt-<step>.manifest.json       the record: every file above of that step with its size,
                                    written once they all read back (bert/checkpoints.py)
    damaged/ckpt-<step>[.<n>]/      a damaged checkpoint's files, set aside by the run that found it

Google's and NVIDIA's tools read ckpt-<step> as a BERT checkpoint (they skip the slots and
global_step as they do in their own).

A checkpoint is trusted only once verified. A save writes every file (all workers' states
included), reads every tensor back (TensorFlow checks each one's crc32c), and only then writes
its record, then the `checkpoint` index, and only then deletes the checkpoints past `keep`: the
newest intact one is never deleted for one that is not yet verified. A run killed in the middle
of a save resumes from the previous one; files are written through temporaries that
common.files.remove_stale_temporaries clears, and a save's files without a record are cleared
before training. On resume the newest checkpoint whose files all have their recorded size and
whose tensors all read back is used; a damaged newer one is named in one sentence and set aside
under damaged/ (renamed, never deleted); none intact is a UserError. Every worker verifies the
same files and so picks the same checkpoint (loop.resume checks that they agree). A save that
cannot be written (no space, a read-only or vanished directory, no permission) is a StorageError
naming the directory, the bytes needed and free, and the last intact checkpoint; it leaves
nothing of itself behind.

Keras 3 keeps dropout's seed-generator state in model.variables but not in model.weights, under
names from a per-process counter (seed_generator_12/...): it is saved here as dropout_seed_<i>, in
the model's own variable order, which does not depend on what else the process built before.

The input position is one number for all workers (training/data_order.py), so a checkpoint
resumes on another worker count: the job keeps its global batch (`read_run_state` tells it what
that was before anything is built); rank r takes rank r's dropout seeds when the writing run had
one, and keeps its fresh ones otherwise.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
import re
import shutil
import sys

import numpy as np
import tensorflow as tf

from bert.checkpoints import (
    BERT_CONFIG_NAME,
    RECORD_SUFFIX,
    TRAINING_STATE_PREFIX,
    CheckpointDamagedError,
    bundle_files,
    checkpoint_problem,
    checkpoint_record_path,
    model_variables,
    seal_checkpoint,
    write_checkpoint_index,
    write_tf_checkpoint,
)
from common.errors import StorageError, UserError
from common.files import atomic_path, describe_write_error, remove_stale_temporaries, write_error_number
from training.distributed import Distributed

INDEX_NAME = "checkpoint"
WORKER_STATE_DIR = "worker_state"
DAMAGED_DIR = "damaged"  # damaged checkpoints, set aside by the run that found them
STATE_PREFIX = TRAINING_STATE_PREFIX  # bert/checkpoints.py's loaders skip what is under it
_CHECKPOINT = re.compile(r"^ckpt-(\d+)$")
_CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)(\.index|\.data-\d+-of-\d+|" + re.escape(RECORD_SUFFIX) + ")$")
WORKERS_KEY = STATE_PREFIX + "num_workers"
SEQUENCES_KEY = STATE_PREFIX + "sequences_consumed"
GLOBAL_BATCH_KEY = STATE_PREFIX + "global_batch_size"
LEARNING_RATE_WORKERS_KEY = STATE_PREFIX + "learning_rate_workers"

# Optimizer slot lists (one slot per trainable variable, same order) and their checkpoint names.
_SLOT_LISTS = (("_m", "adam_m"), ("_v", "adam_v"), ("_momentums", "adam_m"), ("_velocities", "adam_v"))


def weight_names(model) -> dict:
    """{checkpoint name: variable} for every weight of `model`: Google's names where
    bert.checkpoints knows them (encoder, MLM and NSP heads), the Keras path otherwise (a
    fine-tuning head)."""
    names = model_variables(model)
    known = {id(v) for v in names.values()}
    for variable in model.weights:
        if id(variable) not in known:
            names[variable.path] = variable
    return names


def dropout_seed_variables(model) -> dict:
    """{dropout_seed_<i>: seed-generator state} for the variables of `model` that are not weights."""
    weights = {id(v) for v in model.weights}
    return {f"dropout_seed_{i}": v for i, v in enumerate(v for v in model.variables if id(v) not in weights)}


def optimizer_names(optimizer, trainable_variables, names_by_id: dict) -> dict:
    """{checkpoint name: variable} for an optimizer's state: slots as <weight name>/adam_m and
    /adam_v, iterations and anything else under training_state/optimizer/."""
    names, claimed = {}, set()
    for attribute, suffix in _SLOT_LISTS:
        slots = getattr(optimizer, attribute, None)
        if isinstance(slots, list) and len(slots) == len(trainable_variables):
            for variable, slot in zip(trainable_variables, slots):
                names[f"{names_by_id[id(variable)]}/{suffix}"] = slot
                claimed.add(id(slot))
    names[STATE_PREFIX + "optimizer/iterations"] = optimizer.iterations
    claimed.add(id(optimizer.iterations))
    for i, variable in enumerate(optimizer.variables):
        if id(variable) not in claimed:
            names[f"{STATE_PREFIX}optimizer/{i}"] = variable
    return names


def checkpoint_step(prefix: str) -> int:
    match = _CHECKPOINT.match(os.path.basename(prefix))
    if not match:
        raise ValueError(f"{prefix} is not a ckpt-<step> checkpoint.")
    return int(match.group(1))


_INDEX_LINE = re.compile(r'^\s*(\w+)\s*:\s*(?:"((?:[^"\\]|\\.)*)"|[-+0-9.eE]+)\s*$')


def read_index(output_dir: str) -> tuple[list[str] | None, bool]:
    """(the checkpoint names TF's `checkpoint` index of `output_dir` lists, latest last; whether it
    could be read). No index: (None, True). Parsed here rather than by tf.train.get_checkpoint_state,
    which logs a warning and says nothing when the file is damaged."""
    path = os.path.join(output_dir, INDEX_NAME)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None, True
    except (OSError, UnicodeDecodeError):
        return None, False
    from google.protobuf import text_encoding

    latest, listed = None, []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _INDEX_LINE.match(line)
        if not match:
            return None, False
        key, value = match.group(1), match.group(2)
        if key in ("model_checkpoint_path", "all_model_checkpoint_paths"):
            if value is None:
                return None, False
            value = text_encoding.CUnescape(value).decode("utf-8", "replace")
            if key == "model_checkpoint_path":
                latest = value
            else:
                listed.append(value)
    if latest is None:
        return None, False
    if latest in listed:
        listed.remove(latest)
    return listed + [latest], True


def _in_dir(output_dir: str, name: str) -> str:
    """An index entry as a prefix under output_dir (TF writes names, other tools absolute paths)."""
    if os.path.isabs(name) and os.path.dirname(name) == os.path.abspath(output_dir):
        name = os.path.basename(name)
    return name if os.path.isabs(name) else os.path.join(output_dir, name)


def _order(prefix: str) -> int:
    match = re.search(r"-(\d+)$", os.path.basename(prefix))
    return int(match.group(1)) if match else -1


def _recorded(output_dir: str) -> list[str]:
    found = glob.glob(os.path.join(glob.escape(output_dir), "ckpt-*" + RECORD_SUFFIX))
    prefixes = [p[: -len(RECORD_SUFFIX)] for p in found]
    return [p for p in prefixes if _CHECKPOINT.match(os.path.basename(p))]


def _candidates(output_dir: str) -> list[str]:
    """Every checkpoint of output_dir that a resume may consider, oldest first: those with a record,
    those the index lists (a record may be missing from one written before records existed), and,
    when the index cannot be read in a directory without records, every ckpt-*.index on disk."""
    if not os.path.isdir(output_dir):
        return []
    recorded = _recorded(output_dir)
    listed, readable = read_index(output_dir)
    if not readable and not recorded:
        listed = [
            p[: -len(".index")] for p in glob.glob(os.path.join(glob.escape(output_dir), "ckpt-*.index"))
        ]
    prefixes = {}
    for prefix in [_in_dir(output_dir, n) for n in listed or []] + recorded:
        prefixes.setdefault(os.path.abspath(prefix), prefix)
    return sorted(prefixes.values(), key=_order)


def committed_checkpoints(output_dir: str) -> list[str]:
    """Prefixes of the finished checkpoints of `output_dir` (a record, or an index entry with its
    files), oldest first, verified or not."""
    return [
        p
        for p in _candidates(output_dir)
        if os.path.isfile(checkpoint_record_path(p)) or os.path.isfile(p + ".index")
    ]


def newest_intact(output_dir: str) -> tuple[str | None, list[tuple[str, str]]]:
    """(the newest intact checkpoint of `output_dir` or None, [(prefix, what is wrong)] of the
    damaged ones newer than it, newest first). Checkpoints are verified newest first
    (bert.checkpoints.checkpoint_problem) until one is intact."""
    damaged = []
    for prefix in reversed(_candidates(output_dir)):
        problem = checkpoint_problem(prefix)
        if problem is None:
            return prefix, damaged
        damaged.append((prefix, problem))
    return None, damaged


def _none_intact(output_dir: str, damaged) -> UserError:
    listing = "; ".join(f"{os.path.basename(p)}: {problem}" for p, problem in damaged)
    return UserError(
        f"No checkpoint in {output_dir} is intact ({listing}): restore their files, or move them "
        "away to start afresh, and re-run."
    )


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest intact checkpoint of `output_dir` (damaged newer ones are passed over: the
    Checkpointer of the run sets them aside and says so), or None when it holds none. A directory
    whose checkpoints are all damaged is a UserError naming each and what is wrong."""
    latest, damaged = newest_intact(output_dir)
    if latest is None and damaged:
        raise _none_intact(output_dir, damaged)
    return latest


@dataclasses.dataclass(frozen=True)
class RunState:
    """What a checkpoint says about the run that wrote it (None: not recorded)."""

    prefix: str
    step: int
    workers: int
    global_batch_size: int | None
    learning_rate_workers: int | None
    sequences: int


def read_run_state(prefix: str) -> RunState:
    """The RunState of checkpoint `prefix`, read without building anything. A checkpoint that is
    not this trainer's, or an older one without a data position, is a UserError."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    for key, what in (
        (WORKERS_KEY, "is not a checkpoint of this trainer"),
        (SEQUENCES_KEY, "has no data position (an older version wrote it)"),
    ):
        if key not in shapes:
            raise UserError(
                f"{prefix} {what}: it lacks {key}; to start from its weights use a new "
                "--output_dir and --init_checkpoint."
            )

    def value(key):
        return int(reader.get_tensor(key)) if key in shapes else None

    return RunState(
        prefix,
        checkpoint_step(prefix),
        value(WORKERS_KEY),
        value(GLOBAL_BATCH_KEY),
        value(LEARNING_RATE_WORKERS_KEY),
        value(SEQUENCES_KEY),
    )


def _print_to_stderr(sentence: str) -> None:
    print(sentence, file=sys.stderr, flush=True)


# What a failed write raises: the OS's errors, and TensorFlow's (SaveV2's ResourceExhaustedError
# "No space left on device", PermissionDeniedError, NotFoundError, ...).
_WRITE_ERRORS = (OSError, tf.errors.OpError)


class Checkpointer:
    """Saves and restores everything that decides a run's future.

    step: the TrainStep (its model, optimizer and loss scale). position: the data order's
    training.data_order.Position (its `sequences` saved, its `restored` checked at restore), or None.
    update: the job's training.update.Update (its global batch and learning-rate worker count saved
    for a resume on another worker count), or None. keep: how many checkpoints to keep (the newest).
    log: where rank 0's sentences about damaged checkpoints go (stderr by default).
    """

    def __init__(
        self,
        output_dir: str,
        step,
        position=None,
        *,
        update=None,
        keep: int = 5,
        distributed: Distributed | None = None,
        log=None,
    ):
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (got {keep}).")
        self.output_dir = output_dir
        self.keep = keep
        self.position = position
        self.update = update
        self.distributed = distributed or Distributed(use_horovod=False)
        self.log = log or _print_to_stderr
        self._verified = None  # the checkpoint this run last wrote and read back, or restored
        model = step.model
        weights = weight_names(model)
        by_id = {id(v): name for name, v in weights.items()}
        self.variables = {
            **weights,
            **optimizer_names(step.optimizer, step.variables, by_id),
            **{
                f"{STATE_PREFIX}loss_scale/{n}": v
                for n, v in zip(("scale", "good_steps", "skipped_steps"), step.loss_scale.variables)
            },
        }
        self._worker_variables = {
            name: getattr(v, "value", v) for name, v in dropout_seed_variables(model).items()
        }
        self._worker_checkpoint = tf.train.Checkpoint(**self._worker_variables)

    # --- where things are -------------------------------------------------------------------

    def _worker_state_dir(self, step: int, rank: int, workers: int) -> str:
        return os.path.join(self.output_dir, WORKER_STATE_DIR, f"ckpt-{step}-rank-{rank}-of-{workers}")

    def committed(self) -> list[str]:
        return committed_checkpoints(self.output_dir)

    def latest(self) -> str | None:
        """The newest intact checkpoint, or None (never an error: the sentences that name the last
        good checkpoint ask here)."""
        return newest_intact(self.output_dir)[0]

    # --- before training --------------------------------------------------------------------

    def remove_leftovers(self) -> None:
        """Rank 0, before training: clears temporaries of a killed save and the files of a save
        killed before its record, sets aside (under damaged/) every damaged checkpoint newer than
        the newest intact one, saying so, and rewrites the index when it cannot be read or names
        other checkpoints than those on disk. A directory with no intact checkpoint among damaged
        ones is a UserError, and nothing is moved."""
        if not self.distributed.is_chief or not os.path.isdir(self.output_dir):
            return
        remove_stale_temporaries(self.output_dir)
        workers_dir = os.path.join(self.output_dir, WORKER_STATE_DIR)
        if os.path.isdir(workers_dir):
            remove_stale_temporaries(workers_dir)
        latest, damaged = newest_intact(self.output_dir)
        if latest is None and damaged:
            raise _none_intact(self.output_dir, damaged)
        for prefix, problem in damaged:
            where = self._set_aside(prefix)
            self.log(
                f"Checkpoint {prefix} is damaged ({problem}): set aside as {where}; continuing from "
                f"{latest}, the newest intact checkpoint."
            )
        committed = self.committed()
        listed, readable = read_index(self.output_dir)
        if committed and [os.path.basename(p) for p in committed] != [
            os.path.basename(p) for p in listed or []
        ]:
            write_checkpoint_index(self.output_dir, committed)
            if not readable:
                self.log(
                    f"The checkpoint index {os.path.join(self.output_dir, INDEX_NAME)} could not be read: "
                    f"rewritten from the checkpoints' records (the newest intact is {latest})."
                )
        kept = {checkpoint_step(p) for p in committed if _CHECKPOINT.match(os.path.basename(p))}
        for step in self._steps_on_disk() - kept:
            self._delete(step)

    def _set_aside(self, prefix: str) -> str:
        """Moves the files of damaged checkpoint `prefix` (its record first, then its bundle and
        its workers' states) into damaged/<name>[.<n>]/; returns that folder."""
        name = os.path.basename(prefix)
        target = os.path.join(self.output_dir, DAMAGED_DIR, name)
        n = 1
        while os.path.lexists(target):
            n += 1
            target = os.path.join(self.output_dir, DAMAGED_DIR, f"{name}.{n}")
        os.makedirs(target)
        record = checkpoint_record_path(prefix)
        for path in ([record] if os.path.lexists(record) else []) + bundle_files(prefix):
            os.replace(path, os.path.join(target, os.path.basename(path)))
        match = _CHECKPOINT.match(name)
        states = glob.glob(os.path.join(glob.escape(self.output_dir), WORKER_STATE_DIR, f"{name}-rank-*"))
        for path in states if match else []:
            os.makedirs(os.path.join(target, WORKER_STATE_DIR), exist_ok=True)
            os.replace(path, os.path.join(target, WORKER_STATE_DIR, os.path.basename(path)))
        return target

    # --- saving -----------------------------------------------------------------------------

    def save(self, step: int) -> str:
        """Writes ckpt-<step> and this worker's state, has rank 0 read it all back and record it,
        then deletes the checkpoints past `keep`; every worker must call it at the same step.
        Returns the checkpoint prefix. A write that fails on any worker is a StorageError on every
        worker, and the save leaves nothing behind."""
        d = self.distributed
        prefix = os.path.join(self.output_dir, f"ckpt-{step}")
        arrays = self._arrays(step) if d.is_chief else {}
        needed = sum(a.nbytes for a in arrays.values()) + sum(
            np.asarray(v.numpy()).nbytes for v in self._worker_variables.values()
        )
        error = None
        try:
            self._write(step, prefix, arrays)
        except _WRITE_ERRORS as e:
            error = e
        # Every worker's state is on disk (or every worker knows that a write failed) before rank
        # 0 reads them back and records the checkpoint.
        if d.any(error is not None):
            raise self._failed(step, error, needed)
        if d.is_chief:
            try:
                self._commit(step, prefix)
            except (*_WRITE_ERRORS, CheckpointDamagedError) as e:
                error = e
        # No worker goes on before the checkpoint is recorded and the index names it: a worker that
        # looks for the latest one next (a run started again in the same process) must find the
        # one rank 0 finds.
        if d.any(error is not None):
            raise self._failed(step, error, needed)
        self._verified = prefix
        return prefix

    def _arrays(self, step: int) -> dict:
        d = self.distributed
        arrays = {name: np.asarray(v.numpy()) for name, v in self.variables.items()}
        arrays["global_step"] = np.asarray(step, np.int64)
        arrays[WORKERS_KEY] = np.asarray(d.size, np.int64)
        arrays[SEQUENCES_KEY] = np.asarray(self.position.sequences if self.position else 0, np.int64)
        if self.update is not None:
            arrays[GLOBAL_BATCH_KEY] = np.asarray(self.update.global_batch_size, np.int64)
            arrays[LEARNING_RATE_WORKERS_KEY] = np.asarray(self.update.scaled_for_workers, np.int64)
        return arrays

    def _write(self, step: int, prefix: str, arrays: dict) -> None:
        """This worker's state, and on rank 0 the checkpoint's weights and training state."""
        if not os.path.isdir(self.output_dir):  # never re-created here: its checkpoints went with it
            raise FileNotFoundError(errno.ENOENT, "the directory no longer exists", self.output_dir)
        d = self.distributed
        state_dir = self._worker_state_dir(step, d.rank, d.size)
        os.makedirs(os.path.dirname(state_dir), exist_ok=True)
        with atomic_path(state_dir, directory=True) as tmp:
            self._worker_checkpoint.write(os.path.join(tmp, "state"))
        if d.is_chief:
            write_tf_checkpoint(prefix, arrays)

    def _commit(self, step: int, prefix: str) -> None:
        """Rank 0, once every worker's state is on disk: reads the checkpoint back and writes its
        record, then the index, and only then deletes the checkpoints past `keep`."""
        size = self.distributed.size
        states = [os.path.join(self._worker_state_dir(step, r, size), "state") for r in range(size)]
        for rank, state in enumerate(states):
            if not os.path.isfile(state + ".index"):
                raise CheckpointDamagedError(
                    f"worker {rank}'s state {os.path.dirname(state)} is not there: every worker must "
                    "see the same --output_dir"
                )
        seal_checkpoint(prefix, states)
        self._verified = prefix
        committed = [p for p in self.committed() if os.path.basename(p) != os.path.basename(prefix)]
        committed = sorted(committed + [prefix], key=_order)
        kept, dropped = committed[-self.keep :], committed[: -self.keep]
        write_checkpoint_index(self.output_dir, kept)
        for old in dropped:
            if _CHECKPOINT.match(os.path.basename(old)):
                self._delete(checkpoint_step(old))

    def _failed(self, step: int, error, needed: int) -> StorageError:
        """The StorageError of a failed save of `step`, after rank 0 removed what the save wrote
        (unless it was recorded before the failure: then it is intact, and kept)."""
        d = self.distributed
        prefix = os.path.join(self.output_dir, f"ckpt-{step}")
        if d.is_chief and self._verified != prefix:
            self._delete(step, quietly=True)
        if error is None:
            reason = "another worker could not write its part; its own sentence says why"
        elif isinstance(error, CheckpointDamagedError):
            reason = str(error).rstrip(".")
        else:
            reason = describe_write_error(error, self.output_dir, needed)
        if os.path.isdir(self.output_dir):
            last = self.latest()
            where = f"the last intact checkpoint is {last}" if last else "no intact checkpoint is there yet"
        else:
            last = self._verified
            where = f"the last intact checkpoint was {last}" if last else "no checkpoint was there yet"
        number = None if error is None else write_error_number(error)
        if number in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space there"
        elif number in (errno.EROFS, errno.EACCES, errno.EPERM):
            fix = "make the directory writable"
        elif not os.path.isdir(self.output_dir):
            fix = "bring the directory back"
        else:
            fix = "fix the directory"
        return StorageError(
            f"Could not write checkpoint {step} in {self.output_dir} ({reason}); {where}: {fix}, "
            "then re-run the same command to continue from there."
        )

    def _steps_on_disk(self) -> set[int]:
        """The steps of every checkpoint file, record and worker state in the directory (a save
        killed between its data and its .index leaves a data file alone)."""
        steps = set()
        root = glob.escape(self.output_dir)
        for path in glob.glob(os.path.join(root, "ckpt-*")):
            match = _CHECKPOINT_FILE.match(os.path.basename(path))
            if match:
                steps.add(int(match.group(1)))
        for path in glob.glob(os.path.join(root, WORKER_STATE_DIR, "ckpt-*-rank-*")):
            match = re.match(r"^ckpt-(\d+)-rank-", os.path.basename(path))
            if match:
                steps.add(int(match.group(1)))
        return steps

    def _delete(self, step: int, quietly: bool = False) -> None:
        """Removes checkpoint `step`: its record first (without it, what is left is a leftover that
        the next run clears), then its files and its workers' states."""
        root = glob.escape(self.output_dir)
        prefix = os.path.join(self.output_dir, f"ckpt-{step}")
        try:
            for path in [checkpoint_record_path(prefix)] + bundle_files(prefix):
                if os.path.lexists(path):
                    os.remove(path)
            for path in glob.glob(os.path.join(root, WORKER_STATE_DIR, f"ckpt-{step}-rank-*")):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            if not quietly:
                raise

    # --- restoring --------------------------------------------------------------------------

    def restore(self, prefix: str) -> int:
        """Loads everything saved at `prefix` into the model, optimizer, loss scale and this
        worker's dropout seeds; returns the step. A checkpoint for another model or optimizer is
        a UserError; one from another worker count is fine (see the module docstring)."""
        state = read_run_state(prefix)
        if self.position is not None and self.position.restored != state.sequences:
            raise UserError(
                f"The input was positioned at sequence {self.position.restored} but {prefix} holds "
                f"{state.sequences}: the checkpoints of {self.output_dir} changed while this run started."
            )
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        d = self.distributed
        missing = sorted(set(self.variables) - set(shapes))
        misshaped = [
            f"{n} {tuple(shapes[n])} vs {tuple(v.shape)}"
            for n, v in self.variables.items()
            if n in shapes and tuple(shapes[n]) != tuple(v.shape)
        ]
        if missing or misshaped:
            problems = (
                (f"missing {', '.join(missing[:5])}" if missing else "")
                + ("; " if missing and misshaped else "")
                + (f"shape mismatch {', '.join(misshaped[:5])}" if misshaped else "")
            )
            raise UserError(
                f"{prefix} does not fit this model and optimizer ({problems}); resume with "
                "the settings it was written with or use a new --output_dir."
            )
        for name, variable in self.variables.items():
            variable.assign(reader.get_tensor(name))
        if d.rank < state.workers:  # a worker the writing run did not have keeps fresh seeds
            state_dir = self._worker_state_dir(state.step, d.rank, state.workers)
            if not os.path.isdir(state_dir):
                raise UserError(
                    f"{state_dir} (worker {d.rank}'s dropout seeds for {prefix}) is missing; "
                    "every worker must see the same --output_dir."
                )
            self._worker_checkpoint.read(os.path.join(state_dir, "state")).assert_consumed()
        self._verified = prefix
        return state.step


def write_model_files(config, vocab_file: str | None, output_dir: str) -> None:
    """bert_config.json and vocab.txt beside the checkpoints: the directory then loads as a
    checkpoint on its own (phase 2's --init_checkpoint, extract_features.py, conversion)."""
    config.to_json_file(os.path.join(output_dir, BERT_CONFIG_NAME))
    if vocab_file:
        target = os.path.join(output_dir, "vocab.txt")
        if os.path.abspath(vocab_file) != os.path.abspath(target):
            with atomic_path(target) as tmp:
                shutil.copyfile(vocab_file, tmp)
