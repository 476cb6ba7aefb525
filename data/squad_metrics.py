"""SQuAD's official evaluation: exact match and F1 of predicted answer strings, v1.1 and v2.0.

Reproduces, key for key and number for number, the two official scripts from
https://rajpurkar.github.io/SQuAD-explorer/:

- evaluate-v1.1.py -> {"exact_match", "f1"}: percentages over all questions, each question
  scored by its best gold answer. A question without a prediction scores 0.
- evaluate-v2.0.py -> {"exact", "f1", "total", "HasAns_*", "NoAns_*"} and, given no-answer
  probabilities, {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}. A question
  is unanswerable when its "answers" list is empty; its only gold answer is then "", and the
  empty prediction means "no answer".

Both normalise an answer by lower-casing it, dropping string.punctuation, the articles a/an/the
and extra whitespace; F1 counts the common tokens (a multiset overlap). The versions differ in
one corner: when a side normalises to no tokens, v1.1 scores F1 0 and v2.0 scores 1 if both
sides are empty (both say "no answer"), else 0.

Where the official v2.0 script crashes (a question without a prediction, KeyError), this
module scores the question 0 at every threshold, as v1.1 does, and counts it in the totals.
Messages about unanswered questions go to stderr, so stdout holds only the JSON.

    python -m data.squad_metrics dev-v2.0.json predictions.json --na-prob-file null_odds.json
"""

from __future__ import annotations

import argparse
import collections
import json
import numbers
import os
import re
import string
import sys

from common.errors import UserError
from common.files import read_json

VERSIONS = ("1.1", "2.0")
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (both official scripts)."""
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def get_tokens(s: str) -> list[str]:
    """The normalised answer's tokens; [] for an empty answer (v2.0's no-answer)."""
    if not s:
        return []
    return normalize_answer(s).split()


def exact_score(prediction: str, ground_truth: str) -> int:
    """1 if both normalise to the same string, else 0."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str, version: str = "2.0") -> float:
    """Token F1 in [0, 1] (the int 0 or 1 in the corner cases, as the official scripts return).

    When either side has no tokens, v2.0 returns 1 if both have none, else 0; v1.1 returns 0.
    """
    prediction_tokens = get_tokens(prediction)
    ground_truth_tokens = get_tokens(ground_truth)
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if _version(version) == "2.0" and (not prediction_tokens or not ground_truth_tokens):
        return int(prediction_tokens == ground_truth_tokens)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def evaluate(
    dataset, predictions, na_probs=None, version=None, na_prob_thresh: float = 1.0, log=None
) -> dict:
    """The official scores of `predictions` on `dataset`.

    dataset: a SQuAD JSON file's path or its parsed object ({"version": ..., "data": [...]}).
    predictions: question id -> answer string ("" = no answer in v2.0), or a JSON file's path.
    na_probs: v2.0 only; question id -> probability of no answer (or a path), which adds the
      best_* keys. na_prob_thresh: v2.0 predicts "no answer" where that probability exceeds it.
    version: "1.1" or "2.0"; None reads it from the data (see `dataset_version`).
    log: takes each message about an unanswered question (default: print to stderr).
    Returns the official script's dict, keys in its order. Raises UserError naming the file (or
    argument) for input that is missing, not JSON or not in SQuAD's format.
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    dataset, dataset_source = _load(dataset, "SQuAD dataset file", "the dataset")
    predictions, predictions_source = _load(predictions, "predictions file", "the predictions")
    questions = _questions(dataset, dataset_source)
    _check_mapping(predictions, str, predictions_source, "answer strings")
    version = _version(version) if version is not None else dataset_version(dataset)
    if version == "1.1":
        if na_probs is not None:
            raise UserError(
                "No-answer probabilities (--na-prob-file) apply to SQuAD 2.0 only; drop them for SQuAD 1.1."
            )
        return _evaluate_v1(questions, predictions, dataset_source, log)
    if na_probs is not None:
        na_probs, na_probs_source = _load(
            na_probs, "no-answer probability file", "the no-answer probabilities"
        )
        _check_mapping(na_probs, numbers.Real, na_probs_source, "numbers")
        # The official script looks up every answered question of the dataset.
        missing = next((q for q, _ in questions if q in predictions and q not in na_probs), None)
        if missing is not None:
            raise UserError(f"{na_probs_source} has no no-answer probability for question {missing!r}.")
    return _evaluate_v2(questions, predictions, na_probs, na_prob_thresh, log)


def dataset_version(dataset: dict) -> str:
    """SQuAD 2.0 when the "version" field says 2.x or any question has an "is_impossible" key.

    Returns "2.0" or "1.1".
    """
    if str(dataset.get("version", "")).lstrip("vV").startswith("2"):
        return "2.0"
    for article in dataset.get("data") or ():
        for paragraph in article.get("paragraphs") or ():
            if any("is_impossible" in qa for qa in paragraph.get("qas") or ()):
                return "2.0"
    return "1.1"


def _evaluate_v1(questions, predictions, source, log) -> dict:
    """evaluate-v1.1.py's evaluate(): sums in file order, so the floats match to the last bit."""
    f1 = exact_match = total = 0
    for qid, gold_answers in questions:
        total += 1
        if qid not in predictions:
            log(f"Unanswered question {qid} will receive score 0.")
            continue
        if not gold_answers:
            raise UserError(
                f"Question {qid!r} in {source} has no gold answers, which SQuAD 1.1 cannot score; "
                f"evaluate it as SQuAD 2.0 (--version 2.0)."
            )
        prediction = predictions[qid]
        exact_match += max(exact_score(prediction, gold) for gold in gold_answers)
        f1 += max(f1_score(prediction, gold, version="1.1") for gold in gold_answers)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _evaluate_v2(questions, predictions, na_probs, na_prob_thresh, log) -> dict:
    """evaluate-v2.0.py's main(), function for function (make_qid_to_has_ans, get_raw_scores, ...)."""
    qid_to_has_ans = {qid: bool(gold_answers) for qid, gold_answers in questions}
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw, unanswered = {}, {}, set()
    for qid, gold_answers in questions:
        gold_answers = [a for a in gold_answers if normalize_answer(a)] or [""]
        if qid not in predictions:
            log(f"Unanswered question {qid} will receive score 0.")
            exact_raw[qid] = f1_raw[qid] = 0
            unanswered.add(qid)
            continue
        prediction = predictions[qid]
        exact_raw[qid] = max(exact_score(prediction, gold) for gold in gold_answers)
        f1_raw[qid] = max(f1_score(prediction, gold, version="2.0") for gold in gold_answers)
    # Without a file, the official script gives every prediction probability 0.0.
    thresh_probs = na_probs if na_probs is not None else {k: 0.0 for k in predictions}
    exact = _apply_no_ans_threshold(exact_raw, thresh_probs, qid_to_has_ans, na_prob_thresh, unanswered)
    f1 = _apply_no_ans_threshold(f1_raw, thresh_probs, qid_to_has_ans, na_prob_thresh, unanswered)
    out = _eval_dict(exact, f1)
    if has_ans_qids:
        out.update({f"HasAns_{k}": v for k, v in _eval_dict(exact, f1, has_ans_qids).items()})
    if no_ans_qids:
        out.update({f"NoAns_{k}": v for k, v in _eval_dict(exact, f1, no_ans_qids).items()})
    if na_probs is not None:
        args = (predictions, na_probs, qid_to_has_ans, unanswered)
        out["best_exact"], out["best_exact_thresh"] = _find_best_thresh(exact_raw, *args)
        out["best_f1"], out["best_f1_thresh"] = _find_best_thresh(f1_raw, *args)
    return out


def _apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh, unanswered) -> dict:
    """Above the threshold the prediction becomes "no answer": right (1.0) exactly when it is."""
    new_scores = {}
    for qid, s in scores.items():
        if qid not in unanswered and na_probs[qid] > na_prob_thresh:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def _eval_dict(exact_scores, f1_scores, qid_list=None) -> dict:
    qid_list = qid_list or list(exact_scores)
    total = len(qid_list)
    return {
        "exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total,
        "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total,
        "total": total,
    }


def _find_best_thresh(scores, predictions, na_probs, qid_to_has_ans, unanswered):
    """The threshold that maximises the score, swept over the questions in na_prob order.

    The sweep starts with every question answered "no answer" (threshold 0.0: the unanswerable
    ones are right) and lets each question in turn, from the least likely unanswerable, keep
    its prediction. sorted() is stable, so ties keep the na_probs' key order, and only a strict
    improvement moves the threshold: exactly the official script's choices.
    """
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k] and k not in unanswered)
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores or qid in unanswered:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def _version(version) -> str:
    name = str(version).lstrip("vV")
    if name not in VERSIONS:
        raise UserError(f"Unknown SQuAD version {version!r}; choose one of {', '.join(VERSIONS)}.")
    return name


def _load(value, what: str, name: str):
    """(parsed object, how errors name it) for a path or an already parsed object."""
    if isinstance(value, (str, os.PathLike)):
        return read_json(os.fspath(value), what), f"The {what} {os.fspath(value)!r}"
    return value, name[0].upper() + name[1:]


def _check_mapping(value, value_types, source: str, what: str) -> None:
    if not isinstance(value, dict):
        raise UserError(f"{source} must be a JSON object mapping question ids to {what}.")
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, value_types):
            raise UserError(f"{source} must map question ids to {what}, but {key!r} maps to {item!r:.60}.")


def _questions(dataset, source: str) -> list[tuple[str, list[str]]]:
    """(question id, gold answer texts) for every question, in file order."""
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise UserError(f'{source} is not a SQuAD dataset: it has no "data" list of articles.')
    questions, where = [], "data"
    try:
        for i, article in enumerate(dataset["data"]):
            where = f"data[{i}]"
            for j, paragraph in enumerate(article["paragraphs"]):
                where = f"data[{i}].paragraphs[{j}]"
                for k, qa in enumerate(paragraph["qas"]):
                    where = f"data[{i}].paragraphs[{j}].qas[{k}]"
                    texts = [answer["text"] for answer in qa["answers"]]
                    if not isinstance(qa["id"], str) or not all(isinstance(t, str) for t in texts):
                        raise TypeError
                    questions.append((qa["id"], texts))
    except (KeyError, TypeError, AttributeError):
        raise UserError(
            f"{source} is not in SQuAD's format at {where} (expected data -> paragraphs -> qas, "
            f"each question with a string id and answers with a string text)."
        ) from None
    if not questions:
        raise UserError(f"{source} has no questions to score.")
    return questions


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.squad_metrics", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("data_file", help="the SQuAD dataset JSON (dev-v1.1.json, dev-v2.0.json)")
    parser.add_argument("prediction_file", help="JSON object: question id -> answer string")
    parser.add_argument("--na-prob-file", help="SQuAD 2.0: JSON object: question id -> P(no answer)")
    parser.add_argument(
        "--na-prob-thresh",
        type=float,
        default=1.0,
        help='SQuAD 2.0: predict "" where P(no answer) exceeds this (default 1.0)',
    )
    parser.add_argument("--version", choices=VERSIONS, help="default: read from the dataset")
    args = parser.parse_args(argv)
    try:
        result = evaluate(
            args.data_file, args.prediction_file, args.na_prob_file, args.version, args.na_prob_thresh
        )
    except UserError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    # Each official script's own layout: v1.1 prints one line, v2.0 indents by 2.
    print(json.dumps(result, indent=2 if "exact" in result else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
