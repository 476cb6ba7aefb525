"""SQuAD v1.1 / v2.0 for fine-tuning: reading, windowed features, and predictions from logits.

Google's run_squad.py semantics (read_squad_examples, convert_examples_to_features with its
_DocSpan loop and _check_is_max_context, write_predictions), with one change: answers are
located by character offsets instead of whitespace words. Each context is tokenized once by the
WordPiece tokenizer (Google's tokens, bert.tokenization), whose offsets point into the original
string even where it lower-cases, strips accents or drops characters. A predicted
span therefore reads back as the exact original characters
`context_text[token_to_char[start][0]:token_to_char[end][1]]`, which replaces Google's
get_final_text heuristic (and its failures on accents and irregular whitespace).

One adjustment to the backend's offsets: a combining mark that accent stripping removed after
the last letter of a word ("Cafe" + U+0301) belongs to no token, so it is added to the end of
the token before it; a predicted span never cuts a letter from its accent. (Accent stripping
also takes the dakuten off kana, "です" -> "てす", as Google's tokenizer does; the offsets still
point at "です".)
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import os
import sys
import unicodedata
from typing import Callable

import numpy as np

from bert.tokenization import CLS_TOKEN, SEP_TOKEN
from common.errors import UserError
from common.files import ensure_writable_dir, read_json, write_json

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab. Here B counts features (windows).

# Google numbers features from here, so ids never collide with small example indices.
FIRST_UNIQUE_ID = 1000000000
# Below this many examples featurisation takes well under a second: no progress display.
_PROGRESS_MIN_EXAMPLES = 1000
# Google's initial null score: the null odds of an example whose context has no token (no window).
_NO_WINDOW_NULL_SCORE = 1000000.0


@dataclasses.dataclass
class SquadExample:
    """One question. `answer_text`/`start_char` locate the first gold answer in `context_text`
    ('' and -1 when the question is impossible or has no answer); `answers` lists every gold
    answer text (dev sets have several), for reference and evaluation."""

    qas_id: str
    question_text: str
    context_text: str
    answer_text: str = ""
    start_char: int = -1
    is_impossible: bool = False
    answers: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Feature:
    """One window `[CLS] query [SEP] context-window [SEP]` of one example, zero padded to S.

    `tokens`, `token_to_char` and `token_is_max_context` cover the window's real tokens (not the
    padding): `token_to_char[i]` is the (start, end) character span of context token i in the
    example's context_text, None for [CLS], [SEP] and question tokens; `token_is_max_context[i]`
    says whether this window gives token i its most context (Google's rule), False outside the
    context. start_position/end_position index the answer's tokens in this window; 0 (the [CLS])
    when the question is impossible, the answer lies outside the window, or not training.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list
    input_ids: list
    input_mask: list
    segment_ids: list
    token_to_char: list
    token_is_max_context: list
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Reading


def _require(mapping, key, types, path, where):
    if not isinstance(mapping, dict) or key not in mapping:
        raise UserError(f"{path}: {where} has no {key!r} key; is this a SQuAD JSON file?")
    value = mapping[key]
    if not isinstance(value, types):
        raise UserError(f"{path}: {where} has a {key!r} of the wrong type ({type(value).__name__}).")
    return value


def answer_matches(context: str, start: int, text: str) -> bool:
    """Whether `text` is the context at `start`: exactly, or equal once runs of whitespace are
    collapsed (Google compares " ".join(text.split()) so as to forgive whitespace noise)."""
    if start < 0 or start + len(text) > len(context) or not text.strip():
        return False
    span = context[start : start + len(text)]
    return span == text or " ".join(span.split()) == " ".join(text.split())


def read_examples(
    path: str, is_training: bool, version_2_with_negative: bool, log: Callable[[str], None] | None = None
) -> tuple[list[SquadExample], dict]:
    """Reads an official SQuAD JSON file (data -> paragraphs -> context, qas).

    Training skips (counts, and logs by question id) answers whose text is not at answer_start
    in the context; such an example keeps its place in eval mode, where answers are not used to
    build features. Returns (examples, stats) with stats {"questions", "examples", "impossible",
    "skipped_mismatched_answers"}. Raises UserError naming the file (and line/column or question
    id) for a missing or malformed file, a missing key, or an impossible question without
    version_2_with_negative.
    """
    log = log or _stderr
    if not os.path.isfile(path):
        raise UserError(f"The SQuAD file {path!r} does not exist; check the path (or download it).")
    dataset = read_json(path, "SQuAD file")
    data = _require(dataset, "data", list, path, "the top level")

    examples, questions, impossible, skipped = [], 0, 0, 0
    for article_index, article in enumerate(data):
        paragraphs = _require(article, "paragraphs", list, path, f"article {article_index}")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"paragraph {paragraph_index} of article {article_index}"
            context = _require(paragraph, "context", str, path, where)
            for qa_index, qa in enumerate(_require(paragraph, "qas", list, path, where)):
                qas_id = _require(qa, "id", str, path, f"question {qa_index} of {where}")
                where_q = f"question {qas_id!r}"
                question = _require(qa, "question", str, path, where_q)
                questions += 1
                is_impossible = qa.get("is_impossible", False)
                if not isinstance(is_impossible, bool):
                    raise UserError(f"{path}: {where_q} has a non-boolean 'is_impossible'.")
                if is_impossible and not version_2_with_negative:
                    raise UserError(
                        f"{path}: {where_q} is marked is_impossible, a SQuAD v2.0 feature; pass "
                        f"--version_2_with_negative to read SQuAD v2.0 files."
                    )
                if "answers" in qa or (is_training and not is_impossible):
                    raw_answers = _require(qa, "answers", list, path, where_q)
                else:
                    raw_answers = []  # a predict-only file carries no answers
                answers = []
                for answer in raw_answers:
                    text = _require(answer, "text", str, path, f"an answer of {where_q}")
                    start = _require(answer, "answer_start", int, path, f"an answer of {where_q}")
                    answers.append((text, start))

                example = SquadExample(
                    qas_id=qas_id,
                    question_text=question,
                    context_text=context,
                    is_impossible=is_impossible,
                    answers=[text for text, _ in answers],
                )
                if is_impossible:
                    impossible += 1
                elif answers:
                    text, start = answers[0]
                    if is_training:
                        if not answer_matches(context, start, text):
                            skipped += 1
                            found = context[max(0, start) : max(0, start) + len(text)]
                            log(
                                f"[squad] warning: {path}: skipping question {qas_id!r}: its answer "
                                f"{text!r} is not the context's {found!r} at answer_start {start}."
                            )
                            continue
                        # The context's own characters: exact text for the whitespace-forgiven
                        # matches too, so features round-trip to what the context holds.
                        text = context[start : start + len(text)]
                    example.answer_text, example.start_char = text, start
                elif is_training:
                    raise UserError(
                        f"{path}: {where_q} has no answers and is not is_impossible; training "
                        f"needs one answer per answerable question."
                    )
                examples.append(example)

    stats = {
        "questions": questions,
        "examples": len(examples),
        "impossible": impossible,
        "skipped_mismatched_answers": skipped,
    }
    return examples, stats


# ---------------------------------------------------------------------------------------------
# Features


def context_offsets(context: str, offsets) -> list[tuple[int, int]]:
    """The backend's (start, end) character offsets, each end pushed over the combining marks
    that directly follow it and that no token covers (accent stripping drops a mark after a
    word's last letter from every token; it still belongs to that letter)."""
    spans = [(int(s), int(e)) for s, e in offsets]
    for i, (start, end) in enumerate(spans):
        limit = spans[i + 1][0] if i + 1 < len(spans) else len(context)
        while end < limit and unicodedata.category(context[end]).startswith("M"):
            end += 1
        spans[i] = (start, end)
    return spans


def char_span_to_tokens(spans: list[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int]:
    """(first, last) token covering [start_char, end_char): the first token ending after
    start_char and the last token starting before end_char; first > last when no token does
    (an answer of only whitespace or dropped characters). `spans` are in text order."""
    first = bisect.bisect_right([e for _, e in spans], start_char)
    last = bisect.bisect_left([s for s, _ in spans], end_char) - 1
    return first, last


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """Google's _DocSpan loop: (start, length) windows over the context tokens, each moving by
    `doc_stride` (or its length, if shorter); the last one ends at the last token."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """Google's _check_is_max_context: whether window `span_index` is the one that gives context
    token `position` the most context, scored min(left, right) + 0.01 * window length (ties to
    the earlier window)."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


@functools.lru_cache(maxsize=4096)
def windows(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> tuple[tuple, tuple]:
    """(doc_spans, max-context flags per window and token), the flags equal to is_max_context's
    but found in one pass over the windows instead of one pass per token (which dominated the
    featurisation time on long contexts); cached, since the result depends only on lengths."""
    spans = doc_spans(num_tokens, max_tokens_for_doc, doc_stride)
    best_score, best_index = [-1.0] * num_tokens, [-1] * num_tokens
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        for position in range(start, end + 1):
            score = min(position - start, end - position) + 0.01 * length
            if score > best_score[position]:  # strictly: ties stay with the earlier window
                best_score[position], best_index[position] = score, index
    flags = tuple(
        tuple(best_index[start + i] == index for i in range(length))
        for index, (start, length) in enumerate(spans)
    )
    return tuple(spans), flags


def _progress_callback(progress, total: int):
    """(callback, closer) for a `progress` argument: a callable is used as is; True shows a
    Progress bar when there are many examples."""
    if callable(progress):
        return progress, lambda: None
    if progress and total >= _PROGRESS_MIN_EXAMPLES:
        from common.progress import Progress

        bar = Progress("squad features", total, unit="examples")
        return bar, bar.close
    return (lambda n=1: None), lambda: None


def convert_examples_to_features(
    examples: list[SquadExample],
    tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    is_training: bool = False,
    progress=True,
    log: Callable[[str], None] | None = None,
) -> list[Feature]:
    """Examples -> one Feature per window of max_seq_length - len(query) - 3 context tokens.

    The question is cut to max_query_length tokens; each distinct context is tokenized once.
    In training the answer's characters [start_char, start_char + len(answer_text)) map to the
    first token ending after start_char and the last token starting before the end; an answer
    that covers no token at all is skipped with a warning. `progress` is True (a bar for many
    examples), False, or a callable taking a count of examples done.
    """
    encode = getattr(tokenizer, "encode_with_offsets_batch", None)
    if encode is None:
        raise UserError(
            "SQuAD needs a WordPiece vocab (--vocab_file): answers are located through the "
            "character offsets of the WordPiece tokenizer, which a SentencePiece model lacks."
        )
    log = log or _stderr
    if doc_stride < 1:
        raise UserError(f"doc_stride must be at least 1 (got {doc_stride}).")

    # Questions of one paragraph share its context: tokenize each distinct context once.
    contexts = list(dict.fromkeys(e.context_text for e in examples))
    encoded = {}  # context -> (ids, tokens, character spans) of its tokens
    for context, encoding in zip(contexts, encode(contexts)):
        encoded[context] = (encoding.ids, encoding.tokens, context_offsets(context, encoding.offsets))
    questions = encode([e.question_text for e in examples])

    features = []
    unique_id = FIRST_UNIQUE_ID
    unmappable = 0
    update, close = _progress_callback(progress, len(examples))
    try:
        for example_index, (example, question) in enumerate(zip(examples, questions)):
            query_ids = list(question.ids[:max_query_length])
            max_tokens_for_doc = max_seq_length - len(query_ids) - 3
            if max_tokens_for_doc < 1:
                raise UserError(
                    f"max_seq_length={max_seq_length} leaves no room for the context after a "
                    f"{len(query_ids)}-token question; raise it or lower max_query_length."
                )
            doc_ids, doc_tokens, doc_chars = encoded[example.context_text]

            answer = None  # (first, last) context token of the answer
            if is_training and not example.is_impossible:
                end_char = example.start_char + len(example.answer_text)
                first, last = char_span_to_tokens(doc_chars, example.start_char, end_char)
                if first > last:
                    unmappable += 1
                    log(
                        f"[squad] warning: skipping question {example.qas_id!r}: its answer "
                        f"{example.answer_text!r} covers no token of the context."
                    )
                    update(1)
                    continue
                answer = (first, last)

            spans, span_flags = windows(len(doc_ids), max_tokens_for_doc, doc_stride)
            query_tokens = list(question.tokens[:max_query_length])
            doc_offset = len(query_ids) + 2  # [CLS] query [SEP]
            for span_index, (start, length) in enumerate(spans):
                tokens = [CLS_TOKEN, *query_tokens, SEP_TOKEN, *doc_tokens[start : start + length], SEP_TOKEN]
                ids = [tokenizer.cls_id, *query_ids, tokenizer.sep_id]
                ids += doc_ids[start : start + length] + [tokenizer.sep_id]
                segment_ids = [0] * doc_offset + [1] * (length + 1)
                token_to_char = [None] * doc_offset + doc_chars[start : start + length] + [None]
                max_context = [False] * doc_offset + list(span_flags[span_index]) + [False]

                start_position = end_position = 0
                if answer is not None and start <= answer[0] and answer[1] < start + length:
                    start_position = answer[0] - start + doc_offset
                    end_position = answer[1] - start + doc_offset

                padding = max_seq_length - len(ids)
                # Padding uses id 0 (Google's layout); input_mask tells the model to ignore it.
                features.append(
                    Feature(
                        unique_id=unique_id,
                        example_index=example_index,
                        doc_span_index=span_index,
                        tokens=tokens,
                        input_ids=ids + [0] * padding,
                        input_mask=[1] * len(ids) + [0] * padding,
                        segment_ids=segment_ids + [0] * padding,
                        token_to_char=token_to_char,
                        token_is_max_context=max_context,
                        start_position=start_position,
                        end_position=end_position,
                        is_impossible=example.is_impossible,
                    )
                )
                unique_id += 1
            update(1)
    finally:
        close()
    if unmappable:
        log(f"[squad] {unmappable} training example(s) skipped: answer covers no token.")
    return features


def features_to_arrays(features: list[Feature]) -> dict[str, np.ndarray]:
    """Features -> input_ids, input_mask, segment_ids int32 [B, S]; start_positions,
    end_positions int32 [B]; unique_ids int64 [B] (B = number of features)."""
    return {
        "input_ids": np.asarray([f.input_ids for f in features], np.int32).reshape(len(features), -1),
        "input_mask": np.asarray([f.input_mask for f in features], np.int32).reshape(len(features), -1),
        "segment_ids": np.asarray([f.segment_ids for f in features], np.int32).reshape(len(features), -1),
        "start_positions": np.asarray([f.start_position for f in features], np.int32),
        "end_positions": np.asarray([f.end_position for f in features], np.int32),
        "unique_ids": np.asarray([f.unique_id for f in features], np.int64),
    }


# ---------------------------------------------------------------------------------------------
# Predictions


def _best_indexes(logits: np.ndarray, n_best_size: int) -> list[int]:
    # A stable sort keeps Google's tie order (the lower index first).
    return [int(i) for i in np.argsort(-logits, kind="stable")[:n_best_size]]


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _logits_for(logits, features: list[Feature], index: int) -> np.ndarray:
    """Row `index` of an array [B, S] aligned with `features`, or the entry of a dict keyed by
    unique_id."""
    row = logits[features[index].unique_id] if isinstance(logits, dict) else logits[index]
    return np.asarray(row, np.float64)


def postprocess(
    examples: list[SquadExample],
    features: list[Feature],
    start_logits,
    end_logits,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict, dict, dict]:
    """Google's write_predictions: logits -> (predictions, nbest, null_odds), keyed by qas_id.

    `start_logits`/`end_logits` are float [B, S] with row i for features[i] (or dicts from
    unique_id to a row). Per example, over its windows: the n_best_size best start and end
    indexes; spans outside the context, reversed, longer than max_answer_length tokens, or
    starting at a token this window is not the max context for are dropped; candidates are
    ranked by start + end logit and deduplicated by text; probabilities are a softmax over the
    n-best. v2.0 adds the null span (the lowest start_logits[0] + end_logits[0] over the
    windows) and predicts '' when null_odds = null score - best non-null score exceeds
    null_score_diff_threshold. Without any non-null candidate the n-best gets an "empty" entry
    (logits 0): v1.1 then predicts "empty", as Google's code does, and v2.0 predicts ''.
    """
    by_example: dict[int, list[int]] = {}
    for index, feature in enumerate(features):
        by_example.setdefault(feature.example_index, []).append(index)

    predictions, nbest_all, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        context = example.context_text
        feature_indexes = by_example.get(example_index, [])
        candidates = []  # (score, start logit, end logit, feature index, start, end)
        null = None  # (score, start logit, end logit, feature index) of the lowest null span
        for feature_index in feature_indexes:
            feature = features[feature_index]
            starts = _logits_for(start_logits, features, feature_index)
            ends = _logits_for(end_logits, features, feature_index)
            if version_2_with_negative and (null is None or starts[0] + ends[0] < null[0]):
                null = (starts[0] + ends[0], float(starts[0]), float(ends[0]), feature_index)
            n_tokens = len(feature.token_to_char)
            # Only the window's tokens are ranked: Google's code ranks its padding too and then
            # drops it, which can leave valid spans out of the n-best (and would make the answer
            # depend on how far a batch was padded: training/length_bins.py).
            end_indexes = _best_indexes(ends[:n_tokens], n_best_size)
            for start in _best_indexes(starts[:n_tokens], n_best_size):
                if start >= n_tokens or feature.token_to_char[start] is None:
                    continue
                if not feature.token_is_max_context[start]:
                    continue
                for end in end_indexes:
                    if end >= n_tokens or feature.token_to_char[end] is None:
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    score = starts[start] + ends[end]
                    candidates.append(
                        (score, float(starts[start]), float(ends[end]), feature_index, start, end)
                    )
        if null is not None:
            candidates.append((*null, 0, 0))  # start 0 is the [CLS]: the null span
        # Python's sort is stable: equal scores keep Google's order of discovery.
        candidates.sort(key=lambda c: c[0], reverse=True)

        nbest, seen = [], set()
        for _, start_logit, end_logit, feature_index, start, end in candidates:
            if len(nbest) >= n_best_size:
                break
            if start > 0:
                chars = features[feature_index].token_to_char
                text = context[chars[start][0] : chars[end][1]]
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            nbest.append({"text": text, "start_logit": start_logit, "end_logit": end_logit})
        if null is not None and "" not in seen:
            nbest.append({"text": "", "start_logit": null[1], "end_logit": null[2]})
        best_non_null = next((e for e in nbest if e["text"]), None)
        if best_non_null is None:
            # Google's placeholder (its v2.0 code would crash here; Hugging Face's adds the same).
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})

        probabilities = _softmax([e["start_logit"] + e["end_logit"] for e in nbest])
        nbest_all[example.qas_id] = [
            {
                "text": e["text"],
                "probability": p,
                "start_logit": e["start_logit"],
                "end_logit": e["end_logit"],
            }
            for e, p in zip(nbest, probabilities)
        ]

        if not version_2_with_negative:
            predictions[example.qas_id] = nbest[0]["text"]
        elif best_non_null is None:
            # No span to offer: null, with Google's initial null score when there is no window.
            predictions[example.qas_id] = ""
            null_odds[example.qas_id] = float(null[0]) if null is not None else _NO_WINDOW_NULL_SCORE
        else:
            diff = null[0] - best_non_null["start_logit"] - best_non_null["end_logit"]
            null_odds[example.qas_id] = float(diff)
            predictions[example.qas_id] = "" if diff > null_score_diff_threshold else best_non_null["text"]
    return predictions, nbest_all, null_odds


def write_predictions(output_dir: str, predictions: dict, nbest: dict, null_odds: dict | None = None) -> dict:
    """Writes predictions.json, nbest_predictions.json and (v2.0, when null_odds is given)
    null_odds.json into output_dir, each atomically; returns {name: path}."""
    ensure_writable_dir(output_dir, "predictions directory")
    files = {"predictions": predictions, "nbest_predictions": nbest}
    if null_odds is not None:
        files["null_odds"] = null_odds
    paths = {}
    for name, value in files.items():
        paths[name] = os.path.join(output_dir, name + ".json")
        write_json(paths[name], value)
    return paths
