"""Masked-LM predictions (data/pretraining/masking.py): hand-checked cases with every draw fixed."""

from data.pretraining.masking import create_masked_lm_predictions, num_to_predict
from pretraining_reference import STRINGS, ScriptedRng


def test_num_to_predict_rounds_half_to_even_and_clamps():
    assert num_to_predict(10, 0.15, 20) == 2  # 1.5 -> 2
    assert num_to_predict(5, 0.5, 20) == 2  # 2.5 -> 2 (Python's round)
    assert num_to_predict(7, 0.5, 20) == 4  # 3.5 -> 4
    assert num_to_predict(3, 0.0, 20) == 1  # at least one
    assert num_to_predict(128, 0.15, 20) == 19 and num_to_predict(512, 0.15, 20) == 20


def test_masking_80_10_10_with_every_draw_fixed():
    tokens = ["[CLS]", "a", "b", "[SEP]", "c", "d", "e", "[SEP]"]
    # 8 tokens * 0.5 = 4 predictions. Candidates 1,2,4,5,6 shuffled to 6,1,5,2,4.
    rng = ScriptedRng(
        randoms=[
            0.1,  # position 6: < 0.8 -> [MASK]
            0.9,
            0.2,  # position 1: keep the original
            0.9,
            0.7,  # position 5: a random word ...
            0.5,
        ],  # position 2: [MASK]
        randints=[16],  # ... vocab_words[16] = "x"
        permutations=[[4, 0, 3, 1, 2]],
    )
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS
    )
    assert out == ["[CLS]", "a", "[MASK]", "[SEP]", "c", "x", "[MASK]", "[SEP]"]
    assert positions == [1, 2, 5, 6] and labels == ["a", "b", "d", "e"]
    assert rng.calls == ["shuffle(5)"] + ["random"] * 5 + ["randint(0,18)", "random"]
    assert rng.done()


def test_masking_never_touches_cls_and_sep_and_respects_the_cap():
    tokens = ["[CLS]", "a", "[SEP]", "b", "c", "[SEP]"]
    rng = ScriptedRng(randoms=[0.0] * 3)
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=1.0, max_predictions_per_seq=3, vocab=STRINGS
    )
    assert out == ["[CLS]", "[MASK]", "[SEP]", "[MASK]", "[MASK]", "[SEP]"]
    assert positions == [1, 3, 4] and labels == ["a", "b", "c"]


def test_whole_word_masking_groups_pieces_even_across_sep():
    tokens = ["[CLS]", "un", "##aff", "##able", "[SEP]", "##z", "x", "[SEP]"]
    # Groups: [1, 2, 3, 5] ("##z" joins the last group, as in the reference) and [6].
    # 8 * 0.5 = 4 predictions: the whole 4-piece word fits exactly.
    rng = ScriptedRng(randoms=[0.0] * 4, permutations=[[0, 1]])
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS, do_whole_word_mask=True
    )
    assert positions == [1, 2, 3, 5] and labels == ["un", "##aff", "##able", "##z"]
    assert out == ["[CLS]", "[MASK]", "[MASK]", "[MASK]", "[SEP]", "[MASK]", "x", "[SEP]"]
    # With room for 3 only, the 4-piece word is skipped (not cut) and "x" is masked.
    rng = ScriptedRng(randoms=[0.0], permutations=[[0, 1]])
    _, positions, _ = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=3, vocab=STRINGS, do_whole_word_mask=True
    )
    assert positions == [6]
    # Without whole-word masking every piece is its own candidate.
    rng = ScriptedRng(randoms=[0.0] * 4)
    _, positions, _ = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS
    )
    assert rng.calls[0] == "shuffle(5)" and positions == [1, 2, 3, 5]
