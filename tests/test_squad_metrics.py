"""SQuAD's official metrics (data/squad_metrics.py): hand-computed v1.1 and v2.0 scores, the
no-answer threshold search with its tie rule, and one-sentence errors for bad input."""

import json
import subprocess
import sys

import pytest

from common.errors import UserError
from conftest import ROOT
from data.squad_metrics import dataset_version, evaluate, exact_score, f1_score, normalize_answer

V2_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total"]
V2_KEYS += ["NoAns_exact", "NoAns_f1", "NoAns_total"]
BEST_KEYS = ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


def squad(version, questions):
    """A one-article dataset in SQuAD's layout; questions: (id, [answer texts], extra qa fields)."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in texts], **extra}
        for qid, texts, extra in questions
    ]
    return {"version": version, "data": [{"title": "T", "paragraphs": [{"context": "c", "qas": qas}]}]}


V1 = squad(
    "1.1",
    [
        ("q1", ["The Eiffel Tower", "Eiffel Tower, Paris"], {}),
        ("q2", ["Albert Einstein", "Einstein"], {}),
        ("q3", ["a red car"], {}),
        ("q4", ["1905"], {}),
        ("q5", ["Rome"], {}),
    ],
)
V1_PREDICTIONS = {
    "q1": "eiffel  TOWER!",  # -> "eiffel tower" = gold 1: EM 1, F1 1
    "q2": "physicist Albert Einstein",  # vs gold 1: P 2/3, R 1, F1 0.8; vs gold 2: F1 0.5 -> 0.8
    "q3": "",  # EM 0, F1 0 (no common token)
    "q4": "in 1905 and 1906",  # P 1/4, R 1 -> F1 0.4
    # q5 has no prediction: 0, counted in the total
}

# h1..h3 answerable, n1/n2 not (empty "answers"); every question has a prediction.
V2 = squad(
    "v2.0",
    [
        ("h1", ["Denver Broncos", "the Broncos"], {"is_impossible": False}),
        ("h2", ["Paris", "The"], {"is_impossible": False}),  # "The" normalises to "": dropped
        ("h3", ["in 1905", "the year 1905"], {"is_impossible": False}),
        ("n1", [], {"is_impossible": True}),
        ("n2", [], {"is_impossible": True}),
    ],
)
V2_PREDICTIONS = {
    "h1": "Broncos",  # = "the Broncos" after normalising: EM 1, F1 1
    "h2": "",  # EM 0 and F1 0 (had "The" been kept, "" would match it)
    "h3": "1905 and 1906",  # vs [in, 1905] or [year, 1905]: P 1/3, R 1/2 -> F1 0.4, EM 0
    "n1": "",  # right: no answer
    "n2": "Some guess",  # wrong
}


def test_normalize_answer_lowers_and_drops_punctuation_articles_and_spaces():
    assert normalize_answer("  The Eiffel  Tower, (in Paris)! ") == "eiffel tower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre AND another") == "theatre and another"  # whole words only
    assert normalize_answer("state-of-the-art") == "stateoftheart"  # punctuation goes before articles
    assert normalize_answer("The!") == ""


def test_exact_and_f1_scores():
    assert exact_score("The Cat.", "cat") == 1 and exact_score("cats", "cat") == 0
    assert f1_score("the cat sat", "a cat") == pytest.approx(2 * (1 / 2) * 1 / (1 / 2 + 1))  # P 1/2, R 1
    assert f1_score("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)  # multiset overlap: 2 of 3
    # Two answers with no tokens: v2.0 says both mean "no answer" (F1 1), v1.1 scores F1 0.
    assert f1_score("the", "", version="2.0") == 1 and f1_score("the", "", version="1.1") == 0
    assert f1_score("cat", "", version="2.0") == 0


def test_v1_1_scores_best_gold_answer_and_zero_for_a_missing_prediction():
    messages = []
    result = evaluate(V1, V1_PREDICTIONS, log=messages.append)
    assert list(result) == ["exact_match", "f1"]
    # EM: q1 only -> 100 * 1 / 5. F1: summed in file order 1.0 + 0.8 + 0 + 0.4 (+ 0 for q5) =
    # 2.2000000000000002, so the official script prints 44.00000000000001, not 44.0.
    assert result == {"exact_match": 20.0, "f1": 44.00000000000001}
    assert messages == ["Unanswered question q5 will receive score 0."]


def test_v2_0_scores_answerable_and_unanswerable_questions():
    result = evaluate(V2, V2_PREDICTIONS)
    assert list(result) == V2_KEYS
    # exact: h1, n1 right of 5; f1: 1 + 0 + 0.4 + 1 + 0 = 2.4 of 5.
    assert result == {
        "exact": 40.0,
        "f1": 48.0,
        "total": 5,
        "HasAns_exact": 100.0 * 1 / 3,
        "HasAns_f1": 100.0 * 1.4 / 3,
        "HasAns_total": 3,
        "NoAns_exact": 50.0,
        "NoAns_f1": 50.0,
        "NoAns_total": 2,
    }
    assert isinstance(result["total"], int)


def test_v2_0_no_answer_threshold_turns_likely_unanswerable_predictions_into_no_answer():
    na_probs = {"h1": 0.1, "h3": 0.4, "n2": 0.4, "h2": 0.8, "n1": 0.9}
    result = evaluate(V2, V2_PREDICTIONS, na_probs, na_prob_thresh=0.3)
    assert list(result) == V2_KEYS + BEST_KEYS
    # Above 0.3: h3 becomes "no answer" (wrong, 0.0), n2 too (right, 1.0), h2 and n1 unchanged.
    # exact and f1: h1 1, h2 0, h3 0, n1 1, n2 1 -> 3 of 5.
    assert [result[k] for k in V2_KEYS] == [60.0, 60.0, 5, 100 / 3, 100 / 3, 3, 100.0, 100.0, 2]


def test_v2_0_best_thresholds_follow_the_official_sweep_and_its_tie_rule():
    # The sweep starts at threshold 0.0 with every question "no answer": n1, n2 right -> 2.
    # It then lets each question keep its prediction in na_prob order (sorted() is stable, so
    # the tied h3 and n2 keep the dict's order) and moves the threshold on a strict gain only.
    #   exact: h1 +1 -> 3 (best, 0.1); h3 +0 -> 3 (no move); n2 -1 -> 2; h2 +0; n1 +0 ("" = right)
    #   f1:    h1 +1 -> 3 (best, 0.1); h3 +0.4 -> 3.4 (best, 0.4); n2 -1 -> 2.4; h2 +0; n1 +0
    h3_first = {"h1": 0.1, "h3": 0.4, "n2": 0.4, "h2": 0.8, "n1": 0.9}
    result = evaluate(V2, V2_PREDICTIONS, h3_first)
    best = {k: result[k] for k in BEST_KEYS}
    assert best == {"best_exact": 60.0, "best_exact_thresh": 0.1, "best_f1": 68.0, "best_f1_thresh": 0.4}
    # The same probabilities with n2 first: f1 h1 -> 3 (0.1), n2 -> 2, h3 -> 2.4: 3 stays best.
    n2_first = {"h1": 0.1, "n2": 0.4, "h3": 0.4, "h2": 0.8, "n1": 0.9}
    result = evaluate(V2, V2_PREDICTIONS, n2_first)
    assert (result["best_f1"], result["best_f1_thresh"]) == (60.0, 0.1)
    # The default threshold 1.0 leaves the plain scores as they were.
    assert [result[k] for k in V2_KEYS] == list(evaluate(V2, V2_PREDICTIONS).values())


def test_v2_0_missing_predictions_score_zero_at_every_threshold():
    data = squad(
        "v2.0",
        [("h1", ["Broncos"], {}), ("n1", [], {}), ("m1", ["Paris"], {}), ("m2", [], {})],
    )
    messages = []
    result = evaluate(data, {"h1": "Broncos", "n1": ""}, {"h1": 0.2, "n1": 0.7}, log=messages.append)
    assert messages == [f"Unanswered question {q} will receive score 0." for q in ("m1", "m2")]
    # h1 and n1 right, m1 and m2 0, all four counted. The sweep starts from the one answered
    # unanswerable question (n1) -> 1; h1 +1 -> 2 (0.2); n1 +0 -> 50.0 of 4.
    assert result == {
        "exact": 50.0,
        "f1": 50.0,
        "total": 4,
        "HasAns_exact": 50.0,
        "HasAns_f1": 50.0,
        "HasAns_total": 2,
        "NoAns_exact": 50.0,
        "NoAns_f1": 50.0,
        "NoAns_total": 2,
        "best_exact": 50.0,
        "best_exact_thresh": 0.2,
        "best_f1": 50.0,
        "best_f1_thresh": 0.2,
    }


def test_version_comes_from_the_data_unless_given():
    assert dataset_version(V1) == "1.1" and dataset_version(V2) == "2.0"
    assert dataset_version(squad("1.1", [("q", [], {"is_impossible": True})])) == "2.0"
    assert dataset_version({"data": V1["data"]}) == "1.1"
    # v1.1 data scored as 2.0: no unanswerable question, so no NoAns_* keys.
    result = evaluate(V1, {**V1_PREDICTIONS, "q5": "Rome"}, version="2.0")
    assert list(result) == V2_KEYS[:6] and result["total"] == 5


def _one_sentence_error(*args, **kwargs) -> str:
    with pytest.raises(UserError) as error:
        evaluate(*args, **kwargs)
    message = str(error.value)
    assert "\n" not in message and message.endswith(".")
    return message


def test_bad_input_raises_one_sentence_naming_the_file(tmp_path):
    good = tmp_path / "dev.json"
    good.write_text(json.dumps(V1))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(V1_PREDICTIONS))

    missing = _one_sentence_error(tmp_path / "nope.json", str(predictions))
    assert "nope.json" in missing and "does not exist" in missing

    broken = tmp_path / "broken.json"
    broken.write_text('{"version": "1.1",\n "data": [\n  {"title": oops}]}\n')
    message = _one_sentence_error(str(broken), str(predictions))
    assert "broken.json" in message and "not valid JSON" in message and "line 3" in message

    as_list = tmp_path / "list.json"
    as_list.write_text('["Paris"]')
    assert "list.json" in _one_sentence_error(str(good), str(as_list))
    numbers = tmp_path / "numbers.json"
    numbers.write_text('{"q1": 3}')
    message = _one_sentence_error(str(good), str(numbers))
    assert "numbers.json" in message and "'q1' maps to 3" in message

    no_data = tmp_path / "no_data.json"
    no_data.write_text('{"version": "1.1"}')
    message = _one_sentence_error(str(no_data), str(predictions))
    assert "no_data.json" in message and '"data"' in message

    assert "SQuAD 2.0 only" in _one_sentence_error(V1, V1_PREDICTIONS, {"q1": 0.5})
    message = _one_sentence_error(V2, V2_PREDICTIONS, {"h1": 0.5})
    assert "'h2'" in message  # the first answered question without a probability
    assert "1.1, 2.0" in _one_sentence_error(V1, V1_PREDICTIONS, version="3")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "data.squad_metrics", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_cli_prints_the_official_json_and_exits_2_on_malformed_json(tmp_path):
    data, predictions, na_probs = tmp_path / "dev.json", tmp_path / "pred.json", tmp_path / "na.json"
    data.write_text(json.dumps(V2))
    predictions.write_text(json.dumps(V2_PREDICTIONS))
    na_probs.write_text(json.dumps({"h1": 0.1, "h3": 0.4, "n2": 0.4, "h2": 0.8, "n1": 0.9}))
    result = _cli(data, predictions, "--na-prob-file", na_probs, "--na-prob-thresh", "0.3")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert list(printed) == V2_KEYS + BEST_KEYS
    assert printed == evaluate(V2, V2_PREDICTIONS, json.loads(na_probs.read_text()), na_prob_thresh=0.3)

    # v1.1 (read from the data): stdout holds only the JSON, the missing q5 is reported on stderr.
    data.write_text(json.dumps(V1))
    predictions.write_text(json.dumps(V1_PREDICTIONS))
    result = _cli(data, predictions)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"exact_match": 20.0, "f1": 44.00000000000001}
    assert result.stderr == "Unanswered question q5 will receive score 0.\n"

    predictions.write_text('{"q1": "Paris",}')
    result = _cli(data, predictions)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("python -m data.squad_metrics: error: The predictions file ")
    assert "pred.json" in line and "line 1" in line
