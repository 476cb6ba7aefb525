"""training/packing.py: sequences of one update packed into rows (hand-checked layouts), and the
model on packed rows giving every sequence the outputs, loss sums and gradients it has unpacked."""

import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import packed_rows
from data.pretraining import schema
from tools import tiny_pretraining as tiny
from training import packing


def test_best_fit_decreasing_places_each_sequence_in_the_tightest_row():
    # Longest first: 128 fills row 0; 100 opens row 1 (28 free), 60 row 2 (68 free); 50 fits row
    # 2 best (18 left); 30 fits neither (28, 18): row 3; 28 fills row 1; 10 goes to row 2 (18).
    lengths = [100, 30, 28, 60, 50, 128, 10]
    assert packing.pack(lengths, [1] * 7, 128, 8, 28) == [[5], [0, 2], [3, 4, 6], [1]]
    # At most 2 sequences a row: 10 goes to row 3 instead.
    assert packing.pack(lengths, [1] * 7, 128, 2, 28) == [[5], [0, 2], [3, 4], [1, 6]]
    # At most 5 predictions a row: 28 (4 predictions) cannot join 100's row (2).
    predictions = [2, 1, 4, 1, 1, 1, 1]
    assert packing.pack(lengths, predictions, 128, 8, 5) == [[5], [0], [3, 4, 6], [1, 2]]
    # Equal lengths keep their order.
    assert packing.pack([64, 64, 64], [1, 1, 1], 128, 8, 28) == [[0, 1], [2]]


def test_a_sequence_longer_than_a_row_or_over_the_predictions_is_refused():
    with pytest.raises(ValueError, match="within 1..128"):
        packing.pack([129], [1], 128, 8, 28)
    with pytest.raises(ValueError, match="more than 28"):
        packing.pack([100], [29], 128, 8, 28)


def test_rows_are_dealt_as_a_snake_to_micro_batches_of_one_row_count():
    # Tokens of the rows: 128, 128, 120, 30 -> slots 0, 1, 1, 0.
    rows = [[5], [0, 2], [3, 4, 6], [1]]
    lengths = [100, 30, 28, 60, 50, 128, 10]
    assert packing.deal(rows, lengths, 2, 1, 4) == (2, [[0, 3], [1, 2]])
    # 4 rows over 2 workers x 2 micro-batches: one row each.
    count, slots = packing.deal(rows, lengths, 2, 2, 4)
    assert count == 1 and sorted(r for slot in slots for r in slot) == [0, 1, 2, 3]
    # Row counts are multiples of the quantum: B = 32 -> 2; 3 rows in one micro-batch -> 4.
    assert packing.row_quantum(32) == 2 and packing.deal(rows[:3], lengths, 1, 1, 32)[0] == 4
    assert packing.row_counts(32) == tuple(range(2, 33, 2)) and packing.row_counts(4) == (1, 2, 3, 4)


def test_rows_for_bins_are_dealt_in_runs_emptiest_first_as_a_snake_over_workers():
    rows = [[5], [0, 2], [3, 4, 6], [1]]  # tokens 128, 128, 120, 30
    lengths = [100, 30, 28, 60, 50, 128, 10]
    # Sorted by tokens (ties by index): rows 3, 2, 0, 1. 2 workers x 1 micro-batch of 2 rows:
    # worker 0 takes the emptier run, worker 1 the fuller.
    assert packing.deal(rows, lengths, 2, 1, 4, by_length=True) == (2, [[3, 2], [0, 1]])
    # 2 workers x 2 micro-batches of one row: round 0 to workers 0, 1; round 1 to workers 1, 0
    # (slot j x W + r).
    assert packing.deal(rows, lengths, 2, 2, 4, by_length=True) == (1, [[3], [2], [1], [0]])
    # Rounded up to 4 rows for 3: the empty row comes first, so it shares the emptiest run.
    assert packing.deal(rows[:3], lengths, 1, 1, 32, by_length=True) == (4, [[2, 0, 1]])


def _features(sequences, S, P):
    """Unpacked features of (tokens, segments, {position: label}, nsp label) tuples."""
    G = len(sequences)
    f = {name: np.zeros((G, S), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    f["masked_lm_positions"] = np.zeros((G, P), np.int32)
    f["masked_lm_ids"] = np.zeros((G, P), np.int32)
    f["masked_lm_weights"] = np.zeros((G, P), np.float32)
    f["next_sentence_labels"] = np.zeros((G, 1), np.int32)
    for g, (tokens, segments, masked, label) in enumerate(sequences):
        n = len(tokens)
        f["input_ids"][g, :n], f["segment_ids"][g, :n], f["input_mask"][g, :n] = tokens, segments, 1
        for j, (position, masked_label) in enumerate(sorted(masked.items())):
            f["masked_lm_positions"][g, j], f["masked_lm_ids"][g, j] = position, masked_label
            f["masked_lm_weights"][g, j] = 1.0
        f["next_sentence_labels"][g, 0] = label
    return f


def test_a_packed_row_keeps_each_sequences_tokens_positions_predictions_and_cls():
    sequences = [
        ([2, 10, 3, 11, 3], [0, 0, 0, 1, 1], {1: 50}, 1),
        ([2, 20, 21, 3, 22, 3], [0, 0, 0, 0, 1, 1], {2: 51, 4: 52}, 0),
        ([2, 30, 3, 31, 32, 33, 3], [0, 0, 0, 1, 1, 1, 1], {5: 53}, 1),
    ]
    features = _features(sequences, 16, 3)
    out = packing.layout(features, [[1, 0], [2]], 3, 16, 4, 6)
    assert out["input_ids"][0].tolist() == [2, 20, 21, 3, 22, 3, 2, 10, 3, 11, 3] + [0] * 5
    assert out["segment_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1] + [0] * 5
    assert out["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4] + [0] * 5
    assert out["sequence_ids"][0].tolist() == [1] * 6 + [2] * 5 + [0] * 5
    assert out["input_mask"][0].tolist() == [1] * 11 + [0] * 5
    assert out["masked_lm_positions"][0].tolist() == [2, 4, 7, 0, 0, 0]  # sequence 0's 1 -> 6 + 1
    assert out["masked_lm_ids"][0].tolist() == [51, 52, 50, 0, 0, 0]
    assert out["masked_lm_weights"][0].tolist() == [1, 1, 1, 0, 0, 0]
    assert out["cls_positions"][0].tolist() == [0, 6, 0, 0]
    assert out["next_sentence_labels"][0].tolist() == [0, 1, 0, 0]
    assert out["next_sentence_weights"][0].tolist() == [1, 1, 0, 0]
    assert out["input_ids"][1, :7].tolist() == [2, 30, 3, 31, 32, 33, 3]
    assert out["masked_lm_positions"][1, 0] == 5 and out["cls_positions"][1, 0] == 0
    # The third row is empty: all padding, no sequence.
    assert not out["input_mask"][2].any() and not out["next_sentence_weights"][2].any()


def _update(G, S, P, seed):
    """G of the tests' tiny records (lengths 5..S), parsed: an update's unpacked features."""
    rng = random.Random(seed)
    records = [tiny.example(rng, seq=S, predictions=P, min_length=5) for _ in range(G)]
    return {k: v.numpy() for k, v in schema.parse_examples(tf.constant(records), S, P).items()}


def test_an_update_packs_into_fewer_rows_with_every_sequence_once():
    S, P, B, W, k = 16, 4, 8, 2, 2
    features = _update(W * k * B, S, P, seed=3)
    batches = [m for r in range(W) for m in packing.pack_update(features, W, r, k, B)]
    rows = {len(m["input_ids"]) for m in batches}
    assert len(rows) == 1 and rows.pop() < B  # one row count, fewer rows than sequences
    assert sum(float(m["next_sentence_weights"].sum()) for m in batches) == W * k * B
    real = sum(int(m["input_mask"].sum()) for m in batches)
    assert real == int(features["input_mask"].sum())
    masked = sum(float(m["masked_lm_weights"].sum()) for m in batches)
    assert masked == float(features["masked_lm_weights"].sum())
    # Every sequence's token ids appear once, in one row, in order.
    found = sorted(
        tuple(m["input_ids"][r][m["sequence_ids"][r] == s])
        for m in batches
        for r in range(len(m["input_ids"]))
        for s in range(1, packing.MAX_SEQUENCES + 1)
        if (m["sequence_ids"][r] == s).any()
    )
    expected = sorted(
        tuple(ids[mask > 0]) for ids, mask in zip(features["input_ids"], features["input_mask"])
    )
    assert found == expected


def test_the_model_gives_packed_sequences_their_unpacked_outputs_losses_and_gradients():
    from bert.pretraining import BertPretrainer
    from training.pretraining_objective import PretrainingObjective

    S, P, G = 16, 4, 12
    features = _update(G, S, P, seed=5)
    model = BertPretrainer(tiny.tiny_bert_config(dropout=False))
    objective = PretrainingObjective()
    (packed,) = packing.pack_update(features, 1, 0, 1, G)
    assert len(packed["input_ids"]) < G

    def run(batch):
        batch = {k: tf.constant(v) for k, v in batch.items()}
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            sums = objective(outputs, batch)
            loss = sums["mlm_loss"] + sums["nsp_loss"]
        return outputs, sums, objective.denominators(batch), tape.gradient(loss, model.trainable_variables)

    padded_out, padded_sums, padded_counts, padded_grads = run(features)
    packed_out, packed_sums, packed_counts, packed_grads = run(packed)
    for name in padded_counts:
        assert float(packed_counts[name]) == float(padded_counts[name])
    for name in padded_sums:
        np.testing.assert_allclose(
            float(packed_sums[name]), float(padded_sums[name]), rtol=1e-5, err_msg=name
        )
    # Each prediction's logits where it went; each sequence's NSP logits from its own [CLS].
    seq_ids = packed["sequence_ids"]
    for r in range(len(packed["input_ids"])):
        for slot in range(packing.MAX_SEQUENCES):
            if not packed["next_sentence_weights"][r, slot]:
                continue
            ids = packed["input_ids"][r][seq_ids[r] == slot + 1]
            g = next(
                g
                for g in range(G)
                if tuple(features["input_ids"][g][features["input_mask"][g] > 0]) == tuple(ids)
            )
            np.testing.assert_allclose(
                packed_out["nsp_logits"][r, slot], padded_out["nsp_logits"][g], rtol=1e-5, atol=1e-5
            )
    for padded, packed_grad, variable in zip(padded_grads, packed_grads, model.trainable_variables):
        np.testing.assert_allclose(
            tf.convert_to_tensor(packed_grad),
            tf.convert_to_tensor(padded),
            rtol=1e-4,
            atol=1e-6,
            err_msg=variable.path,
        )


def _final_weights(output_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output_dir)))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith(("bert/", "cls/"))]
    return {n: reader.get_tensor(n) for n in names if not n.endswith(("/adam_m", "/adam_v"))}


@pytest.mark.slow
@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_packed_training_ends_where_padded_and_binned_training_ends(tmp_path, capsys, masking):
    """run_pretraining.py, dropout off, 6 updates of 2 micro-batches of 8 (records of 5 to 16
    tokens in rows of 16): --packing ends with the weights of the padded and the binned run
    within 1e-5, and each packed update computed fewer rows than sequences; packed with bins of 4,
    the micro-batches of partly filled rows are also cut to their bins (shorter than 16)."""
    import json

    import run_pretraining

    paths = tiny.setup(tmp_path / "data", per_file=60, dropout=False, min_length=5, masking=masking)
    runs = {
        "padded": {"bin_size": 0},
        "binned": {"bin_size": 4},
        "packed": {"bin_size": None, "packing": "true"},
        "packed and binned": {"bin_size": 4, "packing": "true"},
    }
    for name, overrides in runs.items():
        flags = tiny.flags(
            paths,
            tmp_path / name,
            train_batch_size=8,
            num_accumulation_steps=2,
            num_train_steps=6,
            save_checkpoints_steps=6,
            do_eval="false",
            use_xla="false",
            **overrides,
        )
        assert run_pretraining.main(flags) == 0, name
        # Packed updates ran as at most 8 rows for their 8 sequences a micro-batch, some fewer (the compiled
        # shapes' first two axes: micro-batches x rows).
        out = capsys.readouterr().out
        if name == "packed":
            rows = packed_rows(out)  # never more than 8, some fewer
            assert max(rows) <= 8 and min(rows) < 8, out[-2000:]
        if name == "packed and binned":  # micro-steps of R x L, or updates of 2 x R x L
            shapes = [
                [int(n) for n in line.split()[3].split("x")[-2:]]
                for line in out.splitlines()
                if line.startswith("Compiled the ")
            ]
            assert max(r for r, _ in shapes) <= 8 and min(length for _, length in shapes) < 16, out[-2000:]
    padded = _final_weights(tmp_path / "padded")
    for name in ("binned", "packed", "packed and binned"):
        other = _final_weights(tmp_path / name)
        assert set(other) == set(padded)
        for variable, value in padded.items():
            np.testing.assert_allclose(
                other[variable], value, rtol=0, atol=1e-5, err_msg=f"{name} {variable}"
            )
    with open(tmp_path / "packed" / "log.jsonl") as f:
        logged = [json.loads(line) for line in f]
    with open(tmp_path / "padded" / "log.jsonl") as f:
        expected = [json.loads(line) for line in f]
    assert [r["step"] for r in logged] == [r["step"] for r in expected]
    for packed_row, padded_row in zip(logged, expected):
        assert packed_row["loss"] == pytest.approx(padded_row["loss"], rel=1e-5)


@pytest.mark.slow
def test_the_layout_padding_auto_picks_ends_where_padded_training_ends(tmp_path, capsys):
    """--padding auto's pick (training/layout_choice.py, here among padded, bins of 4 and 8, packed
    and packed + bins for records of 5 to 16 tokens in rows of 16) trains 4 updates of 2 x 8 to the
    padded run's weights within 1e-5, whatever it picks; on these short records it packs."""
    import glob

    import run_pretraining
    from bert.config import read_config_file
    from training import layout_choice
    from training.layout_choice import Layout

    paths = tiny.setup(tmp_path / "data", per_file=40, dropout=False, min_length=5)
    layouts = (Layout(0, False), Layout(4, False), Layout(8, False), Layout(0, True), Layout(4, True))
    chosen, _ = layout_choice.for_records(
        sorted(glob.glob(paths["input_files"])),
        read_config_file(paths["bert_config_file"]),
        tiny.SEQ,
        tiny.PREDICTIONS,
        8,
        2,
        layouts,
    )
    assert chosen.layout.packing
    common = dict(
        train_batch_size=8,
        num_accumulation_steps=2,
        num_train_steps=4,
        save_checkpoints_steps=4,
        do_eval="false",
        use_xla="false",
    )
    runs = {
        "padded": {"bin_size": 0},
        "auto": {"bin_size": chosen.layout.bin_size, "packing": str(chosen.layout.packing).lower()},
    }
    for name, overrides in runs.items():
        assert run_pretraining.main(tiny.flags(paths, tmp_path / name, **common, **overrides)) == 0, name
        capsys.readouterr()
    padded, auto = _final_weights(tmp_path / "padded"), _final_weights(tmp_path / "auto")
    assert set(auto) == set(padded)
    for variable, value in padded.items():
        np.testing.assert_allclose(auto[variable], value, rtol=0, atol=1e-5, err_msg=variable)
