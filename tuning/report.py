"""What a fine-tuning hyperparameter study reports from its Optuna storage: the trials table
(trials.tsv and printed), the best trial (best_trial.json, with its checkpoint) and the plots,
as PNG and offline HTML: every trial's dev metric over updates (pruned trials dashed where they
were cut) and learning rate vs metric. Any worker of a shared study may write them; each file is
replaced atomically."""

from __future__ import annotations

import os
import socket

from common.files import atomic_path, atomic_write, write_json
from tuning.search_space import PARAMETERS

TRIALS_TABLE = "trials.tsv"
BEST_TRIAL = "best_trial.json"
PLOTS = ("dev_metric_by_step", "learning_rate_vs_metric")


def _minutes(trial) -> float | None:
    if trial.datetime_start is None or trial.datetime_complete is None:
        return None
    return (trial.datetime_complete - trial.datetime_start).total_seconds() / 60


def trial_rows(study, space: dict) -> list[dict]:
    """One row per trial: number, state, parameters, metric, last step, minutes."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("surplus"):
            continue
        row = {"trial": t.number, "state": t.state.name.lower()}
        for name in space:
            row[name] = t.params.get(name, t.user_attrs.get(name))
        last = max(t.intermediate_values.items())[1] if t.intermediate_values else None
        row["metric"] = t.value if t.value is not None else last
        row["last_step"] = t.user_attrs.get("last_step")
        row["minutes"] = _minutes(t)
        rows.append(row)
    return rows


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(rows: list[dict], metric: str) -> str:
    if not rows:
        return "(no trials)"
    header = [("metric" if k == "metric" else k) for k in rows[0]]
    cells = [[_cell(r[k]) for k in rows[0]] for r in rows]
    header = [metric if h == "metric" else h for h in header]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def write_table(path: str, rows: list[dict], metric: str) -> None:
    with atomic_write(path) as f:
        if rows:
            f.write("\t".join(metric if k == "metric" else k for k in rows[0]) + "\n")
            for row in rows:
                f.write("\t".join("" if v is None else str(v) for v in row.values()) + "\n")


def best_complete(study):
    """The complete trial with the highest value (Optuna's best_trial), or None before one."""
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def best_trial(study, metric: str) -> dict | None:
    """The best complete trial: number, metric, parameters, output directory, checkpoint."""
    best = best_complete(study)
    if best is None:
        return None
    params = {**best.user_attrs, **best.params}  # fixed values are user attributes
    output_dir = best.user_attrs.get("output_dir")
    return {
        "trial": best.number,
        "metric": metric,
        "value": best.value,
        "params": {k: params[k] for k in PARAMETERS if k in params},
        "output_dir": output_dir,
        "host": best.user_attrs.get("host"),
        "checkpoint": _intact_checkpoint(output_dir),
    }


def _intact_checkpoint(output_dir: str | None) -> str | None:
    """The newest intact checkpoint of a trial's directory; None when it has none (or none intact:
    the report still comes out)."""
    from common.errors import UserError
    from training.checkpointing import latest_checkpoint

    if not output_dir or not os.path.isdir(output_dir):
        return None
    try:
        return latest_checkpoint(output_dir)
    except UserError:
        return None


LEGEND = {"pruned": "pruned (its value when cut)"}
STYLE = {"complete": ("-", "o"), "pruned": ("--", "x"), "fail": (":", "s"), "running": (":", ".")}


def _curves(study) -> list[tuple]:
    """(trial number, state, steps, values) of each trial's reported dev metric."""
    curves = []
    for t in study.get_trials(deepcopy=False):
        if t.intermediate_values:
            steps = sorted(t.intermediate_values)
            curves.append((t.number, t.state.name.lower(), steps, [t.intermediate_values[k] for k in steps]))
    return curves


def _points(rows: list[dict]) -> list[tuple]:
    return [
        (r["learning_rate"], r["metric"], r["state"], r["trial"])
        for r in rows
        if r.get("learning_rate") is not None and r["metric"] is not None
    ]


def write_plots(output_dir: str, study, rows: list[dict], metric: str) -> list[str]:
    """The dev metric over steps of every trial (pruned ones dashed, ending in x where they were
    cut) and learning rate vs metric (the final one; a pruned trial's last), as PNG and HTML."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import plotly.graph_objects as go

    curves, points = _curves(study), _points(rows)
    written = []
    # 1. Dev metric by step.
    fig, ax = plt.subplots(figsize=(8, 5))
    html = go.Figure()
    for number, state, steps, values in curves:
        line, marker = STYLE.get(state, STYLE["running"])
        ax.plot(
            steps,
            values,
            linestyle=line,
            marker=marker,
            markevery=[len(steps) - 1],
            label=f"trial {number} ({state})",
        )
        html.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                mode="lines+markers",
                name=f"trial {number} ({state})",
                line={"dash": "dash" if state == "pruned" else "solid"},
            )
        )
    ax.set(xlabel="update", ylabel=f"dev {metric}", title=f"Dev {metric} during fine-tuning")
    if curves:
        ax.legend(fontsize="small", ncol=2)
    html.update_layout(
        title=f"Dev {metric} during fine-tuning", xaxis_title="update", yaxis_title=f"dev {metric}"
    )
    written += _save(fig, html, os.path.join(output_dir, PLOTS[0]))
    plt.close(fig)
    # 2. Learning rate vs metric.
    fig, ax = plt.subplots(figsize=(7, 5))
    html = go.Figure()
    for state in sorted({p[2] for p in points}):
        mine = [p for p in points if p[2] == state]
        ax.scatter(
            [p[0] for p in mine],
            [p[1] for p in mine],
            marker=STYLE.get(state, STYLE["running"])[1],
            label=LEGEND.get(state, state),
        )
        html.add_trace(
            go.Scatter(
                x=[p[0] for p in mine],
                y=[p[1] for p in mine],
                mode="markers",
                name=LEGEND.get(state, state),
                text=[f"trial {p[3]}" for p in mine],
            )
        )
    ax.set_xscale("log")
    ax.set(xlabel="learning rate", ylabel=f"dev {metric}", title=f"Learning rate vs dev {metric}")
    if points:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ax.legend()
    html.update_layout(
        title=f"Learning rate vs dev {metric}",
        xaxis_title="learning rate",
        yaxis_title=f"dev {metric}",
        xaxis_type="log",
    )
    written += _save(fig, html, os.path.join(output_dir, PLOTS[1]))
    plt.close(fig)
    return written


def _save(fig, html, stem: str) -> list[str]:
    with atomic_path(stem + ".png") as temporary:
        fig.savefig(temporary, format="png", dpi=100, bbox_inches="tight")
    # plotly.min.js once beside the pages: they open offline.
    with atomic_path(stem + ".html") as temporary:
        html.write_html(temporary, include_plotlyjs="directory")
    return [stem + ".png", stem + ".html"]


def report(output_dir: str, space: dict, study, metric: str, stream) -> dict:
    """Writes trials.tsv, best_trial.json and the plots into output_dir; prints the table and the
    best trial; returns {"rows", "best", "plots"}."""
    rows = trial_rows(study, space)
    write_table(os.path.join(output_dir, TRIALS_TABLE), rows, metric)
    best = best_trial(study, metric)
    if best is not None:
        write_json(os.path.join(output_dir, BEST_TRIAL), best)
    plots = write_plots(output_dir, study, rows, metric)
    print(format_table(rows, metric), file=stream)
    if best is None:
        print("No trial completed.", file=stream)
    else:
        shown = "  ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best["params"].items()
        )
        print(f"Best: trial {best['trial']}  {metric} {best['value']:.4f}  {shown}", file=stream)
        where = best["checkpoint"] or best["output_dir"]
        elsewhere = best["host"] not in (None, socket.gethostname())
        print(f"Best checkpoint: {where}" + (f" (on {best['host']})" if elsewhere else ""), file=stream)
    print(
        f"Wrote {TRIALS_TABLE}, {BEST_TRIAL if best else ''} and plots in {output_dir}",
        file=stream,
        flush=True,
    )
    return {"rows": rows, "best": best, "plots": plots}
