"""The generator of realistic multistream dumps (tests/dump_generator.py): Wikipedia's layout,
seeded bytes, the page kinds the cleaner must tell apart."""

import bz2
import collections

import pytest

import dump_generator
from data.corpus import wikipedia
from data.corpus.text_formatting import iter_documents


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dump") / "enwiki-test-pages-articles-multistream.xml.bz2")
    stats = dump_generator.generate_dump(path, 600_000, seed=3)
    return path, stats


def _index(stats):
    with bz2.open(stats["index_path"], "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split(":", 2) for line in f]


def test_index_beside_the_dump_under_wikipedias_name(dump):
    path, stats = dump
    assert stats["index_path"].endswith("enwiki-test-pages-articles-multistream-index.txt.bz2")
    assert wikipedia.multistream_index_path(path) == stats["index_path"]


def test_every_stream_decompresses_alone_and_holds_the_pages_its_index_lines_name(dump):
    path, stats = dump
    data = open(path, "rb").read()
    assert len(data) == stats["bz2_bytes"]
    lines = _index(stats)
    assert len(lines) == stats["pages"]
    offsets = sorted({int(offset) for offset, _, _ in lines})
    assert stats["streams"] == len(offsets) + 2  # plus the header and the footer streams
    header = bz2.decompress(data[: offsets[0]]).decode()
    assert header.startswith("<mediawiki") and header.rstrip().endswith("</siteinfo>")
    bounds = offsets + [len(data)]
    seen = []
    for start, end in zip(bounds, bounds[1:]):
        xml = bz2.decompress(data[start:end])  # the last range holds the footer stream too
        pages = list(wikipedia.fragment_pages(xml))
        assert 0 < len(pages) <= dump_generator.PAGES_PER_STREAM
        listed = [(page_id, title) for offset, page_id, title in lines if int(offset) == start]
        assert [(p.id, p.title) for p in pages] == listed
        seen += pages
    assert bz2.decompress(data[offsets[-1] :]).decode().endswith("</mediawiki>\n")
    assert len(seen) == stats["pages"]
    # Titles with markup characters survive the XML escaping and the index as they are.
    assert any("&" in p.title for p in seen) and any(":" in p.title and p.ns == "0" for p in seen)


def test_size_is_reached_with_whole_streams(dump):
    path, stats = dump
    whole = bz2.decompress(open(path, "rb").read())
    assert len(whole) == stats["xml_bytes"]
    assert 600_000 <= stats["xml_bytes"] < 600_000 + 200_000


def test_page_kinds_are_what_the_cleaner_decides_and_articles_come_out_clean(dump):
    path, stats = dump
    with bz2.open(path) as f:
        kinds = collections.Counter(wikipedia.page_kind(p) for p in wikipedia.iter_pages(f))
    assert kinds == {k: stats[k] for k in ("article", "redirect", "disambiguation", "other_namespace")}
    assert min(kinds.values()) >= 3
    counts = collections.Counter()
    documents = list(iter_documents(path, counts))
    assert len(documents) == stats["article"]
    text = "\n".join(documents)
    for markup in (
        "{{",
        "}}",
        "[[",
        "]]",
        "<ref",
        "ref>",
        "'''",
        "==",
        "&nbsp;",
        "{|",
        "|",
        "Category:",
        "<!--",
    ):
        assert markup not in text, markup
    assert "c. " in text and "–" in text  # {{circa}} and &ndash; rendered as text


def test_same_seed_same_bytes_and_another_seed_another_dump(tmp_path):
    first = dump_generator.generate_dump(str(tmp_path / "a.xml.bz2"), 150_000, seed=11, pages_per_stream=7)
    again = dump_generator.generate_dump(str(tmp_path / "b.xml.bz2"), 150_000, seed=11, pages_per_stream=7)
    dump_generator.generate_dump(str(tmp_path / "c.xml.bz2"), 150_000, seed=12, pages_per_stream=7)
    assert (tmp_path / "a.xml.bz2").read_bytes() == (tmp_path / "b.xml.bz2").read_bytes()
    assert (tmp_path / "a-index.txt.bz2").read_bytes() == (tmp_path / "b-index.txt.bz2").read_bytes()
    assert (tmp_path / "a.xml.bz2").read_bytes() != (tmp_path / "c.xml.bz2").read_bytes()
    assert first["streams"] == -(-first["pages"] // 7) + 2 and first == {
        **again,
        "index_path": first["index_path"],
    }
