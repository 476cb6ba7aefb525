"""docs/performance.md is generated from bench/results/ (bench/report.py); the records' format
(bench/records.py). Plain Python: no TensorFlow, no benchmark run."""

import glob
import json
import os
import re

import pytest

from bench import records, report

ROOT = records.ROOT


def test_the_committed_page_is_what_the_records_generate():
    with open(report.PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == report.render(), "docs/performance.md is stale: run `python -m bench report`"


def test_the_page_stays_short():
    assert os.path.getsize(report.PAGE) < 40_000


def test_every_record_is_well_formed_and_named_by_its_file():
    everything = records.load_all()
    assert len(everything) >= 10
    for name, rs in everything.items():
        assert rs, name
        for record in rs:
            assert records.check(record) == [], (name, record["options"])
            assert record["benchmark"] == name
            if record.get("carried_over"):  # copied, never re-dated: the page before records
                assert record["date"] <= "2026-12-07" and record["carried_over"].startswith(
                    "docs/performance.md"
                )
        options = [tuple(r["options"]) for r in rs]
        assert len(options) == len(set(options)), f"{name}: two records of the same options"


def test_every_headline_finds_its_figures_and_cites_their_records():
    page = report.render()
    summary = page.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| question")
    ]
    assert len(rows) == len(report.HEADLINES)
    assert "not recorded" not in summary
    assert "| 0.99 (0.94-1.09) on BERT-base b16" in summary  # the cell of the tf.cond row, not another
    assert "| 31x (3.9 against 0.124)" in summary


def _anchors(text: str) -> set[str]:
    return {report.anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_every_link_into_the_page_finds_its_heading():
    with open(report.PAGE, encoding="utf-8") as f:
        anchors = _anchors(f.read())
    pages = glob.glob(os.path.join(ROOT, "*.md")) + glob.glob(os.path.join(ROOT, "*", "*.md"))
    links = []
    for path in pages:
        with open(path, encoding="utf-8") as f:
            links += [(path, a) for a in re.findall(r"performance\.md#([\w\-]+)", f.read())]
    assert links
    broken = [(os.path.relpath(path, ROOT), a) for path, a in links if a not in anchors]
    assert broken == []


def test_parse_output_reads_each_table_under_its_title_and_keeps_the_other_lines():
    output = (
        "[bench] warming up\nphase 1, 2 cores\n\nseq/s by model:\n"
        "| model | seq/s |\n|---|---|\n| tiny | 30.3 |\n| base | 0.90 \n\n"
        "| a | b |\n| --- | --- |\n| 1 | 2 |\nsaid after\n"
    )
    tables, notes = records.parse_output(output)
    assert tables == [
        {
            "title": "seq/s by model",
            "headers": ["model", "seq/s"],
            "rows": [["tiny", "30.3"], ["base", "0.90"]],
        },
        {"title": "table 2", "headers": ["a", "b"], "rows": [["1", "2"]]},
    ]
    assert notes == ["[bench] warming up", "phase 1, 2 cores", "said after"]


def _record(options, figure, date="2026-12-07"):
    return {
        "benchmark": "model_throughput",
        "options": options,
        "command": "python -m bench model_throughput " + " ".join(options),
        "commit": "abcdef1",
        "date": date,
        "machine": {"cpu": "AMD EPYC", "cores": 2, "isa": ["avx2"], "gpu": None},
        "tables": [{"title": "t", "headers": ["model", "seq/s"], "rows": [["tiny", figure]]}],
    }


def test_a_newer_record_of_the_same_options_replaces_the_older_and_others_stay(tmp_path):
    records.save(_record(["--quick"], "1.0", "2026-12-01"), str(tmp_path))
    records.save(_record([], "2.0", "2026-12-02"), str(tmp_path))
    records.save(_record(["--quick"], "3.0", "2026-12-03"), str(tmp_path))
    kept = records.load("model_throughput", str(tmp_path))
    assert [(r["options"], r["tables"][0]["rows"][0][1]) for r in kept] == [([], "2.0"), (["--quick"], "3.0")]
    with open(tmp_path / "model_throughput.json", encoding="utf-8") as f:
        assert json.load(f)["records"] == kept


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"commit": "HEAD"}, "not a short sha"),
        ({"date": "7 Dec 2026"}, "not YYYY-MM-DD"),
        ({"tables": []}, "no tables"),
        ({"tables": [{"title": "t", "headers": ["a", "b"], "rows": [["1"]]}]}, "not 2 cells wide"),
        ({"machine": {"cpu": None, "cores": 2, "isa": [], "gpu": None}}, "'cpu' is unknown"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_problem(tmp_path, change, problem):
    with pytest.raises(ValueError, match=problem):
        records.save({**_record([], "1.0"), **change}, str(tmp_path))
    assert not os.listdir(tmp_path)


@pytest.mark.process  # git, for the commit
def test_a_record_made_here_names_the_machine_and_the_commit():
    record = records.make_record("model_throughput", ["--quick"], "title\n| a |\n|---|\n| 1 |\n")
    assert records.check(record) == []
    assert record["command"] == "python -m bench model_throughput --quick"
    assert record["machine"]["cores"] >= 1 and record["machine"]["cpu"]
    assert re.fullmatch(r"[0-9a-f]{7}", record["commit"])


def test_a_gpu_record_goes_to_the_gpu_section_and_an_unclaimed_one_to_other_records():
    everything = records.load_all()
    gpu = {
        **_record(["--quick"], "900.0"),
        "machine": {"cpu": "x", "cores": 16, "isa": [], "gpu": "NVIDIA H100"},
    }
    odd = {**_record([], "1.0"), "benchmark": "new_bench"}
    page = report.render(
        {**everything, "model_throughput": [*everything["model_throughput"], gpu], "new_bench": [odd]}
    )
    gpu_part = page.split("## GPU throughput", 1)[1]
    assert "NVIDIA H100" in gpu_part and "900.0" in gpu_part and "None recorded yet" not in gpu_part
    assert "## Other records" in gpu_part and "### new_bench" in gpu_part
    assert "None recorded yet" in report.render(everything).split("## GPU throughput", 1)[1]
