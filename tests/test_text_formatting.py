"""Text formatting: MediaWiki dumps (real export format), plain text and JSONL -> one document per line."""

import bz2
import collections
import json
import os
import tracemalloc

import pytest

from common.errors import UserError
from data.corpus import text_formatting, wikipedia
from data.corpus.text_formatting import format_corpus, iter_documents

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
WIKI = os.path.join(FIXTURES, "enwiki_sample.xml")
JSONL = os.path.join(FIXTURES, "domain_corpus.jsonl")


def _quiet(*_):
    pass


def _docs(path, **kwargs):
    stats = collections.Counter()
    return list(iter_documents(path, stats, **kwargs)), stats


def test_wiki_dump_keeps_only_articles_and_counts_the_rest():
    docs, stats = _docs(WIKI)
    assert [d.split(" ")[0] for d in docs] == ["Augusta", "The", "Photosynthesis", "Mount", "Zeta"]
    assert stats["input_documents"] == 12
    assert stats["redirect"] == 1  # <redirect/> + #REDIRECT
    assert stats["disambiguation"] == 2  # "(disambiguation)" title and {{Disambiguation|geo}}
    assert stats["other_namespace"] == 3  # Talk:, Category:, Template:
    assert stats["empty_documents"] == 1  # an infobox, a table and a list: no prose


def test_wiki_markup_is_removed_and_link_text_kept():
    docs, _ = _docs(WIKI)
    ada, danube, photo, kili, zeta = docs
    text = " ".join(docs)
    for markup in (
        "{{",
        "}}",
        "[[",
        "]]",
        "{|",
        "|}",
        "<ref",
        "ref>",
        "<!--",
        "'''",
        "''",
        "==",
        "Category",
        "thumb",
        "wikitable",
        "Reflist",
        "&nbsp;",
        "&amp;",
        "http",
        "\n",
    ):
        assert markup not in text, markup
    assert "the poet Lord Byron and Anne Isabella Byron." in ada  # piped links
    assert "computing Bernoulli numbers." in ada  # link trail
    assert "L. F. Menabrea" in ada
    assert "The programming language Ada is named after her" in ada  # level-3 section kept
    assert "Portrait" not in ada and "Chalon" not in ada  # file caption with links
    assert "Women in computing" not in ada  # See also list
    assert "biography" not in ada  # External links
    assert "Fuegi" not in ada and "Toole" not in ada  # references
    assert "Note G describes an algorithm" in ada and "Pages" not in ada  # table dropped
    assert danube.startswith("The Danube (Donau) is the second-longest river in Europe")
    assert "The river is about 2850 km long. Its drainage basin covers roughly 801,463 km2" in danube
    assert "nested" not in danube and "Germany" not in danube  # nested tables, infobox
    assert "Inn Drava" not in danube and "Tributaries" not in danube  # lists, definition term
    assert "It uses carbon dioxide (CO2) and water" in photo
    assert "6CO_2" not in photo and "Blankenship" not in photo  # <math>, Further reading
    assert "phōs (light)" in photo  # Unicode kept
    assert kili.startswith(
        "Mount Kilimanjaro (Mlima Kilimanjaro) is a dormant volcano in Tanzania. At 5895 m, it is the highest"
    )
    assert "As of 2020, around 35,000 people" in kili
    assert zeta == "Zeta Lake is a small glacial lake in the Canadian Rockies."


@pytest.mark.parametrize(
    "wikitext, expected",
    [
        ("{{a|{{b|{{c}}}}|x}}Text.", ["Text."]),
        ("Before {{Infobox\n| a = {|\n| x\n|}\n}} after.", ["Before after."]),
        ("{|\n| {{flag|X}}\n{|\n| inner\n|}\n| outer\n|}\nProse here.", ["Prose here."]),
        ("[[File:A.jpg|thumb|A [[b|c]] and [[d]].]]Kept [[x|y]] and [[z]]s.", ["Kept y and zs."]),
        (
            "[[:Category:Rivers]] is a visible link; [[Category:Hidden]][[de:Fluss]]",
            ["Category:Rivers is a visible link;"],
        ),
        ("[[Paris, Texas|]] and [https://x.org label] and [https://y.org].", ["Paris and label and."]),
        ("Text<!-- hidden -->.<ref name=a>cite</ref> More<ref name=a/> words.", ["Text. More words."]),
        (
            "Intro.\n== References ==\n* a\n=== Sub ===\nstill refs\n== Life ==\nLife text.",
            ["Intro.", "Life text."],
        ),
        ("Broken {{infobox| never closed\nand the rest", ["Broken"]),
        ("A&nbsp;B &amp; C&ndash;D <b>bold</b> <span class=x>in</span><br/>line", ["A B & C–D bold in line"]),
        (
            "{{convert|5|to|10|km}} and {{lang-fr|Bonjour}} and {{nowrap|1 000}}.",
            ["5 to 10 km and Bonjour and 1 000."],
        ),
        ("{{{param|default}}}Only text.", ["Only text."]),
    ],
)
def test_clean_wikitext_cases(wikitext, expected):
    assert wikipedia.clean_wikitext(wikitext) == expected


def test_bz2_dump_gives_the_same_documents_as_plain_xml(tmp_path):
    compressed = tmp_path / "dump.xml.bz2"
    compressed.write_bytes(bz2.compress(open(WIKI, "rb").read()))
    assert _docs(str(compressed))[0] == _docs(WIKI)[0]


def test_wiki_pages_are_cleared_so_memory_stays_flat(tmp_path):
    def dump(n_pages):
        page = (
            "<page><title>T{i}</title><ns>0</ns><id>{i}</id><revision><id>1</id><text>"
            + "Some sentence about the topic. " * 40
            + "</text></revision></page>\n"
        )
        path = tmp_path / f"dump{n_pages}.xml"
        with open(path, "w") as f:
            f.write('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/">\n')
            for i in range(n_pages):
                f.write(page.format(i=i))
            f.write("</mediawiki>\n")
        return str(path)

    peaks = []
    for n in (500, 2500):
        path = dump(n)
        tracemalloc.start()
        count = sum(1 for _ in wikipedia.iter_pages(open(path, "rb")))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert count == n
    # 5x the pages (about 6 MB vs 1.2 MB of XML) must not need more memory.
    assert peaks[1] < peaks[0] * 1.5 + 200_000, peaks


def test_jsonl_corpus_counts_bad_lines():
    docs, stats = _docs(JSONL)
    assert len(docs) == 10
    assert docs[1].startswith(
        "A 37-year-old woman reported three weeks of fatigue and joint pain. Laboratory"
    )
    assert "\n" not in "".join(docs)
    assert (stats["bad_json_lines"], stats["missing_text"], stats["empty_documents"]) == (1, 1, 1)


def test_plain_text_documents_and_long_document_cut(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("First doc line one.\nLine two.\n\n\n  \nSecond doc.\n\nThird\x85doc\u2028here.\n")
    docs, _ = _docs(str(path))
    assert docs == ["First doc line one. Line two.", "Second doc.", "Third doc here."]
    per_line, _ = _docs(str(path), one_document_per_line=True)
    assert per_line == ["First doc line one.", "Line two.", "Second doc.", "Third doc here."]
    long_doc = tmp_path / "long.txt"
    long_doc.write_text("".join(f"Sentence number {i} is here.\n" for i in range(100)))
    docs, stats = _docs(str(long_doc), max_document_chars=300)
    assert stats["split_long_documents"] == len(docs) - 1 > 5
    assert all(len(d) <= 300 for d in docs)
    assert " ".join(docs) == " ".join(f"Sentence number {i} is here." for i in range(100))


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    text = tmp_path / "bad.txt"
    text.write_bytes(b"Caf\xe9 au lait.\n\nGood \xff\xfe line.\n")
    docs, stats = _docs(str(text))
    assert docs == ["Caf\ufffd au lait.", "Good \ufffd\ufffd line."]
    assert stats["invalid_utf8_sequences"] == 3
    xml = tmp_path / "bad.xml"
    xml.write_bytes(
        b"<mediawiki><page><title>X</title><ns>0</ns><id>1</id><revision><text>Bad \xe9 byte."
        b"</text></revision></page></mediawiki>"
    )
    docs, stats = _docs(str(xml))
    assert docs == ["Bad \ufffd byte."] and stats["invalid_utf8_sequences"] == 1


def test_truncated_and_malformed_dumps_fail_with_one_sentence(tmp_path):
    truncated = tmp_path / "cut.xml.bz2"
    truncated.write_bytes(bz2.compress(open(WIKI, "rb").read())[:2000])
    with pytest.raises(UserError, match="truncated download"):
        _docs(str(truncated))
    malformed = tmp_path / "bad.xml"
    malformed.write_text("<mediawiki><page><title>X</title></mediawiki>")
    with pytest.raises(UserError, match="not a well-formed MediaWiki XML dump"):
        _docs(str(malformed))


def test_format_corpus_is_restartable(tmp_path):
    out = tmp_path / "formatted" / "c.txt"
    stats = format_corpus([WIKI, JSONL], str(out), log=_quiet)
    assert stats["documents"] == 15 and out.read_text().count("\n") == 15
    manifest = json.loads((tmp_path / "formatted" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["outputs"]["c.txt"]["counts"]["documents"] == 15
    assert format_corpus([WIKI, JSONL], str(out), log=_quiet)["skipped"] is True
    original = out.read_bytes()
    out.write_bytes(original[:-10] + b"corrupted\n")  # same size, different bytes
    assert "skipped" not in format_corpus([WIKI, JSONL], str(out), log=_quiet)
    assert out.read_bytes() == original
    # A parameter change invalidates the output.
    redone = format_corpus([WIKI, JSONL], str(out), text_key="body", log=_quiet)
    assert "skipped" not in redone and redone["missing_text"] == 12


def test_a_killed_run_leaves_only_a_tmp_file(tmp_path, monkeypatch):
    out = tmp_path / "f" / "c.txt"

    def explode(*args, **kwargs):
        yield b"one document\n", 1
        raise KeyboardInterrupt

    monkeypatch.setattr(text_formatting, "document_blocks", explode)
    with pytest.raises(KeyboardInterrupt):
        format_corpus([JSONL], str(out), log=_quiet)
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == []
    monkeypatch.undo()
    leftover = tmp_path / "f" / ".c.txt.tmp-999"
    leftover.write_text("half a file")  # as if the process were SIGKILLed
    assert format_corpus([JSONL], str(out), log=_quiet)["documents"] == 10
    assert not leftover.exists()


def test_no_documents_and_unwritable_output_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n')
    with pytest.raises(UserError, match="No documents left"):
        format_corpus([str(empty)], str(tmp_path / "o" / "x.txt"), log=_quiet)
    assert not (tmp_path / "o" / "x.txt").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="Cannot write to the output directory"):
        format_corpus([JSONL], str(blocker / "sub" / "x.txt"), log=_quiet)
    with pytest.raises(UserError, match="does not exist"):
        format_corpus([str(tmp_path / "missing.xml")], str(tmp_path / "x.txt"), log=_quiet)
