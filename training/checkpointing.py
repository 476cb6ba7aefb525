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

Google's and NVIDIA's tools read ckpt-<step> as a BERT checkpoint (they skip the slots and
global_step as they do in their own). A save is committed by rewriting `checkpoint` after every
file of it (all workers' states included) is complete, so a run killed in the middle of a save
resumes from the previous one. Files are written through temporaries that
common.files.remove_stale_temporaries clears.

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
import glob
import os
import re
import shutil

import numpy as np
import tensorflow as tf

from bert.checkpoints import (
    BERT_CONFIG_NAME,
    TRAINING_STATE_PREFIX,
    model_variables,
    write_checkpoint_index,
    write_tf_checkpoint,
)
from common.errors import UserError
from common.files import atomic_path, remove_stale_temporaries
from training.distributed import Distributed

INDEX_NAME = "checkpoint"
WORKER_STATE_DIR = "worker_state"
STATE_PREFIX = TRAINING_STATE_PREFIX  # bert/checkpoints.py's loaders skip what is under it
_CHECKPOINT = re.compile(r"^ckpt-(\d+)$")
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


def committed_checkpoints(output_dir: str) -> list[str]:
    """Prefixes of the checkpoints that the index of `output_dir` lists, oldest first."""
    if not os.path.isdir(output_dir):
        return []
    state = tf.train.get_checkpoint_state(output_dir)
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    prefixes = [p if os.path.isabs(p) else os.path.join(output_dir, p) for p in paths]
    return [p for p in prefixes if os.path.isfile(p + ".index")]


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest committed checkpoint of `output_dir`, or None."""
    committed = committed_checkpoints(output_dir)
    return committed[-1] if committed else None


def checkpoint_step(prefix: str) -> int:
    match = _CHECKPOINT.match(os.path.basename(prefix))
    if not match:
        raise ValueError(f"{prefix} is not a ckpt-<step> checkpoint.")
    return int(match.group(1))


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


class Checkpointer:
    """Saves and restores everything that decides a run's future.

    step: the TrainStep (its model, optimizer and loss scale). position: the data order's
    training.data_order.Position (its `sequences` saved, its `start` checked at restore), or None.
    update: the job's training.job.Update (its global batch and learning-rate worker count saved
    for a resume on another worker count), or None. keep: how many checkpoints to keep (the newest).
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
    ):
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (got {keep}).")
        self.output_dir = output_dir
        self.keep = keep
        self.position = position
        self.update = update
        self.distributed = distributed or Distributed(use_horovod=False)
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
        worker = {name: getattr(v, "value", v) for name, v in dropout_seed_variables(model).items()}
        self._worker_checkpoint = tf.train.Checkpoint(**worker)

    # --- where things are -------------------------------------------------------------------

    def _worker_state_dir(self, step: int, rank: int, workers: int) -> str:
        return os.path.join(self.output_dir, WORKER_STATE_DIR, f"ckpt-{step}-rank-{rank}-of-{workers}")

    def committed(self) -> list[str]:
        return committed_checkpoints(self.output_dir)

    def latest(self) -> str | None:
        return latest_checkpoint(self.output_dir)

    # --- saving -----------------------------------------------------------------------------

    def remove_leftovers(self) -> None:
        """Rank 0, before training: clears temporaries of a killed save and checkpoint files the
        index does not list (a save killed before its commit)."""
        if not self.distributed.is_chief or not os.path.isdir(self.output_dir):
            return
        remove_stale_temporaries(self.output_dir)
        workers_dir = os.path.join(self.output_dir, WORKER_STATE_DIR)
        if os.path.isdir(workers_dir):
            remove_stale_temporaries(workers_dir)
        kept = {checkpoint_step(p) for p in self.committed()}
        for step in self._steps_on_disk() - kept:
            self._delete(step)

    def save(self, step: int) -> str:
        """Writes ckpt-<step> and this worker's state; every worker must call it at the same step.
        Returns the checkpoint prefix. The old checkpoints past `keep` are deleted."""
        d = self.distributed
        state_dir = self._worker_state_dir(step, d.rank, d.size)
        os.makedirs(os.path.dirname(state_dir), exist_ok=True)
        with atomic_path(state_dir, directory=True) as tmp:
            self._worker_checkpoint.write(os.path.join(tmp, "state"))
        prefix = os.path.join(self.output_dir, f"ckpt-{step}")
        if d.is_chief:
            arrays = {name: np.asarray(v.numpy()) for name, v in self.variables.items()}
            arrays["global_step"] = np.asarray(step, np.int64)
            arrays[WORKERS_KEY] = np.asarray(d.size, np.int64)
            arrays[SEQUENCES_KEY] = np.asarray(self.position.sequences if self.position else 0, np.int64)
            if self.update is not None:
                arrays[GLOBAL_BATCH_KEY] = np.asarray(self.update.global_batch_size, np.int64)
                arrays[LEARNING_RATE_WORKERS_KEY] = np.asarray(self.update.scaled_for_workers, np.int64)
            write_tf_checkpoint(prefix, arrays)
        d.barrier()  # every worker's state is on disk before the index names the checkpoint
        if d.is_chief:
            committed = [p for p in self.committed() if checkpoint_step(p) != step] + [prefix]
            committed.sort(key=checkpoint_step)
            kept, dropped = committed[-self.keep :], committed[: -self.keep]
            write_checkpoint_index(self.output_dir, kept)
            for old in dropped:
                self._delete(checkpoint_step(old))
        # No worker goes on before the index names this checkpoint: a worker that looks for the
        # latest one next (a run started again in the same process) must find the one rank 0 finds.
        d.barrier()
        return prefix

    def _steps_on_disk(self) -> set[int]:
        steps = set()
        for path in glob.glob(os.path.join(glob.escape(self.output_dir), "ckpt-*.index")):
            match = _CHECKPOINT.match(os.path.basename(path)[: -len(".index")])
            if match:
                steps.add(int(match.group(1)))
        for path in glob.glob(os.path.join(glob.escape(self.output_dir), WORKER_STATE_DIR, "ckpt-*-rank-*")):
            match = re.match(r"^ckpt-(\d+)-rank-", os.path.basename(path))
            if match:
                steps.add(int(match.group(1)))
        return steps

    def _delete(self, step: int) -> None:
        root = glob.escape(self.output_dir)
        for path in glob.glob(os.path.join(root, f"ckpt-{step}.index")) + glob.glob(
            os.path.join(root, f"ckpt-{step}.data-*")
        ):
            os.remove(path)
        for path in glob.glob(os.path.join(root, WORKER_STATE_DIR, f"ckpt-{step}-rank-*")):
            shutil.rmtree(path, ignore_errors=True)

    # --- restoring --------------------------------------------------------------------------

    def restore(self, prefix: str) -> int:
        """Loads everything saved at `prefix` into the model, optimizer, loss scale and this
        worker's dropout seeds; returns the step. A checkpoint for another model or optimizer is
        a UserError; one from another worker count is fine (see the module docstring)."""
        state = read_run_state(prefix)
        if self.position is not None and self.position.start != state.sequences:
            raise UserError(
                f"The input was positioned at sequence {self.position.start} but {prefix} holds "
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
