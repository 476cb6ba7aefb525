"""Instance creation and the create_pretraining_data writer.

Three kinds of evidence:
- hand-checked cases on tiny vocabularies with a scripted rng (every draw fixed), which pin
  the reference's rules: the 80/10/10 split, truncation, random-next labels, whole words;
- an independent transcription of Google's create_pretraining_data.py (string tokens, the
  tokenizer's `tokenize`, Google's writer) below, against which the files we write are
  compared example for example on a few-hundred-line corpus with a real vocabulary;
- the C fast path against the pure-Python path: the same bytes.
"""

import collections
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from bert.tokenization import build_tokenizer
from data import create_pretraining_data as cpd
from data import instances_native, schema
from data.create_pretraining_data import _create_training_files, create_training_files, read_documents
from data.instances import (InstanceOptions, TrainingInstance, create_instances_from_document,
                            create_training_instances, truncate_seq_pair)
from data.masking import MaskingVocab, create_masked_lm_predictions, num_to_predict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g", "h",
               "un", "##aff", "##able", "x", "y", "##z"]
TINY_VOCAB = {t: i for i, t in enumerate(TINY_TOKENS)}
STRINGS = MaskingVocab.of_strings(TINY_VOCAB)


def native_or_skip():
    lib = instances_native.load(required=False)
    if lib is None:
        pytest.skip(f"no native helper: {instances_native.unavailable_reason()}")
    return lib


class ScriptedRng:
    """An rng whose every draw is given: random() and randint() pop from scripts (randint
    checks its bounds), shuffle() applies the given permutations (identity when none left)."""

    def __init__(self, randoms=(), randints=(), permutations=()):
        self.randoms, self.randints, self.permutations = list(randoms), list(randints), list(permutations)
        self.calls = []

    def random(self):
        self.calls.append("random")
        return self.randoms.pop(0)

    def randint(self, a, b):
        value = self.randints.pop(0)
        assert a <= value <= b, (a, b, value)
        self.calls.append(f"randint({a},{b})")
        return value

    def shuffle(self, x):
        self.calls.append(f"shuffle({len(x)})")
        if self.permutations:
            order = self.permutations.pop(0)
            x[:] = [x[i] for i in order]

    def done(self):
        return not self.randoms and not self.randints


# ---- hand-checked rules ---------------------------------------------------------------------


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
        randoms=[0.1,          # position 6: < 0.8 -> [MASK]
                 0.9, 0.2,     # position 1: keep the original
                 0.9, 0.7,     # position 5: a random word ...
                 0.5],         # position 2: [MASK]
        randints=[16],         # ... vocab_words[16] = "x"
        permutations=[[4, 0, 3, 1, 2]])
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS)
    assert out == ["[CLS]", "a", "[MASK]", "[SEP]", "c", "x", "[MASK]", "[SEP]"]
    assert positions == [1, 2, 5, 6] and labels == ["a", "b", "d", "e"]
    assert rng.calls == ["shuffle(5)"] + ["random"] * 5 + ["randint(0,18)", "random"]
    assert rng.done()


def test_masking_never_touches_cls_and_sep_and_respects_the_cap():
    tokens = ["[CLS]", "a", "[SEP]", "b", "c", "[SEP]"]
    rng = ScriptedRng(randoms=[0.0] * 3)
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=1.0, max_predictions_per_seq=3, vocab=STRINGS)
    assert out == ["[CLS]", "[MASK]", "[SEP]", "[MASK]", "[MASK]", "[SEP]"]
    assert positions == [1, 3, 4] and labels == ["a", "b", "c"]


def test_whole_word_masking_groups_pieces_even_across_sep():
    tokens = ["[CLS]", "un", "##aff", "##able", "[SEP]", "##z", "x", "[SEP]"]
    # Groups: [1, 2, 3, 5] ("##z" joins the last group, as in the reference) and [6].
    # 8 * 0.5 = 4 predictions: the whole 4-piece word fits exactly.
    rng = ScriptedRng(randoms=[0.0] * 4, permutations=[[0, 1]])
    out, positions, labels = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS, do_whole_word_mask=True)
    assert positions == [1, 2, 3, 5] and labels == ["un", "##aff", "##able", "##z"]
    assert out == ["[CLS]", "[MASK]", "[MASK]", "[MASK]", "[SEP]", "[MASK]", "x", "[SEP]"]
    # With room for 3 only, the 4-piece word is skipped (not cut) and "x" is masked.
    rng = ScriptedRng(randoms=[0.0], permutations=[[0, 1]])
    _, positions, _ = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=3, vocab=STRINGS, do_whole_word_mask=True)
    assert positions == [6]
    # Without whole-word masking every piece is its own candidate.
    rng = ScriptedRng(randoms=[0.0] * 4)
    _, positions, _ = create_masked_lm_predictions(
        tokens, rng, masked_lm_prob=0.5, max_predictions_per_seq=20, vocab=STRINGS)
    assert rng.calls[0] == "shuffle(5)" and positions == [1, 2, 3, 5]


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


def options(**kw):
    base = dict(max_seq_length=16, max_predictions_per_seq=3, masked_lm_prob=0.0, short_seq_prob=0.0,
                dupe_factor=1)
    base.update(kw)
    return InstanceOptions(**base)


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
    assert schema.pad_features([TINY_VOCAB[t] for t in inst.tokens], inst.segment_ids,
                               inst.masked_lm_positions, [TINY_VOCAB[t] for t in inst.masked_lm_labels],
                               inst.is_random_next, 16, 3)["next_sentence_labels"] == [1]


def test_actual_next_has_label_0_and_random_next_puts_segments_back():
    doc = [["a"], ["b"], ["c"], ["d"]]
    other = [["x"], ["y"]]
    docs = [doc, other]
    o = options(max_seq_length=7)  # max_num_tokens 4 = target
    rng = ScriptedRng(
        randoms=[0.9,        # target stays 4
                 0.7,        # chunk a,b,c,d (4 >= 4): split a_end=2, coin 0.7 -> actual next
                 0.0],       # mask coin
        randints=[2])
    instances = create_instances_from_document(docs, 0, rng, o, STRINGS)
    assert [i.is_random_next for i in instances] == [False]
    assert instances[0].tokens == ["[CLS]", "[MASK]", "b", "[SEP]", "c", "d", "[SEP]"]

    rng = ScriptedRng(
        randoms=[0.9,
                 0.2,        # coin < 0.5 -> random next: a_end=1 ("a"), b..d go back
                 0.0,        # mask
                 0.6,        # next chunk b,c,d (3 sentences, document end): coin -> actual next
                 0.0],       # mask
        randints=[1,         # a_end
                  1, 0,      # random document 1, start sentence 0 (takes x, y: target 4-1=3)
                  1])        # a_end for b | c d
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
        a = inst.tokens[1:inst.tokens.index("[SEP]")]
        assert len(a) >= 1 and len(inst.tokens) <= 16


def test_pinned_first_instances_with_seed():
    """A regression pin: the first instances for seed 12345 on a tiny corpus (values from this
    implementation, cross-checked by the transcription test below)."""
    docs = [[["a", "b", "c"], ["d", "e"], ["f", "g", "h"]], [["x", "y"], ["un", "##aff", "##able"]]]
    o = options(max_seq_length=12, max_predictions_per_seq=2, masked_lm_prob=0.2, dupe_factor=1)
    rng = random.Random(12345)
    instances = create_training_instances(docs, rng, o, STRINGS)
    got = [(i.tokens, i.segment_ids, i.is_random_next, i.masked_lm_positions, i.masked_lm_labels)
           for i in instances]
    transcribed = google_create_training_instances(docs, random.Random(12345), 12, 1, 0.0, 0.2, 2,
                                                   list(TINY_VOCAB), False)
    assert got == [(i.tokens, i.segment_ids, i.is_random_next, i.masked_lm_positions, i.masked_lm_labels)
                   for i in transcribed]
    assert got == PINNED


# ---- an independent transcription of Google's create_pretraining_data.py --------------------


def google_create_training_instances(all_documents, rng, max_seq_length, dupe_factor, short_seq_prob,
                                     masked_lm_prob, max_predictions_per_seq, vocab_words,
                                     do_whole_word_mask):
    all_documents = [x for x in all_documents if x]
    rng.shuffle(all_documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(google_create_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng, do_whole_word_mask))
    rng.shuffle(instances)
    return instances


def google_create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob,
                                          masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
                                          do_whole_word_mask):
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                is_random_next = False
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1
                assert len(tokens_b) >= 1
                tokens = []
                segment_ids = []
                tokens.append("[CLS]")
                segment_ids.append(0)
                for token in tokens_a:
                    tokens.append(token)
                    segment_ids.append(0)
                tokens.append("[SEP]")
                segment_ids.append(0)
                for token in tokens_b:
                    tokens.append(token)
                    segment_ids.append(1)
                tokens.append("[SEP]")
                segment_ids.append(1)
                (tokens, masked_lm_positions, masked_lm_labels) = google_create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask)
                instances.append(TrainingInstance(tokens, segment_ids, is_random_next, masked_lm_positions,
                                                  masked_lm_labels))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


GoogleMaskedLm = collections.namedtuple("GoogleMaskedLm", ["index", "label"])


def google_create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
                                        do_whole_word_mask):
    cand_indexes = []
    for (i, token) in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if do_whole_word_mask and len(cand_indexes) >= 1 and token.startswith("##"):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        is_any_index_covered = False
        for index in index_set:
            if index in covered_indexes:
                is_any_index_covered = True
                break
        if is_any_index_covered:
            continue
        for index in index_set:
            covered_indexes.add(index)
            masked_token = None
            if rng.random() < 0.8:
                masked_token = "[MASK]"
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(GoogleMaskedLm(index=index, label=tokens[index]))
    assert len(masked_lms) <= num_to_predict
    masked_lms = sorted(masked_lms, key=lambda x: x.index)
    masked_lm_positions = []
    masked_lm_labels = []
    for p in masked_lms:
        masked_lm_positions.append(p.index)
        masked_lm_labels.append(p.label)
    return (output_tokens, masked_lm_positions, masked_lm_labels)


def google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def google_read_documents(input_files, tokenizer):
    all_documents = [[]]
    for input_file in input_files:
        with open(input_file, "rb") as reader:
            # TF's GFile yields lines split at b"\n" only.
            for raw in reader.read().split(b"\n"):
                line = raw.decode("utf-8").strip()
                if not line:
                    all_documents.append([])
                else:
                    tokens = tokenizer.tokenize(line)
                    if tokens:
                        all_documents[-1].append(tokens)
    return all_documents


def google_examples(instances, vocab, max_seq_length, max_predictions_per_seq, n_outputs):
    """Google's write_instance_to_example_files, as lists of feature dicts per output file."""
    outputs = [[] for _ in range(n_outputs)]
    for k, instance in enumerate(instances):
        input_ids = [vocab[t] for t in instance.tokens]
        input_mask = [1] * len(input_ids)
        segment_ids = list(instance.segment_ids)
        while len(input_ids) < max_seq_length:
            input_ids.append(0)
            input_mask.append(0)
            segment_ids.append(0)
        masked_lm_positions = list(instance.masked_lm_positions)
        masked_lm_ids = [vocab[t] for t in instance.masked_lm_labels]
        masked_lm_weights = [1.0] * len(masked_lm_ids)
        while len(masked_lm_positions) < max_predictions_per_seq:
            masked_lm_positions.append(0)
            masked_lm_ids.append(0)
            masked_lm_weights.append(0.0)
        outputs[k % n_outputs].append({
            "input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "masked_lm_positions": masked_lm_positions, "masked_lm_ids": masked_lm_ids,
            "masked_lm_weights": masked_lm_weights,
            "next_sentence_labels": [1 if instance.is_random_next else 0]})
    return outputs


PINNED = [
    (["[CLS]", "un", "[MASK]", "[MASK]", "[SEP]", "d", "e", "f", "g", "h", "[SEP]"],
     [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], True, [2, 3], ["##aff", "##able"]),
    (["[CLS]", "x", "y", "[SEP]", "[MASK]", "g", "[MASK]", "[SEP]"], [0, 0, 0, 0, 1, 1, 1, 1], True, [4, 6],
     ["f", "h"]),
    (["[CLS]", "[MASK]", "b", "c", "d", "e", "[SEP]", "f", "g", "h", "[SEP]"],
     [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], False, [1, 8], ["a", "g"]),
]


# ---- the real thing, against the transcription -----------------------------------------------

WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be or "
         "has had not but their first new two after one also who its they been have into more other than "
         "some when time most only about over such").split() + [
    "café", "Zürich", "naïve", "résumé", "東京", "日本語を", "ΣΟΦΙΑ", "Straße", "l’école", "e-mail", "U.S.",
    "$100", "3.14", "C++", "😀", "x" * 120, "antidisestablishmentarianism", "unaffable", "Müller-Lüdenscheidt",
    "İstanbul", "a\u0301b", "ﬁne", "\u00a0nbsp", "zero\u200bwidth", "tab\there", "ctrl\x07char", "«quoted»"]


def write_corpus(path, seed=0, n_docs=40):
    rng = random.Random(seed)
    lines = []
    for d in range(n_docs):
        for _ in range(rng.choice([1, 1, 2, 3, 5, 8, 12])):
            n = rng.choice([1, 2, 4, 8, 15, 30]) if rng.random() < 0.97 else 250
            lines.append(" ".join(rng.choice(WORDS) for _ in range(n)))
        if d % 9 == 3:
            lines.append("\x01\x02")  # no tokens: skipped, not a document boundary
        lines.append(rng.choice(["", "", "   ", "\u00a0", "\t"]))  # blank: next document
        if d % 11 == 5:
            lines.append("")  # an empty document
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def base_tokenizer(minilm_dir):
    return build_tokenizer(vocab_file=os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(str(tmp_path_factory.mktemp("corpus") / "corpus.txt"))


def read_examples(path, S, P):
    from tensorflow.core.example import example_pb2

    out = []
    for data in schema.read_records(path):
        example = example_pb2.Example.FromString(data)
        f = example.features.feature
        out.append({name: list(f[name].float_list.value if name == "masked_lm_weights"
                               else f[name].int64_list.value) for name in schema.FEATURE_NAMES})
    return out


CASES = [
    dict(max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15, short_seq_prob=0.1,
         dupe_factor=2, do_whole_word_mask=False, random_seed=12345),
    dict(max_seq_length=24, max_predictions_per_seq=5, masked_lm_prob=0.3, short_seq_prob=0.5,
         dupe_factor=2, do_whole_word_mask=True, random_seed=7),
    dict(max_seq_length=9, max_predictions_per_seq=2, masked_lm_prob=0.0, short_seq_prob=1.0,
         dupe_factor=1, do_whole_word_mask=False, random_seed=1),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_files_equal_the_reference_example_for_example(case, corpus, base_tokenizer, tmp_path):
    c = CASES[case]
    S, P = c["max_seq_length"], c["max_predictions_per_seq"]
    outputs = [str(tmp_path / f"out-{j}.tfrecord") for j in range(2)]
    stats = create_training_files([corpus], outputs, base_tokenizer, **c)

    docs = google_read_documents([corpus], base_tokenizer)
    instances = google_create_training_instances(
        docs, random.Random(c["random_seed"]), S, c["dupe_factor"], c["short_seq_prob"], c["masked_lm_prob"],
        P, list(base_tokenizer.vocab.keys()), c["do_whole_word_mask"])
    expected = google_examples(instances, base_tokenizer.vocab, S, P, 2)

    assert stats["instances"] == len(instances) > 50
    assert stats["documents"] == len([d for d in docs if d])
    assert stats["sentences"] == sum(len(d) for d in docs)
    assert stats["tokens"] == sum(len(s) for d in docs for s in d)
    assert stats["masked_tokens"] == sum(len(i.masked_lm_positions) for i in instances)
    for path, want in zip(outputs, expected):
        got = read_examples(path, S, P)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{os.path.basename(path)} example {k} differs"


def test_both_engines_write_the_same_bytes(corpus, base_tokenizer, tmp_path):
    native_or_skip()
    o = InstanceOptions(max_seq_length=32, max_predictions_per_seq=6, dupe_factor=2, do_whole_word_mask=True,
                        short_seq_prob=0.3)
    files = {}
    for engine in ("native", "python"):
        out = str(tmp_path / f"{engine}.tfrecord")
        stats = _create_training_files([corpus], [out], base_tokenizer, o, 99, engine=engine)
        files[engine] = (open(out, "rb").read(), {k: v for k, v in stats.items() if k != "seconds"})
    assert files["native"] == files["python"]


def test_round_robin_over_outputs_matches_one_output(corpus, base_tokenizer, tmp_path):
    one = str(tmp_path / "one.tfrecord")
    three = [str(tmp_path / f"three-{j}.tfrecord") for j in range(3)]
    kw = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1, random_seed=3)
    create_training_files([corpus], [one], base_tokenizer, **kw)
    create_training_files([corpus], three, base_tokenizer, **kw)
    single = list(schema.read_records(one))
    split = [list(schema.read_records(p)) for p in three]
    assert [len(s) for s in split] == [len(single[j::3]) for j in range(3)]
    for j in range(3):
        assert split[j] == single[j::3]
    assert not [f for f in os.listdir(tmp_path) if "partial" in f]


@pytest.mark.parametrize("lower", [True, False])
def test_fast_tokenizer_agrees_with_the_tokenizer(lower, minilm_dir, tmp_path):
    lib = native_or_skip()
    base_tokenizer = build_tokenizer(vocab_file=os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lower)
    fast = instances_native.FastWordPiece.for_tokenizer(lib, base_tokenizer)
    assert fast is not None
    # The on-disk cache of the character table holds what computing it gives.
    fresh = instances_native._character_table(base_tokenizer._tokenizer, lower)
    for cached, computed in zip((fast.cls, fast.rep_off, fast.rep), fresh):
        np.testing.assert_array_equal(cached, computed)
    text = ("Ünïcödé ΣΟΦΙΑ σοφία ﬁne 東京タワー 😀 a\u0301b \u00a0 tab\there zero\u200bwidth "
            "x" * 3 + " " + "y" * 101 + " l’école «quoted» İstanbul Straße $3.14 C++ e-mail\r")
    lines = [text, "", "   ", "plain ascii words, with punctuation!", "\x01", "mixed 😀 line", "İ Σ ς"]
    block = "\n".join(lines).encode()
    path = tmp_path / "t.txt"
    path.write_bytes(block + b"\n\xff\xfe broken utf-8 \xc3\n")
    kind, n_tok, ids = fast.tokenize_block(block)
    assert list(kind) == [2, 0, 0, 1, 1, 2, 2]  # fallback for astral and context-dependent lines
    corpus_fast = read_documents([str(path)], base_tokenizer, fast=True)
    corpus_slow = read_documents([str(path)], base_tokenizer, fast=False)
    for name in ("tokens", "sent_off", "doc_sent"):
        np.testing.assert_array_equal(getattr(corpus_fast, name), getattr(corpus_slow, name))
    assert corpus_fast.invalid_utf8_lines == corpus_slow.invalid_utf8_lines == 1
    expected = [base_tokenizer.encode(line) for line in (lines[0], lines[3], lines[4], lines[5], lines[6])]
    expected.append(base_tokenizer.encode(b"\xff\xfe broken utf-8 \xc3".decode("utf-8", "replace")))
    expected = [e for e in expected if e]
    assert corpus_fast.num_sentences == len(expected)
    assert corpus_fast.tokens.tolist() == [i for e in expected for i in e]


def test_native_random_matches_python_random():
    lib = native_or_skip()
    for seed in (0, 12345):
        ours, theirs = random.Random(seed), random.Random(seed)
        state = instances_native.MTState.from_random(ours)
        for n in (1, 2, 3, 4, 7, 8, 1000, 2**31, 2**32, 2**32 + 5, 2**40 + 3):
            assert lib.bert_randbelow(state, n) == theirs.randrange(n)
        for _ in range(700):  # crosses a 624-word refill
            assert lib.bert_random(state) == theirs.random()
        x = list(range(50))
        theirs.shuffle(x)
        assert instances_native.shuffled_indices(lib, state, 50).tolist() == x
        state.store(ours)
        assert ours.getstate() == theirs.getstate()


# ---- bad input --------------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "data.create_pretraining_data", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_end_to_end_with_invalid_utf8(minilm_dir, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("Hello world.\nThe second sentence.\n\nAnother document here.\nWith bad \xff bytes.\n"
                     .encode("latin-1").replace(b"\\xff", b"\xff"))
    out = tmp_path / "out" / "x.tfrecord"
    r = run_cli(f"--input_file={tmp_path}/in*.txt", f"--output_file={out}",
                f"--vocab_file={minilm_dir}/vocab.txt", "--dupe_factor=3", "--max_seq_length=16",
                "--max_predictions_per_seq=3", "--nodo_lower_case")
    assert r.returncode == 0, r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert "2 documents, 4 sentences" in summary and "1 lines with invalid UTF-8 replaced" in summary
    assert schema.count_records(str(out)) > 0
    assert "instances" in r.stderr and "documents" in r.stderr  # progress lines


def test_cli_errors_are_one_clear_sentence(minilm_dir, tmp_path):
    vocab = f"--vocab_file={minilm_dir}/vocab.txt"
    r = run_cli(f"--input_file={tmp_path}/nothing-*.txt", f"--output_file={tmp_path}/o", vocab)
    assert r.returncode == 1 and "No input files match" in r.stderr and "nothing-*.txt" in r.stderr
    assert "Traceback" not in r.stderr

    (tmp_path / "in.txt").write_text("a b c\n")
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\na\nb\n")
    r = run_cli(f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/o", f"--vocab_file={bad_vocab}")
    assert r.returncode == 1 and "[SEP]" in r.stderr and "[MASK]" in r.stderr and str(bad_vocab) in r.stderr
    assert "Traceback" not in r.stderr

    (tmp_path / "afile").write_text("")
    r = run_cli(f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/afile/o.tfrecord", vocab)
    assert r.returncode == 1 and "Cannot write the output file" in r.stderr and "Traceback" not in r.stderr

    r = run_cli(f"--input_file={tmp_path}/in.txt", vocab)
    assert r.returncode == 2 and "--output_file is required" in r.stderr


def test_failure_leaves_no_output(base_tokenizer, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("a b c\nd e f\n")
    out = str(tmp_path / "o.tfrecord")

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cpd, "read_documents", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        create_training_files([str(tmp_path / "in.txt")], [out], base_tokenizer)
    assert os.listdir(tmp_path) == ["in.txt"]


def test_options_are_validated():
    with pytest.raises(ValueError, match="max_seq_length"):
        InstanceOptions(max_seq_length=4)
    with pytest.raises(ValueError, match="masked_lm_prob"):
        InstanceOptions(masked_lm_prob=1.5)
    with pytest.raises(ValueError, match="dupe_factor"):
        InstanceOptions(dupe_factor=0)


def test_progress_adds_up_to_the_input_size(corpus, base_tokenizer, tmp_path):
    seen = []
    create_training_files([corpus], [str(tmp_path / "o")], base_tokenizer, dupe_factor=1,
                          progress=seen.append)
    assert sum(seen) == os.path.getsize(corpus) and all(n >= 0 for n in seen)
