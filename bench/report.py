"""`python -m bench report`: writes docs/performance.md from the records in bench/results/.

The page is generated, never edited by hand: a summary of the headline figures first, then one
section per question with each record's date, commit, machine and command above its tables, then
the GPU records. A record that no question claims still appears, under "Other records", so a new
benchmark's figures are never lost. `--check` exits 1 when the committed page differs from what
the records give (tests/test_performance_page.py asserts the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench import records  # noqa: E402

PAGE = os.path.join(records.ROOT, "docs", "performance.md")
Options = tuple | None  # a record's options, or None: every other record of that benchmark


@dataclasses.dataclass(frozen=True)
class Section:
    title: str
    question: str  # one or two sentences: what the tables answer, and how they were measured
    records: tuple[tuple[str, Options], ...]  # (benchmark, options) in the order shown
    group: str = ""  # the results heading it stands under, as NVIDIA's READMEs group theirs


BASE_TIMING = ("--repeats", "3", "--steps", "1", "--warmup", "1")


def like_for_like(model: str, precisions: str, *timing: str) -> tuple[str, ...]:
    """The options of a `bench pretrain_throughput --optimizers lamb,adamw` record."""
    return (
        *("--models", model, "--precisions", precisions, "--xla", "on", "--data", "synthetic"),
        *("--accumulation", "1", "--optimizers", "lamb,adamw", *timing),
    )


SECTIONS = (
    Section(
        "The quickstart",
        "How long the whole path takes on a 2-core CPU, and what the tiny model and a real small"
        " BERT reach (`bash scripts/quickstart.sh`, docs/quickstart.md).",
        (("quickstart", None),),
    ),
    Section(
        "The pretraining update against keras-hub",
        "Is our whole pretraining update (run_pretraining.py's input, XLA step and LAMB) as fast as"
        " keras-hub 0.32's BertBackbone + MaskedLMHead + AdamW on the same batches? Each stack in its"
        " own process, interleaved repeats, the other paused while one is timed; `--baseline REV`"
        " adds our update as it was at REV.",
        (
            ("pretrain_throughput", ("--baseline", "b2d3583")),
            ("pretrain_throughput", ("--baseline", "99ce9c1")),
        ),
        group="Training performance results",
    ),
    Section(
        "The update, like for like",
        "keras-hub runs AdamW: ours with AdamW too (`--optimizers lamb,adamw`), beside our LAMB. Ours"
        " clips by the global norm, keras-hub's AdamW does not (docs/pretraining.md#optimization).",
        (
            ("pretrain_throughput", like_for_like("mini", "fp32,bf16", "--repeats", "5", "--steps", "4")),
            ("pretrain_throughput", like_for_like("base", "fp32", *BASE_TIMING)),
            ("pretrain_throughput", like_for_like("base", "bf16", *BASE_TIMING)),
        ),
        group="Training performance results",
    ),
    Section(
        "Precision, XLA, accumulation and two Horovod workers",
        "The same comparison across precision, XLA and gradient accumulation.",
        (
            (
                "pretrain_throughput",
                ("--models", "mini", "--precisions", "fp32,bf16", "--xla", "on,off", "--accumulation", "1,4"),
            ),
        ),
        group="Training performance results",
    ),
    Section(
        "Host reads",
        "Does reading the update's metrics only at log steps pay? On a CPU a call returns when its"
        " work is done, so there is nothing to overlap; `--read_every` is there for a GPU.",
        (("pretrain_throughput", ("--read_every", "1,8", "--steps", "16", "--models", "mini")),),
        group="Training performance results",
    ),
    Section(
        "Training step throughput",
        "The model alone: forward, loss and gradients per precision and XLA, each in its own process.",
        (("model_throughput", None),),
        group="Training performance results",
    ),
    Section(
        "Padding computed or not",
        "What `--bin_size` (micro-batches padded only to their bin) gains over padding every"
        " sequence to the full length, side by side in one process, interleaved.",
        (("padding", ("--only", "pretraining")), ("padding", ())),
        group="Training performance results",
    ),
    Section(
        "Packing",
        "What `--packing` (several sequences per row, the update's own set) gains over padding and"
        " bins, with a model large enough for attention to carry a BERT-like share of the work.",
        (("padding", None),),
        group="Training performance results",
    ),
    Section(
        "Choosing the layout",
        "Whether `--padding auto` (the pretraining launcher's default) picks the fastest layout: its"
        " prediction from the records' lengths beside each layout's measured speed (a `bench padding`"
        " record), and per group the pick's measured speed over the fastest layout's.",
        (("layout_choice", None),),
        group="Training performance results",
    ),
    Section(
        "The input order",
        "Whether the global data order (with masking at load time for dynamic records) still feeds"
        " a GPU: worker 0's parsed micro-batches per second, no model.",
        (("input_order", None),),
        group="Training performance results",
    ),
    Section(
        "Data preparation",
        "Preparation speed and peak memory against Google's create_pretraining_data.py.",
        (("prep_throughput", None),),
        group="Data preparation results",
    ),
    Section(
        "Google-exact tokenization",
        "What the per-line check that keeps Google's tokens on every input costs.",
        (("tokenizer_exactness", None),),
        group="Data preparation results",
    ),
    Section(
        "The data path at scale",
        "The whole data path on a generated 1 GB Wikipedia multistream dump, 1 and 2 processes, and"
        " its projection to the full English dump on 16 cores.",
        (("prep_scale", ("--xml_mb", "1000", "--maskings", "static")),),
        group="Data preparation results",
    ),
    Section(
        "Dynamic masking: prepare once, mask every epoch",
        "What `--masking=dynamic` (pairs written once, unmasked, masked as read) saves in"
        " preparation, and whether the model learns as well.",
        (("prep_scale", None), ("masking_quality", None)),
        group="Data preparation results",
    ),
    Section(
        "Optimizer convergence",
        "Held-out masked-LM accuracy after the same number of sequences: small-batch Adam, large-batch"
        " Adam and LAMB.",
        (("optimizer_convergence", None),),
        group="Accuracy results",
    ),
    Section(
        "Fine-tuning quality against Hugging Face",
        "The same real weights (all-MiniLM-L6-v2), windows, decoding and metrics, fine-tuned by us"
        " and by Hugging Face Transformers (PyTorch, Trainer's defaults); paired by seed.",
        (("finetune_quality", None),),
        group="Accuracy results",
    ),
    Section(
        "Serving latency",
        "The exported SavedModel against the in-memory model under XLA, per task and batch.",
        (("inference", None),),
        group="Inference performance results",
    ),
    Section(
        "Tuning after the quickstart",
        "What a first `run_tune.py` study finds and takes.",
        (("tuning", ()),),
        group="Operations",
    ),
    Section(
        "Tuning across machines",
        "Trials per hour with one and three workers sharing one study.",
        (("tuning", None),),
        group="Operations",
    ),
    Section(
        "Stopping: preemption notices and lost workers",
        "How long a job takes to stop, with its checkpoint, after a notice or a lost worker.",
        (("stopping", None),),
        group="Operations",
    ),
    Section(
        "Faults in one run: the soak",
        "Seeded faults (a killed worker, a notice to every worker, a killed launcher, power lost,"
        " a non-finite batch) in one two-worker run, restarted as a scheduler would: how it came"
        " back, what it cost, and whether it ended where the same run left alone ends"
        " (docs/reliability.md).",
        (("fault_soak", None),),
        group="Operations",
    ),
)


# ------------------------------------------------------------------------------ the summary


class Missing(LookupError):
    pass


def lookup(all_records: dict, benchmark: str, options: tuple, table: int, match: dict, column: str) -> str:
    """The cell of `column` in the first row of a record's table whose cells start with `match`'s
    values (header -> text); Missing when the record, table, row or column is not there."""
    for record in all_records.get(benchmark, []):
        if tuple(record["options"]) == tuple(options) and not record["machine"].get("gpu"):
            try:
                found = record["tables"][table]
                headers = found["headers"]
                for row in found["rows"]:
                    if all(row[headers.index(key)].startswith(text) for key, text in match.items()):
                        return row[headers.index(column)]
            except (IndexError, ValueError):
                break
    raise Missing(f"{benchmark} {' '.join(options)}: {match} / {column}")


def _number(cell: str) -> float:
    return float(re.match(r"[\d.,]+", cell.replace(",", "")).group(0))


@dataclasses.dataclass(frozen=True)
class Headline:
    question: str
    anchor: str  # the section that holds its table
    answer: Callable[[Callable[..., str]], str]  # given cell(benchmark, options, table, match, column)


HEADLINES = (
    Headline(
        "Our pretraining update against keras-hub's (fp32, XLA, seq 128), now / keras-hub",
        "The pretraining update against keras-hub",
        lambda c: (
            f"{c('pretrain_throughput', ('--baseline', 'b2d3583'), 0, {'config': 'base', 'stack': 'tf.cond'}, 'now / keras-hub')}"
            f" on BERT-base b16; {c('pretrain_throughput', ('--baseline', 'b2d3583'), 0, {'config': 'mini', 'stack': 'tf.cond'}, 'now / keras-hub')}"
            f" on L4/H256 b32; with 4 accumulated micro-batches"
            f" {c('pretrain_throughput', ('--baseline', '99ce9c1'), 0, {'config': 'L4/H256 b32 bf16, accumulation 4'}, 'after / keras-hub')}"
        ),
    ),
    Headline(
        "Fine-tuning all-MiniLM-L6-v2: ours (`--decay_after_warmup --adam_epsilon=1e-8`) against Hugging Face, mean (sd) of 8 seeds",
        "Fine-tuning quality against Hugging Face",
        lambda c: (
            f"SQuAD F1 {c('finetune_quality', ('--seeds', '8'), 0, {'seed': 'mean'}, 'ours `--decay_after_warmup --adam_epsilon=1e-8`')}"
            f" against {c('finetune_quality', ('--seeds', '8'), 0, {'seed': 'mean'}, 'Hugging Face')};"
            f" GLUE-format accuracy {c('finetune_quality', ('--seeds', '8'), 1, {'seed': 'mean'}, 'ours `--decay_after_warmup --adam_epsilon=1e-8`')}"
            f" against {c('finetune_quality', ('--seeds', '8'), 1, {'seed': 'mean'}, 'Hugging Face')}"
        ),
    ),
    Headline(
        "Length bins of 64 against padding, phase 2 (seq 512), seq/s",
        "Padding computed or not",
        lambda c: (
            f"{c('padding', ('--only', 'pretraining'), 0, {'input': 'quickstart corpus phase 2', 'work: batch': 'NVIDIA', 'bin': '64'}, 'vs bin 0')}"
            f" (NVIDIA's recipe scaled), {c('padding', ('--only', 'pretraining'), 0, {'input': 'quickstart corpus phase 2', 'work: batch': 'quickstart', 'bin': '64'}, 'vs bin 0')}"
            " (quickstart preset); phase 1: "
            f"{c('padding', ('--only', 'pretraining'), 0, {'input': 'quickstart corpus phase 1', 'work: batch': 'NVIDIA', 'bin': '64'}, 'vs bin 0')}"
        ),
    ),
    Headline(
        "Length bins of 64 against padding, SQuAD at 384",
        "Padding computed or not",
        lambda c: (
            f"fine-tuning {c('padding', (), 0, {'work: batch': 'fine-tuning', 'bin': '64'}, 'vs bin 0')},"
            f" prediction {c('padding', (), 0, {'work: batch': 'prediction: 8', 'bin': '64'}, 'vs bin 0')}"
        ),
    ),
    Headline(
        "Packing against padding, phase 1 (seq 128), bert_small",
        "Packing",
        lambda c: (
            f"{c('padding', PACKING_1, 0, {'input': 'quickstart corpus', 'work: batch': 'quickstart', 'layout': 'packed'}, 'vs padded')}"
            f" on the quickstart corpus, {c('padding', PACKING_1, 0, {'input': 'generated Wikipedia', 'work: batch': 'quickstart', 'layout': 'packed'}, 'vs padded')}"
            " on a generated Wikipedia dump (presets leave it off)"
        ),
    ),
    Headline(
        "create_pretraining_data.py against Google's, one process, MB/s",
        "Data preparation",
        lambda c: (
            f"{_ratio(c('prep_throughput', ('--sizes', '20,200'), 0, {'run': '`create_pretraining_data.py`'}, 'MB/s'), c('prep_throughput', ('--sizes', '20,200'), 0, {'run': 'Google'}, 'MB/s'))}"
            f" ({c('prep_throughput', ('--sizes', '20,200'), 0, {'run': '`create_pretraining_data.py`'}, 'MB/s')} against"
            f" {c('prep_throughput', ('--sizes', '20,200'), 0, {'run': 'Google'}, 'MB/s')}), peak RSS"
            f" {c('prep_throughput', ('--sizes', '20,200'), 0, {'run': '`create_pretraining_data.py`'}, 'peak RSS')} against"
            f" {c('prep_throughput', ('--sizes', '20,200'), 0, {'run': 'Google'}, 'peak RSS')}"
        ),
    ),
    Headline(
        "Dynamic against static masking (dupe 5), both phases of a 1 GB dump",
        "Dynamic masking: prepare once, mask every epoch",
        lambda c: (
            f"{c('prep_scale', ('--xml_mb', '1000'), 0, {'TFRecord stage': 'both'}, 'bytes ratio')} fewer bytes,"
            f" {c('prep_scale', ('--xml_mb', '1000'), 0, {'TFRecord stage': 'both'}, 'CPU ratio')} less CPU;"
            f" held-out MLM accuracy {c('masking_quality', ('--train_steps', '2200', '--seeds', '12345,1'), 0, {'records': 'dynamic - static'}, 'MLM acc seq 128')}"
            " (equal within the noise)"
        ),
    ),
    Headline(
        "The whole data path for the full English Wikipedia on one 16-core node (projected)",
        "Dynamic masking: prepare once, mask every epoch",
        lambda c: (
            f"{c('prep_scale', ('--xml_mb', '1000'), 1, {'path': 'dynamic'}, 'whole path')} with dynamic masking,"
            f" {c('prep_scale', ('--xml_mb', '1000'), 1, {'path': 'static'}, 'whole path')} static"
        ),
    ),
    Headline(
        "The quickstart on 2 CPU cores",
        "The quickstart",
        lambda c: (
            f"{c('quickstart', (), 0, {'stage or result': 'quickstart, in all'}, 'result')};"
            f" all-MiniLM-L6-v2 on its questions {c('quickstart', (), 0, {'stage or result': 'all-MiniLM'}, 'result')}"
        ),
    ),
    Headline(
        "Serving a GLUE request at batch 1 (L4/H256, seq 128), p50",
        "Serving latency",
        lambda c: (
            f"{c('inference', ('--model', 'mini', '--requests', '30'), 0, {'task': 'GLUE', 'batch': '1', 'path': 'SavedModel'}, 'p50 ms')} ms"
            f" SavedModel, {c('inference', ('--model', 'mini', '--requests', '30'), 0, {'task': 'GLUE', 'batch': '1', 'path': 'Keras'}, 'p50 ms')} ms"
            " in-memory under XLA"
        ),
    ),
)
PACKING_1 = ("--only", "pretraining", "--phases", "1", "--model", "small", "--bins", "0,16", "--xml_mb", "8")


def _ratio(a: str, b: str) -> str:
    return f"{_number(a) / _number(b):.0f}x"


def _cited(all_records: dict, answer: Callable) -> tuple[str, set]:
    """A headline's answer, and the (date, commit) of each record it read."""
    seen: set = set()

    def cell(benchmark, options, table, match, column):
        value = lookup(all_records, benchmark, options, table, match, column)
        record = next(r for r in all_records[benchmark] if tuple(r["options"]) == tuple(options))
        seen.add((record["date"], record["commit"]))
        return value

    try:
        return answer(cell), seen
    except Missing:
        return "not recorded", set()


# ------------------------------------------------------------------------------ the page


def anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _isa(isa: list | None) -> str | None:
    if not isa:
        return None
    for flag, name in (
        ("amx_bf16", "AMX"),
        ("avx512_bf16", "AVX-512 BF16"),
        ("avx512f", "AVX-512"),
        ("avx2", "AVX2"),
        ("sve", "SVE"),
        ("asimd", "NEON"),
    ):
        if flag in isa:
            return name
    return isa[-1]


def machine_cell(record: dict) -> str:
    m = record["machine"]
    if record.get("carried_over"):
        return m.get("note") or "not recorded"
    cores = f"{m['cores']} cores" if m.get("cores") else None
    parts = [m.get("gpu"), m.get("cpu"), cores, _isa(m.get("isa")), m.get("note")]
    return ", ".join(p for p in parts if p)


def _escape(cell: str) -> str:
    return str(cell).replace("|", "\\|")


def _table(headers: list, rows: list) -> list[str]:
    lines = ["| " + " | ".join(map(_escape, headers)) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(map(_escape, row)) + " |" for row in rows]


def render_record(record: dict) -> list[str]:
    commit = f"`{record['commit']}`" + (" (working tree)" if record.get("working_tree") else "")
    command = record["command"]
    command = f"`{command}`" if command.startswith(("python", "bash", "CI=")) else command
    carried = " (carried over)" if record.get("carried_over") else ""
    lines = [f"Measured {record['date']} at {commit} on {machine_cell(record)}{carried}: {command}"]
    for table in record["tables"]:
        lines += ["", table["title"] + ":", "", *_table(table["headers"], table["rows"])]
    for note in record.get("notes", []):
        lines += ["", note]
    return lines + [""]


def _claim(all_records: dict, sections) -> tuple[list, list]:
    """Each section's records (CPU ones), each record once; the GPU records; the unclaimed ones."""
    left = {(name, tuple(r["options"])): r for name, rs in all_records.items() for r in rs}
    gpu = [key for key, r in left.items() if r["machine"].get("gpu")]
    gpu_records = [left.pop(key) for key in gpu]
    claimed = []
    for section in sections:
        mine = []
        for benchmark, options in section.records:
            if options is not None:
                key = (benchmark, tuple(options))
                if key in left:
                    mine.append(left.pop(key))
            else:
                for key in [k for k in left if k[0] == benchmark]:
                    mine.append(left.pop(key))
        claimed.append(mine)
    return claimed, gpu_records, list(left.values())


INTRO = """\
# Performance: measured results

Generated by `python -m bench report` from [bench/results/](../bench/results/): do not edit by
hand. `python -m bench NAME --record [options]` measures again and replaces the record of the same
options ([bench/README.md](../bench/README.md)); git keeps the history. CPU figures come from shared
2-core machines and are noisy: compare within a table. "Carried over": copied with its own date,
commit and machine (in words) from the page this one replaced.
"""


def render(all_records: dict | None = None) -> str:
    all_records = records.load_all() if all_records is None else all_records
    claimed, gpu_records, other = _claim(all_records, SECTIONS)
    lines = [INTRO, "## Summary", ""]
    rows = []
    for headline in HEADLINES:
        answer, seen = _cited(all_records, headline.answer)
        when = ", ".join(f"{date} `{commit}`" for date, commit in sorted(seen))
        rows.append([headline.question, answer, when, f"[table](#{anchor(headline.anchor)})"])
    lines += _table(["question", "answer", "measured", "details"], rows)
    lines += ["", "GPU figures: [GPU throughput](#gpu-throughput).", ""]
    group = ""
    for section, mine in zip(SECTIONS, claimed):
        if not mine:
            continue
        if section.group and section.group != group:
            lines += [f"## {section.group}", ""]
        group = section.group
        lines += [f"{'###' if group else '##'} {section.title}", "", section.question, ""]
        for record in mine:
            lines += render_record(record)
    lines += ["## GPU throughput", ""]
    if gpu_records:
        lines += ["Records measured on a GPU, by benchmark.", ""]
        for record in gpu_records:
            lines += [f"### {record['benchmark']}", "", *render_record(record)]
    else:
        lines += [
            "None recorded yet. On a GPU machine `python -m bench model_throughput --record` (and",
            "`--seq_length 512`) and `python -m bench pretrain_throughput --record --xla on` record the",
            "sequences per second per GPU; `python -m bench report` puts them here.",
            "",
        ]
    if other:
        lines += ["## Other records", ""]
        for record in other:
            lines += [f"### {record['benchmark']}", "", *render_record(record)]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/performance.md differs from the records"
    )
    parser.add_argument("--output", default=PAGE, help="where to write the page (default: %(default)s)")
    args = parser.parse_args(argv)
    for name, rs in records.load_all().items():
        for record in rs:
            problems = records.check(record)
            if problems:
                print(f"bench/results/{name}.json: {'; '.join(problems)}", file=sys.stderr)
                return 1
    page = render()
    if args.check:
        with open(args.output, encoding="utf-8") as f:
            same = f.read() == page
        if not same:
            print(
                f"{args.output} differs from bench/results/: run `python -m bench report`.", file=sys.stderr
            )
        return 0 if same else 1
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"wrote {os.path.relpath(args.output, records.ROOT)} ({len(page.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
