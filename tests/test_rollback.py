"""training/rollback.py: a diverged update rolls the run back to its newest checkpoint, past the
data that led to it, and the run then ends where a run that never saw that data ends; the
rollback is recorded so that a stopped run continues it; --max_rollbacks stops a run that keeps
diverging. loop.train in one process with a NaN micro-batch, then run_pretraining.py on records
poisoned at known places of the data order: on one worker, stopped after one rollback by
--max_rollbacks and continued on one worker and on two Horovod workers."""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import run_pretraining
from conftest import BIN, worker_env
from test_loop import _batches, _log, _step
from tools import tiny_pretraining as tiny
from training import loop
from training.checkpointing import SEQUENCES_KEY, Checkpointer, latest_checkpoint
from training.data_order import Position
from training.metrics_log import read_log
from training.rollback import ROLLBACKS_NAME, Rollback, read_rollbacks, resume_position

pytestmark = [pytest.mark.slow, pytest.mark.process]

BATCH = 2  # random_batch's rows: one micro-batch per update, one worker


def _train(out, config, batches, *, steps, every, rollback_options=None, log_every=1):
    """loop.train over `batches` from sequence 0 (with a Rollback whose input restarts within
    `batches`); the step and its checkpointer."""
    os.makedirs(out, exist_ok=True)
    step = _step(config)
    checkpointer = Checkpointer(str(out), step, Position(0, BATCH, 1), keep=5)
    log = _log(out, steps, every=log_every)
    safeguards = [log]
    if rollback_options is not None:
        rollback = Rollback(
            str(out),
            lambda start: iter(batches[start // BATCH :]),
            global_batch=BATCH,
            distributed=step.distributed,
            log=log,
            **rollback_options,
        )
        safeguards.insert(0, rollback)
    loop.train(
        step,
        checkpointer.position.counted(iter(batches)),
        checkpointer,
        num_train_steps=steps,
        save_checkpoints_steps=every,
        safeguards=safeguards,
    )
    return step, checkpointer


def _weights(step):
    return [v.numpy() for v in step.model.weights]


def test_a_nan_update_rolls_back_and_ends_where_a_run_without_that_data_ends(tmp_path, tiny_config):
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
        log_every=4,  # updates 5-8 queued at once: 7 and 8 ran past the NaN and are undone too
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
    assert [e["step"] for e in log] == [4, 4, 8]
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


# run_pretraining.py: updates of 4 sequences, checkpoints every 5 updates. The records at places
# 29 and 41 of the data order are poisoned (a NaN masked_lm_weight). Update 8 (sequences 28-31)
# diverges: rollback 1 restores ckpt-5 (sequence 20) and continues at 32, so update 8 is 40-43 and
# diverges again; rollback 2 restores ckpt-5 once more and continues at 44, to update 20.
STEPS, SAVE_EVERY, SEED, WINDOW = 20, 5, 7, 32
POISONED = (29, 41)


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    """(the data, the uninterrupted run, a run stopped after its first rollback): one worker."""
    root = tmp_path_factory.mktemp("poisoned")
    data = tiny.setup(root / "data", files=2, per_file=60, dropout=False)
    tiny.poison(sorted(glob.glob(data["input_files"])), POISONED, seed=SEED, window=WINDOW)
    straight, stopped = root / "straight", root / "stopped"
    assert _pretrain(data, straight, max_rollbacks=2) == 0
    assert _pretrain(data, stopped, max_rollbacks=1) == 2
    return data, straight, stopped


def _flags(data, out, **overrides):
    values = dict(
        num_train_steps=STEPS,
        save_checkpoints_steps=SAVE_EVERY,
        seed=SEED,
        shuffle_buffer=WINDOW,
        use_xla=False,
        on_divergence="rollback",
        log_every_n_steps=5,
    )
    return tiny.flags(data, out, **{**values, **overrides})


def _pretrain(data, out, **overrides) -> int:
    return run_pretraining.main(_flags(data, out, **overrides))


def _arrays(out):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(out)))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


@pytest.mark.slow
def test_a_run_rolls_back_past_poisoned_records_twice_and_finishes(poisoned, capsys):
    data, straight, _ = poisoned
    records = read_rollbacks(str(straight))
    assert [(r["step"], r["diverged_step"], r["skipped"]) for r in records] == [
        (5, 8, [20, 32]),
        (5, 8, [32, 44]),
    ]
    assert tf.train.latest_checkpoint(str(straight)).endswith(f"ckpt-{STEPS}")
    state = _arrays(straight)
    assert int(state[SEQUENCES_KEY]) == 44 + 4 * (STEPS - SAVE_EVERY)
    assert all(np.all(np.isfinite(v)) for v in state.values() if v.dtype.kind == "f")
    log = read_log(str(straight / "log.jsonl"))
    assert [(e["step"], "rollback" in e) for e in log] == [
        (5, False),
        (5, True),
        (5, True),
        (10, False),
        (15, False),
        (20, False),
    ]


@pytest.mark.slow
def test_a_run_stopped_after_a_rollback_continues_it_on_one_and_on_two_workers(poisoned, tmp_path, capsys):
    """The run stopped by --max_rollbacks=1 holds what a run killed after its rollback holds:
    ckpt-5 and the record (written before anything is restored). Continued with
    --max_rollbacks=2 it ends with exactly the uninterrupted run's weights on one worker, and
    within 1e-5 of them on two Horovod workers, whose own rollback restores ckpt-5 on both."""
    data, straight, stopped = poisoned
    assert tf.train.latest_checkpoint(str(stopped)).endswith(f"ckpt-{SAVE_EVERY}")
    assert [r["skipped"] for r in read_rollbacks(str(stopped))] == [[20, 32]]
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(stopped, one)
    shutil.copytree(stopped, two)
    capsys.readouterr()
    assert _pretrain(data, one, max_rollbacks=2) == 0
    out = capsys.readouterr().out
    assert (
        "ckpt-5 is where a divergence at step 8 was rolled back to (rollbacks.json): the input continues at sequence 32"
        in out
    )
    assert "Rolled back: the loss is not finite at step 8 (loss nan); restored" in out
    want = _arrays(straight)
    got = _arrays(one)
    assert set(got) == set(want)
    assert all(np.array_equal(got[n], want[n]) for n in want)

    horovod = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
    done = subprocess.run(
        [
            *horovod,
            run_pretraining.__file__,
            *_flags(data, two, max_rollbacks=2, use_horovod="true", train_batch_size=2),
        ],
        env=worker_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Rolled back: the loss is not finite at step 8" in done.stdout, done.stdout[-3000:]
    assert [r["skipped"] for r in read_rollbacks(str(two))] == [[20, 32], [32, 44]]
    got = _arrays(two)
    weights = [n for n in want if n.startswith(("bert/", "cls/"))]
    assert max(float(np.max(np.abs(got[n] - want[n]))) for n in weights) < 1e-5
    assert int(got[SEQUENCES_KEY]) == int(want[SEQUENCES_KEY])
