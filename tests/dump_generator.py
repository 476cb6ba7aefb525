"""Seeded, realistic MediaWiki dumps of a requested size, in Wikipedia's multistream layout.

For tests and bench/prep_scale.py: no real dump can be fetched there, and a small fixture says
nothing about speed or memory at scale. `generate_dump(path, xml_bytes, seed=...)` writes

- `path` (`*.xml.bz2`): a pages-articles export (export-0.11 schema, `<siteinfo>` with the
  namespaces) as a concatenation of independent bz2 streams, exactly as Wikipedia publishes
  `...-pages-articles-multistream.xml.bz2`: the first stream holds the header up to
  `</siteinfo>`, then one stream per `pages_per_stream` (100) pages, the last `</mediawiki>`;
- `multistream_index_path(path)` (`*-index.txt.bz2`): one `OFFSET:PAGE_ID:TITLE` line per page,
  OFFSET the byte offset in `path` of the stream that holds the page (titles unescaped).

Pages mix what the cleaner must handle, in roughly enwiki's proportions by count: articles
(short description, infobox, file link with a linked caption, bold title, piped and plain links
with trails, refs named, reused and with citation templates, {{convert}}/{{lang}}/{{circa}},
entities, comments, sections with lists and nested tables, See also / References / External
links, categories), redirects (`<redirect title=..>` + `#REDIRECT`), disambiguation pages
({{disambiguation}} or a "(disambiguation)" title) and pages of other namespaces (Category,
Template, File, Wikipedia, Portal). Titles include ':', '&', quotes and non-ASCII letters.

Words follow a Zipf law over a seeded vocabulary (English function words, then pseudo-words
built from syllables), so tokenizers see a realistic spread. The same (xml_bytes, seed,
pages_per_stream) gives the same bytes on every machine (random.Random and bz2 level 9 only).
Memory stays at one stream of pages plus a bounded list of recent titles.
"""

from __future__ import annotations

import bz2
import hashlib
import itertools
import os
import random
from xml.sax.saxutils import escape, quoteattr

from common.files import atomic_write
from data.corpus.wikipedia import multistream_index_path

PAGES_PER_STREAM = 100  # Wikipedia's multistream dumps put 100 pages in each bz2 stream.

HEADER = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ \
http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.43.0-wmf.7</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="-1" case="first-letter">Special</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="4" case="first-letter">Wikipedia</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
      <namespace key="100" case="first-letter">Portal</namespace>
    </namespaces>
  </siteinfo>
"""
FOOTER = "</mediawiki>\n"

# Page kinds by count, close to enwiki's pages-articles (redirects outnumber articles there too).
KIND_WEIGHTS = (("article", 0.42), ("redirect", 0.36), ("disambiguation", 0.03), ("other_namespace", 0.19))
OTHER_NAMESPACES = (
    ("4", "Wikipedia"),
    ("6", "File"),
    ("10", "Template"),
    ("14", "Category"),
    ("100", "Portal"),
)

_FUNCTION_WORDS = (
    "the of and in to a was is for on as by with he that at from his it an were are which this "
    "also be has or had first one their its new after but who not they have her she two been other "
    "when there all during into school time may years more most only over city some world would "
    "where later up such used many can state about national out known university united then made "
    "three while between year under both before part being since these well through however so "
    "than area each until following several north south east west river early second including"
).split()
_ONSETS = (
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "br",
    "ch",
    "st",
    "th",
)
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "io")
_CODAS = ("", "", "n", "r", "s", "l", "t", "nd", "rk", "ng")
_ACCENTED = ("é", "ü", "ø", "ñ", "ç", "å")
_FOREIGN = ("東京", "Москва", "Αθήνα", "Kraków", "São Paulo", "Zürich")


class _Vocabulary:
    """Seeded words with Zipf-distributed frequencies."""

    def __init__(self, rng: random.Random, size: int = 20_000):
        invented, seen = [], set(_FUNCTION_WORDS)
        while len(invented) + len(_FUNCTION_WORDS) < size:
            syllables = rng.choices((1, 2, 3, 4), weights=(35, 40, 18, 7))[0]
            word = "".join(
                rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
            )
            if rng.random() < 0.01:
                word = word[:-1] + rng.choice(_ACCENTED)
            if word not in seen:
                seen.add(word)
                invented.append(word)
        # Shorter words are the more frequent ones, as in every language (Zipf's abbreviation law).
        self.words = words = list(_FUNCTION_WORDS) + sorted(invented, key=len)
        self.cum_weights = list(itertools.accumulate(1.0 / (rank + 2.7) for rank in range(len(words))))
        # Names (titles, link targets) come from the rarer words, capitalised.
        self.names = [w.capitalize() for w in words[len(_FUNCTION_WORDS) + 200 :]]

    def sample(self, rng: random.Random, n: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cum_weights, k=n)


class _PageWriter:
    """Builds the wikitext and XML of one page at a time from one seeded rng."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.vocab = _Vocabulary(self.rng)
        self.page_id = 0
        self.revision_id = 1_000_000
        self.recent_titles: list[str] = ["Main topic"]

    # --- words and titles -------------------------------------------------------------------
    def name(self) -> str:
        return self.rng.choice(self.vocab.names)

    def title(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            title = f"{self.name()} {self.name()}"
        elif r < 0.75:
            title = self.name()
        elif r < 0.85:
            title = f"{self.name()} ({rng.choice(['film', 'band', 'river', 'album', 'novel', 'village'])})"
        elif r < 0.9:
            title = f"{self.name()}: {self.name()} {self.name()}"  # a colon in an article title
        elif r < 0.94:
            title = f"{self.name()} & {self.name()}"
        elif r < 0.97:
            title = f'{self.name()}\'s "{self.name()}"'
        else:
            title = f"{self.name()} ({rng.choice(_FOREIGN)})"
        return title

    def link_target(self) -> str:
        return self.rng.choice(self.recent_titles)

    def remember(self, title: str) -> None:
        self.recent_titles.append(title)
        if len(self.recent_titles) > 2000:  # bounded: memory must not follow the dump size
            del self.recent_titles[:1000]

    # --- prose ---------------------------------------------------------------------------------
    def sentence(self, ref_names: list[str]) -> str:
        rng = self.rng
        words = self.vocab.sample(rng, rng.randint(6, 28))
        words[0] = words[0].capitalize()
        for i in rng.sample(range(len(words)), rng.randint(0, 3)):  # distinct: no markup in markup
            r = rng.random()
            if r < 0.45:
                target = self.link_target()
                if rng.random() < 0.5:
                    words[i] = f"[[{target}|{words[i]}]]"
                else:
                    words[i] = f"[[{target}]]"
            elif r < 0.55:
                words[i] = f"[[{words[i]}]]s" if not words[i].endswith("s") else f"[[{words[i]}]]"
            elif r < 0.65:
                words[i] = f"''{words[i]}''"
            elif r < 0.7:
                words[i] = f"'''{words[i]}'''"
            elif r < 0.76:
                unit = rng.choice(["km", "mi", "m", "ft", "kg", "ha"])
                words[i] = f"{{{{convert|{rng.randint(2, 9000)}|{unit}}}}}"
            elif r < 0.8:
                words[i] = f"{{{{lang|{rng.choice(['fr', 'de', 'ja', 'es'])}|{words[i]}}}}}"
            elif r < 0.84:
                words[i] = f"{{{{circa|{rng.randint(1200, 1990)}}}}}"
            elif r < 0.88:
                words[i] = f"{words[i]}&nbsp;{rng.randint(1, 99)}"
            elif r < 0.92:
                words[i] = f"{words[i]} ({rng.randint(1700, 2024)}&ndash;{rng.randint(1700, 2024)})"
            elif r < 0.95:
                words[i] = f"[https://example.org/{words[i]} {words[i]}]"
            else:
                words[i] = f"{words[i]}<!-- editors: check this -->"
        text = " ".join(words)
        if rng.random() < 0.3:
            text += ","
            text += " " + " ".join(self.vocab.sample(rng, rng.randint(3, 10)))
        text += "."
        r = rng.random()
        if r < 0.25:
            name = f"r{len(ref_names)}"
            ref_names.append(name)
            text += (
                f'<ref name="{name}">{{{{cite web |url=https://example.org/{self.page_id}/{name} '
                f"|title={self.name()} {self.name()} |publisher={self.name()} |date=2 May 2019}}}}</ref>"
            )
        elif r < 0.33 and ref_names:
            text += f'<ref name="{rng.choice(ref_names)}" />'
        elif r < 0.38:
            text += f"<ref>{self.name()}, p.&nbsp;{rng.randint(1, 400)}.</ref>"
        return text

    def paragraph(self, ref_names) -> str:
        return " ".join(self.sentence(ref_names) for _ in range(self.rng.randint(2, 7)))

    def table(self, nested: bool = True) -> str:
        rng = self.rng
        rows = [f'{{| class="wikitable sortable"\n|+ {self.name()} by year\n! Year !! Name !! Value']
        for _ in range(rng.randint(2, 8)):
            cell = f"[[{self.link_target()}]]" if rng.random() < 0.5 else self.name()
            rows.append(f"|-\n| {rng.randint(1900, 2024)} || {cell} || {rng.randint(1, 10_000):,}")
        if nested and rng.random() < 0.2:
            rows.append("|-\n| colspan=3 |\n" + self.table(nested=False))
        rows.append("|}")
        return "\n".join(rows)

    def infobox(self, title: str) -> str:
        rng = self.rng
        fields = [
            f"| name = {title}",
            f"| image = {self.name()}.jpg",
            f"| caption = {self.name()} in {rng.randint(1900, 2020)}",
            f"| birth_date = {{{{birth date|{rng.randint(1800, 2000)}|{rng.randint(1, 12)}|{rng.randint(1, 28)}}}}}",
            f"| location = [[{self.link_target()}]], {{{{flag|{self.name()}}}}}",
            f"| known_for = {{{{hlist|[[{self.link_target()}]]|{self.name()}}}}}",
        ]
        return (
            "{{Infobox "
            + rng.choice(["person", "settlement", "river", "album"])
            + "\n"
            + "\n".join(fields)
            + "\n}}"
        )

    # --- pages -----------------------------------------------------------------------------
    def article(self, title: str) -> str:
        rng = self.rng
        refs: list[str] = []
        parts = [f"{{{{Short description|{' '.join(self.vocab.sample(rng, 4))}}}}}"]
        if rng.random() < 0.4:
            parts.append("{{Use dmy dates|date=March 2024}}")
        if rng.random() < 0.6:
            parts.append(self.infobox(title))
        if rng.random() < 0.3:
            parts.append(
                f"[[File:{self.name()}.jpg|thumb|upright|A {self.name()} near [[{self.link_target()}]], "
                f"{{{{circa|{rng.randint(1800, 2000)}}}}}]]"
            )
        lead = f"'''{title}''' ({{{{lang-fr|{self.name()}}}}}) is a {' '.join(self.vocab.sample(rng, 3))}."
        parts.append(lead + " " + self.paragraph(refs))
        # Article lengths are heavy-tailed: most are stubs, a few run to dozens of sections.
        for _ in range(min(40, int(rng.paretovariate(1.3)) - 1 + rng.randint(0, 2))):
            level = "==" if rng.random() < 0.8 else "==="
            parts.append(
                f"{level} {' '.join(self.vocab.sample(rng, rng.randint(1, 3))).capitalize()} {level}"
            )
            for _ in range(rng.randint(1, 4)):
                parts.append(self.paragraph(refs))
            r = rng.random()
            if r < 0.15:
                parts.append(self.table())
            elif r < 0.3:
                parts.append(
                    "\n".join(f"* [[{self.link_target()}]], {self.name()}" for _ in range(rng.randint(2, 6)))
                )
            elif r < 0.35:
                parts.append(f"<gallery>\n{self.name()}.jpg|A caption\n</gallery>")
            elif r < 0.4:
                parts.append(f"<math>x^{rng.randint(2, 9)} + y</math> holds for every {self.name()}.")
        if rng.random() < 0.5:
            parts.append("== See also ==\n" + "\n".join(f"* [[{self.link_target()}]]" for _ in range(3)))
        parts.append("== References ==\n{{Reflist}}")
        if rng.random() < 0.5:
            parts.append(f"== External links ==\n* [https://example.org/{self.page_id} Official website]")
        parts.append("{{Authority control}}")
        parts.append("\n".join(f"[[Category:{self.name()} {self.name()}]]" for _ in range(rng.randint(1, 5))))
        return "\n\n".join(parts)

    def disambiguation(self, title: str) -> tuple[str, str]:
        rng = self.rng
        if rng.random() < 0.4:
            title = f"{title.split(' (')[0]} (disambiguation)"
        base = title.split(" (")[0]
        lines = [f"'''{base}''' may refer to:"]
        for kind in rng.sample(
            ["film", "band", "river", "album", "novel", "village", "ship"], rng.randint(2, 6)
        ):
            lines.append(f"* [[{base} ({kind})]], a {rng.randint(1900, 2024)} {kind} by {self.name()}")
        lines.append("")
        lines.append("{{" + rng.choice(["disambiguation", "Disambiguation|geo", "hndis", "Dab"]) + "}}")
        return title, "\n".join(lines)

    def other_namespace(self) -> tuple[str, str, str]:
        rng = self.rng
        ns, prefix = rng.choice(OTHER_NAMESPACES)
        name = self.name()
        if prefix == "File":
            text = (
                f"== Summary ==\n{{{{Information|description={self.sentence([])}|source=own work"
                f"|author=[[User:{self.name()}]]}}}}\n== Licensing ==\n{{{{cc-by-sa-4.0}}}}"
            )
            return ns, f"File:{name}.jpg", text
        if prefix == "Template":
            text = (
                f"{{{{Navbox\n| name = {name}\n| list1 = [[{self.link_target()}]] · [[{self.link_target()}]]\n}}}}"
                "<noinclude>{{Documentation}}</noinclude>"
            )
            return ns, f"Template:{name}", text
        if prefix == "Category":
            return ns, f"Category:{name}", f"{self.sentence([])}\n[[Category:{self.name()}]]"
        return ns, f"{prefix}:{name}", self.paragraph([])

    def page(self) -> tuple[str, int, str, str]:
        """(kind, page id, title, page XML)."""
        rng = self.rng
        self.page_id += rng.randint(1, 5)
        self.revision_id += rng.randint(1, 50)
        kind = rng.choices([k for k, _ in KIND_WEIGHTS], weights=[w for _, w in KIND_WEIGHTS])[0]
        ns, redirect = "0", None
        title = self.title()
        if kind == "article":
            text = self.article(title)
            self.remember(title)
        elif kind == "redirect":
            redirect = self.link_target()
            text = f"#REDIRECT [[{redirect}]]\n\n{{{{Redirect category shell|\n{{{{R from alternative name}}}}\n}}}}"
        elif kind == "disambiguation":
            title, text = self.disambiguation(title)
        else:
            ns, title, text = self.other_namespace()
        encoded = text.encode("utf-8")
        sha1 = int.from_bytes(hashlib.sha1(encoded).digest(), "big")
        xml = (
            f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{self.page_id}</id>\n"
            + (f"    <redirect title={quoteattr(redirect)} />\n" if redirect is not None else "")
            + f"    <revision>\n      <id>{self.revision_id}</id>\n      <parentid>{self.revision_id - 1}</parentid>\n"
            f"      <timestamp>2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T08:00:00Z</timestamp>\n"
            f"      <contributor>\n        <username>{self.name()}</username>\n"
            f"        <id>{rng.randint(1, 9_999_999)}</id>\n      </contributor>\n"
            "      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
            f'      <text bytes="{len(encoded)}" xml:space="preserve">{escape(text)}</text>\n'
            f"      <sha1>{_base36(sha1)}</sha1>\n    </revision>\n  </page>\n"
        )
        return kind, self.page_id, title, xml


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out)).rjust(31, "0")


def generate_dump(
    path: str,
    xml_bytes: int,
    *,
    seed: int = 0,
    pages_per_stream: int = PAGES_PER_STREAM,
    index_path: str | None = None,
    progress=None,
) -> dict:
    """Writes a multistream dump of about `xml_bytes` of XML (whole streams of pages until the
    size is reached) to `path` and its index to `index_path` (default multistream_index_path).

    `progress(n)` is advanced by the XML bytes written. Returns counts: pages, article, redirect,
    disambiguation, other_namespace, streams (bz2 streams, header and footer included),
    xml_bytes, bz2_bytes, index_path.
    """
    if xml_bytes <= 0:
        raise ValueError(f"xml_bytes must be positive, got {xml_bytes}")
    if pages_per_stream <= 0:
        raise ValueError(f"pages_per_stream must be positive, got {pages_per_stream}")
    index_path = index_path or multistream_index_path(path)
    for directory in {os.path.dirname(os.path.abspath(p)) for p in (path, index_path)}:
        os.makedirs(directory, exist_ok=True)
    writer = _PageWriter(seed)
    stats = dict.fromkeys(("pages", "article", "redirect", "disambiguation", "other_namespace"), 0)
    offset = written = streams = 0
    index = bz2.BZ2Compressor(9)

    def put_stream(text: str):
        nonlocal offset, written, streams
        data = text.encode("utf-8")
        compressed = bz2.compress(data, 9)
        out.write(compressed)
        offset += len(compressed)
        written += len(data)
        streams += 1
        if progress is not None:
            progress(len(data))

    with atomic_write(path, "wb") as out, atomic_write(index_path, "wb") as index_out:
        put_stream(HEADER)
        while written < xml_bytes:
            pages, lines, size = [], [], written
            while len(pages) < pages_per_stream and size < xml_bytes:
                kind, page_id, title, xml = writer.page()
                pages.append(xml)
                lines.append(f"{offset}:{page_id}:{title}\n")
                size += len(xml)
                stats[kind] += 1
            stats["pages"] += len(pages)
            index_out.write(index.compress("".join(lines).encode("utf-8")))
            put_stream("".join(pages))
        put_stream(FOOTER)
        index_out.write(index.flush())
    return {**stats, "streams": streams, "xml_bytes": written, "bz2_bytes": offset, "index_path": index_path}
