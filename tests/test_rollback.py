"""training/rollback.py: a diverged update rolls the run back to its newest checkpoint, past the
data that led to it, and the run then ends where a run that never saw that data ends; the
rollback is recorded so that a stopped run continues it; --max_rollbacks stops a run that keeps
diverging. In one process here (loop.train with a NaN micro-batch); run_pretraining.py with
poisoned records, one and two Horovod workers, in tests/test_run_pretraining.py."""

import json
import os

import numpy as np
import pytest

from test_loop import _batches, _log, _step
from training import loop
from training.checkpointing import Checkpointer, latest_checkpoint
from training.data_order import Position
from training.metrics_log import read_log
from training.rollback import ROLLBACKS_NAME, Rollback, read_rollbacks, resume_position

BATCH = 2  # random_batch's rows: one micro-batch per update, one worker


def _train(out, config, batches, *, steps, every, rollback_options=None, log_every=1):
    """loop.train over `batches` from sequence 0 (with a Rollback whose input restarts within
    `batches`); the step and its checkpointer."""
    os.makedirs(out, exist_ok=True)
    step = _step(config)
    checkpointer = Checkpointer(str(out), step, Position(0, BATCH, 1), keep=5)
    rollback = None
    if rollback_options is not None:
        rollback = Rollback(
            str(out),
            lambda start: iter(batches[start // BATCH :]),
            global_batch=BATCH,
            distributed=step.distributed,
            **rollback_options,
        )
    loop.train(
        step,
        checkpointer.position.counted(iter(batches)),
        checkpointer,
        _log(out, steps, every=log_every),
        num_train_steps=steps,
        save_checkpoints_steps=every,
        rollback=rollback,
    )
    return step, checkpointer


def _weights(step):
    return [v.numpy() for v in step.model.weights]


@pytest.mark.parametrize("log_every", [1, 4])  # reading each update, or 4 queued at a time
def test_a_nan_update_rolls_back_and_ends_where_a_run_without_that_data_ends(
    tmp_path, tiny_config, log_every
):
    # Micro-batch 5 (update 6) is poisoned; checkpoints every 4 updates. The rollback restores
    # ckpt-4 (sequence 8), skips sequences 8-12 (updates 5 and 6) and one update more, and trains
    # updates 5-8 on micro-batches 7-10: what a run fed 0-3 and then 7-10 does, dropout included.
    batches = _batches(tiny_config, 12, nan_at=5)
    rolled, checkpointer = _train(
        tmp_path / "rolled",
        tiny_config,
        batches,
        steps=8,
        every=4,
        rollback_options=dict(skip_updates=1, max_rollbacks=3),
        log_every=log_every,
    )
    clean, _ = _train(tmp_path / "clean", tiny_config, batches[:4] + batches[7:11], steps=8, every=4)
    assert int(rolled.optimizer.iterations) == 8
    for got, want in zip(_weights(rolled), _weights(clean), strict=True):
        np.testing.assert_array_equal(got, want)
    assert checkpointer.position.sequences == 22  # 8 + 6 skipped + 4 updates of 2

    [record] = read_rollbacks(str(tmp_path / "rolled"))
    assert record == {
        "checkpoint": "ckpt-4",
        "step": 4,
        "sequences": 8,
        "resume_sequences": 14,
        "skipped": [8, 14],
        "diverged_step": 6,
        "updates_undone": 1,
        "why": "The loss is not finite",
        "loss": "nan",
    }
    log = read_log(str(tmp_path / "rolled" / "log.jsonl"))
    # The undone update's line went with it; the rollback's line stands at the step restored.
    logged = [1, 2, 3, 4, 4, 5, 6, 7, 8] if log_every == 1 else [4, 4, 8]
    assert [e["step"] for e in log] == logged
    assert [e["rollback"] for e in log if "rollback" in e] == [record]
    assert latest_checkpoint(str(tmp_path / "rolled")).endswith("ckpt-8")
    # The next checkpoint holds the position past the window: a resume from it needs no record.
    assert resume_position(str(tmp_path / "rolled"), 8, 22) == (22, None)
    assert resume_position(str(tmp_path / "rolled"), 4, 8) == (14, record)


def test_repeated_divergence_stops_after_max_rollbacks_naming_them(tmp_path, tiny_config):
    # Rollback 1 (update 6) resumes at sequence 12, micro-batch 6; micro-batch 8, poisoned too,
    # is update 7: with --max_rollbacks=1 the run stops there, and the record stays.
    batches = _batches(tiny_config, 12, nan_at=5)
    batches[8] = _batches(tiny_config, 12, nan_at=8)[8]
    with pytest.raises(
        loop.TrainingDivergedError,
        match=r"not finite at step 7 \(loss nan\); it is not rolled back: 1 rollback\(s\) already "
        r"\(--max_rollbacks=1, listed in .*rollbacks.json\); the update was not applied and the last "
        r"good checkpoint is .*ckpt-4:",
    ):
        _train(
            tmp_path,
            tiny_config,
            batches,
            steps=8,
            every=4,
            rollback_options=dict(skip_updates=0, max_rollbacks=1),
        )
    [record] = read_rollbacks(str(tmp_path))
    assert (record["step"], record["diverged_step"], record["skipped"]) == (4, 6, [8, 12])
    assert latest_checkpoint(str(tmp_path)).endswith("ckpt-4")


def test_a_divergence_before_the_first_checkpoint_stops_the_run(tmp_path, tiny_config):
    with pytest.raises(loop.TrainingDivergedError, match=r"at step 2 .*no checkpoint was written yet"):
        _train(
            tmp_path,
            tiny_config,
            _batches(tiny_config, 8, nan_at=1),
            steps=8,
            every=4,
            rollback_options=dict(skip_updates=0, max_rollbacks=3),
        )
    assert not os.path.exists(tmp_path / ROLLBACKS_NAME)


def test_a_damaged_record_file_is_one_sentence_naming_it(tmp_path):
    (tmp_path / ROLLBACKS_NAME).write_text('[{"step": 4,')
    with pytest.raises(Exception, match=r"rollbacks.json is not valid JSON .*new --output_dir"):
        read_rollbacks(str(tmp_path))
    (tmp_path / ROLLBACKS_NAME).write_text(json.dumps({"step": 4}))
    with pytest.raises(Exception, match=r"rollbacks.json must hold a JSON list"):
        read_rollbacks(str(tmp_path))
