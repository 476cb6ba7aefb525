"""Padding only as far as the lengths need (training/length_bins.py): the bin arithmetic and the
dealing by hand, the binned input against the padded one (the same sequences in every update,
shorter micro-batches), group_by_length's order, and whole runs: binned training ends where
padded training ends (dropout off), binned evaluation and prediction equal the padded ones."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import run_pretraining
from conftest import BIN, notice_after_step, packed_rows, worker_env
from tools import tiny_pretraining as tiny
from training.data_order import GROUP_BATCHES, rows_in_order, worker_micro_batches
from training.length_bins import bin_length, by_length, deal_by_length, resolved_bin_size, trim
from training.preemption import request_stop

HOROVODRUN = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]


def test_a_bin_length_is_the_longest_rounded_up_to_the_bin_within_one_bin_and_max_seq_length():
    assert [bin_length(n, 64, 512) for n in (0, 1, 64, 65, 128, 500, 512)] == [64, 64, 64, 128, 128, 512, 512]
    assert [bin_length(n, 48, 100) for n in (47, 49, 97, 100)] == [48, 96, 100, 100]
    assert bin_length(3, 0, 128) == 128  # bin 0: padded as before
    assert int(bin_length(tf.constant(65), 64, 512)) == 128
    assert [
        resolved_bin_size(b, s) for b, s in ((None, 512), (0, 512), (None, 64), (None, 16), (16, 16))
    ] == [
        64,
        0,
        0,  # one bin: padded, in the unsorted order
        0,
        0,
    ]


def test_trim_cuts_only_the_sequence_features_to_the_batch_bin():
    mask = np.zeros([2, 16], np.int32)
    mask[0, :5], mask[1, :9] = 1, 1
    features = {
        "input_ids": tf.constant(mask * 7),
        "input_mask": tf.constant(mask),
        "segment_ids": tf.constant(mask),
        "masked_lm_positions": tf.constant(np.full([2, 16], 3, np.int32)),  # P = S: not a sequence axis
    }
    cut = trim(features, 4, 16)
    assert [cut[n].shape.as_list() for n in ("input_ids", "input_mask", "segment_ids")] == [[2, 12]] * 3
    assert cut["masked_lm_positions"].shape.as_list() == [2, 16]
    np.testing.assert_array_equal(cut["input_mask"].numpy(), mask[:, :12])
    assert trim(features, 0, 16) is features


def test_an_update_is_sorted_by_length_and_dealt_to_the_workers_as_a_snake():
    # G = W 2 x k 2 x B 2; sorted ascending: positions 3 5 | 0 6 | 2 7 | 1 4 (lengths 1 2 | 3 4 | 5 6 | 7 8).
    lengths = tf.constant([3, 7, 5, 1, 8, 2, 4, 6])
    dealt = [deal_by_length(lengths, 2, 2, r).numpy().tolist() for r in (0, 1)]
    # Round 0 goes to workers 0, 1; round 1 to workers 1, 0.
    assert dealt == [[[3, 5], [1, 4]], [[0, 6], [2, 7]]]
    ties = deal_by_length(tf.constant([4, 4, 4, 4]), 2, 1, 0).numpy().tolist()
    assert ties == [[0, 1], [2, 3]]  # equal lengths keep their order


def _lengths(n, seed=0):
    return np.random.default_rng(seed).integers(1, 65, size=n)


def test_binned_micro_batches_hold_each_update_s_sequences_for_any_worker_count():
    lengths = _lengths(96)
    order = tf.data.Dataset.range(96)

    def updates(workers, batch, k):
        streams = [
            list(
                worker_micro_batches(
                    order,
                    batch,
                    workers,
                    r,
                    accumulation=k,
                    lengths_of=lambda index: tf.gather(tf.constant(lengths), index),
                ).as_numpy_iterator()
            )
            for r in range(workers)
        ]
        per_update = batch * k * workers
        return [
            sorted(int(x) for r in range(workers) for b in streams[r][u * k : (u + 1) * k] for x in b)
            for u in range(96 // per_update)
        ]

    padded = [sorted(range(u * 24, u * 24 + 24)) for u in range(4)]
    assert updates(1, 8, 3) == updates(2, 4, 3) == updates(3, 4, 2) == updates(2, 2, 6) == padded
    # Within a worker's update the micro-batches go from short to long.
    first = list(
        worker_micro_batches(
            order, 4, 1, 0, accumulation=6, lengths_of=lambda i: tf.gather(tf.constant(lengths), i)
        ).take(6)
    )
    longest = [int(lengths[b.numpy()].max()) for b in first]
    assert longest == sorted(longest) and longest[0] < longest[-1]


def test_prediction_batches_go_by_length_and_cover_every_row_once():
    lengths = np.array([9, 3, 17, 3, 30, 1, 12])
    batches = list(by_length(lengths, 3, 8, 32))
    rows = [r[:real].tolist() for r, real, _ in batches]
    assert rows == [[5, 1, 3], [0, 6, 2], [4]]
    assert [length for *_, length in batches] == [8, 24, 32]
    assert batches[-1][0].tolist() == [4, 4, 4]  # padded to the batch size with its last row
    assert [r[:real].tolist() for r, real, _ in by_length(lengths, 3, 0, 32)] == [[0, 1, 2], [3, 4, 5], [6]]


def test_group_by_length_sorts_groups_of_batches_in_one_order_resumable_from_a_position():
    rows, batch = 1000, 8  # 2 full groups of 50 batches and a partial one
    lengths = _lengths(rows, seed=1)

    def order(start=0, n=rows):
        d = rows_in_order(rows, seed=5, start=start, lengths=lengths, group_batch=batch)
        return [int(x) for x in d.take(n)]

    epoch = order()
    assert sorted(epoch) == list(range(rows))
    group = GROUP_BATCHES * batch
    for g in range(2):
        batches = [epoch[g * group + b * batch : g * group + (b + 1) * batch] for b in range(GROUP_BATCHES)]
        spreads = [int(lengths[b].max() - lengths[b].min()) for b in batches]
        assert max(spreads) <= 4  # sorted within the group: near-equal lengths per batch
        tops = [int(lengths[b].max()) for b in batches]
        assert tops != sorted(tops, reverse=True)  # the batches' order is shuffled
    later = order(n=3 * rows)
    assert later[:rows] == epoch
    second = later[rows : 2 * rows]
    assert sorted(second) == list(range(rows)) and second != epoch
    assert order(start=5, n=20) == later[5:25]
    assert order(start=rows + 995, n=40) == later[rows + 995 : rows + 1035]  # across an epoch's end


# --- whole runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # 5 to 16 tokens: bins of 4 make micro-batches of 8, 12 and 16 positions.
    return tiny.setup(tmp_path_factory.mktemp("data"), files=2, per_file=60, dropout=False, min_length=5)


def _weights(output_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output_dir)))
    return {
        n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith(("bert/", "cls/"))
    }


def _largest_difference(a, b):
    assert set(a) == set(b)
    return max(float(np.max(np.abs(a[n] - b[n]))) for n in a)


@pytest.mark.slow
@pytest.mark.parametrize("accumulation, use_xla", [(3, True), (1, True), (3, False)])
def test_binned_updates_end_where_padded_updates_end(data, tmp_path, capsys, accumulation, use_xla):
    runs, compiled = {}, {}
    for bin_size in (0, 4):
        out = tmp_path / f"bin{bin_size}"
        flags = tiny.flags(
            data,
            out,
            bin_size=bin_size,
            num_accumulation_steps=accumulation,
            num_train_steps=5,
            use_xla=use_xla,
        )
        assert run_pretraining.main(flags) == 0
        runs[bin_size] = _weights(out)
        compiled[bin_size] = [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("Compiled the ")
        ]
    assert _largest_difference(runs[0], runs[4]) < 1e-5
    assert len(compiled[0]) == 1  # one shape padded
    # Each length compiles once, as a micro-step or stacked (at most 3 lengths of 5 to 16 tokens).
    assert 1 < len(compiled[4]) == len(set(compiled[4])) <= 2 * 3
    if accumulation > 1:
        assert any("micro-step" in line for line in compiled[4]), compiled[4]


def test_an_update_of_alike_lengths_runs_stacked_at_its_longest():
    from training.train_step import _stacked_or_none

    def batch(length):
        return {
            "input_ids": tf.ones([2, length], tf.int32),
            "input_mask": tf.ones([2, length], tf.int32),
            "segment_ids": tf.zeros([2, length], tf.int32),
            "masked_lm_positions": tf.ones([2, 3], tf.int32),
        }

    assert _stacked_or_none([batch(64), batch(16), batch(16)]) is None  # binned saves half
    alike = _stacked_or_none([batch(64), batch(64), batch(56)])
    assert [b["input_ids"].shape.as_list() for b in alike] == [[2, 64]] * 3
    np.testing.assert_array_equal(alike[2]["input_mask"].numpy()[:, 56:], 0)  # padding, masked
    assert alike[2]["masked_lm_positions"].shape.as_list() == [2, 3]


@pytest.mark.process
@pytest.mark.slow
def test_binned_and_packed_updates_on_two_horovod_workers_end_where_padded_ones_end(data, tmp_path):
    """Two Horovod workers, 2 micro-batches of 4 each per update, 8 updates: padded, binned and
    packed (training/packing.py) end within 1e-5 of each other. The packed run, its rows cut to
    bins of 4 on the two workers, is stopped by its STOP file after update 2 and continued by one
    process (2 x 2 micro-batches of 4 keep the global batch) in rows of the full length: packing
    on a changed worker count and layout resumes to the same weights too."""
    env = worker_env()
    runs = {}

    def command(out, **overrides):
        # Without XLA: the programs compiled per length are the single-worker runs' subject (above);
        # here each of four workers would compile them at once.
        values = dict(num_accumulation_steps=2, num_train_steps=8, save_checkpoints_steps=4, use_xla="false")
        return [run_pretraining.__file__, *tiny.flags(data, out, **{**values, **overrides})]

    for name, overrides in {"padded": {"bin_size": 0}, "binned": {"bin_size": 4}}.items():
        out = tmp_path / name
        done = subprocess.run(
            [*HOROVODRUN, *command(out, use_horovod="true", **overrides)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = _weights(out)
    packed = tmp_path / "packed"
    packing = {"bin_size": None, "packing": "true"}
    status, _, err = notice_after_step(
        [*HOROVODRUN, *command(packed, use_horovod="true", **{**packing, "bin_size": 4})],
        packed,
        env,
        2,
        lambda process: request_stop(str(packed)),
    )
    assert status != 0 and "Stopped for a preemption notice (STOP file)" in err, err[-3000:]
    stopped_at = int(tf.train.latest_checkpoint(str(packed)).rsplit("-", 1)[1])
    assert 2 <= stopped_at < 8
    done = subprocess.run(
        [sys.executable, *command(packed, **packing)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 worker(s) x 4 sequences x 4 micro-batch(es) per update keep it" in done.stdout, done.stdout[
        -3000:
    ]
    assert min(packed_rows(done.stdout)) < 4  # some micro-batches of 4 sequences packed into fewer rows
    runs["packed"] = _weights(packed)
    assert _largest_difference(runs["padded"], runs["binned"]) < 1e-5
    assert _largest_difference(runs["padded"], runs["packed"]) < 1e-5


@pytest.mark.slow
def test_binned_evaluation_equals_padded_evaluation(data, tmp_path):
    trained = tmp_path / "trained"
    assert run_pretraining.main(tiny.flags(data, trained, num_train_steps=2)) == 0
    results = {}
    for bin_size in (0, 4):
        out = tmp_path / f"eval{bin_size}"
        flags = tiny.flags(
            data,
            out,
            bin_size=bin_size,
            do_train="false",
            do_eval="true",
            init_checkpoint=trained,
            max_eval_steps=3,
        )
        assert run_pretraining.main(flags) == 0
        with open(out / "eval_results.json") as f:
            results[bin_size] = json.load(f)
    assert results[0].keys() == results[4].keys()
    for name, value in results[0].items():
        assert results[4][name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("value", ["-1", "17"])
def test_a_bad_bin_size_is_one_sentence_naming_the_flag(data, tmp_path, capsys, value):
    status = run_pretraining.main([*tiny.flags(data, tmp_path / "out"), f"--bin_size={value}"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "--bin_size" in err and value in err
    assert not os.path.exists(tmp_path / "out" / "ckpt-1.index")


def _predict(main, files, init, output_dir, *extra, **values):
    from finetuning_runs import _flags

    assert main(_flags(files, output_dir, *extra, init_checkpoint=init, **values)) == 0
    return output_dir


def test_binned_squad_prediction_writes_the_padded_run_s_predictions(model_files, squad_run, tmp_path):
    import run_squad
    from finetuning_runs import SQUAD_FLAGS, SQUAD_TRAIN

    runs = {
        bin_size: _predict(
            run_squad.main,
            model_files,
            squad_run["output"],
            tmp_path / f"bin{bin_size}",
            "--do_predict",
            "--do_eval",
            *SQUAD_FLAGS,
            predict_file=SQUAD_TRAIN,
            predict_batch_size=3,
            bin_size=bin_size,
        )
        for bin_size in (0, 8)
    }
    read = {
        b: {
            name: json.loads((out / name).read_text())
            for name in ("predictions.json", "nbest_predictions.json", "eval_results.json")
        }
        for b, out in runs.items()
    }
    assert read[0]["predictions.json"] == read[8]["predictions.json"]
    for question, nbest in read[0]["nbest_predictions.json"].items():
        binned = read[8]["nbest_predictions.json"][question]
        assert [c["text"] for c in binned] == [c["text"] for c in nbest]
        assert [c["probability"] for c in binned] == pytest.approx(
            [c["probability"] for c in nbest], abs=1e-5
        )
    for name in ("exact_match", "f1"):
        assert read[8]["eval_results.json"][name] == pytest.approx(
            read[0]["eval_results.json"][name], abs=1e-6
        )


def test_binned_glue_prediction_equals_padded_prediction(model_files, mrpc_run, tmp_path):
    import run_classifier
    from finetuning_runs import GLUE

    runs = {
        bin_size: _predict(
            run_classifier.main,
            model_files,
            mrpc_run["output"],
            tmp_path / f"bin{bin_size}",
            "--do_eval",
            task_name="MRPC",
            data_dir=GLUE,
            predict_batch_size=2,
            bin_size=bin_size,
        )
        for bin_size in (0, 8)
    }
    files = {b: (out / "dev_predictions.tsv").read_text() for b, out in runs.items()}
    assert files[0] == files[8] and files[0].count("\n") > 2
    results = {b: json.loads((out / "eval_results.json").read_text()) for b, out in runs.items()}
    assert results[0] == results[8]
