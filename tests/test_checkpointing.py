"""training/checkpointing.py: which checkpoint is the latest (none, partial, complete), what a
saved checkpoint says about its run, keep=N rotation, leftovers of an interrupted save, damaged
checkpoints found and set aside, saves that fail, the config and vocab beside the checkpoints.

The smallest objects the Checkpointer takes: a one-layer BertEncoder of hidden size 4 (its names
are Google's), a Keras Adam built on its weights and a disabled loss scale; no training."""

import dataclasses
import errno
import json
import os
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.checkpoints import write_tf_checkpoint
from bert.config import BertConfig
from bert.encoder import BertEncoder
from common.errors import StorageError, UserError
from optimization.loss_scale import DynamicLossScale
from training.checkpointing import (
    DAMAGED_DIR,
    Checkpointer,
    RunState,
    checkpoint_step,
    committed_checkpoints,
    latest_checkpoint,
    read_run_state,
    write_model_files,
)
from training.data_order import Position
from training.update import Update

CONFIG = {
    "vocab_size": 12,
    "hidden_size": 4,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 8,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 8,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}


def tiny_step(hidden_size=4):
    """What Checkpointer reads of a TrainStep: model, optimizer, variables, loss_scale."""
    keras.utils.set_random_seed(3)
    model = BertEncoder(BertConfig(**dict(CONFIG, hidden_size=hidden_size)))
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return SimpleNamespace(
        model=model,
        optimizer=optimizer,
        variables=model.trainable_variables,
        loss_scale=DynamicLossScale(enabled=False),
    )


@pytest.fixture(scope="module")
def step():
    return tiny_step()


@dataclasses.dataclass
class Workers:
    """One rank of a run of `size` workers, without Horovod (what Checkpointer asks of it)."""

    rank: int = 0
    size: int = 1
    barriers: int = 0  # collectives every worker meets at: Distributed.barrier and .any
    flags: list = dataclasses.field(default_factory=list)  # what each .any was asked

    @property
    def is_chief(self):
        return self.rank == 0

    def barrier(self):
        self.barriers += 1

    def any(self, flag):
        self.barriers += 1
        self.flags.append(bool(flag))
        return bool(flag)


def index_lines(directory) -> list:
    with open(os.path.join(directory, "checkpoint")) as f:
        return f.read().splitlines()


def google_checkpoint(prefix, **extra):
    """A checkpoint with one weight and `extra` int64 scalars, written without a Checkpointer."""
    arrays = {"bert/pooler/dense/bias": np.zeros(4, np.float32)}
    arrays.update({k: np.asarray(v, np.int64) for k, v in extra.items()})
    write_tf_checkpoint(prefix, arrays)
    return prefix


# ---- which checkpoint is the latest ----------------------------------------------------------


def test_a_missing_or_empty_directory_has_no_checkpoint(tmp_path):
    assert latest_checkpoint(str(tmp_path / "nowhere")) is None
    assert committed_checkpoints(str(tmp_path / "nowhere")) == []
    assert latest_checkpoint(str(tmp_path)) is None
    (tmp_path / "checkpoint").write_text("not an index {")  # unreadable: as if none
    assert latest_checkpoint(str(tmp_path)) is None


def test_a_checkpoint_the_index_does_not_name_or_whose_files_are_gone_is_not_the_latest(tmp_path):
    # Files of a save killed before its commit: no index names them.
    google_checkpoint(str(tmp_path / "ckpt-2"))
    assert latest_checkpoint(str(tmp_path)) is None
    # The index names ckpt-2 and ckpt-4, but ckpt-4's files are not there.
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-2"\n'
        'all_model_checkpoint_paths: "ckpt-4"\n'
    )
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    # Only the data file of ckpt-4 (its .index is written last): still not complete.
    google_checkpoint(str(tmp_path / "ckpt-4"))
    os.remove(tmp_path / "ckpt-4.index")
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    # The index names only ckpt-4, which is damaged: no checkpoint to continue from is an error,
    # never a silent fresh start over the damaged one.
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"\n')
    with pytest.raises(UserError) as error:
        latest_checkpoint(str(tmp_path))
    assert str(error.value) == (
        f"No checkpoint in {tmp_path} is intact (ckpt-4: ckpt-4.index is missing): restore their "
        "files, or move them away to start afresh, and re-run."
    )


def test_the_latest_of_complete_checkpoints_is_the_newest_the_index_names(tmp_path, step):
    checkpointer = Checkpointer(str(tmp_path), step)
    assert checkpointer.latest() is None
    checkpointer.save(1)
    checkpointer.save(3)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")  # TF reads it alike
    assert committed_checkpoints(str(tmp_path)) == [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-3")]
    assert index_lines(tmp_path) == [
        'model_checkpoint_path: "ckpt-3"',
        'all_model_checkpoint_paths: "ckpt-1"',
        'all_model_checkpoint_paths: "ckpt-3"',
    ]
    # The records, not the index, say which checkpoints are finished: an index that lost an entry
    # (or another tool's, with absolute paths) loses no checkpoint.
    (tmp_path / "checkpoint").write_text(
        f'model_checkpoint_path: "{tmp_path}/ckpt-1"\nall_model_checkpoint_paths: "{tmp_path}/ckpt-1"\n'
    )
    assert committed_checkpoints(str(tmp_path)) == [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-3")]
    # In a directory without records (Google's tools, older versions) the index decides.
    google_checkpoint(str(tmp_path / "legacy" / "ckpt-1"))
    google_checkpoint(str(tmp_path / "legacy" / "ckpt-3"))
    (tmp_path / "legacy" / "checkpoint").write_text(
        f'model_checkpoint_path: "{tmp_path}/legacy/ckpt-1"\nall_model_checkpoint_paths: "{tmp_path}/legacy/ckpt-1"\n'
    )
    assert latest_checkpoint(str(tmp_path / "legacy")) == str(tmp_path / "legacy" / "ckpt-1")
    # The index as TensorFlow's own CheckpointManager writes it (timestamps included) reads alike.
    tf.compat.v1.train.update_checkpoint_state(
        str(tmp_path / "legacy"),
        "ckpt-3",
        all_model_checkpoint_paths=["ckpt-1", "ckpt-3"],
        all_model_checkpoint_timestamps=[1.7e9, 1.8e9],
        last_preserved_timestamp=1.6e9,
    )
    assert "timestamp" in (tmp_path / "legacy" / "checkpoint").read_text()
    assert committed_checkpoints(str(tmp_path / "legacy")) == [
        str(tmp_path / "legacy" / "ckpt-1"),
        str(tmp_path / "legacy" / "ckpt-3"),
    ]


def test_the_step_is_read_from_the_checkpoints_name():
    assert checkpoint_step("/runs/a/ckpt-1200") == 1200
    assert checkpoint_step("ckpt-0") == 0
    for name in ("/runs/a/model.ckpt-12", "/runs/a/ckpt-best", "/runs/ckpt-3/bert_model.ckpt"):
        with pytest.raises(ValueError, match="is not a ckpt-<step> checkpoint"):
            checkpoint_step(name)


# ---- what a checkpoint says about its run ----------------------------------------------------


def test_read_run_state_gives_back_what_the_checkpointer_saved(tmp_path, step):
    workers = Workers(rank=0, size=3)
    position = Position(40, batch_size=2, workers=3)
    list(position.counted(range(2)))  # two micro-batches of 2 on each of 3 workers: 40 + 12
    update = Update(2, 4, 1e-3, 3, "lamb", learning_rate_workers=1)  # global batch 2 x 4 x 3
    for rank in (1, 2):  # the other workers write their states (rank 0 waits for them)
        Checkpointer(str(tmp_path), step, distributed=Workers(rank=rank, size=3)).save(5)
    checkpointer = Checkpointer(str(tmp_path), step, position, update=update, distributed=workers)
    prefix = checkpointer.save(5)
    assert prefix == str(tmp_path / "ckpt-5")
    assert read_run_state(prefix) == RunState(prefix, 5, 3, 24, 1, 52)
    assert workers.barriers == 2  # the states are on disk before the commit; the commit before any goes on
    assert sorted(os.listdir(tmp_path / "worker_state")) == [f"ckpt-5-rank-{r}-of-3" for r in range(3)]
    # The arrays themselves, read by TensorFlow: Google's names, NVIDIA's slot names, the step.
    reader = tf.train.load_checkpoint(prefix)
    assert int(reader.get_tensor("global_step")) == 5
    np.testing.assert_array_equal(
        reader.get_tensor("bert/embeddings/word_embeddings"), step.model.embeddings.word_embeddings.numpy()
    )
    assert reader.get_tensor("bert/encoder/layer_0/attention/self/query/kernel/adam_m").shape == (4, 4)
    assert reader.get_tensor("bert/pooler/dense/bias/adam_v").shape == (4,)
    assert int(reader.get_tensor("training_state/optimizer/iterations")) == 0


def test_without_a_position_or_an_update_the_state_says_none(tmp_path, step):
    prefix = Checkpointer(str(tmp_path), step).save(7)
    assert read_run_state(prefix) == RunState(prefix, 7, 1, None, None, 0)


def test_a_checkpoint_of_another_trainer_or_an_older_version_is_one_sentence(tmp_path):
    google = google_checkpoint(str(tmp_path / "a" / "ckpt-1"))
    with pytest.raises(UserError) as error:
        read_run_state(google)
    assert str(error.value) == (
        f"{google} is not a checkpoint of this trainer: it lacks training_state/num_workers; to start "
        "from its weights use a new --output_dir and --init_checkpoint."
    )
    older = google_checkpoint(str(tmp_path / "b" / "ckpt-1"), **{"training_state/num_workers": 1})
    with pytest.raises(UserError, match=r"has no data position \(an older version wrote it\): it lacks "):
        read_run_state(older)


def test_a_restore_brings_the_saved_values_back_and_refuses_another_model(tmp_path):
    step = tiny_step()
    checkpointer = Checkpointer(str(tmp_path), step, Position(6, 2, 1))
    checkpointer.save(2)
    saved = {name: v.numpy().copy() for name, v in checkpointer.variables.items()}
    for v in step.model.trainable_variables:
        v.assign(v.numpy() + 1.0)
    step.optimizer.iterations.assign(9)
    assert Checkpointer(str(tmp_path), step, Position(6, 2, 1)).restore(str(tmp_path / "ckpt-2")) == 2
    assert all(np.array_equal(saved[name], v.numpy()) for name, v in checkpointer.variables.items())
    assert int(step.optimizer.iterations) == 0
    with pytest.raises(UserError, match=r"positioned at sequence 0 but .*ckpt-2 holds 6"):
        Checkpointer(str(tmp_path), step, Position(0, 2, 1)).restore(str(tmp_path / "ckpt-2"))
    wider = Checkpointer(str(tmp_path / "other"), tiny_step(hidden_size=6))
    with pytest.raises(UserError, match=r"does not fit this model and optimizer \(shape mismatch "):
        wider.restore(str(tmp_path / "ckpt-2"))


# ---- rotation --------------------------------------------------------------------------------


def test_keep_n_leaves_the_newest_n_checkpoints_and_their_worker_states(tmp_path, step):
    checkpointer = Checkpointer(str(tmp_path), step, keep=2)
    for n in (1, 2, 3, 4):
        checkpointer.save(n)
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
        "ckpt-3.manifest.json",
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
        "ckpt-4.manifest.json",
        "worker_state",
    ]
    assert sorted(os.listdir(tmp_path / "worker_state")) == ["ckpt-3-rank-0-of-1", "ckpt-4-rank-0-of-1"]
    assert index_lines(tmp_path) == [
        'model_checkpoint_path: "ckpt-4"',
        'all_model_checkpoint_paths: "ckpt-3"',
        'all_model_checkpoint_paths: "ckpt-4"',
    ]
    checkpointer.save(4)  # saved again at the same step: listed once
    assert committed_checkpoints(str(tmp_path)) == [str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-4")]
    with pytest.raises(ValueError, match=r"keep must be >= 1 \(got 0\)"):
        Checkpointer(str(tmp_path), step, keep=0)


# ---- leftovers of an interrupted save --------------------------------------------------------


def plant_leftovers(directory):
    """What saves killed at every point leave, plus files that are not checkpoints."""
    google_checkpoint(os.path.join(directory, "ckpt-3"))  # written, never committed
    os.makedirs(os.path.join(directory, "worker_state", "ckpt-3-rank-0-of-1"))
    os.makedirs(os.path.join(directory, "worker_state", "ckpt-4-rank-1-of-2"))  # another rank's, uncommitted
    os.makedirs(os.path.join(directory, ".ckpt-5.tmp-999"))  # write_tf_checkpoint's temporary folder
    os.makedirs(os.path.join(directory, "worker_state", ".ckpt-5-rank-0-of-1.tmp-999"))
    with open(os.path.join(directory, ".checkpoint.tmp-999"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-3"\n')
    for name in ("log.jsonl", "bert_config.json", "eval_results.txt", "model.ckpt-9.index"):
        with open(os.path.join(directory, name), "w") as f:
            f.write("not a leftover")


def test_remove_leftovers_deletes_what_no_commit_names_and_nothing_else(tmp_path, step):
    checkpointer = Checkpointer(str(tmp_path), step)
    checkpointer.save(1)
    checkpointer.save(2)
    before = sorted(os.listdir(tmp_path))
    plant_leftovers(str(tmp_path))
    checkpointer.remove_leftovers()
    assert sorted(os.listdir(tmp_path)) == sorted(
        before + ["log.jsonl", "bert_config.json", "eval_results.txt", "model.ckpt-9.index"]
    )
    assert sorted(os.listdir(tmp_path / "worker_state")) == ["ckpt-1-rank-0-of-1", "ckpt-2-rank-0-of-1"]
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    assert read_run_state(str(tmp_path / "ckpt-2")).step == 2  # the committed ones are intact


def test_only_rank_0_removes_leftovers_and_a_new_directory_is_fine(tmp_path, step):
    plant_leftovers(str(tmp_path))
    before = {d: sorted(os.listdir(d)) for d in (tmp_path, tmp_path / "worker_state")}
    Checkpointer(str(tmp_path), step, distributed=Workers(rank=1, size=2)).remove_leftovers()
    assert {d: sorted(os.listdir(d)) for d in before} == before
    Checkpointer(str(tmp_path / "new"), step).remove_leftovers()
    assert not (tmp_path / "new").exists()
    # Rank 0 of a directory with no commit at all: every checkpoint file goes.
    Checkpointer(str(tmp_path), step).remove_leftovers()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(("ckpt-", ".ckpt-", ".checkpoint"))]
    assert os.listdir(tmp_path / "worker_state") == []


# ---- verification ----------------------------------------------------------------------------


def test_a_save_writes_its_record_after_its_files_and_the_index_after_the_record(tmp_path, step, monkeypatch):
    checkpointer = Checkpointer(str(tmp_path), step, keep=1)
    checkpointer.save(1)
    done = []
    replace, remove = os.replace, os.remove
    monkeypatch.setattr(
        os, "replace", lambda a, b: done.append(("wrote", os.path.basename(b))) or replace(a, b)
    )
    monkeypatch.setattr(os, "remove", lambda p: done.append(("deleted", os.path.basename(p))) or remove(p))
    checkpointer.save(2)
    wrote = [name for what, name in done if what == "wrote"]
    assert wrote == [
        "ckpt-2-rank-0-of-1",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "ckpt-2.manifest.json",
        "checkpoint",
    ]
    # Checkpoint 1 goes only once 2 is recorded and named; its record goes first.
    deleted = [name for what, name in done if what == "deleted" and name.startswith("ckpt-1")]
    assert deleted == ["ckpt-1.manifest.json", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    assert done.index(("deleted", "ckpt-1.manifest.json")) > done.index(("wrote", "checkpoint"))
    with open(tmp_path / "ckpt-2.manifest.json") as f:
        record = json.load(f)
    assert record["bundles"] == ["ckpt-2", "worker_state/ckpt-2-rank-0-of-1/state"]
    assert record["files"]["ckpt-2.index"] == os.path.getsize(tmp_path / "ckpt-2.index")
    assert sorted(record["files"]) == [
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "worker_state/ckpt-2-rank-0-of-1/state.data-00000-of-00001",
        "worker_state/ckpt-2-rank-0-of-1/state.index",
    ]


def _damage(directory, how):
    """Damages ckpt-2 of `directory` as `how` says; returns the phrase checkpoint_problem gives."""
    data, index = directory / "ckpt-2.data-00000-of-00001", directory / "ckpt-2.index"
    if how == "truncated data":
        size = os.path.getsize(data)
        os.truncate(data, size - 8)
        return f"ckpt-2.data-00000-of-00001 is {size - 8} bytes but {size} were written"
    if how == "longer index":
        size = os.path.getsize(index)
        with open(index, "ab") as f:
            f.write(b"xx")
        return f"ckpt-2.index is {size + 2} bytes but {size} were written"
    if how == "missing data":
        os.remove(data)
        return "ckpt-2.data-00000-of-00001 is missing"
    if how == "flipped byte":
        content = bytearray(data.read_bytes())
        content[len(content) // 2] ^= 0xFF
        data.write_bytes(bytes(content))
        return "does not read back"
    if how == "missing worker state":
        os.remove(directory / "worker_state" / "ckpt-2-rank-0-of-1" / "state.index")
        return "worker_state/ckpt-2-rank-0-of-1/state.index is missing"
    if how == "unreadable record":
        (directory / "ckpt-2.manifest.json").write_text('{"files": ')
        return "its record ckpt-2.manifest.json is unreadable ("
    raise ValueError(how)


@pytest.mark.parametrize(
    "how",
    [
        "truncated data",
        "longer index",
        "missing data",
        "flipped byte",
        "missing worker state",
        "unreadable record",
    ],
)
def test_a_damaged_newest_checkpoint_is_passed_over_then_set_aside_with_one_sentence(tmp_path, step, how):
    from bert.checkpoints import checkpoint_problem

    said = []
    checkpointer = Checkpointer(str(tmp_path), step, log=said.append)
    checkpointer.save(1)
    checkpointer.save(2)
    assert checkpoint_problem(str(tmp_path / "ckpt-2")) is None
    what = _damage(tmp_path, how)
    assert what in checkpoint_problem(str(tmp_path / "ckpt-2"))
    # Every worker passes it over alike, moving nothing; rank 0 then sets it aside and says so.
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")
    Checkpointer(str(tmp_path), step, distributed=Workers(rank=1, size=2)).remove_leftovers()
    assert (tmp_path / "ckpt-2.manifest.json").exists() and said == []
    checkpointer.remove_leftovers()
    (sentence,) = said
    assert sentence.startswith(f"Checkpoint {tmp_path}/ckpt-2 is damaged (") and what in sentence
    assert sentence.endswith(
        f"): set aside as {tmp_path}/{DAMAGED_DIR}/ckpt-2; continuing from {tmp_path}/ckpt-1, the "
        "newest intact checkpoint."
    )
    aside = tmp_path / DAMAGED_DIR / "ckpt-2"
    assert "ckpt-2.manifest.json" in os.listdir(aside) and os.listdir(aside / "worker_state") == [
        "ckpt-2-rank-0-of-1"
    ]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("ckpt-2")]
    assert index_lines(tmp_path) == [
        'model_checkpoint_path: "ckpt-1"',
        'all_model_checkpoint_paths: "ckpt-1"',
    ]
    # The same step saved again (the resumed run gets there) and damaged again: set aside beside it.
    checkpointer.save(2)
    _damage(tmp_path, how)
    checkpointer.remove_leftovers()
    assert sorted(os.listdir(tmp_path / DAMAGED_DIR)) == ["ckpt-2", "ckpt-2.2"]


def test_no_intact_checkpoint_is_one_sentence_and_nothing_is_moved(tmp_path, step):
    checkpointer = Checkpointer(str(tmp_path), step)
    checkpointer.save(1)
    checkpointer.save(2)
    _damage(tmp_path, "missing data")
    os.remove(tmp_path / "ckpt-1.index")
    expected = (
        f"No checkpoint in {tmp_path} is intact (ckpt-2: ckpt-2.data-00000-of-00001 is missing; ckpt-1: "
        "ckpt-1.index is missing): restore their files, or move them away to start afresh, and re-run."
    )
    for call in (lambda: latest_checkpoint(str(tmp_path)), checkpointer.remove_leftovers):
        with pytest.raises(UserError) as error:
            call()
        assert str(error.value) == expected
    assert not (tmp_path / DAMAGED_DIR).exists() and (tmp_path / "ckpt-2.manifest.json").exists()
    assert checkpointer.latest() is None  # what the sentences naming the last good one ask: no error


def test_an_unreadable_index_is_rewritten_from_the_records(tmp_path, step):
    said = []
    checkpointer = Checkpointer(str(tmp_path), step, log=said.append)
    checkpointer.save(1)
    checkpointer.save(2)
    (tmp_path / "checkpoint").write_bytes(b"\xff\xfe garbage \x00")
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    checkpointer.remove_leftovers()
    assert said == [
        f"The checkpoint index {tmp_path}/checkpoint could not be read: rewritten from the checkpoints' "
        f"records (the newest intact is {tmp_path}/ckpt-2)."
    ]
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    assert committed_checkpoints(str(tmp_path)) == [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")]
    # A save killed after its record, before the index named it: the record makes it the latest.
    checkpointer.save(3)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")
    said.clear()
    checkpointer.remove_leftovers()
    assert said == [] and tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-3")


# ---- saves that fail -------------------------------------------------------------------------


def test_keep_never_deletes_the_last_intact_checkpoint_for_one_that_does_not_read_back(
    tmp_path, step, monkeypatch
):
    import training.checkpointing as checkpointing
    from bert.checkpoints import CheckpointDamagedError

    checkpointer = Checkpointer(str(tmp_path), step, keep=1)
    checkpointer.save(1)

    def fails(prefix, bundles):
        raise CheckpointDamagedError(
            f"{prefix} does not read back after writing: tensor x of ckpt-2 is wrong."
        )

    monkeypatch.setattr(checkpointing, "seal_checkpoint", fails)
    with pytest.raises(StorageError) as error:
        checkpointer.save(2)
    assert str(error.value) == (
        f"Could not write checkpoint 2 in {tmp_path} ({tmp_path}/ckpt-2 does not read back after writing: "
        f"tensor x of ckpt-2 is wrong); the last intact checkpoint is {tmp_path}/ckpt-1: fix the directory, "
        "then re-run the same command to continue from there."
    )
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")  # kept, with keep=1
    assert not [n for n in os.listdir(tmp_path) if n.startswith(("ckpt-2", ".ckpt-2"))]
    assert os.listdir(tmp_path / "worker_state") == ["ckpt-1-rank-0-of-1"]


@pytest.mark.parametrize(
    "error, reason, fix",
    [
        (
            PermissionError(errno.EACCES, "Permission denied"),
            "permission denied",
            "make the directory writable",
        ),
        (
            tf.errors.ResourceExhaustedError(
                None, None, "x/.ckpt-2.tmp-1/ckpt.data-00000-of-00001; No space left on device"
            ),
            "no space left on the device: about ",
            "free space there",
        ),
    ],
)
def test_a_failed_write_is_one_sentence_and_leaves_nothing(tmp_path, step, monkeypatch, error, reason, fix):
    import training.checkpointing as checkpointing

    checkpointer = Checkpointer(str(tmp_path), step)
    checkpointer.save(1)
    write = checkpointing.write_tf_checkpoint

    def fails(prefix, arrays):
        write(prefix, arrays)  # its files are in place, then the failure: they are removed again
        raise error

    monkeypatch.setattr(checkpointing, "write_tf_checkpoint", fails)
    with pytest.raises(StorageError) as failure:
        checkpointer.save(2)
    sentence = str(failure.value)
    assert sentence.startswith(f"Could not write checkpoint 2 in {tmp_path} ({reason}")
    assert sentence.endswith(
        f"; the last intact checkpoint is {tmp_path}/ckpt-1: {fix}, then re-run the same command to "
        "continue from there."
    )
    assert sorted(n for n in os.listdir(tmp_path) if "ckpt-2" in n) == []
    assert os.listdir(tmp_path / "worker_state") == ["ckpt-1-rank-0-of-1"]


def test_a_failure_on_another_worker_fails_this_one_too_and_a_vanished_directory_stays_gone(tmp_path, step):
    class OtherFailed(Workers):
        def any(self, flag):
            return True  # another worker could not write its state

    checkpointer = Checkpointer(str(tmp_path), step, distributed=OtherFailed(rank=0, size=2))
    with pytest.raises(
        StorageError, match=r"another worker could not write its part; its own sentence says why"
    ):
        checkpointer.save(1)
    assert not [n for n in os.listdir(tmp_path) if n.startswith("ckpt-1")]
    assert os.listdir(tmp_path / "worker_state") == []

    gone = tmp_path / "gone"
    gone.mkdir()
    checkpointer = Checkpointer(str(gone), step)
    checkpointer.save(1)
    os.rename(gone, tmp_path / "elsewhere")
    with pytest.raises(StorageError) as error:
        checkpointer.save(2)
    assert str(error.value) == (
        f"Could not write checkpoint 2 in {gone} (the directory no longer exists); the last intact "
        f"checkpoint was {gone}/ckpt-1: bring the directory back, then re-run the same command to "
        "continue from there."
    )
    assert not gone.exists()


# ---- the files beside the checkpoints --------------------------------------------------------


def test_write_model_files_writes_the_config_and_a_copy_of_the_vocab(tmp_path):
    config = BertConfig(**CONFIG)
    vocab = tmp_path / "vocab_source.txt"
    vocab.write_bytes(b"[PAD]\n[UNK]\ncaf\xc3\xa9\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "vocab.txt").write_text("an older vocab\n")
    write_model_files(config, str(vocab), str(out))
    with open(out / "bert_config.json") as f:
        assert json.load(f) == CONFIG
    assert (out / "vocab.txt").read_bytes() == vocab.read_bytes()
    assert sorted(os.listdir(out)) == ["bert_config.json", "vocab.txt"]  # no temporary left
    # The vocab already in place is left as it is; no vocab writes the config alone.
    write_model_files(config, str(out / "vocab.txt"), str(out))
    assert (out / "vocab.txt").read_bytes() == vocab.read_bytes()
    alone = tmp_path / "alone"
    alone.mkdir()
    write_model_files(BertConfig(**dict(CONFIG, vocab_size=30)), None, str(alone))
    assert os.listdir(alone) == ["bert_config.json"]
    with open(alone / "bert_config.json") as f:
        assert json.load(f)["vocab_size"] == 30
