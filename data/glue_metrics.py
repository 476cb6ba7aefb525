"""GLUE's metrics, in NumPy: accuracy, F1, Matthews correlation, Pearson and Spearman.

Each task is scored the way the GLUE leaderboard (and Hugging Face's glue_compute_metrics)
scores it, and each metric repeats the arithmetic of the library they call, so the numbers
agree to the last bit (tests/test_glue_metrics.py checks it; NumPy >= 2 for vecdot):

    CoLA, AX               matthews_corr    sklearn.metrics.matthews_corrcoef
    SST-2, MNLI(-m/-mm),   accuracy         sklearn.metrics.accuracy_score
      QNLI, RTE, WNLI
    MRPC, QQP              accuracy, f1     f1_score of the positive class "1"
    STS-B                  pearson,         scipy.stats.pearsonr,
                           spearman         scipy.stats.spearmanr (average ranks for ties)

The task table (names, aliases, label sets, which metrics) is data/glue.py's. Labels are the
strings GLUE's files hold: "0"/"1", entailment/neutral/contradiction, entailment/
not_entailment, and STS-B's scores as numbers. A correlation that is undefined (fewer than two
items, or a constant input) is NaN, as scipy reports it; Matthews is 0.0 where its denominator
is 0 (one class only in the gold labels or in the predictions), as sklearn's.

    python -m data.glue_metrics MRPC dev_labels.txt predictions.tsv
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from common.errors import UserError
from data.glue import Task, get_task

POSITIVE_LABEL = "1"  # MRPC and QQP report F1 of "paraphrase" / "duplicate"
SUBMISSION_HEADER = ("index", "prediction")  # data.glue.write_submission's files


def accuracy(gold, predicted) -> float:
    """The fraction of equal items; gold, predicted: [n] of any comparable dtype."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    return float(np.mean(gold == predicted))


def f1(gold, predicted, positive=POSITIVE_LABEL) -> float:
    """F1 of the class `positive`: 2 TP / (2 TP + FP + FN); 0.0 when there is no positive at all."""
    gold, predicted = np.asarray(gold) == positive, np.asarray(predicted) == positive
    true_positives = int(np.sum(gold & predicted))
    denominator = int(np.sum(gold)) + int(np.sum(predicted))  # (TP + FN) + (TP + FP)
    return 2.0 * true_positives / denominator if denominator else 0.0


def matthews_corr(gold, predicted) -> float:
    """The Matthews correlation over any number of classes (Gorodkin's R_K), as sklearn computes it:
    from the confusion matrix C, (c s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)) with c = trace(C),
    s = n, t and p the true and predicted class counts; 0.0 when the denominator is 0."""
    _, codes = np.unique(np.concatenate([np.asarray(gold), np.asarray(predicted)]), return_inverse=True)
    k = int(codes.max()) + 1 if codes.size else 1
    gold_codes, predicted_codes = codes[: len(gold)], codes[len(gold) :]
    confusion = np.bincount(gold_codes * k + predicted_codes, minlength=k * k).reshape(k, k)
    t_sum = confusion.sum(axis=1, dtype=np.float64)
    p_sum = confusion.sum(axis=0, dtype=np.float64)
    n_correct = np.trace(confusion, dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def pearson(x, y) -> float:
    """Pearson's r of two float sequences [n], computed as scipy.stats.pearsonr does; NaN for n < 2
    or a constant input."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    xm, ym = x - x.mean(), y - y.mean()
    # Norms of the deviations scaled by the largest one first, so that squaring cannot overflow.
    x_max, y_max = np.abs(xm).max(), np.abs(ym).max()
    x_norm = x_max * np.linalg.vector_norm(xm / x_max)
    y_norm = y_max * np.linalg.vector_norm(ym / y_max)
    r = float(np.clip(np.vecdot(xm / x_norm, ym / y_norm), -1.0, 1.0))
    return float(round(r)) if x.size == 2 else r  # two points: exactly +-1, as scipy promises


def average_ranks(x) -> np.ndarray:
    """1-based ranks of x [n], tied values sharing their mean rank (scipy.stats.rankdata 'average')."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    inverse = np.empty(x.size, np.intp)
    inverse[order] = np.arange(x.size)
    sorted_x = x[order]
    starts = np.r_[True, sorted_x[1:] != sorted_x[:-1]]  # first item of each run of equal values
    run = np.cumsum(starts)[inverse]  # each item's run number, from 1
    bounds = np.r_[np.flatnonzero(starts), x.size]  # run r spans sorted positions bounds[r-1]..bounds[r]-1
    return 0.5 * (bounds[run] + bounds[run - 1] + 1)


def spearman(x, y) -> float:
    """Spearman's rho: the correlation of the average ranks, computed as scipy.stats.spearmanr does
    (np.corrcoef); NaN for n < 2 or a constant input."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(average_ranks(x), average_ranks(y))[1, 0])


METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_corr": matthews_corr,
    "pearson": pearson,
    "spearman": spearman,
}


def compute(task: str | Task, gold: list, predicted: list) -> dict:
    """{metric name: value} for `task` (a name such as "MRPC" or "sts-b", or a data.glue Task).

    gold, predicted: [n] labels as GLUE writes them (strings; ints 0/1 pass as "0"/"1"), or
    STS-B scores (numbers or numeric strings). Raises UserError for an unknown task, lists of
    different lengths or no items, or a label outside the task's set.
    """
    task = get_task(task) if isinstance(task, str) else task
    if len(gold) != len(predicted):
        raise UserError(f"{len(gold)} gold labels but {len(predicted)} predictions for GLUE {task.name}.")
    if not gold:
        raise UserError(f"No labels to score for GLUE {task.name}.")
    gold = [_parse(task, value, f"gold item {i}") for i, value in enumerate(gold)]
    predicted = [_parse(task, value, f"predicted item {i}") for i, value in enumerate(predicted)]
    return {name: METRICS[name](gold, predicted) for name in task.metrics}


def read_labels(path: str, task: str | Task) -> list:
    """One label (or STS-B score) per line of `path`, or the prediction column of a GLUE submission
    TSV (header `index<TAB>prediction`); trailing empty lines are skipped. Raises UserError naming
    the file and line for a label outside the task's set or a score that is not a number."""
    task = get_task(task) if isinstance(task, str) else task
    try:
        # utf-8-sig: a BOM some editors add must not become part of the first label.
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise UserError(f"The label file {path!r} does not exist.") from None
    except OSError as e:
        raise UserError(f"Cannot read the label file {path!r} ({e.strerror or e}).") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}).") from None
    while lines and not lines[-1].strip():
        lines.pop()
    first = 1
    if lines and tuple(c.strip() for c in lines[0].split("\t")) == SUBMISSION_HEADER:
        first = 2
        rows = [line.split("\t") for line in lines[1:]]
        bad = next((n for n, row in enumerate(rows, first) if len(row) != len(SUBMISSION_HEADER)), None)
        if bad is not None:
            raise UserError(
                f"{path}, line {bad}: expected two tab-separated columns (index, prediction) "
                f"as the header says."
            )
        lines = [row[1] for row in rows]
    return [_parse(task, value, f"{path}, line {n}") for n, value in enumerate(lines, first)]


def evaluate_files(task: str | Task, gold_file: str, prediction_file: str) -> dict:
    """`compute` on two label files (see `read_labels`), which must have the same number of labels."""
    task = get_task(task) if isinstance(task, str) else task
    gold, predicted = read_labels(gold_file, task), read_labels(prediction_file, task)
    if len(gold) != len(predicted):
        raise UserError(
            f"The gold file {gold_file!r} has {len(gold)} labels but the prediction file "
            f"{prediction_file!r} has {len(predicted)}; they must be line for line."
        )
    return compute(task, gold, predicted)


def _parse(task: Task, value, where: str):
    """A label string of the task's set, or a finite float for STS-B; UserError naming `where`."""
    if task.is_regression:
        try:
            score = float(value)
        except (TypeError, ValueError):
            score = math.nan
        if not math.isfinite(score):
            raise UserError(f"{where}: the {task.name} score {value!r} is not a finite number.")
        return score
    label = str(value).strip()
    if label not in task.labels:
        raise UserError(
            f"{where}: label {value!r} is not one of GLUE {task.name}'s labels "
            f"{', '.join(repr(v) for v in task.labels)}."
        )
    return label


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.glue_metrics", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "task", help="CoLA, SST-2, MRPC, STS-B, QQP, MNLI, MNLI-m, MNLI-mm, QNLI, RTE, WNLI, AX"
    )
    parser.add_argument("gold_file", help="one gold label per line")
    parser.add_argument("prediction_file", help="one predicted label per line, or a GLUE submission TSV")
    args = parser.parse_args(argv)
    try:
        result = evaluate_files(args.task, args.gold_file, args.prediction_file)
    except UserError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
