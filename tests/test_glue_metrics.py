"""GLUE's metrics (data/glue_metrics.py): each NumPy metric equals sklearn's or scipy's to the last
bit on seeded random cases, every task reports its metrics, and bad input stops with one sentence."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics

from common.errors import UserError
from conftest import ROOT
from data.glue_metrics import (
    accuracy,
    average_ranks,
    compute,
    evaluate_files,
    f1,
    matthews_corr,
    pearson,
    read_labels,
    spearman,
)

SIZES = [2, 3, 7, 50, 1000]
MNLI = ["entailment", "neutral", "contradiction"]


def _labels(rng, n, classes, skew=0.5):
    """n labels drawn from `classes`, the first one with probability `skew` (imbalanced cases)."""
    rest = (1 - skew) / (len(classes) - 1)
    return list(rng.choice(classes, size=n, p=[skew] + [rest] * (len(classes) - 1)))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.filterwarnings("ignore:A single label was found")  # sklearn, on the tiny draws
def test_classification_metrics_equal_sklearn(n):
    rng = np.random.default_rng(n)
    for skew in (0.5, 0.1, 0.9):
        gold, predicted = _labels(rng, n, ["0", "1"], skew), _labels(rng, n, ["0", "1"], skew)
        assert accuracy(gold, predicted) == metrics.accuracy_score(gold, predicted)
        assert f1(gold, predicted) == metrics.f1_score(gold, predicted, pos_label="1", zero_division=0.0)
        assert matthews_corr(gold, predicted) == metrics.matthews_corrcoef(gold, predicted)
        gold, predicted = _labels(rng, n, MNLI, skew), _labels(rng, n, MNLI, skew)
        assert accuracy(gold, predicted) == metrics.accuracy_score(gold, predicted)
        assert matthews_corr(gold, predicted) == metrics.matthews_corrcoef(gold, predicted)


def test_degenerate_classification_cases_match_sklearn():
    # No positive anywhere: F1 0.0 (sklearn with zero_division=0). One class only: Matthews 0.0.
    assert f1(["0", "0"], ["0", "0"]) == 0.0
    assert matthews_corr(["1", "1", "1"], ["1", "1", "1"]) == 0.0
    assert matthews_corr(["1", "0", "1"], ["1", "1", "1"]) == 0.0  # a constant prediction
    # Perfect and perfectly wrong predictions.
    assert matthews_corr(["0", "1", "1"], ["0", "1", "1"]) == 1.0
    assert matthews_corr(["0", "1", "1"], ["1", "0", "0"]) == -1.0


@pytest.mark.parametrize("n", SIZES)
def test_correlations_equal_scipy_with_ties(n):
    rng = np.random.default_rng(100 + n)
    x = rng.normal(size=n)
    y = 0.5 * x + rng.normal(size=n)
    assert pearson(x, y) == stats.pearsonr(x, y).statistic
    assert spearman(x, y) == stats.spearmanr(x, y).statistic
    # STS-B scores on a 0..5 grid of fifths: many ties, which share their average rank.
    a = np.round(rng.uniform(0, 5, size=n) * 5) / 5
    b = np.clip(np.round((a + rng.normal(scale=1.0, size=n)) * 5) / 5, 0, 5)
    np.testing.assert_array_equal(average_ranks(a), stats.rankdata(a))
    if np.ptp(a) > 0 and np.ptp(b) > 0:
        assert len(set(a)) < n or n < 7  # ties really occur in the larger cases
        assert pearson(a, b) == stats.pearsonr(a, b).statistic
        assert spearman(a, b) == stats.spearmanr(a, b).statistic


def test_average_ranks_and_undefined_correlations():
    np.testing.assert_array_equal(average_ranks([3.0, 1.0, 3.0, 2.0, 3.0]), [4.0, 1.0, 4.0, 2.0, 4.0])
    # Ranks 1 2 3 4 vs 1 2.5 2.5 4: rho = 4.5 / sqrt(5 * 4.5) = 0.9486...
    assert spearman([1, 2, 3, 4], [10, 20, 20, 40]) == pytest.approx(4.5 / math.sqrt(5 * 4.5))
    assert pearson([1.0, 2.0], [3.0, 1.0]) == -1.0  # two points: exactly -1, as scipy rounds it
    # Undefined, NaN as scipy reports it: a constant input (even one whose mean is inexact: 0.1 * 3
    # / 3 != 0.1), or a single item.
    assert math.isnan(pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]))
    assert math.isnan(spearman([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]))
    assert math.isnan(pearson([1.0], [1.0]))


def test_each_task_reports_its_metrics():
    gold, predicted = ["1", "1", "0", "0", "1"], ["1", "0", "0", "1", "1"]
    # TP 2, TN 1, FP 1, FN 1: accuracy 3/5, F1 2*2 / (2*2 + 1 + 1) = 2/3,
    # Matthews (2*1 - 1*1) / sqrt(3 * 3 * 2 * 2) = 1/6.
    for task in ("MRPC", "qqp"):
        assert compute(task, gold, predicted) == {"f1": 2 / 3, "accuracy": 0.6}
    for task in ("SST-2", "sst2", "WNLI"):
        assert compute(task, gold, predicted) == {"accuracy": 0.6}
    assert compute("CoLA", gold, predicted) == {"matthews_corr": 1 / 6}
    assert compute("cola", [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == {"matthews_corr": 1 / 6}  # ints pass
    nli = ["entailment", "not_entailment", "entailment", "entailment"]
    for task in ("QNLI", "rte"):
        assert compute(task, nli, ["entailment"] * 4) == {"accuracy": 0.75}
    mnli = ["entailment", "neutral", "contradiction", "neutral"]
    for task in ("MNLI", "mnli-m", "MNLI-MM"):
        assert compute(task, mnli, ["entailment", "neutral", "neutral", "neutral"]) == {"accuracy": 0.75}
    # AX is scored as GLUE's diagnostic: a three-class Matthews correlation. 2 of 4 right, class
    # counts 1/1/2 in both: (2*4 - 6) / sqrt((16 - 6) * (16 - 6)) = 0.2.
    assert compute("ax", mnli, ["entailment", "neutral", "neutral", "contradiction"]) == {
        "matthews_corr": 0.2
    }
    for task in ("STS-B", "stsb", "sts-b"):
        result = compute(task, ["1.0", "2.5", 4, "3"], [1.2, 2.0, 4.5, 3.3])
        assert list(result) == ["pearson", "spearman"] and result["spearman"] == 1.0  # same order
        assert result["pearson"] == stats.pearsonr([1.0, 2.5, 4, 3], [1.2, 2.0, 4.5, 3.3]).statistic


def test_read_labels_skips_a_trailing_empty_line_and_reads_submission_files(tmp_path):
    plain = tmp_path / "labels.txt"
    plain.write_text("1\n0\n1\n\n")
    assert read_labels(str(plain), "MRPC") == ["1", "0", "1"]
    submission = tmp_path / "MRPC.tsv"
    submission.write_text("index\tprediction\n0\t1\n1\t1\n2\t0\n")
    assert read_labels(str(submission), "mrpc") == ["1", "1", "0"]
    scores = tmp_path / "STS-B.tsv"
    scores.write_text("\ufeffindex\tprediction\r\n0\t4.250\r\n1\t0.000\r\n")  # a BOM and CRLF
    assert read_labels(str(scores), "STS-B") == [4.25, 0.0]
    # 1/0/1 vs 1/1/0: TP 1, FP 1, FN 1 -> F1 2 / 4; one of three right.
    assert evaluate_files("MRPC", str(plain), str(submission)) == {"f1": 0.5, "accuracy": 1 / 3}


def _one_sentence(function, *args) -> str:
    with pytest.raises(UserError) as error:
        function(*args)
    message = str(error.value)
    assert "\n" not in message and message.endswith(".")
    return message


def test_bad_input_raises_one_sentence(tmp_path):
    message = _one_sentence(compute, "squad", ["1"], ["1"])
    assert "'squad'" in message and "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI, AX" in message

    gold, short = tmp_path / "gold.txt", tmp_path / "pred.txt"
    gold.write_text("1\n0\n1\n")
    short.write_text("1\n0\n")
    message = _one_sentence(evaluate_files, "MRPC", str(gold), str(short))
    assert "gold.txt' has 3 labels" in message and "pred.txt' has 2" in message

    short.write_text("1\n0\nyes\n")
    message = _one_sentence(evaluate_files, "MRPC", str(gold), str(short))
    assert f"{short}, line 3: label 'yes'" in message

    nli = tmp_path / "rte.txt"
    nli.write_text("entailment\nneutral\n")  # neutral is MNLI's, not RTE's
    assert f"{nli}, line 2: label 'neutral'" in _one_sentence(read_labels, str(nli), "RTE")

    scores = tmp_path / "stsb.tsv"
    scores.write_text("index\tprediction\n0\t3.5\n1\tfive\n")
    assert f"{scores}, line 3: the STS-B score 'five'" in _one_sentence(read_labels, str(scores), "STS-B")
    scores.write_text("index\tprediction\n0\n")
    assert f"{scores}, line 2: expected two" in _one_sentence(read_labels, str(scores), "STS-B")

    assert "does not exist" in _one_sentence(read_labels, str(tmp_path / "nope.txt"), "CoLA")
    assert "2 gold labels but 1 predictions" in _one_sentence(compute, "CoLA", ["0", "1"], ["0"])
    assert "No labels" in _one_sentence(compute, "CoLA", [], [])


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "data.glue_metrics", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_cli_prints_one_json_object_and_exits_2_on_bad_input(tmp_path):
    gold, predicted = tmp_path / "gold.txt", tmp_path / "STS-B.tsv"
    gold.write_text("0.0\n2.5\n5.0\n4.0\n")
    predicted.write_text("index\tprediction\n0\t0.400\n1\t2.000\n2\t4.800\n3\t4.900\n")
    result = _cli("sts-b", gold, predicted)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    # Ranks 1 2 4 3 vs 1 2 3 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8, which corrcoef (as scipy) gives
    # as 0.7999999999999999.
    gold_scores, predicted_scores = [0.0, 2.5, 5.0, 4.0], [0.4, 2.0, 4.8, 4.9]
    assert printed == {
        "pearson": stats.pearsonr(gold_scores, predicted_scores).statistic,
        "spearman": stats.spearmanr(gold_scores, predicted_scores).statistic,
    }
    assert printed["spearman"] == pytest.approx(0.8)

    result = _cli("MNLI", gold, predicted)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("python -m data.glue_metrics: error: ")
    assert f"{gold}, line 1: label '0.0' is not one of GLUE MNLI's labels" in line
