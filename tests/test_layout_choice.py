"""training/layout_choice.py: the layout --padding auto predicts cheapest from the records' lengths,
and the real tokens it reads from a record without TensorFlow."""

import numpy as np
import pytest

from data.pretraining import schema
from training import layout_choice as lc
from training.layout_choice import Layout

# configs/bert_small.json with the quickstart's 2048-token vocab, phase 2's 80 predictions
SMALL = lc.CostModel.of(hidden=512, intermediate=2048, layers=4, heads=8, vocab=2048, predictions=80)


def _pick(lengths, S=512, P=80, B=8, k=4, model=SMALL):
    predictions = lc.predict(lengths, model, S, P, B, k)
    return lc.choose(predictions), predictions


def test_many_short_documents_among_long_ones_are_packed():
    rng = np.random.default_rng(0)
    short, long = rng.integers(30, 120, size=1400), rng.integers(300, 513, size=600)
    lengths = rng.permutation(np.concatenate([short, long]))  # a third of the real positions
    chosen, predictions = _pick(lengths)  # the quickstart preset's phase 2: 8 x 4
    assert chosen.layout == Layout(0, True)
    padded = predictions[0]
    assert padded.layout == Layout(0, False)
    assert chosen.real_share > 0.8 and padded.real_share < 0.4
    assert padded.cost / chosen.cost > 2
    # Rows cut to bins hold more real tokens but pay PACKED_BINS_OVERHEAD
    binned = next(p for p in predictions if p.layout == Layout(32, True))
    assert binned.real_share > chosen.real_share and binned.cost > chosen.cost


def test_long_sequences_stay_padded_and_a_long_tail_of_lengths_takes_bins():
    rng = np.random.default_rng(1)
    full = rng.integers(500, 513, size=2000)
    chosen, predictions = _pick(full)
    assert chosen.layout == Layout(0, False)  # every layout within the tie of padding: the simplest
    # Lengths spread evenly over 256..512: no two fit a row, so packing only adds its overhead;
    # sorted micro-batches cut to bins save the positions past each one's longest.
    spread = rng.integers(257, 513, size=2000)
    chosen, predictions = _pick(spread)
    assert not chosen.layout.packing and chosen.layout.bin_size > 0


def test_the_padded_share_is_the_real_tokens_over_every_position():
    lengths = np.full(100, 128)
    predictions = lc.predict(lengths, SMALL, 512, 80, 8, 4)
    shares = {p.layout: p.real_share for p in predictions}
    assert shares[Layout(0, False)] == pytest.approx(0.25)
    assert shares[Layout(64, False)] == pytest.approx(128 / 128)  # one bin of 128 holds them exactly
    assert shares[Layout(0, True)] == pytest.approx(1.0)  # four to a row of 512


def test_cost_counts_positions_pairs_rows_and_micro_batches():
    model = lc.CostModel(per_position=2.0, per_pair=0.5, per_row=7.0, per_micro_batch=11.0)
    # 3 rows of 4: 3 x (2 x 4 + 0.5 x 16 + 7) + 11
    assert model.micro_batch(3, 4) == 3 * (8 + 8 + 7) + 11
    # a 128-token micro-batch of 8 rows costs less than one of 8 x 512 (positions and attention)
    assert SMALL.micro_batch(8, 128) < SMALL.micro_batch(8, 512) / 4


def test_the_description_names_the_choice_and_every_layouts_share():
    chosen, predictions = _pick(np.random.default_rng(2).integers(20, 90, size=500))
    text = lc.describe(chosen, predictions)
    assert chosen.layout == Layout(32, False)  # 4 micro-batches of 8 this short: packed rows are half empty
    assert text.startswith(f"{chosen.layout.name} (predicted real-token share {chosen.real_share:.2f}, ")
    assert "padded 0.1" in text and "bins 64 " in text and "packed+128 " in text


@pytest.mark.parametrize("real", [1, 7, 300, 512])
def test_real_tokens_are_read_from_a_record_without_tensorflow(real):
    ids = [2] + [5] * (real - 2) + [3] if real > 1 else [2]
    features = schema.pad_features(ids, [0] * real, [0], [5], False, 512, 80)
    features[schema.INPUT_MASK] = [1] * real + [0] * (512 - real)
    assert schema.real_tokens(schema.serialize_example(features)) == real


def test_a_record_without_an_input_mask_is_refused():
    with pytest.raises(ValueError, match="input_mask"):
        schema.real_tokens(b"")
