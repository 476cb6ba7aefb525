"""MediaWiki XML dumps -> clean article text, streaming.

`iter_pages(stream)` walks a pages-articles export (`<mediawiki><siteinfo>..<page><title><ns>
<id><redirect/><revision><text>`) with xml.etree iterparse and clears every finished page, so
memory stays flat however large the dump is. `article_paragraphs(page)` decides whether a page
is an article (namespace 0, not a redirect, not a disambiguation or set-index page) and turns
its wikitext into plain paragraphs.

Wikitext cleaning, in order: HTML comments; <ref>, <gallery>, <math> and similar blocks with
their content; templates {{...}} (nested, with a few inline templates such as {{convert}} or
{{lang}} kept as their text) and tables {|...|} (nested); links ([[a|b]] -> b, [[a]]s -> as;
File/Image/Category/interlanguage links dropped, including captions with nested links);
external links ([url label] -> label); bold/italic quotes; remaining HTML tags; entities.
Then line by line: headings dropped (and whole reference-like sections such as "References"
or "External links"), list items and table remnants dropped, lines joined into paragraphs.
"""

from __future__ import annotations

import html
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

# --- Pages ---------------------------------------------------------------------------------------


@dataclass
class Page:
    title: str
    ns: str
    id: str
    text: str
    redirect: bool


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_pages(stream):
    """Yields a Page per <page> of a MediaWiki export read from the binary `stream`.

    The export's XML namespace (export-0.10, 0.11, ...) is ignored. Raises ET.ParseError on
    malformed XML and EOFError on a truncated bz2 stream; callers turn both into user messages.
    """
    root = None
    for event, elem in ET.iterparse(stream, events=("start", "end")):
        if event == "start":
            if root is None:
                root = elem
            continue
        if _local(elem.tag) != "page":
            continue
        title = ns = page_id = ""
        text = ""
        redirect = False
        for child in elem:
            name = _local(child.tag)
            if name == "title":
                title = child.text or ""
            elif name == "ns":
                ns = (child.text or "").strip()
            elif name == "id":
                page_id = (child.text or "").strip()
            elif name == "redirect":
                redirect = True
            elif name == "revision":
                for grandchild in child:
                    if _local(grandchild.tag) == "text":
                        text = grandchild.text or ""
        yield Page(title=title, ns=ns, id=page_id, text=text, redirect=redirect)
        # Drop the finished page and everything before it: memory stays at one page.
        elem.clear()
        if root is not None:
            root.clear()


# --- Multistream dumps -----------------------------------------------------------------------
# `...-pages-articles-multistream.xml.bz2` is a concatenation of independent bz2 streams (the
# <siteinfo> header, then 100 pages per stream, then </mediawiki>); its index
# `...-multistream-index.txt.bz2` lists `OFFSET:PAGE_ID:TITLE` per page, OFFSET being the byte
# offset of the stream that holds the page. Each stream can be decompressed and parsed alone.


def multistream_index_path(dump_path: str) -> str:
    """Where the index of `dump_path` lies: `X.xml.bz2` -> `X-index.txt.bz2` (Wikipedia's naming:
    `...-multistream.xml.bz2` -> `...-multistream-index.txt.bz2`)."""
    base = dump_path[: -len(".bz2")] if dump_path.endswith(".bz2") else dump_path
    base = base[: -len(".xml")] if base.endswith(".xml") else base
    return base + "-index.txt.bz2"


_INDEX_ENTRY = re.compile(rb"^(\d+):\s*\d+\s*:", re.MULTILINE)
# A quarter MB: as fast as 4 MB blocks (bz2 decompression costs the time), and the block, its copy
# and its offsets are the parent's largest objects; 4 MB blocks raised its peak RSS by 13 MB on
# any index larger than one block.
_INDEX_BLOCK = 1 << 18


def stream_offsets(index_file):
    """The distinct stream offsets of an index (`OFFSET:PAGE_ID:TITLE` lines, read from the binary
    file `index_file`), in order; raises ValueError naming the first line that is not of that
    form or goes back to an earlier offset.

    The index of the English dump has tens of millions of lines: it is read in blocks and its
    offsets found by one regex per block, so the parent process spends seconds, not minutes, here.
    """
    last, line_number, tail = -1, 0, b""
    while True:
        data = index_file.read(_INDEX_BLOCK)
        block = tail + data
        cut = block.rfind(b"\n") + 1 if data else len(block)
        block, tail = block[:cut], block[cut:]
        if block:
            offsets = list(map(int, _INDEX_ENTRY.findall(block)))
            lines = block.count(b"\n") + (not block.endswith(b"\n"))
            blank = len(re.findall(rb"^[ \t\r]*$\n?", block, re.MULTILINE)) - (block.endswith(b"\n"))
            if len(offsets) != lines - blank or offsets != sorted(offsets) or (offsets and offsets[0] < last):
                _raise_at_bad_line(block, line_number, last)
            for offset in dict.fromkeys(offsets):
                if offset != last:
                    yield offset
                    last = offset
            line_number += lines
        if not data:
            return


def _raise_at_bad_line(block: bytes, line_number: int, last: int):
    for number, line in enumerate(block.split(b"\n"), line_number + 1):
        if not line.strip():
            continue
        match = _INDEX_ENTRY.match(line)
        if not match:
            raise ValueError(f"line {number} is not OFFSET:PAGE_ID:TITLE")
        offset = int(match.group(1))
        if offset < last:
            raise ValueError(f"line {number} goes back to offset {offset} after {last}")
        last = offset
    raise AssertionError("no bad line found")  # unreachable: the caller saw one


def fragment_pages(xml: bytes):
    """The Pages of a decompressed stream: whole <page> elements, with anything around them (the
    <mediawiki> opening and <siteinfo>, or the closing </mediawiki>) left out."""
    start = xml.find(b"<page>")
    if start < 0:
        return iter(())
    end = xml.rfind(b"</page>")
    body = xml[start : end + len(b"</page>")] if end > start else xml[start:]
    return iter_pages(io.BytesIO(b"<pages>" + body + b"</pages>"))


# --- Page kinds ----------------------------------------------------------------------------------
_REDIRECT = re.compile(r"^\s*#\s*redirect\b", re.IGNORECASE)
_DISAMBIGUATION_TEMPLATES = (
    "disambiguation",
    "disambig",
    "disamb",
    "dab",
    "disam",
    "dis",
    "hndis",
    "geodis",
    "numberdis",
    "letter disambiguation",
    "letter-number combination disambiguation",
    "school disambiguation",
    "hospital disambiguation",
    "mathematical disambiguation",
    "species latin name disambiguation",
    "genus disambiguation",
    "call sign disambiguation",
    "mountainindex",
    "roadindex",
    "shipindex",
    "set index article",
    "sia",
    "surname",
    "given name",
    "disambiguation cleanup",
    "dmbox",
)
_DISAMBIGUATION = re.compile(
    r"\{\{\s*(?:" + "|".join(re.escape(t) for t in _DISAMBIGUATION_TEMPLATES) + r")\s*(?:\||\}\})",
    re.IGNORECASE,
)


def page_kind(page: Page) -> str:
    """'article', 'other_namespace', 'redirect' or 'disambiguation'."""
    if page.ns not in ("0", ""):
        return "other_namespace"
    if page.redirect or _REDIRECT.match(page.text):
        return "redirect"
    if page.title.endswith("(disambiguation)") or _DISAMBIGUATION.search(page.text.replace("_", " ")):
        return "disambiguation"
    return "article"


# --- Wikitext cleaning ---------------------------------------------------------------------------
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_BLOCKS = (
    "ref",
    "references",
    "gallery",
    "math",
    "chem",
    "ce",
    "timeline",
    "score",
    "graph",
    "syntaxhighlight",
    "source",
    "pre",
    "imagemap",
    "mapframe",
    "maplink",
    "templatedata",
    "hiero",
    "inputbox",
    "categorytree",
    "noinclude",
    "includeonly",
    "indicator",
    "code",
)
_SELF_CLOSING = re.compile(r"<(?:%s)\b[^<>]*/\s*>" % "|".join(_DROPPED_BLOCKS), re.IGNORECASE)
_BLOCK = re.compile(r"<(%s)\b[^<>]*>.*?</\1\s*>" % "|".join(_DROPPED_BLOCKS), re.IGNORECASE | re.DOTALL)
_UNCLOSED_REF = re.compile(r"<ref\b[^<>]*>[^<]*?(?=\n\n|\Z)", re.IGNORECASE)
_TRIPLE_BRACES = re.compile(r"\{\{\{[^{}]*\}\}\}")
_STRUCTURE = re.compile(r"\{\{|\}\}|^[ \t:]*\{\||^[ \t]*\|\}", re.MULTILINE)
_LINK = re.compile(r"\[\[([^\[\]]*)\]\]([a-z]*)")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|mailto:)?//?[^\s\[\]]+(?:\s+([^\[\]]*))?\]")
_BOLD_ITALIC = re.compile(r"'{2,5}")
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^(={1,6})\s*(.*?)\s*\1\s*$")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_LEADING_PUNCT_IN_PARENS = re.compile(r"\(\s*[,;:]+\s*")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])(?=\s|$)")

# Sections whose content is references, links or lists rather than prose.
DROPPED_SECTIONS = frozenset(
    {
        "references",
        "external links",
        "see also",
        "notes",
        "further reading",
        "bibliography",
        "sources",
        "footnotes",
        "citations",
        "notes and references",
        "references and notes",
        "works cited",
        "gallery",
        "explanatory notes",
        "general references",
        "cited sources",
        "literature",
        "links",
        "related pages",
        "selected bibliography",
        "publications",
    }
)

# Namespaces whose links are not running text (with their common aliases).
DROPPED_LINK_NAMESPACES = frozenset(
    {
        "file",
        "image",
        "category",
        "media",
        "template",
        "help",
        "special",
        "module",
        "draft",
        "portal",
        "user",
        "talk",
    }
)
_INTERLANGUAGE = re.compile(r"^[a-z]{2,3}(?:-[a-z]{2,8})*$")


def _split_args(text: str) -> list[str]:
    """Splits template arguments on '|' outside nested [[...]] and {{...}}."""
    args, depth, start, i = [], 0, 0, 0
    while i < len(text):
        two = text[i : i + 2]
        if two in ("[[", "{{"):
            depth += 1
            i += 2
            continue
        if two in ("]]", "}}") and depth:
            depth -= 1
            i += 2
            continue
        if text[i] == "|" and depth == 0:
            args.append(text[start:i])
            start = i + 1
        i += 1
    args.append(text[start:])
    return args


def _positional(args: list[str]) -> list[str]:
    return [a.strip() for a in args if not re.match(r"^\s*[\w -]+\s*=", a)]


_RANGE_WORDS = {"-", "–", "to", "and", "or", "by", "x", "×", "+", "&"}
_SIMPLE_TEXT_TEMPLATES = {
    "nowrap",
    "nobr",
    "small",
    "smaller",
    "big",
    "larger",
    "em",
    "strong",
    "sc",
    "smallcaps",
    "noitalic",
    "nobold",
    "var",
    "mvar",
    "math",
    "tooltip",
    "abbr",
    "sic",
    "not a typo",
    "ill",
    "interlanguage link",
    "nihongo",
    "linktext",
    "lang-x",
    "keep together",
    "serif",
    "resize",
    "visible anchor",
    "anchor text",
    "bold",
    "italic",
    "highlight",
    "proper name",
}
_FIXED_TEXT_TEMPLATES = {
    "'": "'",
    "snd": " – ",
    "spaced ndash": " – ",
    "ndash": "–",
    "mdash": "—",
    "spaced en dash": " – ",
    "=": "=",
    "!": "|",
    "nbsp": " ",
    "·": "·",
    "dot": "·",
    "-": "",
    "clear": "",
    "'s": "'s",
}


def _template_name(head: str) -> str:
    name = head.strip().replace("_", " ").lower()
    if name.startswith("template:"):
        name = name[len("template:") :].strip()
    return name


def _renders_text(name: str) -> bool:
    return (
        name in _FIXED_TEXT_TEMPLATES
        or name in _ARGUMENT_TEXT_TEMPLATES
        or name in _SIMPLE_TEXT_TEMPLATES
        or name.startswith("lang-")
    )


def _render_template(inner: str) -> str:
    """Text a template stands for in running prose; "" for the vast majority (infoboxes, citations, ...)."""
    head = inner.split("|", 1)[0]
    if "[[" not in head and "{{" not in head and not _renders_text(_template_name(head)):
        # Most templates (infoboxes, citations) stand for no text: their arguments, often
        # most of an article's wikitext, need not be split (the name is the text before the
        # first "|" unless a nested link or template holds one).
        return ""
    args = _split_args(inner)
    name = _template_name(args[0])
    if name in _FIXED_TEXT_TEMPLATES:
        return _FIXED_TEXT_TEMPLATES[name]
    pos = _positional(args[1:])
    if not pos:
        return ""
    if name in ("convert", "cvt"):
        if len(pos) >= 4 and pos[1] in _RANGE_WORDS:
            return f"{pos[0]} {pos[1]} {pos[2]} {pos[3]}"
        return f"{pos[0]} {pos[1]}" if len(pos) >= 2 else pos[0]
    if name in ("lang", "transl", "transliteration") and len(pos) >= 2:
        return pos[-1] if name != "lang" else pos[1]
    if name.startswith("lang-"):
        return pos[0]
    if name in ("as of",):
        return "As of " + " ".join(pos[:3])
    if name in ("c.", "circa"):
        return "c. " + pos[0]
    if name in ("frac", "sfrac"):
        return " ".join(pos[:-2] + ["/".join(pos[-2:])]) if len(pos) >= 2 else pos[0]
    if name in ("us$", "usd", "us dollar"):
        return "US$" + pos[0]
    if name in _SIMPLE_TEXT_TEMPLATES:
        return pos[0] or (pos[1] if len(pos) > 1 else "")
    return ""


# The templates _render_template gives text for from their arguments (besides the fixed-text,
# simple-text and lang-xx ones).
_ARGUMENT_TEXT_TEMPLATES = frozenset(
    {
        "convert",
        "cvt",
        "lang",
        "transl",
        "transliteration",
        "as of",
        "c.",
        "circa",
        "frac",
        "sfrac",
        "us$",
        "usd",
        "us dollar",
    }
)


def strip_templates_and_tables(text: str) -> str:
    """Removes {{templates}} and {|tables|}, both nestable and nested in each other.

    Inline templates from a small list keep their text; an unclosed construct drops the rest
    of the text (a broken infobox must not leak markup into the corpus).
    """
    text = _TRIPLE_BRACES.sub("", text)
    out, stack, pos = [], [], 0
    for m in _STRUCTURE.finditer(text):
        token = m.group().strip(" \t:")
        if token in ("{{", "{|"):
            if not stack:
                out.append(text[pos : m.start()])
            stack.append(("template" if token == "{{" else "table", m.start(), m.end()))
        elif token == "}}":
            if not any(kind == "template" for kind, _, _ in stack):
                continue  # a stray "}}" in text: left for the final cleanup
            while True:
                kind, start, body = stack.pop()
                if kind == "template":
                    break
            if not stack:
                inner = text[body : m.start()]
                rendered = _render_template(inner)
                if rendered:
                    # Text without a brace holds no template or table: it is its own result.
                    nested = "{" in rendered or "}" in rendered
                    out.append(strip_templates_and_tables(rendered) if nested else rendered)
                pos = m.end()
        else:  # "|}"
            if not any(kind == "table" for kind, _, _ in stack):
                continue
            while True:
                kind, _, _ = stack.pop()
                if kind == "table":
                    break
            if not stack:
                pos = m.end()
    if not stack:
        out.append(text[pos:])
    return "".join(out)


def _replace_link(match: re.Match) -> str:
    target, pipe, label = match.group(1).partition("|")
    trail = match.group(2)
    target = target.strip()
    visible = target.startswith(":")  # [[:Category:X]] is a visible link, not a categorisation
    target = target.lstrip(":").strip()
    if ":" in target and not visible:
        namespace = target.split(":", 1)[0].strip().lower()
        if namespace in DROPPED_LINK_NAMESPACES or _INTERLANGUAGE.match(namespace):
            return ""
    if pipe:
        label = label.strip()
        if not label:  # the pipe trick: [[Paris, Texas|]] -> Paris
            label = re.sub(r"\s*\(.*?\)\s*$", "", target).split(",")[0].strip()
        # File-style links keep only the last field (the caption); normal links have one label.
        label = label.rsplit("|", 1)[-1].strip()
        return label + trail
    return target.split("#", 1)[0] + trail if not target.startswith("#") else target[1:] + trail


def replace_links(text: str) -> str:
    """[[target|label]] -> label, [[target]]s -> targets; drops file/category/interlanguage links."""
    for _ in range(8):  # innermost first: captions with links inside file links
        new = _LINK.sub(_replace_link, text)
        if new == text:
            break
        text = new
    text = text.replace("[[", "").replace("]]", "")
    return _EXTERNAL_LINK.sub(lambda m: m.group(1) or "", text)


def _normalise_space(text: str) -> str:
    text = " ".join(text.split())
    tidy = text
    if "(" in tidy:  # both patterns need one
        tidy = _EMPTY_PARENS.sub("", tidy)
        tidy = _LEADING_PUNCT_IN_PARENS.sub("(", tidy)
    tidy = _SPACE_BEFORE_PUNCT.sub(r"\1", tidy)
    # Joining the split is idempotent: only text the patterns changed needs it again.
    return text if tidy == text else " ".join(tidy.split())


def clean_wikitext(text: str) -> list[str]:
    """Wikitext -> list of plain-text paragraphs (headings, lists, references, markup removed)."""
    text = _COMMENT.sub("", text)
    text = _SELF_CLOSING.sub("", text)
    text = _BLOCK.sub("", text)
    text = _UNCLOSED_REF.sub("", text)
    text = strip_templates_and_tables(text)
    text = replace_links(text)
    text = _BOLD_ITALIC.sub("", text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    text = text.replace("{{", "").replace("}}", "")
    # The XML parser already undid the dump's own escaping (&amp;nbsp; -> &nbsp;); this resolves
    # the wikitext's entities (&nbsp; &ndash; &amp;) once, as MediaWiki renders them.
    text = html.unescape(text)

    paragraphs, current = [], []
    skip_level = 0  # inside a dropped section of this heading level (0 = not skipping)

    def flush():
        if current:
            paragraph = _normalise_space(" ".join(current))
            if any(ch.isalpha() for ch in paragraph):
                paragraphs.append(paragraph)
            current.clear()

    for line in text.split("\n"):
        stripped = line.strip()
        heading = _HEADING.match(stripped)
        if heading:
            flush()
            level = len(heading.group(1))
            if skip_level and level > skip_level:
                continue
            title = _normalise_space(heading.group(2)).rstrip(":").lower()
            skip_level = level if title in DROPPED_SECTIONS else 0
            continue
        if skip_level:
            continue
        if not stripped:
            flush()
            continue
        if stripped[0] in "*#|!;" or stripped.startswith(("{|", "|}", "----")):
            # List items, definition terms (";" mini-headings), table remnants and rules are
            # not running prose.
            flush()
            continue
        current.append(stripped.lstrip(":").strip())
    flush()
    return paragraphs


def article_text(page: Page) -> tuple[str, str]:
    """(kind, text): kind as page_kind(); text is the cleaned article on one line ("" if none)."""
    kind = page_kind(page)
    if kind != "article":
        return kind, ""
    return kind, " ".join(clean_wikitext(page.text))
