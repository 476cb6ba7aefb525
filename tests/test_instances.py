"""Pretraining instances (data/pretraining/instances.py): truncation, NSP pairs and labels, options,
pinned against the transcription of Google's script."""

import random

import pytest

from common.errors import UserError
from data.pretraining import schema
from data.pretraining.instances import (
    InstanceOptions,
    create_instances_from_document,
    create_training_instances,
    truncate_seq_pair,
)
from pretraining_reference import (
    PINNED,
    STRINGS,
    TINY_VOCAB,
    ScriptedRng,
    google_create_training_instances,
    options,
)


def test_truncation_exact():
    a, b = list("abcde"), list("xy")
    rng = ScriptedRng(randoms=[0.3, 0.7, 0.4])
    truncate_seq_pair(a, b, 4, rng)
    # 7 > 4: a longer, 0.3 < 0.5 -> drop front -> bcde; 6 > 4: a, 0.7 -> drop back -> bcd;
    # 5 > 4: a (3 > 2), 0.4 -> drop front -> cd. Total 4: stop.
    assert a == ["c", "d"] and b == ["x", "y"]
    # Ties cut B.
    a, b = list("ab"), list("xy")
    truncate_seq_pair(a, b, 3, ScriptedRng(randoms=[0.9]))
    assert a == ["a", "b"] and b == ["x"]


def test_single_sentence_chunk_is_always_random_next_with_label_1():
    docs = [[["a", "b"]], [["x", "y"], ["y"]]]
    # Document 0: target 13 (random() 0.5 >= short_seq_prob 0). One sentence -> random next
    # without the coin; random document: randint -> 0 (itself) then 1; start sentence 1.
    rng = ScriptedRng(randoms=[0.5, 0.0], randints=[0, 1, 1])
    instances = create_instances_from_document(docs, 0, rng, options(), STRINGS)
    assert len(instances) == 1
    inst = instances[0]
    assert inst.is_random_next is True
    assert inst.tokens == ["[CLS]", "[MASK]", "b", "[SEP]", "y", "[SEP]"]
    assert inst.masked_lm_positions == [1] and inst.masked_lm_labels == ["a"]
    assert inst.segment_ids == [0, 0, 0, 0, 1, 1]
    assert rng.calls == ["random", "randint(0,1)", "randint(0,1)", "randint(0,1)", "shuffle(3)", "random"]
    assert schema.pad_features(
        [TINY_VOCAB[t] for t in inst.tokens],
        inst.segment_ids,
        inst.masked_lm_positions,
        [TINY_VOCAB[t] for t in inst.masked_lm_labels],
        inst.is_random_next,
        16,
        3,
    )["next_sentence_labels"] == [1]


def test_actual_next_has_label_0_and_random_next_puts_segments_back():
    doc = [["a"], ["b"], ["c"], ["d"]]
    other = [["x"], ["y"]]
    docs = [doc, other]
    o = options(max_seq_length=7)  # max_num_tokens 4 = target
    rng = ScriptedRng(
        randoms=[
            0.9,  # target stays 4
            0.7,  # chunk a,b,c,d (4 >= 4): split a_end=2, coin 0.7 -> actual next
            0.0,
        ],  # mask coin
        randints=[2],
    )
    instances = create_instances_from_document(docs, 0, rng, o, STRINGS)
    assert [i.is_random_next for i in instances] == [False]
    assert instances[0].tokens == ["[CLS]", "[MASK]", "b", "[SEP]", "c", "d", "[SEP]"]

    rng = ScriptedRng(
        randoms=[
            0.9,
            0.2,  # coin < 0.5 -> random next: a_end=1 ("a"), b..d go back
            0.0,  # mask
            0.6,  # next chunk b,c,d (3 sentences, document end): coin -> actual next
            0.0,
        ],  # mask
        randints=[
            1,  # a_end
            1,
            0,  # random document 1, start sentence 0 (takes x, y: target 4-1=3)
            1,
        ],
    )  # a_end for b | c d
    instances = create_instances_from_document(docs, 0, rng, o, STRINGS)
    assert [i.is_random_next for i in instances] == [True, False]
    assert instances[0].tokens == ["[CLS]", "[MASK]", "[SEP]", "x", "y", "[SEP]"]
    assert instances[1].tokens == ["[CLS]", "[MASK]", "[SEP]", "c", "d", "[SEP]"]
    assert instances[1].masked_lm_labels == ["b"] and rng.done()


def test_short_target_and_empty_documents():
    docs = [[], [["a", "b", "c"], []], [["x", "y", "##z"]]]
    rng = random.Random(7)
    instances = create_training_instances(docs, rng, options(dupe_factor=2, short_seq_prob=1.0), STRINGS)
    # Two documents survive; each makes one instance per pass (one sentence each).
    assert len(instances) == 4 and all(i.is_random_next for i in instances)
    for inst in instances:
        a = inst.tokens[1 : inst.tokens.index("[SEP]")]
        assert len(a) >= 1 and len(inst.tokens) <= 16


def test_pinned_first_instances_with_seed():
    """A regression pin: the first instances for seed 12345 on a tiny corpus (values from this
    implementation, cross-checked by the transcription test below)."""
    docs = [[["a", "b", "c"], ["d", "e"], ["f", "g", "h"]], [["x", "y"], ["un", "##aff", "##able"]]]
    o = options(max_seq_length=12, max_predictions_per_seq=2, masked_lm_prob=0.2, dupe_factor=1)
    rng = random.Random(12345)
    instances = create_training_instances(docs, rng, o, STRINGS)
    got = [
        (i.tokens, i.segment_ids, i.is_random_next, i.masked_lm_positions, i.masked_lm_labels)
        for i in instances
    ]
    transcribed = google_create_training_instances(
        docs, random.Random(12345), 12, 1, 0.0, 0.2, 2, list(TINY_VOCAB), False
    )
    assert got == [
        (i.tokens, i.segment_ids, i.is_random_next, i.masked_lm_positions, i.masked_lm_labels)
        for i in transcribed
    ]
    assert got == PINNED


def test_options_are_validated():
    with pytest.raises(UserError, match=r"^--max_seq_length must be at least 5 \(got 4\)\.$"):
        InstanceOptions(max_seq_length=4)
    with pytest.raises(UserError, match=r"^--masked_lm_prob must be a number in \[0, 1\] \(got 1\.5\)\.$"):
        InstanceOptions(masked_lm_prob=1.5)
    with pytest.raises(UserError, match=r"^--dupe_factor must be a positive integer \(got 0\)\.$"):
        InstanceOptions(dupe_factor=0)
    with pytest.raises(UserError, match=r"^--max_predictions_per_seq=9 exceeds --max_seq_length=8\.$"):
        InstanceOptions(max_seq_length=8, max_predictions_per_seq=9)
