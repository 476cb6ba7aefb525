"""A picture of a training run from its log.jsonl: loss, accuracy, learning rate and sequences/s
against the update step, several runs end to end (pretraining's phase 2 after phase 1).

    python -m training.plot results/quickstart/phase_1 results/quickstart/phase_2 --output run.png

Each RUN_DIR is an output directory of run_pretraining.py, run_squad.py or run_classifier.py
(its log.jsonl; training/metrics_log.py writes it). Every run restarts its step count at 1 (phase
2's optimizer starts fresh), so run k is drawn from where run k-1 ended, its span shaded and named
after its directory. Training-batch values are lines; held-out evaluations (the {"step", "eval"}
lines of the log, and the eval_results.json a run writes at its end) are markers.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field

from common.errors import UserError
from common.files import read_json
from training.loop import EVAL_RESULTS_NAME
from training.metrics_log import LOG_NAME, read_log

# The four panels: (title, y label, log keys drawn as lines, eval keys drawn as markers).
PANELS = (
    ("Loss", "loss (training batch)", ("loss", "mlm_loss", "nsp_loss", "span_loss"), ()),
    (
        "Accuracy",
        "accuracy",
        ("mlm_accuracy", "nsp_accuracy", "accuracy", "start_accuracy", "end_accuracy"),
        ("masked_lm_accuracy", "next_sentence_accuracy", "accuracy"),
    ),
    ("Learning rate", "learning rate", ("learning_rate",), ()),
    ("Throughput", "sequences / s", ("sequences_per_second",), ()),
)
LABELS = {
    "loss": "total",
    "mlm_loss": "masked LM",
    "nsp_loss": "next sentence",
    "mlm_accuracy": "masked LM (training batch)",
    "nsp_accuracy": "next sentence (training batch)",
    "accuracy": "training batch",
    "start_accuracy": "answer start (training batch)",
    "end_accuracy": "answer end (training batch)",
    "masked_lm_accuracy": "masked LM, held out",
    "next_sentence_accuracy": "next sentence, held out",
}
# A held-out marker takes the colour of the training line of the same quantity.
COLORS = {
    "mlm_accuracy": "tab:blue",
    "masked_lm_accuracy": "tab:blue",
    "nsp_accuracy": "tab:orange",
    "next_sentence_accuracy": "tab:orange",
    "start_accuracy": "tab:purple",
    "end_accuracy": "tab:brown",
}


@dataclass
class Run:
    """One run's log, its steps shifted by `offset` (where the runs before it ended)."""

    name: str
    offset: int
    train: list[dict]
    evals: list[dict] = field(default_factory=list)  # {"step": ..., **results}

    @property
    def end(self) -> int:
        return self.offset + max((e["step"] for e in self.train), default=0)


def _number(value) -> float | None:
    """A logged value as a float (metrics_log writes non-finite ones as "nan"/"inf" strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def load_runs(run_dirs: list[str]) -> list[Run]:
    """The runs of `run_dirs`, in order, each starting where the previous one ended."""
    runs: list[Run] = []
    for run_dir in run_dirs:
        log_path = os.path.join(run_dir, LOG_NAME)
        if not os.path.isfile(log_path):
            raise UserError(f"{run_dir} holds no {LOG_NAME}; give the output directory of a training run.")
        entries = read_log(log_path)
        train = [e for e in entries if "eval" not in e and isinstance(e.get("step"), int)]
        if not train:
            raise UserError(f"{log_path} holds no logged training step yet.")
        offset = runs[-1].end if runs else 0
        evals = [{"step": e["step"], **e["eval"]} for e in entries if isinstance(e.get("eval"), dict)]
        final_path = os.path.join(run_dir, EVAL_RESULTS_NAME)
        if os.path.isfile(final_path):
            final = read_json(final_path, "evaluation results")
            # The end-of-run evaluation; a run that predicted only (no global_step) sits at its end.
            step = final.get("global_step")
            evals.append({**final, "step": step if isinstance(step, int) else train[-1]["step"]})
        name = os.path.basename(os.path.normpath(run_dir))
        runs.append(Run(name, offset, train, evals))
    return runs


def _series(runs: list[Run], key: str, source: str) -> tuple[list[float], list[float]]:
    """(steps, values) of `key` across the runs, steps end to end; non-numbers left out."""
    steps, values = [], []
    for run in runs:
        for entry in getattr(run, source):
            value = _number(entry.get(key))
            if value is not None and math.isfinite(value):
                steps.append(run.offset + entry["step"])
                values.append(value)
    return steps, values


def draw(runs: list[Run], output: str, title: str | None = None) -> list[str]:
    """Writes the picture of `runs` to `output` (PNG, or any format matplotlib knows by the
    extension); returns the keys it drew."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training node
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), sharex=True)
    drawn = []
    for ax, (panel, ylabel, keys, eval_keys) in zip(axes.flat, PANELS):
        for key in keys:
            steps, values = _series(runs, key, "train")
            if steps:
                marker = "." if len(steps) < 30 else None  # a short run's few points stay visible
                ax.plot(
                    steps,
                    values,
                    label=LABELS.get(key, key),
                    color=COLORS.get(key),
                    linewidth=1.4,
                    marker=marker,
                )
                drawn.append(key)
        for key in eval_keys:
            steps, values = _series(runs, key, "evals")
            if steps:
                color = COLORS.get(key, "tab:green")
                ax.plot(
                    steps,
                    values,
                    "D",
                    color=color,
                    markersize=7,
                    markeredgecolor="black",
                    label=LABELS.get(key, key),
                )
                drawn.append(f"eval/{key}")
        if not ax.get_lines():
            ax.text(0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=ax.transAxes)
        elif panel != "Loss":  # rates, accuracies and throughputs read against zero
            ax.set_ylim(bottom=0)
        ax.set_xlim(0, max(runs[-1].end, 1) * 1.02)  # every run from step 0, the last markers whole
        ax.set_title(panel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize=8, loc="best")
    for ax in axes[1]:
        ax.set_xlabel("update step" + (" (runs end to end)" if len(runs) > 1 else ""))
    _mark_runs(axes.flat, runs)
    fig.suptitle(title or " -> ".join(r.name for r in runs))
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return drawn


def _mark_runs(axes, runs: list[Run]) -> None:
    """Shades every other run's span and names each run at the top of every panel."""
    for ax in axes:
        for i, run in enumerate(runs):
            if i % 2:
                ax.axvspan(run.offset, run.end, color="grey", alpha=0.12, linewidth=0)
            if i:
                ax.axvline(run.offset, color="grey", linestyle="--", linewidth=1)
            if len(runs) > 1:  # the name just right of where the run starts: narrow spans stay readable
                ax.text(
                    run.offset,
                    0.98,
                    f" {run.name}",
                    transform=ax.get_xaxis_transform(),
                    ha="left",
                    va="top",
                    fontsize=9,
                    color="dimgrey",
                    clip_on=True,
                )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="output directories, in order")
    parser.add_argument("--output", required=True, help="the picture to write (e.g. run.png)")
    parser.add_argument("--title", default=None, help="default: the run directories' names")
    args = parser.parse_args(argv)
    try:
        draw(load_runs(args.run_dirs), args.output, args.title)
    except UserError as e:
        print(f"python -m training.plot: error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
