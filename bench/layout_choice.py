"""--padding auto against measurement: the layout training/layout_choice.py predicts cheapest for
each pretraining group of a `bench padding` record, beside every layout's measured speed.

    .venv/bin/python -m bench layout_choice      # the newest padding record with packed rows
    .venv/bin/python -m bench layout_choice --options "--only pretraining --phases 2" --options "..."

For each group (record set, phase, global batch) of the records: the records' lengths are sampled
as the launcher samples them (bench/padding.py's fixtures find the same files under --work_dir),
priced with the record's model (configs/bert_<--model>.json, the records' vocabulary), and the
pick is set beside the measured rows: what auto picks, the fastest measured layout, and the pick's
measured speed over the fastest's (1.00: the pick is the fastest; it is meant to be within 3%), by
the medians of the rounds and by the best rounds (a shared machine's load falls on some rounds).
--detail adds every layout's row: speed against padded and real-token share, measured and
predicted. Nothing is timed here: the figures are the padding records'.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import harness, padding, records  # noqa: E402
from data import paths  # noqa: E402
from training import layout_choice  # noqa: E402
from training.layout_choice import Layout  # noqa: E402


def layout_of(cell: str) -> Layout:
    """A padding table's layout cell ("0", "64", "padded", "bins of 64", "packed", "packed, 64",
    "packed, bins of 64") as a Layout."""
    packed = cell.startswith(padding.PACKED)
    rest = cell[len(padding.PACKED) :].lstrip(", ") if packed else cell
    rest = rest.replace("bins of ", "")
    return Layout(int(rest) if rest and rest != "padded" else 0, packed)


def best_rate(cell: str) -> float:
    """The fastest round's seq/s of a cell "median (min-max)" (or a lone figure)."""
    return float(cell.rsplit("-", 1)[1].rstrip(")")) if "(" in cell else float(cell)


def _option(options: list, name: str, default: str) -> str:
    return options[options.index(name) + 1] if name in options else default


def pick_record(found: list, options: str | None) -> dict:
    """The padding record of `options` (as typed after `bench padding`), else the newest one with
    packed pretraining rows."""
    if options is not None:
        wanted = shlex.split(options)
        for record in found:
            if record["options"] == wanted:
                return record
        raise SystemExit(f"no padding record of options {wanted} in {records.path_of('padding')}")
    packed = [
        r
        for r in found
        if any(padding.PACKED in row[2] for t in r["tables"] for row in t["rows"] if len(row) > 2)
    ]
    if not packed:
        raise SystemExit("no padding record with packed rows: run python -m bench padding --record first")
    return max(packed, key=lambda r: r["date"])


def set_files(work_dir: str, name: str, xml_mb: float) -> tuple[dict, str]:
    """({phase: training files}, vocab) of a record set named as the padding table names it."""
    if name.startswith(padding.SETS["quickstart"]):
        data = padding.quickstart_data_root(work_dir)
        if not all(padding.quickstart_files(data).values()):
            padding.quickstart_records(work_dir)
        return padding.quickstart_files(data), paths.quickstart_vocab(data)
    if name.startswith(padding.SETS["wikipedia"]):
        return padding.wikipedia_records(work_dir, xml_mb)
    return padding.docstring_records(work_dir)


def compare(record: dict, work_dir: str) -> tuple[list, list]:
    """(rows per layout, one summary row per group) of `record`'s pretraining groups."""
    from bert.config import read_config_file
    from data.pretraining.schema import sample_real_tokens

    options = record["options"]
    model = _option(options, "--model", "tiny")
    xml_mb = float(_option(options, "--xml_mb", "8"))
    config = read_config_file(os.path.join(ROOT, "configs", f"bert_{model}.json"))
    groups: dict = {}
    for table in record["tables"]:
        h = {name: i for i, name in enumerate(table["headers"])}
        kind = h.get("layout", h.get("bin"))
        ratio = h.get("vs padded", h.get("vs bin 0"))
        for row in table["rows"]:
            if " phase " not in row[0] or kind is None or not row[ratio].endswith("x"):
                continue
            groups.setdefault((row[0], row[1]), []).append(
                (
                    layout_of(row[kind]),
                    float(row[ratio][:-1]),
                    row[h["real tokens"]],
                    best_rate(row[h["seq/s"]]),
                )
            )
    detail, summary = [], []
    for (name, work), measured in groups.items():
        phase = 1 if "phase 1" in name else 2
        recipe = work.split(":")[0]
        batch, k = padding.RECIPES[recipe][phase]
        seq, predictions = paths.PHASE_SHAPES[phase]
        files, vocab = set_files(work_dir, name, xml_mb)
        cost = layout_choice.CostModel.of(
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            padding.vocab_size(vocab),
            predictions,
        )
        layouts = tuple(dict.fromkeys(m[0] for m in measured))
        predicted = layout_choice.predict(
            sample_real_tokens(files[phase]), cost, seq, predictions, batch, k, layouts
        )
        chosen = layout_choice.choose(predicted)
        by_layout = {p.layout: p for p in predicted}
        padded = by_layout[Layout(0, False)].cost
        best_padded = next(m[3] for m in measured if m[0] == Layout(0, False))
        for layout, speed, real, best in measured:
            p = by_layout[layout]
            detail.append(
                [
                    name,
                    work,
                    layout.name,
                    real,
                    f"{p.real_share:.1%}",
                    f"{speed:.2f}x",
                    f"{best / best_padded:.2f}x",
                    f"{padded / p.cost:.2f}x",
                    "auto" if layout == chosen.layout else "",
                ]
            )
        row = [name, work, chosen.layout.name]
        for column in (1, 3):  # the medians' ratio, then the best rounds'
            fastest = max(measured, key=lambda m: m[column])
            picked = next(m[column] for m in measured if m[0] == chosen.layout)
            scale = 1.0 if column == 1 else best_padded
            row += [f"{fastest[0].name} ({fastest[column] / scale:.2f}x)", f"{picked / fastest[column]:.2f}"]
        summary.append(row)
    return detail, summary


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--work_dir", default=os.path.join(ROOT, "results", "bench_padding"), help="as bench padding's"
    )
    p.add_argument(
        "--options",
        action="append",
        help="a padding record's options, as typed after `bench padding` (again for another record)",
    )
    p.add_argument("--detail", action="store_true", help="also every layout's row, predicted and measured")
    p.add_argument("--results", default=records.RESULTS_DIR, help="where the padding records are")
    args = p.parse_args(argv)
    found = records.load("padding", args.results)
    summary = []
    for options in args.options or [None]:
        record = pick_record(found, options)
        detail, rows = compare(record, args.work_dir)
        model = f"bert_{_option(record['options'], '--model', 'tiny')}"
        summary += [[row[0], model, *row[1:]] for row in rows]
        harness.log(f"measured: {record['command']} ({record['date']}, {record['commit']})")
        if args.detail:
            print(f"Predicted against measured layouts ({record['command']}, {record['date']}):")
            headers = ["input", "work: batch", "layout", "real tokens", "predicted real tokens", "vs padded"]
            headers += ["best round vs padded", "predicted vs padded", "auto"]
            print(harness.markdown_table(headers, detail) + "\n")
    print("What --padding auto picks, per group of the padding records its --options name:")
    headers = ["input", "model", "work: batch", "auto picks", "fastest (medians)", "pick / fastest"]
    headers += ["fastest (best rounds)", "pick / fastest, best rounds"]
    print(harness.markdown_table(headers, summary))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
