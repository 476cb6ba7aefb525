"""training/task.py's contract, pinned by a task that no other code knows: token tagging (is a
token's id even?) on a tiny BERT, driven end to end by training.job.run. The test defines the
whole task (settings, data, model, objective) here, as a new task's author would."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.encoder import EncoderTaskModel
from common.errors import UserError
from conftest import tiny_bert_config
from training import job
from training.finetuning_data import training_dataset
from training.objective import Objective
from training.safeguard import Safeguard
from training.task import Prepared, Task

SEQ = 16
ROWS = 64


class TaggingObjective(Objective):
    """Token-level cross-entropy summed over real tokens, divided by the update's real tokens."""

    terms = {"tagging_loss": "tokens"}
    sums = ("tagging_loss", "correct")

    def denominators(self, features):
        return {"tokens": tf.reduce_sum(tf.cast(features["input_mask"], tf.float32))}

    def __call__(self, outputs, features):
        mask = tf.cast(features["input_mask"], tf.float32)  # [B, S]
        labels = tf.cast(features["tags"], tf.int32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs["tag_logits"])
        hits = tf.cast(
            tf.equal(tf.argmax(outputs["tag_logits"], -1, output_type=tf.int32), labels), tf.float32
        )
        return {"tagging_loss": tf.reduce_sum(losses * mask), "correct": tf.reduce_sum(hits * mask)}

    def metrics(self, totals):
        return {"accuracy": totals["correct"] / totals["tokens"]}


class Tagger(EncoderTaskModel):
    """Encoder + a per-token dense of 2 tags: tag_logits float32 [B, S, 2]."""

    def __init__(self, config, dtype="float32", **kwargs):
        super().__init__(config, dtype=dtype, **kwargs)
        self.encoder.pooler.trainable = False  # unread: no gradient (as bert.finetuning's span model)
        self.tagger = keras.layers.Dense(2, name="tagger", dtype=self.dtype_policy)
        self.tagger.build((None, None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False):
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        return {"tag_logits": tf.cast(self.tagger(sequence), tf.float32)}


def tagging_rows(seed=0):
    """ROWS sequences of random ids, some padded; tag 1 where the id is even."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, tiny_bert_config().vocab_size, (ROWS, SEQ)).astype(np.int32)
    lengths = rng.integers(SEQ // 2, SEQ + 1, ROWS)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    ids *= mask
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": np.zeros_like(ids),
        "tags": (ids % 2 == 0).astype(np.int32) * mask,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaggingSettings(job.JobSettings):
    num_train_steps: int = 24


class Interrupted(Exception):
    pass


class Interrupting(Safeguard):
    """Raises Interrupted after the read boundary of step `at` (the log's every 4 steps)."""

    def __init__(self, at):
        self.at = at

    def after_boundary(self, run, saved):
        if run.current == self.at:
            raise Interrupted(run.current)


class TaggingTask(Task):
    title = "tagging"
    objective = TaggingObjective()

    def __init__(self, interrupt_at: int | None = None):
        self.calls = []
        self.interrupt_at = interrupt_at

    def validate_settings(self, s):
        self.calls.append("validate_settings")
        super().validate_settings(s)
        if s.max_seq_length != SEQ:
            raise UserError(f"--max_seq_length must be {SEQ} for tagging.")

    def inputs(self, s):
        self.calls.append("inputs")
        return super().inputs(s)

    def model_files(self, s, resume_from):
        self.calls.append("model_files")
        return tiny_bert_config(dropout=False), None

    def update(self, s, workers):
        self.calls.append("update")
        return super().update(s, workers)

    def prepare(self, s, plan, dist, out):
        self.calls.append("prepare")
        assert plan.config.hidden_size == 32 and plan.update.workers == 1  # what plan holds by now
        return Prepared(tagging_rows(), s.num_train_steps, 2, {"num_rows": ROWS})

    def build_model(self, config, dtype):
        self.calls.append("build_model")
        return Tagger(config, dtype=dtype)

    def initialise(self, model, s, plan, out):
        self.calls.append("initialise")

    def training_batches(self, s, plan, dist, start):
        self.calls.append("training_batches")
        return iter(
            training_dataset(
                plan.data,
                s.train_batch_size,
                num_workers=dist.size,
                worker_index=dist.rank,
                seed=s.seed,
                start=start,
            )
        )

    def resumed(self, plan, start, out):
        self.calls.append(f"resumed at {start}")

    def safeguards(self, s, plan, step, log, out):
        self.calls.append("safeguards")
        return [Interrupting(self.interrupt_at)]

    def finish(self, s, plan, step, result, log, out):
        self.calls.append("finish")
        result["tagged"] = result["train"]["accuracy"]


def _settings(out, **changes):
    values = dict(
        output_dir=str(out),
        max_seq_length=SEQ,
        train_batch_size=8,
        learning_rate=1e-2,
        optimizer_type="adamw",
        use_xla=False,
        save_checkpoints_steps=4,
        log_every_n_steps=4,
    )
    return TaggingSettings(**{**values, **changes})


def _weights(model):
    return [np.array(w) for w in model.weights]


def test_a_task_without_the_four_hooks_cannot_be_made():
    class Bare(Task):
        pass

    with pytest.raises(TypeError) as e:
        Bare()
    for hook in ("model_files", "prepare", "build_model", "training_batches"):
        assert hook in str(e.value)


def test_a_settings_refusal_comes_before_any_model(tmp_path):
    task = TaggingTask()
    with pytest.raises(UserError, match="--max_seq_length must be 16"):
        job.run(_settings(tmp_path / "out", max_seq_length=32), task)
    assert task.calls == ["validate_settings"] and not os.path.exists(tmp_path / "out")


def test_job_run_trains_a_new_task_through_its_hooks_and_resumes_it_exactly(tmp_path, capsys):
    whole = TaggingTask()
    result = job.run(_settings(tmp_path / "whole"), whole)
    assert whole.calls == [
        "validate_settings",
        "inputs",  # the pre-flight: what every worker must see, and the model's size
        "model_files",
        "model_files",
        "update",
        "prepare",
        "build_model",
        "initialise",
        "training_batches",
        "resumed at 0",
        "safeguards",
        "finish",
    ]
    assert "Resolved tagging settings:" in capsys.readouterr().out
    with open(tmp_path / "whole" / job.RESOLVED_CONFIG_NAME) as f:
        resolved = json.load(f)
    assert resolved["num_rows"] == ROWS and resolved["global_batch_size"] == 8 and resolved["bin_size"] == 0
    # Learnt from random init in 24 updates of 8 sequences (measured 0.9+): chance is 0.5.
    assert result["step"] == 24 and result["tagged"] == result["train"]["accuracy"] > 0.8

    # Stopped by an error after step 8's checkpoint, then run again: the job resumes the task
    # from that checkpoint to the weights of the uninterrupted run, bit for bit.
    with pytest.raises(Interrupted):
        job.run(_settings(tmp_path / "stopped"), TaggingTask(interrupt_at=8))
    again = TaggingTask()
    resumed = job.run(_settings(tmp_path / "stopped"), again)
    assert "resumed at 8" in again.calls and resumed["step"] == 24
    for a, b in zip(_weights(result["model"]), _weights(resumed["model"]), strict=True):
        np.testing.assert_array_equal(a, b)
