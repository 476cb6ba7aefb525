"""Tests for data/squad.py: reading, windows and max context, character-exact answer spans
(accents, CJK, irregular whitespace, decomposed accents), post-processing, errors."""

import json
import math
import os

import numpy as np
import pytest

from bert.tokenization import SPECIAL_TOKENS, WordPieceTokenizer
from common.errors import UserError
from data.squad import (
    FIRST_UNIQUE_ID,
    SquadExample,
    char_span_to_tokens,
    context_offsets,
    convert_examples_to_features,
    doc_spans,
    features_to_arrays,
    is_max_context,
    postprocess,
    read_examples,
    windows,
    write_predictions,
)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "squad")
TRAIN = os.path.join(FIXTURES, "train-v1.1-tiny.json")
DEV = os.path.join(FIXTURES, "dev-v2.0-tiny.json")
# Left out of the vocab: a context token that is [UNK]. Accent stripping also strips the kana's
# dakuten (Google's behaviour too): lower-cased, "です" is "てす".
UNKNOWN_WORDS = ("です", "てす")
LETTERS = "a b c d e f g h i j".split()


def _fixture_texts():
    texts = []
    for path in (TRAIN, DEV):
        with open(path, encoding="utf-8") as f:
            for article in json.load(f)["data"]:
                for paragraph in article["paragraphs"]:
                    texts.append(paragraph["context"])
                    texts.extend(qa["question"] for qa in paragraph["qas"])
    return texts


def _write_vocab(path, words):
    path.write_text("\n".join(dict.fromkeys([*SPECIAL_TOKENS, *words])) + "\n", encoding="utf-8")
    return str(path)


def _make_tokenizer(directory, do_lower_case):
    """A WordPiece vocab holding every word of the fixtures (as this casing normalises them),
    with words of 7+ characters split into two pieces so spans also end inside words."""
    boot = WordPieceTokenizer(_write_vocab(directory / "boot.txt", []), do_lower_case=do_lower_case)
    words = []
    for text in _fixture_texts():
        normalized = boot.backend.normalizer.normalize_str(text)
        for word, _ in boot.backend.pre_tokenizer.pre_tokenize_str(normalized):
            if word in UNKNOWN_WORDS:
                continue
            words += [word[:4], "##" + word[4:]] if len(word) >= 7 else [word]
    name = "lower.txt" if do_lower_case else "cased.txt"
    return WordPieceTokenizer(_write_vocab(directory / name, words + LETTERS + ["q"]), do_lower_case)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vocab")
    return {"lower": _make_tokenizer(directory, True), "cased": _make_tokenizer(directory, False)}


def _silent(_message):
    pass


# ---------------------------------------------------------------------------------------------
# Reading


def test_read_training_examples_skips_and_counts_a_mismatched_answer():
    messages = []
    examples, stats = read_examples(
        TRAIN, is_training=True, version_2_with_negative=False, log=messages.append
    )
    ids = [e.qas_id for e in examples]
    assert "cafe-mismatch" not in ids and len(ids) == 12
    assert stats == {"questions": 13, "examples": 12, "impossible": 0, "skipped_mismatched_answers": 1}
    assert len(messages) == 1 and "cafe-mismatch" in messages[0] and TRAIN in messages[0]
    who = examples[ids.index("cafe-who")]
    assert who.context_text[who.start_char : who.start_char + len(who.answer_text)] == "Pina Bausch"
    assert who.answers == ["Pina Bausch"] and not who.is_impossible
    # Accepted once whitespace is collapsed; the text kept is the context's own (a tab).
    loose = examples[ids.index("cafe-whitespace")]
    assert loose.answers == ["naïve piece"] and loose.answer_text == "naïve\tpiece"


def test_eval_mode_keeps_every_question_and_reads_v2():
    examples, stats = read_examples(TRAIN, is_training=False, version_2_with_negative=False)
    assert stats["skipped_mismatched_answers"] == 0 and len(examples) == 13
    dev, stats = read_examples(DEV, is_training=False, version_2_with_negative=True)
    assert stats == {"questions": 5, "examples": 5, "impossible": 2, "skipped_mismatched_answers": 0}
    by_id = {e.qas_id: e for e in dev}
    assert by_id["dev-impossible"].is_impossible and by_id["dev-impossible"].start_char == -1
    assert by_id["dev-impossible"].answer_text == "" and by_id["dev-impossible"].answers == []
    assert by_id["dev-multi"].answers == ["Wuppertal", "Wuppertal,  Germany"]
    assert by_id["dev-multi"].answer_text == "Wuppertal"


def test_impossible_question_read_as_v1_names_the_flag():
    with pytest.raises(UserError, match="dev-impossible.*--version_2_with_negative"):
        read_examples(DEV, is_training=False, version_2_with_negative=False)


def test_malformed_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"paragraphs": [}\n]}\n', encoding="utf-8")
    with pytest.raises(UserError) as error:
        read_examples(str(path), is_training=True, version_2_with_negative=False)
    assert str(path) in str(error.value) and "line 2 column 19" in str(error.value)


def test_missing_answers_key_names_the_question(tmp_path):
    path = tmp_path / "no-answers.json"
    qa = {"id": "q-without-answers", "question": "Why?"}
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Because.", "qas": [qa]}]}]}))
    with pytest.raises(UserError, match="no-answers.json.*'q-without-answers'.*'answers'"):
        read_examples(str(path), is_training=True, version_2_with_negative=False)
    # A predict-only file (no answers) reads in eval mode.
    examples, _ = read_examples(str(path), is_training=False, version_2_with_negative=False)
    assert examples[0].answers == [] and examples[0].start_char == -1


def test_missing_file_and_missing_context_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_examples(str(tmp_path / "absent.json"), is_training=False, version_2_with_negative=False)
    path = tmp_path / "no-context.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    with pytest.raises(UserError, match="no-context.json: paragraph 0 of article 0 has no 'context'"):
        read_examples(str(path), is_training=False, version_2_with_negative=False)


# ---------------------------------------------------------------------------------------------
# The tokenizer's offsets


def test_backend_offsets_point_into_the_original_text(tokenizers):
    # Lower-casing, accent stripping (even of kana's dakuten), tabs, double spaces, CJK, word
    # pieces and [UNK]: the offsets still index the characters of the input.
    text = "Café  Müller\tnaïve Wuppertal 東京です。"
    pieces = ["Café", "Müller", "naïve", "Wupp", "ertal", "東", "京", "です", "。"]
    for name, words in [
        ("lower", ["cafe", "muller", "naive", "wupp"]),
        ("cased", ["Café", "Müller", "naïve", "Wupp"]),
    ]:
        encoding = tokenizers[name].backend.encode(text, add_special_tokens=False)
        assert encoding.tokens == [*words, "##ertal", "東", "京", "[UNK]", "。"]
        assert [text[s:e] for s, e in encoding.offsets] == pieces


def test_a_stripped_trailing_accent_stays_with_its_letter(tokenizers):
    text = "Cafe\u0301 Mu\u0308ller"  # decomposed (NFD) accents
    encoding = tokenizers["lower"].backend.encode(text, add_special_tokens=False)
    # The backend drops the mark after the word's last letter from every token...
    assert encoding.offsets == [(0, 4), (6, 13)]
    # ...and context_offsets gives it back to that letter; a mark inside a word was kept.
    assert context_offsets(text, encoding.offsets) == [(0, 5), (6, 13)]
    cased = tokenizers["cased"].backend.encode(text, add_special_tokens=False)
    assert context_offsets(text, cased.offsets) == [(s, e) for s, e in cased.offsets]
    assert [text[s:e] for s, e in cased.offsets][0] == "Cafe\u0301"


def test_char_span_to_tokens():
    spans = [(0, 4), (6, 12), (13, 18), (18, 20)]
    assert char_span_to_tokens(spans, 0, 4) == (0, 0)
    assert char_span_to_tokens(spans, 6, 20) == (1, 3)
    assert char_span_to_tokens(spans, 5, 12) == (1, 1)  # leading space: the next token
    assert char_span_to_tokens(spans, 2, 7) == (0, 1)  # inside words: the tokens they touch
    first, last = char_span_to_tokens(spans, 4, 6)  # only whitespace
    assert first > last


# ---------------------------------------------------------------------------------------------
# Windows


def test_doc_spans_and_max_context_by_hand():
    assert doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_spans(10, 4, 6) == [(0, 4), (4, 4), (8, 2)]  # stride beyond the window
    assert doc_spans(7, 4, 2) == [(0, 4), (2, 4), (4, 3)]
    assert doc_spans(3, 4, 2) == [(0, 3)]
    assert doc_spans(0, 4, 2) == []
    spans = doc_spans(7, 4, 2)
    # Token 4: window 1 has 2 left, 1 right (1.04); window 2 has 0 left (0.03).
    assert [is_max_context(spans, i, 4) for i in range(3)] == [False, True, False]
    # Token 5: window 1 has 0 right (0.04); window 2 has 1 and 1 (1.03).
    assert [is_max_context(spans, i, 5) for i in range(3)] == [False, False, True]
    # Token 3 of doc_spans(10, 4, 3) scores 0.04 in windows 0 and 1: the earlier one wins.
    spans = doc_spans(10, 4, 3)
    assert [is_max_context(spans, i, 3) for i in range(3)] == [True, False, False]


@pytest.mark.parametrize(
    "num_tokens, window, stride", [(10, 4, 3), (7, 4, 2), (50, 9, 4), (33, 8, 8), (5, 8, 2)]
)
def test_one_pass_max_context_equals_googles_rule(num_tokens, window, stride):
    spans, flags = windows(num_tokens, window, stride)
    assert list(spans) == doc_spans(num_tokens, window, stride)
    for index, (start, length) in enumerate(spans):
        assert list(flags[index]) == [is_max_context(spans, index, start + i) for i in range(length)]
    # Every token has exactly one window that is its max context.
    counts = np.zeros(num_tokens, int)
    for (start, length), window_flags in zip(spans, flags):
        counts[start : start + length] += window_flags
    assert counts.tolist() == [1] * num_tokens


def test_features_of_a_hand_computed_case(tokenizers):
    tokenizer = tokenizers["lower"]
    context = " ".join(LETTERS)  # 10 one-letter tokens
    example = SquadExample("letters", "q", context, answer_text="e f", start_char=context.index("e f"))
    # max_seq_length 8 - 1 question token - 3 = 4 context tokens per window, stride 3.
    features = convert_examples_to_features(
        [example], tokenizer, max_seq_length=8, doc_stride=3, max_query_length=64, is_training=True
    )
    assert [f.doc_span_index for f in features] == [0, 1, 2]
    assert [f.unique_id for f in features] == [FIRST_UNIQUE_ID + i for i in range(3)]
    ids = tokenizer.vocab
    middle = features[1]
    assert middle.tokens == ["[CLS]", "q", "[SEP]", "d", "e", "f", "g", "[SEP]"]
    assert middle.input_ids == [ids[t] for t in middle.tokens]
    assert middle.segment_ids == [0, 0, 0, 1, 1, 1, 1, 1] and middle.input_mask == [1] * 8
    assert middle.token_to_char == [None, None, None, (6, 7), (8, 9), (10, 11), (12, 13), None]
    assert middle.token_is_max_context == [False] * 3 + [False, True, True, True] + [False]
    assert features[0].token_is_max_context == [False] * 3 + [True] * 4 + [False]
    assert features[2].token_is_max_context == [False] * 3 + [False, True, True, True] + [False]
    # "e f" is tokens 4-5: only the middle window (tokens 3-6) holds it, at positions 4-5.
    assert [(f.start_position, f.end_position) for f in features] == [(0, 0), (4, 5), (0, 0)]

    padded = convert_examples_to_features(
        [example], tokenizer, max_seq_length=12, doc_stride=3, progress=False
    )
    assert len(padded) == 2  # 8 context tokens per window: 0-7, then 3-9
    assert padded[0].input_mask == [1] * 12 and padded[1].input_mask == [1] * 11 + [0]
    assert padded[1].input_ids[-1] == 0 and padded[1].segment_ids == [0] * 3 + [1] * 8 + [0]
    assert len(padded[1].token_to_char) == len(padded[1].tokens) == 11
    arrays = features_to_arrays(padded)
    assert {k: (v.dtype, v.shape) for k, v in arrays.items()} == {
        "input_ids": (np.int32, (2, 12)),
        "input_mask": (np.int32, (2, 12)),
        "segment_ids": (np.int32, (2, 12)),
        "start_positions": (np.int32, (2,)),
        "end_positions": (np.int32, (2,)),
        "unique_ids": (np.int64, (2,)),
    }
    assert arrays["input_ids"][1].tolist() == padded[1].input_ids


def test_question_is_cut_to_max_query_length(tokenizers):
    example = SquadExample("long-question", "a b c d e f", "g h", answer_text="h", start_char=2)
    (feature,) = convert_examples_to_features(
        [example], tokenizers["lower"], max_seq_length=16, max_query_length=3, is_training=True
    )
    assert feature.tokens == ["[CLS]", "a", "b", "c", "[SEP]", "g", "h", "[SEP]"]
    assert (feature.start_position, feature.end_position) == (6, 6)


@pytest.mark.parametrize("case", ["lower", "cased"])
def test_training_spans_round_trip_to_the_exact_answer(tokenizers, case):
    examples, _ = read_examples(TRAIN, is_training=True, version_2_with_negative=False, log=_silent)
    counts = []
    features = convert_examples_to_features(
        examples, tokenizers[case], max_seq_length=40, doc_stride=8, is_training=True, progress=counts.append
    )
    assert sum(counts) == len(examples)
    holding = {}
    for f in features:
        example = examples[f.example_index]
        if f.start_position == 0:
            assert f.end_position == 0
            continue
        start, end = f.token_to_char[f.start_position][0], f.token_to_char[f.end_position][1]
        assert example.context_text[start:end] == example.answer_text, (case, example.qas_id)
        holding.setdefault(example.qas_id, []).append(f.doc_span_index)
    # Every answer is found; the long context's answers sit in several overlapping windows.
    assert set(holding) == {e.qas_id for e in examples}
    assert len(holding["river-built"]) >= 2 and len(holding["river-mill"]) >= 2
    assert holding["cjk-capital"] == [0] and holding["nfd-name"] == holding["nfd-cafe"] == [0]


# ---------------------------------------------------------------------------------------------
# Post-processing


def _letters_features(tokenizer, question="q", context=" ".join(LETTERS), **kwargs):
    example = SquadExample("letters", question, context)
    features = convert_examples_to_features([example], tokenizer, max_seq_length=8, doc_stride=3, **kwargs)
    return [example], features


def _logits(features, marks):
    """[B, 8] logits of -10 with {(feature, position): value} set."""
    logits = np.full((len(features), 8), -10.0)
    for (feature, position), value in marks.items():
        logits[feature, position] = value
    return logits


def test_postprocess_picks_the_best_allowed_span(tokenizers):
    examples, features = _letters_features(tokenizers["lower"])
    # Window 1 holds tokens d e f g at positions 3-6. Its best start is d (position 3), but
    # window 0 is d's max context, so "d ..." from window 1 is dropped; "e f" wins.
    start = _logits(features, {(1, 3): 9.0, (1, 4): 5.0, (1, 5): 3.0})
    end = _logits(features, {(1, 5): 4.0, (1, 6): 2.0})
    predictions, nbest, null_odds = postprocess(examples, features, start, end, n_best_size=5)
    assert predictions == {"letters": "e f"} and null_odds == {}
    entries = nbest["letters"]
    assert entries[0] == {
        "text": "e f",
        "start_logit": 5.0,
        "end_logit": 4.0,
        "probability": entries[0]["probability"],
    }
    # Equal scores keep the order found (window by window, start by start); the last entry is
    # the first -20 span found: "a" in window 0 (where a's logits are all -10).
    assert [e["text"] for e in entries] == ["e f", "e f g", "f", "f g", "a"]
    scores = [e["start_logit"] + e["end_logit"] for e in entries]
    assert scores == [9.0, 7.0, 7.0, 5.0, -20.0]
    assert math.isclose(sum(e["probability"] for e in entries), 1.0)
    expected = np.exp(np.array(scores) - max(scores)) / np.exp(np.array(scores) - max(scores)).sum()
    assert np.allclose([e["probability"] for e in entries], expected)
    json.dumps(nbest)  # plain floats

    # Spans over max_answer_length tokens are dropped: with 1, "f" (3 + 4) wins.
    predictions, nbest, _ = postprocess(examples, features, start, end, max_answer_length=1)
    assert predictions["letters"] == "f"
    assert all(len(e["text"]) == 1 for e in nbest["letters"])


def test_postprocess_deduplicates_by_text(tokenizers):
    # "b" at tokens 0 and 2 of one window: two spans, one text.
    examples, features = _letters_features(tokenizers["lower"], context="b a b a")
    assert len(features) == 1
    start = _logits(features, {(0, 3): 6.0, (0, 5): 5.0, (0, 4): 1.0})
    end = _logits(features, {(0, 3): 6.0, (0, 5): 5.0})
    _, nbest, _ = postprocess(examples, features, start, end, n_best_size=4)
    texts = [e["text"] for e in nbest["letters"]]
    assert texts[0] == "b" and texts.count("b") == 1 and len(texts) == len(set(texts))
    assert texts[:3] == ["b", "b a b", "a b"]  # 12, 11 (b..b via 6 + 5), 1 + 5 = 6


def test_postprocess_without_candidates_gives_googles_empty_entry(tokenizers):
    examples, features = _letters_features(tokenizers["lower"])
    # Every start is after every end: no span survives.
    start = _logits(features, {(i, 6): 5.0 for i in range(3)})
    end = _logits(features, {(i, 3): 5.0 for i in range(3)})
    start[:, 3:6], end[:, 4:7] = -20.0, -20.0
    predictions, nbest, _ = postprocess(examples, features, start, end, n_best_size=1)
    assert predictions == {"letters": "empty"}
    assert nbest["letters"] == [{"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "probability": 1.0}]


@pytest.mark.parametrize("threshold, expected", [(0.0, "e f"), (-3.5, ""), (-2.5, "e f")])
def test_v2_null_threshold_and_null_odds(tokenizers, threshold, expected):
    examples, features = _letters_features(tokenizers["lower"])
    # Null scores 2 + 1 = 3 (window 0), 1 + 0 = 1 (window 1, the minimum), 4 (window 2).
    start = _logits(features, {(0, 0): 2.0, (1, 0): 1.0, (2, 0): 2.0, (1, 4): 2.0})
    end = _logits(features, {(0, 0): 1.0, (1, 0): 0.0, (2, 0): 2.0, (1, 5): 2.0})
    # Best non-null: "e f", 2 + 2 = 4; null odds = 1 - 4 = -3.
    by_id = {f.unique_id: (start[i], end[i]) for i, f in enumerate(features)}
    predictions, nbest, null_odds = postprocess(
        examples,
        features,
        {k: v[0] for k, v in by_id.items()},
        {k: v[1] for k, v in by_id.items()},
        version_2_with_negative=True,
        null_score_diff_threshold=threshold,
    )
    assert null_odds == {"letters": -3.0}
    assert predictions == {"letters": expected}
    entries = nbest["letters"]
    assert [e["text"] for e in entries[:2]] == ["e f", ""]
    assert (entries[1]["start_logit"], entries[1]["end_logit"]) == (1.0, 0.0)
    assert math.isclose(sum(e["probability"] for e in entries), 1.0)


def test_v2_prefers_null_when_no_span_beats_it(tokenizers):
    examples, features = _letters_features(tokenizers["lower"])
    start = _logits(features, {(i, 0): 8.0 for i in range(3)} | {(1, 4): 1.0})
    end = _logits(features, {(i, 0): 8.0 for i in range(3)} | {(1, 4): 1.0})
    predictions, nbest, null_odds = postprocess(examples, features, start, end, version_2_with_negative=True)
    assert predictions == {"letters": ""} and null_odds == {"letters": 14.0}  # 16 - (1 + 1)
    assert nbest["letters"][0]["text"] == "" and nbest["letters"][1]["text"] == "e"


def test_an_empty_context_has_no_window_and_predicts_null(tokenizers):
    examples = [SquadExample("blank", "q", "")]
    assert convert_examples_to_features(examples, tokenizers["lower"], max_seq_length=8) == []
    predictions, nbest, null_odds = postprocess(examples, [], [], [], version_2_with_negative=True)
    assert predictions == {"blank": ""} and null_odds == {"blank": 1000000.0}
    assert [e["text"] for e in nbest["blank"]] == ["empty"]


def test_predictions_from_gold_logits_read_back_every_answer(tokenizers):
    """One-hot logits at the gold positions: the predictions are the answers' exact characters
    (accents, CJK, tabs, double spaces), across overlapping windows."""
    examples, _ = read_examples(TRAIN, is_training=True, version_2_with_negative=False, log=_silent)
    for tokenizer in tokenizers.values():
        features = convert_examples_to_features(
            examples, tokenizer, max_seq_length=40, doc_stride=8, is_training=True
        )
        start, end = np.zeros((len(features), 40)), np.zeros((len(features), 40))
        for i, f in enumerate(features):
            if f.start_position:
                start[i, f.start_position] = end[i, f.end_position] = 10.0
        predictions, _, _ = postprocess(examples, features, start, end)
        assert predictions == {e.qas_id: e.answer_text for e in examples}


def test_write_predictions(tmp_path):
    predictions, nbest = {"q1": "Café"}, {"q1": [{"text": "Café", "probability": 1.0}]}
    paths = write_predictions(str(tmp_path / "out"), predictions, nbest, {"q1": -1.5})
    assert sorted(os.listdir(tmp_path / "out")) == [
        "nbest_predictions.json",
        "null_odds.json",
        "predictions.json",
    ]
    with open(paths["predictions"], encoding="utf-8") as f:
        assert json.load(f) == predictions
    with open(paths["null_odds"], encoding="utf-8") as f:
        assert json.load(f) == {"q1": -1.5}
    write_predictions(str(tmp_path / "v1"), predictions, nbest)
    assert sorted(os.listdir(tmp_path / "v1")) == ["nbest_predictions.json", "predictions.json"]


def test_a_tokenizer_without_offsets_is_refused():
    class SentencePieceLike:
        pass

    with pytest.raises(UserError, match="WordPiece vocab"):
        convert_examples_to_features([], SentencePieceLike())
