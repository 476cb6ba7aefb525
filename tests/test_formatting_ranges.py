"""Formatting an uncompressed JSONL or one-document-per-line file in byte ranges over processes:
the same lines and counts as one reader."""

import collections
import json
import os
import random

import pytest

from data.corpus import text_formatting
from data.corpus.text_formatting import iter_documents

pytestmark = pytest.mark.process


def _jsonl(path, n=600, seed=5):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        r = rng.random()
        if r < 0.05:
            lines.append(b"{not json")
        elif r < 0.1:
            lines.append(json.dumps({"body": "no text key"}).encode())
        elif r < 0.15:
            lines.append(json.dumps({"text": "  ...  "}).encode())  # no letter: an empty document
        elif r < 0.2:
            lines.append(b"")
        else:
            words = " ".join(
                rng.choice(["note", "patient", "dose", "caf\u00e9", "x\u2028y"]) for _ in range(20)
            )
            line = json.dumps({"text": f"{i} {words}"}, ensure_ascii=rng.random() < 0.5).encode()
            if r > 0.97:
                line = line[:-2] + b"\xff\xfe" + line[-2:]  # invalid UTF-8 inside the string
            lines.append(line)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


@pytest.mark.parametrize("kind", ["jsonl", "one_document_per_line"])
def test_ranges_over_two_processes_give_what_one_reader_gives(tmp_path, monkeypatch, kind):
    if kind == "jsonl":
        path = _jsonl(tmp_path / "notes.jsonl")
        options = {}
    else:
        path = str(tmp_path / "lines.txt")
        rng = random.Random(9)
        text = "\n".join(
            " ".join(rng.choice(["a", "bb", "ccc", "", "  "]) for _ in range(rng.randint(0, 30)))
            for _ in range(800)
        )
        (tmp_path / "lines.txt").write_bytes(text.encode() + b"\n\xc3(bad\n")
        options = {"one_document_per_line": True}
    serial_stats = collections.Counter()
    serial = list(iter_documents(path, serial_stats, n_processes=1, **options))
    monkeypatch.setattr(text_formatting, "RANGE_BYTES", 997)  # many ranges, ends inside lines
    ranges = list(text_formatting._line_ranges(path, "jsonl", {}))
    assert len(ranges) > 10
    assert ranges[0][1] == 0 and ranges[-1][2] == os.path.getsize(path)
    assert [r[1] for r in ranges[1:]] == [r[2] for r in ranges[:-1]]  # they tile the file
    assert all(open(path, "rb").read()[r[2] - 1 : r[2]] == b"\n" for r in ranges)  # every range ends a line
    ranged = text_formatting._ranged_documents
    calls = []
    monkeypatch.setattr(
        text_formatting, "_ranged_documents", lambda *args: calls.append(args) or ranged(*args)
    )
    parallel_stats = collections.Counter()
    parallel = list(iter_documents(path, parallel_stats, n_processes=2, **options))
    assert len(calls) == 1  # the ranges did run, over the two processes
    assert parallel == serial and len(serial) > 100
    assert {k: v for k, v in parallel_stats.items() if v} == {k: v for k, v in serial_stats.items() if v}
    if kind == "jsonl":
        assert serial_stats["bad_json_lines"] > 0 and serial_stats["missing_text"] > 0
        assert serial_stats["empty_documents"] > 0 and serial_stats["invalid_utf8_sequences"] > 0


def _paragraphs(path, seed=3):
    """Text with blank lines between documents (some blank lines only NBSP or spaces), documents
    long enough to be cut, invalid UTF-8, and near the end a long stretch without a blank line."""
    rng = random.Random(seed)
    out = []
    for i in range(400):
        for _ in range(rng.randint(1, 8)):
            out.append(
                " ".join(
                    rng.choice(["word", "text", "caf\u00e9", "...", "x"]) for _ in range(rng.randint(1, 12))
                )
            )
        out.append(rng.choice(["", "   ", "\u00a0", "\t"]))
    out.insert(57, "bad \udcff byte")
    out += [f"line {i} of a document that never ends" for i in range(300)]  # ~12 KB, no blank line
    out += ["", "the last document"]
    path.write_bytes("\n".join(out).encode("utf-8", "surrogateescape") + b"\n")
    return str(path)


def test_text_with_blank_lines_cut_after_blank_lines_and_the_rest_read_by_one_reader(tmp_path, monkeypatch):
    path = _paragraphs(tmp_path / "corpus.txt")
    serial_stats = collections.Counter()
    serial = list(iter_documents(path, serial_stats, n_processes=1, max_document_chars=120))
    assert serial_stats["split_long_documents"] > 10 and serial_stats["invalid_utf8_sequences"] == 1
    monkeypatch.setattr(text_formatting, "RANGE_BYTES", 1500)
    monkeypatch.setattr(text_formatting, "SEARCH_BYTES", 3000)
    ranges = list(text_formatting._line_ranges(path, "text", {"one_document_per_line": False}))
    data = open(path, "rb").read()
    assert len(ranges) > 5 and ranges[-1][2] is None  # the stretch without a blank line: one reader
    for _, start, end, _, _ in ranges[:-1]:
        assert not data[data.rfind(b"\n", 0, end - 1) + 1 : end].decode().strip()  # a blank line ends it
    parallel_stats = collections.Counter()
    parallel = list(iter_documents(path, parallel_stats, n_processes=2, max_document_chars=120))
    assert parallel == serial
    assert {k: v for k, v in parallel_stats.items() if v} == {k: v for k, v in serial_stats.items() if v}
