"""The C fast path (data/pretraining/native.py): its WordPiece mirror gives the tokenizer's ids
and its Mersenne Twister gives Python's draws, so the fast path writes the reference's bytes."""

import os
import random

import numpy as np
import pytest

from bert.tokenization import build_tokenizer
from data.pretraining import native
from data.pretraining.writer import read_documents
from pretraining_reference import native_or_skip


@pytest.mark.parametrize("lower", [True, False])
def test_fast_tokenizer_agrees_with_the_tokenizer(lower, minilm_dir, tmp_path):
    lib = native_or_skip()
    base_tokenizer = build_tokenizer(vocab_file=os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lower)
    fast = native.FastWordPiece.for_tokenizer(lib, base_tokenizer)
    assert fast is not None
    # The on-disk cache of the character table holds what computing it gives.
    fresh = native._character_table(lower)
    for cached, computed in zip((fast.cls, fast.rep_off, fast.rep), fresh):
        np.testing.assert_array_equal(cached, computed)
    text = (
        "Ünïcödé ΣΟΦΙΑ σοφία ﬁne 東京タワー 😀 a\u0301b \u00a0 tab\there zero\u200bwidth "
        "x" * 3 + " " + "y" * 101 + " l’école «quoted» İstanbul Straße $3.14 C++ e-mail\r"
    )
    lines = [text, "", "   ", "plain ascii words, with punctuation!", "\x01", "mixed 😀 line", "İ Σ ς"]
    block = "\n".join(lines).encode()
    path = tmp_path / "t.txt"
    path.write_bytes(block + b"\n\xff\xfe broken utf-8 \xc3\n")
    kind, n_tok, ids = fast.tokenize_block(block)
    # Fallback for astral characters and (lower-casing) the context-dependent capital sigma.
    assert list(kind) == [2, 0, 0, 1, 1, 2, 2 if lower else 1]
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
        state = native.MTState.from_random(ours)
        for n in (1, 2, 3, 4, 7, 8, 1000, 2**31, 2**32, 2**32 + 5, 2**40 + 3):
            assert lib.bert_randbelow(state, n) == theirs.randrange(n)
        for _ in range(700):  # crosses a 624-word refill
            assert lib.bert_random(state) == theirs.random()
        x = list(range(50))
        theirs.shuffle(x)
        assert native.shuffled_indices(lib, state, 50).tolist() == x
        state.store(ours)
        assert ours.getstate() == theirs.getstate()
