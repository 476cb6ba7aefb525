"""A real-text corpus that every machine has offline: the prose of the installed Python.

The docstrings of the standard library's and site-packages' modules and their .rst/.txt/.md
documentation, split into sentences (one per line, a blank line between documents): the input
format of create_pretraining_data, and plain text for prepare_data's text_formatting. Code,
tables and lists are dropped; what stays reads as English sentences. The quickstart and the
benchmarks train on it, so they need no download.
"""

from __future__ import annotations

import glob
import os
import re
import sysconfig

from common.files import atomic_write

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_DOCSTRING = re.compile(r'"""(.*?)"""', re.S)
_MARKUP = re.compile(r"[`*_|]{1,3}|:[a-z]+:|\.\. [a-z-]+::.*|^\s*[=\-~^#+]{3,}\s*$", re.M)


def _paragraphs(text):
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        # Code, tables and lists are not prose: keep blocks that read as sentences.
        if not lines or any(line.startswith((">>>", "...", "$ ", "|", "+-", "--")) for line in lines):
            continue
        paragraph = " ".join(line for line in lines if line)
        if len(paragraph) >= 40 and paragraph.count(" ") >= 5:
            yield paragraph


def document_sentences(path: str) -> list[str]:
    """The prose sentences of one source or documentation file (docstrings only for .py)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return []
    if path.endswith(".py"):
        text = "\n\n".join(m.group(1) for m in _DOCSTRING.finditer(text))
    text = _MARKUP.sub(" ", text)
    sentences = []
    for paragraph in _paragraphs(text):
        sentences.extend(s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.strip()) > 1)
    return sentences


def source_files(roots=None):
    """Documentation and module files under the installed Python's library directories, sorted,
    tests excluded (their docstrings are repetitive), each real file once."""
    if roots is None:
        roots = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    seen = set()
    for root in roots:
        for pattern in ("**/*.py", "**/*.rst", "**/*.txt", "**/*.md"):
            for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
                real = os.path.realpath(path)
                parts = os.path.relpath(path, root).split(os.sep)
                if real not in seen and not any(part.startswith("test") for part in parts):
                    seen.add(real)
                    yield path


def build_corpus(path: str, megabytes: float, roots=None, progress=None) -> dict:
    """Writes about `megabytes` MB (10^6 bytes) of sentences to `path` (atomically); the text is
    repeated when the installed Python holds less. `progress(n)` gets bytes written.
    Returns {documents, sentences, bytes, repeated}."""
    target = int(megabytes * 1e6)
    stats = {"documents": 0, "sentences": 0, "bytes": 0, "repeated": False}
    documents = []

    def emit(out, text, n_sentences):
        size = len(text.encode("utf-8"))
        out.write(text)
        stats["documents"] += 1
        stats["sentences"] += n_sentences
        stats["bytes"] += size
        if progress is not None:
            progress(size)

    with atomic_write(path) as out:
        for source in source_files(roots):
            sentences = document_sentences(source)
            if len(sentences) < 2:
                continue
            documents.append(("\n".join(sentences) + "\n\n", len(sentences)))
            emit(out, *documents[-1])
            if stats["bytes"] >= target:
                break
        while stats["bytes"] < target and documents:  # not enough text installed: repeat it
            stats["repeated"] = True
            for text, n in documents:
                emit(out, text, n)
                if stats["bytes"] >= target:
                    break
    if not documents:
        from common.errors import UserError

        raise UserError(f"No prose found under {', '.join(roots or [])} to build a corpus from.")
    return stats


def docstring_sentences(path: str) -> list[list[str]]:
    """The prose sentences of each docstring of one .py file, a list per docstring."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return []
    out = []
    for match in _DOCSTRING.finditer(text):
        body = _MARKUP.sub(" ", match.group(1))
        out.append(
            [s.strip() for p in _paragraphs(body) for s in _SENTENCE_END.split(p) if len(s.strip()) > 1]
        )
    return out


def build_docstring_corpus(path: str, megabytes: float, roots=None) -> dict:
    """Writes about `megabytes` MB of many short documents to `path` (atomically): every docstring
    of two sentences or more is its own document (one sentence per line, a blank line between
    documents), so a few long module docstrings sit among many short function ones.
    Returns {documents, bytes}."""
    target = int(megabytes * 1e6)
    stats = {"documents": 0, "bytes": 0}
    with atomic_write(path) as out:
        for source in source_files(roots):
            if not source.endswith(".py"):
                continue
            for sentences in docstring_sentences(source):
                if len(sentences) >= 2:
                    text = "\n".join(sentences) + "\n\n"
                    out.write(text)
                    stats["documents"] += 1
                    stats["bytes"] += len(text.encode("utf-8"))
            if stats["bytes"] >= target:
                break
    return stats
