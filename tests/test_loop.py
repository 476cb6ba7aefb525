"""training/loop.py, checkpointing.py, metrics_log.py: stop conditions, checkpoint layout and
rotation, exact restore of every piece of state, the log's keys and resume truncation."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert.pretraining import BertPretrainer
from common.errors import UserError
from conftest import random_batch
from training import loop
from training.checkpointing import (
    Checkpointer,
    RunState,
    dropout_seed_variables,
    latest_checkpoint,
    read_run_state,
)
from training.data_order import Position
from training.metrics_log import MetricsLog, read_log
from training.safeguard import Safeguard
from training.save_clock import SaveClock
from training.train_step import PretrainingStep
from training.update import Update

LOG_KEYS = {
    "step",
    "loss",
    "mlm_loss",
    "nsp_loss",
    "mlm_accuracy",
    "learning_rate",
    "loss_scale",
    "sequences_per_second",
    "skipped",
}


def _step(config, learning_rate=0.01, accumulation=1, dtype="float32"):
    keras.utils.set_random_seed(5)
    model = BertPretrainer(config, dtype=dtype)
    schedule = keras.optimizers.schedules.PolynomialDecay(learning_rate, 100, 0.0)
    from optimization import create_optimizer

    return PretrainingStep(
        model, create_optimizer("lamb", schedule), accumulation_steps=accumulation, jit_compile=False
    )


def _batches(config, n, nan_at=None):
    out = []
    for i in range(n):
        b = random_batch(config, batch=2, seq=16, seed=i)
        if i == nan_at:
            b["masked_lm_weights"] = b["masked_lm_weights"].copy()
            b["masked_lm_weights"][0, 0] = np.nan
        out.append(b)
    return out


def _log(tmp_path, total, start=0, every=1):
    return MetricsLog(
        str(tmp_path),
        total_steps=total,
        start_step=start,
        sequences_per_update=2,
        log_every=every,
        stream=open(os.devnull, "w"),
    )


def _checkpoint_arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _counting_reads(step):
    """Records how many updates each TrainStep.read brings over (one wait for the device each)."""
    reads, read = [], step.read
    step.read = lambda dispatched: reads.append(len(dispatched)) or read(dispatched)
    return reads


@pytest.mark.parametrize("dtype", ["float32", "mixed_float16"])
def test_updates_are_read_at_log_and_save_steps_and_end_where_reading_each_would(
    tmp_path, tiny_config, dtype
):
    # In fp16 the updates of batches 1 and 5 are skipped (a NaN loss, as an overflow would be):
    # the loop then queues the missing update before it saves, logs or stops.
    nan_at = (1, 5) if dtype == "mixed_float16" else ()
    batches = _batches(tiny_config, 10)
    for i in nan_at:
        batches[i]["masked_lm_weights"] = batches[i]["masked_lm_weights"].copy()
        batches[i]["masked_lm_weights"][0, 0] = np.nan
    runs = {}
    for name, every in (("each", 1), ("lazy", 4)):
        out = tmp_path / name
        out.mkdir()
        step = _step(tiny_config, dtype=dtype)
        reads = _counting_reads(step)
        data = iter(batches)
        loop.train(
            step,
            data,
            Checkpointer(str(out), step, keep=5),
            num_train_steps=8,
            save_checkpoints_steps=4,
            safeguards=[_log(out, 8, every=every)],
        )
        assert len(list(data)) == 10 - 8 - len(nan_at)  # nothing was read ahead
        runs[name] = (step, reads, read_log(str(out / "log.jsonl")))
    # The first update alone (it compiles), then one read per log or checkpoint step, plus one
    # per update that a skip left missing.
    assert runs["each"][1] == [1] * (8 + len(nan_at))
    assert runs["lazy"][1] == ([1, 3, 1, 4, 1] if nan_at else [1, 3, 4])
    each, lazy = runs["each"][0], runs["lazy"][0]
    assert int(lazy.optimizer.iterations) == 8 and int(lazy.loss_scale.skipped_steps) == len(nan_at)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(each.model.weights, lazy.model.weights))
    for a, b in zip(each.state_variables, lazy.state_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert sorted(p.name for p in (tmp_path / "lazy").glob("ckpt-*.index")) == [
        "ckpt-4.index",
        "ckpt-8.index",
    ]
    a, b = (
        _checkpoint_arrays(str(tmp_path / "each" / "ckpt-8")),
        _checkpoint_arrays(str(tmp_path / "lazy" / "ckpt-8")),
    )
    assert a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a)
    logged = {e["step"]: e for e in runs["each"][2]}
    assert [e["step"] for e in runs["lazy"][2]] == [4, 8]
    for entry in runs["lazy"][2]:
        for key in LOG_KEYS - {"sequences_per_second"}:
            assert entry[key] == logged[entry["step"]][key], key


def test_save_checkpoints_minutes_saves_at_the_first_read_once_the_minutes_passed(
    tmp_path, tiny_config, monkeypatch
):
    # A clock that reads one minute per applied update; 3 minutes between checkpoints, logging
    # (and so reading the device) every 2 updates, the step cadence out of reach.
    step = _step(tiny_config)
    monkeypatch.setattr(SaveClock, "now", staticmethod(lambda: 60.0 * int(step.optimizer.iterations)))
    loop.train(
        step,
        iter(_batches(tiny_config, 10)),
        Checkpointer(str(tmp_path), step, keep=5),
        num_train_steps=10,
        save_checkpoints_steps=100,
        safeguards=[SaveClock(3), _log(tmp_path, 10, every=2)],
    )
    # 4 minutes at step 4 (the first read at or past 3), 4 more at step 8, and the last step.
    assert sorted(int(p.name[5:-6]) for p in tmp_path.glob("ckpt-*.index")) == [4, 8, 10]
    with pytest.raises(ValueError, match="save_checkpoints_minutes must be > 0"):
        SaveClock(0)


class _Periodic(Safeguard):
    """Calls `call(step)` after each read boundary at a multiple of `every`."""

    def __init__(self, every, call):
        self.every, self.call = every, call

    def after_boundary(self, run, saved):
        if run.current % self.every == 0:
            self.call(run.current)


def test_a_safeguards_period_is_read_at_exactly_its_step(tmp_path, tiny_config):
    step = _step(tiny_config)
    reads = _counting_reads(step)
    seen = []
    loop.train(
        step,
        iter(_batches(tiny_config, 8)),
        Checkpointer(str(tmp_path), step, keep=5),
        num_train_steps=8,
        save_checkpoints_steps=8,
        safeguards=[
            _Periodic(3, lambda current: seen.append((current, int(step.optimizer.iterations)))),
            _log(tmp_path, 8, every=4),
        ],
    )
    assert seen == [(3, 3), (6, 6)]  # nothing was queued past the callback's step
    assert reads == [1, 2, 1, 2, 2]


@pytest.mark.parametrize(
    "every, nan_at, stopped_at, reads, logged, in_memory",
    [
        # Reading each update: the run stops at the NaN update, with ckpt-2's weights in memory.
        (1, 2, 3, [1, 1, 1], [1, 2], 2),
        # Reading at log steps: the two updates queued after it ran too (step 7 in memory), but
        # the error still names step 6 and nothing past ckpt-4 is saved.
        (4, 5, 6, [1, 3, 4], [4], 7),
    ],
)
def test_a_nan_loss_in_fp32_stops_naming_the_step_and_the_last_good_checkpoint(
    tmp_path, tiny_config, every, nan_at, stopped_at, reads, logged, in_memory
):
    step = _step(tiny_config)
    counted = _counting_reads(step)
    checkpointer = Checkpointer(str(tmp_path), step, keep=5)
    good = stopped_at - 1 - (stopped_at - 1) % every
    with pytest.raises(
        loop.TrainingDivergedError,
        match=rf"not finite at step {stopped_at} .*last good checkpoint is .*ckpt-{good}",
    ):
        loop.train(
            step,
            iter(_batches(tiny_config, 8, nan_at=nan_at)),
            checkpointer,
            num_train_steps=8,
            save_checkpoints_steps=every,
            safeguards=[_log(tmp_path, 8, every=every)],
        )
    assert counted == reads
    assert latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{good}")
    assert not list(tmp_path.glob(f"ckpt-{good + 1}*")) and not list(tmp_path.glob("ckpt-8*"))
    assert [e["step"] for e in read_log(str(tmp_path / "log.jsonl"))] == logged
    assert int(step.optimizer.iterations) == in_memory
    if in_memory == good:  # the NaN update was never applied: memory still holds the checkpoint
        saved = _checkpoint_arrays(str(tmp_path / f"ckpt-{good}"))
        assert all(np.array_equal(saved[n], v.numpy()) for n, v in checkpointer.variables.items())


def test_checkpoints_rotate_are_committed_last_and_leftovers_are_cleared(tmp_path, tiny_config):
    step = _step(tiny_config)
    checkpointer = Checkpointer(str(tmp_path), step, keep=2)
    loop.train(
        step,
        iter(_batches(tiny_config, 5)),
        checkpointer,
        num_train_steps=5,
        save_checkpoints_steps=2,
        safeguards=[_log(tmp_path, 5, every=2)],
    )
    # Saved at 2, 4 and the last step 5; the newest two are kept, with their worker states.
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-5")
    assert sorted(os.listdir(tmp_path / "worker_state")) == ["ckpt-4-rank-0-of-1", "ckpt-5-rank-0-of-1"]
    assert not list(tmp_path.glob("ckpt-2.*"))
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-4", "ckpt-5"]
    # Logged every 2 steps and at the last.
    assert [e["step"] for e in read_log(str(tmp_path / "log.jsonl"))] == [2, 4, 5]
    assert set(read_log(str(tmp_path / "log.jsonl"))[0]) >= LOG_KEYS
    # A save killed before its commit (files of ckpt-6, no index entry) and a killed temporary.
    for name in ("ckpt-6.index", "ckpt-6.data-00000-of-00001", ".ckpt-7.tmp-123"):
        (tmp_path / name).write_text("partial")
    (tmp_path / "worker_state" / "ckpt-6-rank-0-of-1").mkdir()
    checkpointer.remove_leftovers()
    assert not list(tmp_path.glob("ckpt-6*")) and not list(tmp_path.glob(".ckpt-7*"))
    assert sorted(os.listdir(tmp_path / "worker_state")) == ["ckpt-4-rank-0-of-1", "ckpt-5-rank-0-of-1"]
    assert latest_checkpoint(str(tmp_path)).endswith("ckpt-5")


def test_restore_brings_back_every_piece_of_state(tmp_path, tiny_config):
    """Weights, slots, iterations, loss scale, dropout seeds, the data position and the update."""
    batches = _batches(tiny_config, 8)
    step = _step(tiny_config, accumulation=2)
    update = Update(2, 2, 1e-3, 1, "lamb")
    position = Position(100, batch_size=2, workers=1)
    checkpointer = Checkpointer(str(tmp_path), step, position, update=update)
    micro_batches = position.counted(iter(batches))
    step(micro_batches)
    step(micro_batches)
    checkpointer.save(2)
    assert position.sequences == 100 + 4 * 2
    seeds = {n: v.numpy().copy() for n, v in dropout_seed_variables(step.model).items()}
    assert seeds and all(v[1] > 0 for v in seeds.values())  # dropout ran, the counters moved
    expected = {n: v.numpy().copy() for n, v in checkpointer.variables.items()}
    step(micro_batches)  # move everything on, then restore
    step.loss_scale.scale.assign(3.0)
    resumed = Checkpointer(str(tmp_path), step, Position(108, 2, 1), update=update)
    assert resumed.restore(str(tmp_path / "ckpt-2")) == 2
    assert all(np.array_equal(expected[n], v.numpy()) for n, v in checkpointer.variables.items())
    assert all(np.array_equal(seeds[n], v.numpy()) for n, v in dropout_seed_variables(step.model).items())
    assert int(step.optimizer.iterations) == 2 and float(step.loss_scale.scale) == 1.0
    state = read_run_state(str(tmp_path / "ckpt-2"))
    assert (
        state.step,
        state.workers,
        state.sequences,
        state.global_batch_size,
        state.learning_rate_workers,
    ) == (
        2,
        1,
        108,
        4,
        1,
    )
    # Accumulator sums are not saved: they are zero between updates.
    names = set(_checkpoint_arrays(str(tmp_path / "ckpt-2")))
    assert not any("accumulat" in n for n in names)
    assert {
        "global_step",
        "training_state/num_workers",
        "training_state/sequences_consumed",
        "bert/pooler/dense/kernel/adam_m",
        "cls/predictions/output_bias/adam_v",
    } <= names
    # An input positioned elsewhere than the checkpoint says is refused, not trained on.
    with pytest.raises(UserError, match=r"positioned at sequence 0 but .*ckpt-2 holds 108"):
        Checkpointer(str(tmp_path), step, Position(0, 2, 1)).restore(str(tmp_path / "ckpt-2"))


@dataclasses.dataclass
class _TwoWorkers:
    """Rank 0 of a 2-worker run, without Horovod (only what Checkpointer asks)."""

    rank: int = 0
    size: int = 2
    is_chief: bool = True

    def barrier(self):
        pass

    def any(self, flag):
        return bool(flag)


def test_a_checkpoint_of_two_workers_restores_on_one_with_rank_0s_dropout_seeds(tmp_path, tiny_config):
    step = _step(tiny_config)
    step(iter(_batches(tiny_config, 1)))
    seeds = {n: v.numpy().copy() for n, v in dropout_seed_variables(step.model).items()}
    Checkpointer(str(tmp_path), step, distributed=_TwoWorkers(rank=1, is_chief=False)).save(1)  # its state
    Checkpointer(str(tmp_path), step, distributed=_TwoWorkers()).save(1)
    step(iter(_batches(tiny_config, 1)))
    assert Checkpointer(str(tmp_path), step).restore(latest_checkpoint(str(tmp_path))) == 1
    assert all(np.array_equal(seeds[n], v.numpy()) for n, v in dropout_seed_variables(step.model).items())
    assert read_run_state(latest_checkpoint(str(tmp_path))).workers == 2


def test_a_resumed_update_keeps_the_global_batch_or_names_why_it_cannot():
    two_workers = Update(8, 1, 1e-4, 2, "lamb")
    state = RunState("out/ckpt-40", 40, 2, two_workers.global_batch_size, 2, 640)
    one_worker = Update(8, 1, 1e-4, 1, "lamb").continuing(state)
    assert (one_worker.accumulation_steps, one_worker.global_batch_size) == (2, 16)
    assert one_worker.peak_learning_rate == two_workers.peak_learning_rate == 2e-4
    assert Update(8, 1, 1e-4, 2, "lamb").continuing(state) == two_workers  # nothing changed
    assert Update(4, 3, 1e-4, 4, "lamb").continuing(state).accumulation_steps == 1
    with pytest.raises(
        UserError, match=r"global batch of 16 sequences on 2 worker\(s\); 3 worker\(s\) .* divides 16"
    ):
        Update(8, 1, 1e-4, 3, "lamb").continuing(state)
    with pytest.raises(
        UserError, match=r"--train_batch_size=16 cannot .*: use a --train_batch_size that divides 8"
    ):
        Update(16, 1, 1e-4, 2, "lamb").continuing(state)


def test_a_resumed_log_drops_what_the_interrupted_run_logged_past_its_checkpoint(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 6)) + '{"step": 6, "lo'
    )
    log = _log(tmp_path, total=8, start=3)
    metrics = {
        "loss": 2.0,
        "mlm_loss": 1.5,
        "nsp_loss": 0.5,
        "mlm_accuracy": 0.25,
        "loss_scale": 1.0,
        "learning_rate": 1e-3,
        "skipped": 0,
    }
    for step in (4, 5, 6):
        log.record(step, metrics, seconds=0.5 if step > 4 else 10.0)
    log.close()
    entries = read_log(str(path))
    assert [e["step"] for e in entries] == [1, 2, 3, 4, 5, 6]
    assert entries[-1]["loss"] == 2.0 and set(entries[-1]) >= LOG_KEYS
    # Throughput leaves out the process's first (compiling) update: 2 updates x 2 sequences / 1 s.
    assert log.throughput() == pytest.approx(4.0)


def _signal_at(batches, index, number):
    """The batches, with `number` sent to this process as batch `index` is drawn."""
    import signal

    for i, batch in enumerate(batches):
        if i == index:
            signal.raise_signal(number)
        yield batch


@pytest.mark.parametrize("notice", ["SIGUSR1", "SIGTERM", "STOP file"])
def test_a_preemption_notice_checkpoints_the_update_reached_and_the_rerun_ends_identical(
    tmp_path, tiny_config, notice
):
    import signal

    from common.errors import Preempted
    from training.preemption import StopRequests

    batches = _batches(tiny_config, 8)
    whole = tmp_path / "whole"
    whole.mkdir()
    reference = _step(tiny_config)
    loop.train(
        reference,
        iter(batches),
        Checkpointer(str(whole), reference, keep=5),
        num_train_steps=8,
        save_checkpoints_steps=4,
        safeguards=[_log(whole, 8, every=4)],
    )

    out = tmp_path / "preempted"
    out.mkdir()
    step = _step(tiny_config)
    if notice == "STOP file":
        (out / "STOP").write_text("")  # before the run: it stops before its first update...
        os.utime(out / "STOP", (1, 1))  # (written by an earlier run)
        stop = StopRequests(str(out))
        with pytest.raises(Preempted, match="no checkpoint was written"):
            loop.train(
                step,
                iter(batches),
                Checkpointer(str(out), step),
                num_train_steps=8,
                save_checkpoints_steps=4,
                safeguards=[stop, _log(out, 8, every=4)],
            )
        assert int(step.optimizer.iterations) == 0
        stop.clear_stale_file()  # ...and a new run clears it before it starts
        assert not (out / "STOP").exists()

        def with_file():  # the notice arrives with the 6th micro-batch, as the signals below
            yield from batches[:5]
            (out / "STOP").write_text("")
            yield from batches[5:]

        data = with_file()
    else:
        data = _signal_at(batches, 5, getattr(signal, notice))
    handler = signal.getsignal(signal.SIGTERM)
    stop = StopRequests(str(out))
    with pytest.raises(Preempted) as stopped:
        loop.train(
            step,
            data,
            Checkpointer(str(out), step, keep=5),
            num_train_steps=8,
            save_checkpoints_steps=4,
            safeguards=[stop, _log(out, 8, every=4)],
        )
    assert signal.getsignal(signal.SIGTERM) is handler  # the handlers are put back
    # The update in flight when the notice came (the 6th) finished; no other started.
    assert int(step.optimizer.iterations) == 6
    assert f"({notice}) at step 6: {out}/ckpt-6 holds step 6" in str(stopped.value)
    assert latest_checkpoint(str(out)).endswith("ckpt-6")

    (out / "STOP").unlink(missing_ok=True)
    resumed = _step(tiny_config)
    checkpointer = Checkpointer(str(out), resumed, keep=5)
    assert loop.resume(checkpointer, resumed) == 6
    loop.train(
        resumed,
        iter(batches[6:]),
        checkpointer,
        num_train_steps=8,
        save_checkpoints_steps=4,
        safeguards=[_log(out, 8, start=6, every=4)],
    )
    for a, b in zip(reference.model.weights, resumed.model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(reference.state_variables, resumed.state_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
