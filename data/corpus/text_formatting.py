"""Text formatting stage: a raw corpus -> one clean document per line (NVIDIA's formatted layout).

Inputs, optionally compressed (.bz2, .gz, .xz):
- a MediaWiki XML dump (`*.xml`): articles only (see data/corpus/wikipedia.py). A Wikipedia
  multistream dump (`X.xml.bz2` with its index `X-index.txt.bz2` beside it) is split into its
  bz2 streams by the index's offsets and every process decompresses, parses and cleans whole
  streams; documents are written in stream order, so the output is byte-identical for any
  number of processes. Without an index the dump is decompressed and parsed in one process
  (bz2 blocks start at bit offsets, and their 48-bit marker may also occur inside compressed
  data, so a split on it would be a guess);
- plain text (`*.txt` and anything else): documents separated by blank lines, the lines of a
  document joined by spaces; with `one_document_per_line` each non-empty line is a document;
- JSONL (`*.jsonl`, `*.json`, `*.ndjson`): one JSON object per line, the document in `text_key`.

An uncompressed text or JSONL file is cut into byte ranges where one reader would start afresh
(line ends; blank lines between documents) that `n_processes` workers format; compressed text and
JSONL are read by one process.

On MPI ranks (data/ranks.py; one host or several sharing the output directory) the inputs' bytes,
one file after the other, are cut into one window per rank; rank r formats the units of work
(streams, ranges, whole files) that start in its window with its own `n_processes` workers into a
part file, and rank 0 concatenates the parts in rank order (copy_file_range: in the kernel), so
the output is byte for byte the one-process output.

Output: UTF-8, one document per line, whitespace collapsed, in input order. Invalid UTF-8 is
replaced by U+FFFD and counted; empty documents, unparsable JSON lines and non-article wiki pages
are skipped and counted. Documents longer than `max_document_chars` in plain text are cut at a
line boundary (counted), so no input can make memory grow without bound.
"""

from __future__ import annotations

import bz2
import codecs
import collections
import contextlib
import gzip
import io
import json
import lzma
import os
import shutil
import sys
import time
import xml.etree.ElementTree as ET

from common.errors import UserError
from common.files import atomic_path, commit, ensure_writable_dir, temporary_name
from data.corpus import wikipedia
from data.corpus.parallel import bounded_imap
from data.manifest import input_identity
from data.ranks import reported
from data.stage import Runtime, Stage

INPUT_FORMATS = ("auto", "wikipedia", "text", "jsonl")
# Bump when the cleaning rules change, so stale formatted files are redone.
FORMAT_VERSION = 1
DEFAULT_MAX_DOCUMENT_CHARS = 2_000_000
_COMPRESSED = {".bz2": bz2.open, ".gz": gzip.open, ".xz": lzma.open}


def corpus_format(path: str) -> str:
    """wikipedia, jsonl or text, from the file name (compression suffixes ignored)."""
    name = path.lower()
    for ext in _COMPRESSED:
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith(".xml"):
        return "wikipedia"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "text"


class _CountingFile(io.RawIOBase):
    """The raw (compressed) file, counting bytes read so progress can follow the input size."""

    def __init__(self, path):
        super().__init__()
        self._f = open(path, "rb", buffering=0)
        self.bytes_read = 0

    def readinto(self, buffer):
        n = self._f.readinto(buffer)
        self.bytes_read += n or 0
        return n

    def readable(self):
        return True

    def close(self):
        self._f.close()
        super().close()


def open_input(path: str):
    """(binary stream of decompressed bytes, raw counting file)."""
    if not os.path.isfile(path):
        raise UserError(f"Input file {path!r} does not exist; check --input_files.")
    raw = _CountingFile(path)
    for ext, opener in _COMPRESSED.items():
        if path.lower().endswith(ext):
            return opener(io.BufferedReader(raw, 1 << 20), "rb"), raw
    return io.BufferedReader(raw, 1 << 20), raw


class Utf8Decoder:
    """Decodes bytes as UTF-8, replacing invalid sequences with U+FFFD and counting them."""

    def __init__(self):
        self.invalid = 0
        self.error_name = f"bert_prep_count_{id(self)}"
        codecs.register_error(self.error_name, self._handle)

    def _handle(self, error):
        self.invalid += 1
        return "\ufffd", error.end

    def decode(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("utf-8", self.error_name)

    def incremental(self):
        return codecs.getincrementaldecoder("utf-8")(self.error_name)


class _SanitizedStream:
    """A binary stream re-encoded through Utf8Decoder, so the XML parser never sees invalid UTF-8."""

    def __init__(self, stream, decoder: Utf8Decoder):
        self._stream = stream
        self._decoder = decoder.incremental()

    def read(self, n=-1):
        while True:
            data = self._stream.read(n if n and n > 0 else 1 << 16)
            text = self._decoder.decode(data, not data)
            # An empty result means EOF to the parser: only return one at the real end.
            if text or not data:
                return text.encode("utf-8")


def _one_line(text: str) -> str:
    # str.split() splits on every Unicode line/paragraph separator too (\x1c-\x1e, \x85, \u2028,
    # \u2029), which readers that use splitlines() would otherwise take as line breaks.
    return " ".join(text.split())


def _clean_page(page: wikipedia.Page):
    return wikipedia.article_text(page)


def _wiki_documents(path, stats, progress, n_processes, log):
    if n_processes > 1:
        log(
            f"[text_formatting] {path} has no multistream index (expected "
            f"{wikipedia.multistream_index_path(path)}): it is "
            f"decompressed and parsed in one process; only the cleaning uses {n_processes}."
        )
    stream, raw = open_input(path)
    decoder = Utf8Decoder()
    last = 0
    try:
        pages = wikipedia.iter_pages(_SanitizedStream(stream, decoder))
        for kind, text in bounded_imap(_clean_page, pages, n_processes):
            stats["input_documents"] += 1
            if progress is not None:
                progress.update(raw.bytes_read - last)
                last = raw.bytes_read
            if kind != "article":
                stats[kind] += 1
                continue
            yield text
    except ET.ParseError as e:
        raise UserError(
            f"{path} is not a well-formed MediaWiki XML dump ({e}); re-download it "
            f"(prepare_data.py --action download --dataset wikicorpus_en)."
        ) from None
    except EOFError:
        raise UserError(
            f"{path} ends before the end of its compressed stream (a truncated download?); re-download it."
        ) from None
    finally:
        stats["invalid_utf8_sequences"] += decoder.invalid
        stream.close()
        raw.close()


# --- Multistream dumps: whole bz2 streams per worker ----------------------------------------------
# Streams per task: one stream of a real dump is ~100 pages (a few hundred KB of XML), small
# enough that the pool's bounded read-ahead keeps memory at a few streams per worker; two per
# task halve the parent's cost of sending tasks (about 1 ms each).
STREAMS_PER_TASK = 2


def _stream_ranges(path: str, index: str):
    """(path, start, end) byte ranges that tile `path`, one per stream the index names: the header
    stream before the first offset, and the last indexed stream up to the end of the file (its
    closing </mediawiki> stream included)."""
    size = os.path.getsize(path)
    previous = 0
    try:
        with bz2.open(index, "rb") as lines:
            for offset in wikipedia.stream_offsets(lines):
                if offset >= size:
                    raise UserError(
                        f"{path} has {size:,} bytes but its index {index} names a stream at byte "
                        f"{offset:,}: the dump is truncated; re-download it."
                    )
                if offset > previous:
                    yield path, previous, offset
                previous = offset
    except ValueError as e:
        raise UserError(
            f"The multistream index {index} is malformed ({e}); re-download it, or delete it to "
            f"format {path} in one process."
        ) from None
    except (EOFError, OSError) as e:
        raise UserError(
            f"Reading the multistream index {index} failed ({e}); re-download it, or delete it to "
            f"format {path} in one process."
        ) from None
    yield path, previous, size


_stream_decoder = None  # one per process: codecs keeps every registered error handler forever


def _format_stream(item):
    """Decompresses, parses and cleans the streams in bytes [start, end) of a multistream dump.

    Returns (the articles' final lines in page order as UTF-8, each ending in a newline; their
    number; counts of the stage's page statistics; end - start). The worker encodes: the one
    process that writes in order then only moves bytes.
    """
    global _stream_decoder
    path, start, end = item
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start + 4)  # and the header of the next stream
    data, following = data[: end - start], data[end - start :]
    for offset, head in ((start, data[:4]), (end, following)):
        # An index of another dump (a "latest" fetched on another day) names offsets inside streams.
        if 0 < offset < os.path.getsize(path) and not (head[:3] == b"BZh" and head[3:4].isdigit()):
            raise UserError(
                f"No bz2 stream starts at byte {offset:,} of {path}, where its index "
                f"{wikipedia.multistream_index_path(path)} says one does: the index belongs to another "
                f"dump; download the dump and its index together again."
            )
    where = f"the bz2 stream at byte {start:,} of {path}"
    try:
        xml = bz2.decompress(data)
    except (ValueError, OSError, EOFError) as e:
        raise UserError(f"{where} is truncated or corrupt ({e}); re-download the dump.") from None
    if _stream_decoder is None:
        _stream_decoder = Utf8Decoder()
    invalid = _stream_decoder.invalid
    text = _stream_decoder.decode(xml)
    if _stream_decoder.invalid != invalid:
        xml = text.encode("utf-8")
    counts = {"input_documents": 0, "invalid_utf8_sequences": _stream_decoder.invalid - invalid}
    articles = []
    try:
        for page in wikipedia.fragment_pages(xml):
            counts["input_documents"] += 1
            kind, cleaned = wikipedia.article_text(page)
            line = _final_line(cleaned) if kind == "article" else None
            if line is not None:
                articles.append(line)
            else:
                kind = "empty_documents" if kind == "article" else kind
                counts[kind] = counts.get(kind, 0) + 1
    except ET.ParseError as e:
        raise UserError(f"{where} is not well-formed MediaWiki XML ({e}); re-download the dump.") from None
    block = "".join(line + "\n" for line in articles).encode("utf-8")
    return block, len(articles), counts, end - start


def _starting_in(items, window):
    """The (path, start, ...) items whose start lies in window = [lo, hi); all when window is None.
    The items come in order of their start, so reading them stops at hi."""
    if window is None:
        yield from items
        return
    lo, hi = window
    with contextlib.closing(items):
        for item in items:
            if item[1] >= hi:
                return
            if item[1] >= lo:
                yield item


def _multistream_blocks(path, index, stats, progress, n_processes, window=None):
    """The articles of a multistream dump as (block, documents), streams decompressed, parsed,
    cleaned and encoded by `n_processes` workers, yielded in stream order: the output does not
    depend on the count. With `window`, only the streams that start in it."""
    ranges = _starting_in(_stream_ranges(path, index), window)
    results = bounded_imap(_format_stream, ranges, n_processes, chunk=STREAMS_PER_TASK)
    with contextlib.closing(results):
        for block, documents, counts, compressed in results:
            for key, value in counts.items():
                stats[key] += value
            if progress is not None:
                progress.update(compressed)
            if documents:
                yield block, documents


def _decoded_lines(path, stats, progress):
    """Stripped lines of a plain or compressed text file, invalid UTF-8 replaced and counted."""
    stream, raw = open_input(path)
    decoder = Utf8Decoder()
    last = 0
    try:
        for line in stream:
            if progress is not None and raw.bytes_read != last:
                progress.update(raw.bytes_read - last)
                last = raw.bytes_read
            yield decoder.decode(line).strip()
    except (EOFError, OSError) as e:
        raise UserError(f"Reading {path} failed ({e}); is the compressed file complete?") from None
    finally:
        stats["invalid_utf8_sequences"] += decoder.invalid
        stream.close()
        raw.close()


def _text_documents(lines, stats, one_document_per_line, max_document_chars):
    """The documents of plain text given as its stripped lines (see the module docstring)."""
    current, size = [], 0
    for text in lines:
        if one_document_per_line:
            if text:
                stats["input_documents"] += 1
                yield text
            continue
        if not text:
            if current:
                stats["input_documents"] += 1
                yield " ".join(current)
                current, size = [], 0
            continue
        if size + len(text) > max_document_chars and current:
            stats["split_long_documents"] += 1
            stats["input_documents"] += 1
            yield " ".join(current)
            current, size = [], 0
        current.append(text)
        size += len(text) + 1
    if current:
        stats["input_documents"] += 1
        yield " ".join(current)


def _jsonl_documents(lines, stats, text_key):
    """The documents of JSONL given as its stripped lines."""
    for text in lines:
        if not text:
            continue
        stats["input_documents"] += 1
        try:
            record = json.loads(text)
        except ValueError:
            stats["bad_json_lines"] += 1
            continue
        value = record.get(text_key) if isinstance(record, dict) else None
        if not isinstance(value, str):
            stats["missing_text"] += 1
            continue
        yield value


def _line_documents(lines, stats, fmt, options):
    if fmt == "jsonl":
        return _jsonl_documents(lines, stats, options["text_key"])
    return _text_documents(lines, stats, options["one_document_per_line"], options["max_document_chars"])


# --- Uncompressed text and JSONL: byte ranges per worker -----------------------------------------
# A range ends where one reader would start afresh: at any line end in JSONL and in
# one-document-per-line text; after a blank line in text whose documents are separated by blank
# lines (a long document is cut by its running size, which only a blank line resets). When no blank
# line comes within SEARCH_BYTES after a range's target end, the writing process reads the rest of
# the file itself, as one reader: a range never grows without bound.
RANGE_BYTES = 4 << 20
SEARCH_BYTES = 16 << 20


def _line_ranges(path: str, fmt: str, options: dict):
    """(path, start, end, fmt, options) ranges of about RANGE_BYTES that tile `path`; an end of
    None is the rest of the file, for the writing process to read."""
    size = os.path.getsize(path)
    each_line = fmt == "jsonl" or options["one_document_per_line"]
    start = 0
    with open(path, "rb") as f:
        while start < size:
            if start + RANGE_BYTES >= size:
                yield path, start, size, fmt, options
                return
            f.seek(start + RANGE_BYTES)
            f.readline()  # the rest of the line the target falls in
            while not each_line:
                line = f.readline()
                if not line or not line.decode("utf-8", "replace").strip():
                    break
                if f.tell() - start > RANGE_BYTES + SEARCH_BYTES:
                    yield path, start, None, fmt, options
                    return
            end = f.tell()
            yield path, start, end, fmt, options
            start = end


def _range_lines(f, size_limit, decoder):
    """Stripped, decoded lines of the binary file `f` from where it stands, `size_limit` bytes
    (None: to the end)."""
    left = size_limit
    while left is None or left > 0:
        line = f.readline()
        if not line:
            return
        if left is not None:
            left -= len(line)
        yield decoder.decode(line).strip()


def _range_documents(f, size_limit, decoder, counts, fmt, options):
    """The final lines of the documents read from `f` as _range_lines gives them; empty ones counted."""
    for document in _line_documents(_range_lines(f, size_limit, decoder), counts, fmt, options):
        line = _final_line(document)
        if line is None:
            counts["empty_documents"] += 1
        else:
            yield line


def _format_range(item):
    """(the final lines of the documents in bytes [start, end) of an uncompressed text or JSONL
    file, the stage's counts, start, end); lines None for the rest of the file, left to the
    writing process."""
    global _stream_decoder
    path, start, end, fmt, options = item
    if end is None:
        return None, {}, start, None
    if _stream_decoder is None:
        _stream_decoder = Utf8Decoder()
    invalid = _stream_decoder.invalid
    counts = collections.Counter()
    with open(path, "rb") as f:
        f.seek(start)
        finals = list(_range_documents(f, end - start, _stream_decoder, counts, fmt, options))
    counts["invalid_utf8_sequences"] += _stream_decoder.invalid - invalid
    return finals, dict(counts), start, end


def _ranged_documents(path, stats, progress, n_processes, fmt, options, window=None):
    """The final lines of an uncompressed text or JSONL file, ranges formatted by `n_processes`
    workers and yielded in file order: the same lines one reader gives. With `window`, only the
    ranges that start in it."""
    ranges = _starting_in(_line_ranges(path, fmt, options), window)
    results = bounded_imap(_format_range, ranges, n_processes, chunk=1)
    with contextlib.closing(results):
        for lines, counts, start, end in results:
            if lines is None:  # no blank line for too long: the rest, read here as one reader
                decoder = Utf8Decoder()
                with open(path, "rb") as f:
                    f.seek(start)
                    yield from _range_documents(f, None, decoder, stats, fmt, options)
                stats["invalid_utf8_sequences"] += decoder.invalid
                if progress is not None:
                    progress.update(os.path.getsize(path) - start)
                return
            for key, value in counts.items():
                stats[key] += value
            if progress is not None:
                progress.update(end - start)
            yield from lines


def iter_documents(path: str, stats: dict, **options):
    """Yields each document of `path` as one clean line (no newline); skips and counts into
    `stats` (a Counter-like dict). `options` are document_blocks'."""
    for block, _ in document_blocks(path, stats, **options):
        yield from block.decode("utf-8").split("\n")[:-1]


def document_blocks(
    path: str,
    stats: dict,
    *,
    input_format: str = "auto",
    progress=None,
    n_processes: int = 1,
    text_key: str = "text",
    one_document_per_line: bool = False,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    log=None,
    window: tuple[int, int] | None = None,
):
    """Yields (UTF-8 bytes, n): n documents of `path`, each one clean line ending in a newline, in
    order; skips and counts into `stats` (a Counter-like dict).

    A Wikipedia multistream dump (`X.xml.bz2` with its index `X-index.txt.bz2` beside it) is
    decompressed, parsed and cleaned by `n_processes` workers, whole streams each; any other
    dump is read by one process (`log` says so once when more were asked for). Uncompressed
    text and JSONL go to the workers in byte ranges. The lines and counts
    do not depend on `n_processes`.

    `window` = [lo, hi) (bytes of `path`; lo may be negative) keeps the units of work that start
    in it: the streams of a multistream dump, the ranges of uncompressed text and JSONL, the whole
    file (which starts at 0) otherwise. Windows that tile the file give, in order, its documents
    and counts: how MPI ranks share the inputs.
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    fmt = corpus_format(path) if input_format == "auto" else input_format
    index = wikipedia.multistream_index_path(path)
    if fmt == "wikipedia" and path.lower().endswith(".bz2") and os.path.isfile(index):
        # The workers make the final lines too: the one process that writes them does no more.
        yield from _multistream_blocks(path, index, stats, progress, n_processes, window)
        return
    options = {
        "text_key": text_key,
        "one_document_per_line": one_document_per_line,
        "max_document_chars": max_document_chars,
    }
    if fmt not in ("wikipedia", "jsonl", "text"):
        raise UserError(f"Unknown --input_format {input_format!r}; choose from {', '.join(INPUT_FORMATS)}.")
    compressed = any(path.lower().endswith(ext) for ext in _COMPRESSED)
    shared = n_processes > 1 or window is not None
    if fmt != "wikipedia" and shared and not compressed and os.path.getsize(path) > RANGE_BYTES:
        for line in _ranged_documents(path, stats, progress, n_processes, fmt, options, window):
            yield (line + "\n").encode("utf-8"), 1
        return
    if window is not None and not window[0] <= 0 < window[1]:
        return  # read whole, by the rank whose window holds its start
    lines = None
    if fmt == "wikipedia":
        documents = _wiki_documents(path, stats, progress, n_processes, log)
    else:
        lines = _decoded_lines(path, stats, progress)
        documents = _line_documents(lines, stats, fmt, options)
    try:
        for document in documents:
            line = _final_line(document)
            if line is None:
                stats["empty_documents"] += 1
                continue
            yield (line + "\n").encode("utf-8"), 1
    finally:
        documents.close()
        if lines is not None:
            lines.close()


def _final_line(document: str) -> str | None:
    """The document on one line, or None when it holds no letter or digit (an empty document)."""
    line = _one_line(document)
    return line if any(ch.isalnum() for ch in line) else None


STAT_KEYS = (
    "input_documents",
    "documents",
    "redirect",
    "disambiguation",
    "other_namespace",
    "empty_documents",
    "bad_json_lines",
    "missing_text",
    "split_long_documents",
    "invalid_utf8_sequences",
    "bytes_in",
    "bytes_out",
)


def format_corpus(
    inputs: list[str],
    output_file: str,
    *,
    input_format: str = "auto",
    text_key: str = "text",
    one_document_per_line: bool = False,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    runtime: Runtime | None = None,
    **runtime_fields,
) -> dict:
    """Formats `inputs` into `output_file` (one document per line); restartable via the manifest.

    `runtime` (data.stage.Runtime; its fields may be given alone, e.g. `n_processes=2`) says how:
    under MPI (its `comm`; None for one process) rank r formats the units of work (streams,
    ranges, whole files) that start in its r-th of the inputs' bytes, with its `n_processes`
    workers, into a part file; rank 0 then concatenates the parts in rank order, so the output is
    byte for byte the one-process output. Returns the stage stats (see STAT_KEYS, plus seconds,
    and skipped=True when a verified output from an identical earlier run was kept), the same on
    every rank.
    """
    runtime = Runtime.of(runtime, **runtime_fields)
    log = runtime.log
    if not inputs:
        raise UserError("No input files given; pass --input_files (or download the dataset first).")
    for path in inputs:
        if not os.path.isfile(path):
            raise UserError(
                f"Input file {path!r} does not exist; check --input_files or run the download action first."
            )
    if input_format not in INPUT_FORMATS:
        raise UserError(f"Unknown --input_format {input_format!r}; choose from {', '.join(INPUT_FORMATS)}.")
    directory = os.path.dirname(os.path.abspath(output_file))
    ensure_writable_dir(directory)
    params = {
        "inputs": [input_identity(p) for p in inputs],
        "input_format": input_format,
        "text_key": text_key,
        "one_document_per_line": one_document_per_line,
        "max_document_chars": max_document_chars,
        "version": FORMAT_VERSION,
    }
    stage = Stage(directory, "text_formatting", params, runtime)
    name = os.path.basename(output_file)
    options = {
        "input_format": input_format,
        "n_processes": runtime.n_processes,
        "text_key": text_key,
        "one_document_per_line": one_document_per_line,
        "max_document_chars": max_document_chars,
        "log": log,
    }
    start = time.monotonic()

    def work(run):
        ranks = run.ranks
        total = sum(os.path.getsize(p) for p in inputs)
        lo, hi = ranks.window(total)
        progress = None
        if runtime.progress_factory and ranks.rank == 0:
            progress = runtime.progress_factory("text_formatting", hi - lo)
        part = output_file if ranks.world == 1 else os.path.join(directory, f"{name}.rank{ranks.rank}")
        part = temporary_name(part)
        with reported(ranks, "formatting its share of the inputs"):
            stats = _format_share(inputs, part, None if ranks.world == 1 else (lo, hi), progress, options)
        if progress is not None:
            progress.close()
        shares = ranks.allgather((stats, part), "after formatting its share of the inputs")
        stats = {key: sum(share[key] for share, _ in shares) for key in STAT_KEYS}
        stats["bytes_in"] = total
        if stats["documents"] == 0:
            os.remove(part)
            raise UserError(
                f"No documents left after formatting {', '.join(inputs)} "
                f"({stats['input_documents']} read, {stats['empty_documents']} empty); check the "
                f"input format (--input_format, --text_key)."
            )
        with reported(ranks, f"while rank 0 wrote {output_file}"):
            if ranks.rank == 0:
                _concatenate([p for _, p in shares], output_file)
                stats["seconds"] = round(time.monotonic() - start, 3)
                stage.land({name: stats})

    run = stage.run_on_ranks([name], work)
    if run.skipped:
        if run.ranks.rank == 0:
            log(f"[text_formatting] {output_file} is complete and verified; skipped.")
        return {**stage.manifest.counts(name), **run.layout, "skipped": True}
    return {**stage.manifest.counts(name), **run.layout, "seconds": round(time.monotonic() - start, 3)}


def _format_share(inputs, part, window, progress, options) -> dict:
    """Formats the units of `inputs` that start in `window` (bytes of the inputs one after the
    other; None: all) into the file `part`; returns the counts (STAT_KEYS). `part` is removed
    after an error."""
    stats = dict.fromkeys(STAT_KEYS, 0)
    base = 0
    try:
        with open(part, "wb") as out:
            for path in inputs:
                size = os.path.getsize(path)
                local = None if window is None else (window[0] - base, window[1] - base)
                base += size
                if local is not None and (local[1] <= 0 or local[0] >= max(size, 1)):
                    continue  # no unit of this file starts in the window
                for block, documents in document_blocks(
                    path, stats, progress=progress, window=local, **options
                ):
                    out.write(block)
                    stats["documents"] += documents
                    stats["bytes_out"] += len(block)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)
        raise
    return stats


def _concatenate(parts: list[str], output_file: str) -> None:
    """The parts, in order, become `output_file` (one part is renamed); the parts are removed."""
    if len(parts) == 1:
        commit(parts[0], output_file)
        return
    with atomic_path(output_file) as temporary:
        with open(temporary, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    _copy(f, out)
    for part in parts:
        os.remove(part)


def _copy(src, dst) -> None:
    """Copies the open file `src` to the end of `dst`, in the kernel where it can (copy_file_range:
    no bytes through this process, a reflink on file systems that share blocks)."""
    size = os.fstat(src.fileno()).st_size
    done = 0
    if hasattr(os, "copy_file_range"):
        with contextlib.suppress(OSError):
            while done < size:
                n = os.copy_file_range(src.fileno(), dst.fileno(), size - done)
                if n == 0:
                    break
                done += n
    src.seek(done)
    dst.seek(0, os.SEEK_END)
    shutil.copyfileobj(src, dst, 1 << 20)
