"""Sharding stage: formatted documents -> N training + M test shards, one sentence per line.

Output is the format Google's create_pretraining_data reads: one sentence per line, a blank
line after each document. Documents are never split across shards.

Streaming, in two passes, with memory independent of corpus size:
1. index the documents (non-empty lines): (file, offset, length) of each, 24 bytes, into an index
   file beside the shards; their number checks there are enough for the shards and picks exactly
   floor(N * fraction_test) test documents, spread evenly through the corpus (document i is a
   test document iff floor((i+1)T/N) > floor(iT/N));
2. read the index in order and assign each document to the currently smallest shard of its split
   (by input bytes; ties to the lowest index); the owner of that shard reads the document from
   the formatted file, segments it and appends its sentences through bounded write buffers. The
   final imbalance is at most one document.

The assignment depends only on the input, so a re-run that finds some shards verified
(manifest) recomputes it and segments and writes only the documents of the missing or
corrupt shards.

With n processes, the process reading the index only assigns: each worker owns a fixed set of
shards, gets (shard, file, offset, length) of their documents in order, reads them itself,
segments them and writes its own shards. No document crosses a pipe, and each shard still
receives its documents in corpus order, so the bytes do not depend on the process count.

On MPI ranks (data/ranks.py; one host or several sharing the output directory) rank r indexes
the documents that start in its r-th of the input's bytes, every rank reads all the index files
(the assignment is cheap and the same everywhere) and rank r owns every world-th shard to redo,
written by its own n processes and recorded in its manifest part; rank 0 merges the parts. The
bytes do not depend on the rank count either, and a re-run after a lost rank keeps the shards
the other ranks recorded.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import heapq
import multiprocessing
import os
import queue
import sys
import time

from common.errors import UserError
from common.files import ensure_writable_dir, temporary_name
from data import paths
from data.corpus.segmentation import split_long, split_sentences
from data.corpus.text_formatting import Utf8Decoder
from data.manifest import input_identity
from data.ranks import reported
from data.stage import Runtime, Stage

SEGMENTER_VERSION = 1
DEFAULT_MAX_SENTENCE_CHARS = 2048
DEFAULT_BUFFER_BYTES = 8 << 20


# A document's entry in the index files: (file index, byte offset, length), little-endian int64s.
_ENTRY = 3
_ENTRIES_PER_READ = 1 << 16


def _index_window(input_files, window, index_path) -> int:
    """Writes the entry of every non-empty line whose first byte lies in `window` = [lo, hi) of the
    inputs' bytes one after the other to `index_path`; returns how many. Windows that tile the
    inputs give every document once, in order."""
    lo, hi = window
    entries, count, base = array.array("q"), 0, 0
    with open(index_path, "wb") as out:
        for file_index, path in enumerate(input_files):
            size = os.path.getsize(path)
            begin, end = max(lo - base, 0), min(hi - base, size)
            base += size
            if begin >= end:
                continue
            with open(path, "rb") as f:
                offset = begin
                if begin > 0:  # the line that starts in the window before: not this window's
                    f.seek(begin - 1)
                    if f.read(1) != b"\n":
                        offset += len(f.readline())
                while offset < end:
                    line = f.readline()
                    if not line:
                        break
                    if not line.isspace():
                        entries.extend((file_index, offset, len(line)))
                    offset += len(line)
                    if len(entries) >= _ENTRY * _ENTRIES_PER_READ:
                        count += _write_entries(out, entries)
        count += _write_entries(out, entries)
    return count


def _write_entries(out, entries) -> int:
    if sys.byteorder != "little":
        entries.byteswap()
    out.write(entries.tobytes())
    n = len(entries) // _ENTRY
    del entries[:]
    return n


def _indexed_documents(index_paths):
    """(file index, offset, length) of every document, from the index files in order."""
    for index_path in index_paths:
        with open(index_path, "rb") as f:
            while chunk := f.read(8 * _ENTRY * _ENTRIES_PER_READ):
                entries = array.array("q", chunk)
                if sys.byteorder != "little":
                    entries.byteswap()
                for i in range(0, len(entries), _ENTRY):
                    yield entries[i], entries[i + 1], entries[i + 2]


_decoder = None  # one per process: codecs keeps every registered error handler forever


def _process_decoder() -> Utf8Decoder:
    global _decoder
    if _decoder is None:
        _decoder = Utf8Decoder()
    return _decoder


class _ShardWriters:
    """Appends bytes to shard temp files through buffers bounded by `limit` bytes in total,
    hashing what it writes (the manifest's sha256 without reading the shards back)."""

    def __init__(self, targets: dict, limit: int):
        self.targets = targets  # key -> tmp path
        self.buffers = {key: [] for key in targets}
        self.hashes = {key: hashlib.sha256() for key in targets}
        self.buffered = 0
        self.limit = limit
        for path in targets.values():
            open(path, "wb").close()

    def write(self, key, block: bytes):
        self.buffers[key].append(block)
        self.buffered += len(block)
        if self.buffered >= self.limit:
            self.flush()

    def flush(self):
        for key, parts in self.buffers.items():
            if parts:
                with open(self.targets[key], "ab") as f:
                    f.writelines(parts)
                digest = self.hashes[key]
                for part in parts:
                    digest.update(part)
                parts.clear()
        self.buffered = 0

    def finish(self) -> dict:
        """Writes what is buffered and syncs every file to disk; returns key -> sha256."""
        self.flush()
        for path in self.targets.values():
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        return {key: digest.hexdigest() for key, digest in self.hashes.items()}


class _Segmenter:
    """Reads documents, splits them into sentences and appends them to their shards' temporary
    files, in the order they come: the stage's work after the assignment, in whichever process
    owns the shards.

    The reading, decoding and encoding happen here, so the process that assigns only moves offsets.
    """

    def __init__(self, input_files, targets: dict, max_chars: int, buffer_bytes: int):
        self.input_files = input_files
        self.files = [open(path, "rb") for path in input_files]
        self.writers = _ShardWriters(targets, buffer_bytes)
        self.max_chars = max_chars
        self.decoder = _process_decoder()
        self.invalid_at_start = self.decoder.invalid
        self.stats = {key: dict.fromkeys(_SEGMENT_STATS, 0) for key in targets}

    def add(self, key, file_index, offset, length: int):
        """One document: the `length` bytes at `offset` of input `file_index`."""
        raw = os.pread(self.files[file_index].fileno(), length, offset)
        if len(raw) != length:
            raise UserError(f"{self.input_files[file_index]} changed while it was being sharded; run again.")
        self.segment(key, raw)

    def segment(self, key, raw: bytes):
        sentences, cut = [], 0
        for sentence in split_sentences(self.decoder.decode(raw).strip()):
            pieces = split_long(sentence, self.max_chars)
            cut += len(pieces) > 1
            sentences.extend(pieces)
        stats = self.stats[key]
        stats["sentences"] += len(sentences)
        stats["one_sentence_documents"] += len(sentences) == 1
        stats["long_sentences_split"] += cut
        self.writers.write(key, ("\n".join(sentences) + "\n\n").encode("utf-8"))

    def finish(self) -> list:
        """Writes what is buffered and syncs it; returns [(shard -> counts, invalid UTF-8 sequences
        replaced, shard -> sha256)]."""
        digests = self.writers.finish()
        self.stop()
        return [(self.stats, self.decoder.invalid - self.invalid_at_start, digests)]

    def stop(self):
        for f in self.files:
            f.close()


_SEGMENT_STATS = ("sentences", "one_sentence_documents", "long_sentences_split")
# Documents per message to a worker: a message is a list of small tuples, a few KB.
_BATCH = 512


def _segment_worker(input_files, targets, max_chars, buffer_bytes, tasks, results):
    """A worker process: segments the documents `tasks` names (lists of (shard, file index,
    offset, length), then None) into its own shards `targets`; puts ("done", stats, invalid,
    digests) or ("error", user error?, message) on `results`."""
    try:
        segmenter = _Segmenter(input_files, targets, max_chars, buffer_bytes)
        while (batch := tasks.get()) is not None:
            for key, file_index, offset, length in batch:
                segmenter.add(key, file_index, offset, length)
        results.put(("done", *segmenter.finish()[0]))
    except UserError as e:
        results.put(("error", True, str(e)))
    except BaseException as e:  # noqa: BLE001  (the parent raises it with the worker's words)
        results.put(("error", False, f"{type(e).__name__}: {e}"))


class _Workers:
    """`n` worker processes, each owning every n-th shard to redo; documents go to their shard's
    owner in order through a bounded queue, so memory does not follow the corpus."""

    def __init__(self, n, input_files, targets, max_chars, buffer_bytes):
        ctx = multiprocessing.get_context("spawn")
        self.owner = {key: i % n for i, key in enumerate(sorted(targets))}
        self.tasks = [ctx.Queue(maxsize=8) for _ in range(n)]
        self.results = ctx.Queue()
        self.batches = [[] for _ in range(n)]
        self.processes = []
        for w in range(n):
            own = {key: path for key, path in targets.items() if self.owner[key] == w}
            process = ctx.Process(
                target=_segment_worker,
                args=(input_files, own, max_chars, buffer_bytes, self.tasks[w], self.results),
                daemon=True,
            )
            process.start()
            self.processes.append(process)
        self.done = []

    def add(self, key, file_index, offset, length: int):
        """One document: its owner reads it from the file itself."""
        w = self.owner[key]
        self.batches[w].append((key, file_index, offset, length))
        if len(self.batches[w]) >= _BATCH:
            self._send(w, self.batches[w])
            self.batches[w] = []

    def _send(self, w, message):
        while True:
            try:
                self.tasks[w].put(message, timeout=0.5)
                return
            except queue.Full:
                self._check()

    def _take(self, result):
        if result[0] == "error":
            _, user_error, message = result
            raise UserError(message) if user_error else RuntimeError(f"A sharding worker failed: {message}")
        self.done.append(result)

    def _check(self):
        """Raises the error a worker reported, or names a worker that died without one."""
        while True:
            try:
                self._take(self.results.get_nowait())
            except queue.Empty:
                break
        for w, process in enumerate(self.processes):
            if process.exitcode not in (None, 0):
                raise RuntimeError(
                    f"Sharding worker {w} died (exit code {process.exitcode}) before it finished its "
                    f"shards; nothing was published: run the stage again."
                )

    def finish(self) -> list:
        """Sends what is left and the end; returns each worker's (stats, invalid, digests)."""
        for w, batch in enumerate(self.batches):
            if batch:
                self._send(w, batch)
            self._send(w, None)
        while len(self.done) < len(self.processes):
            try:
                self._take(self.results.get(timeout=0.5))
            except queue.Empty:
                self._check()
        for process in self.processes:
            process.join()
        return [result[1:] for result in self.done]

    def stop(self):
        """Ends the workers after an error; what is still queued for them is dropped (a feeder
        thread writing to a dead worker's full pipe would otherwise hold this process at exit)."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join()
        for tasks in self.tasks:
            tasks.cancel_join_thread()


def shard_corpus(
    input_files: list[str],
    output_dir: str,
    dataset: str,
    *,
    n_training_shards: int,
    n_test_shards: int,
    fraction_test: float,
    max_sentence_chars: int = DEFAULT_MAX_SENTENCE_CHARS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    runtime: Runtime | None = None,
    **runtime_fields,
) -> dict:
    """Writes <output_dir>/{training,test}/<dataset>_{split}_<i>.txt; returns the stage stats (the
    same on every rank).

    `runtime` (data.stage.Runtime; its fields may be given alone, e.g. `n_processes=2`) says how:
    under MPI (its `comm`; None for one process) every rank indexes its share of the input's
    bytes, assigns every document from the index files, and segments and writes every world-th
    shard to redo with its `n_processes` workers: the bytes of any one process. Raises UserError
    when the shard counts or the test fraction do not fit the corpus.
    """
    runtime = Runtime.of(runtime, **runtime_fields)
    log = runtime.log
    if n_training_shards < 1:
        raise UserError(f"--n_training_shards must be at least 1 (got {n_training_shards}).")
    if n_test_shards < 0 or not 0.0 <= fraction_test < 1.0:
        raise UserError(
            f"--fraction_test_set must be in [0, 1) and --n_test_shards >= 0 (got "
            f"{fraction_test} and {n_test_shards})."
        )
    if (fraction_test > 0) != (n_test_shards > 0):
        raise UserError(
            f"--fraction_test_set {fraction_test} with --n_test_shards {n_test_shards}: use "
            f"both (a test set) or neither (0 and 0)."
        )
    if max_sentence_chars < 16:
        raise UserError(f"--max_sentence_chars must be at least 16 (got {max_sentence_chars}).")
    for path in input_files:
        if not os.path.isfile(path):
            raise UserError(f"Formatted input {path!r} does not exist; run --action text_formatting first.")
    ensure_writable_dir(output_dir)

    params = {
        "inputs": [input_identity(p) for p in input_files],
        "n_training_shards": n_training_shards,
        "n_test_shards": n_test_shards,
        "fraction_test": fraction_test,
        "max_sentence_chars": max_sentence_chars,
        "segmenter_version": SEGMENTER_VERSION,
    }
    shards = {("training", i): paths.shard_name(dataset, "training", i) for i in range(n_training_shards)}
    shards.update({("test", i): paths.shard_name(dataset, "test", i) for i in range(n_test_shards)})
    relpaths = {key: f"{key[0]}/{name}" for key, name in shards.items()}
    settings = {
        "n_training_shards": n_training_shards,
        "n_test_shards": n_test_shards,
        "fraction_test": fraction_test,
        "n_processes": runtime.n_processes,
        "max_sentence_chars": max_sentence_chars,
        "buffer_bytes": buffer_bytes,
    }
    stage = Stage(output_dir, "sharding", params, runtime)
    start = time.monotonic()

    def work(run):
        ranks = run.ranks
        if len(run.todo) < len(relpaths) and ranks.rank == 0:
            log(f"[sharding] {len(relpaths) - len(run.todo)} shards verified; redoing {len(run.todo)}.")
        redo = set(run.todo)
        todo = sorted(key for key, rel in relpaths.items() if rel in redo)
        index_path = temporary_name(os.path.join(output_dir, f"documents.rank{ranks.rank}"))
        try:
            with reported(ranks, "indexing its share of the documents"):
                mine = _index_window(
                    input_files, ranks.window(sum(map(os.path.getsize, input_files))), index_path
                )
            indexes = ranks.allgather((mine, index_path), "after indexing its share of the documents")
            n_documents = sum(count for count, _ in indexes)
            _check_counts(n_documents, settings)
            progress = None
            if runtime.progress_factory and ranks.rank == 0:
                progress = runtime.progress_factory("sharding", sum(map(os.path.getsize, input_files)))
            with reported(ranks, "writing its shards"):
                owned = todo[ranks.rank :: ranks.world]
                result = _write_shards(
                    stage,
                    input_files,
                    [p for _, p in indexes],
                    n_documents,
                    relpaths,
                    owned,
                    settings,
                    progress,
                )
            if progress is not None:
                progress.close()
            invalid = sum(ranks.allgather(result.pop("invalid_utf8_sequences"), "after writing its shards"))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(index_path)
        return {**result, "invalid_utf8_sequences": invalid}  # in the documents this run wrote

    run = stage.run_on_ranks(relpaths.values(), work, folders=("", *paths.SPLITS))
    figures = {**stage.manifest.totals(relpaths.values()), "shards": len(relpaths), "redone": len(run.todo)}
    if run.skipped:
        if run.ranks.rank == 0:
            log(f"[sharding] all {len(relpaths)} shards in {output_dir} are complete and verified; skipped.")
        return {**figures, **run.layout, "skipped": True}
    return {**figures, **run.result, **run.layout, "seconds": round(time.monotonic() - start, 3)}


def _check_counts(n_documents, settings) -> None:
    n_test_docs = int(n_documents * settings["fraction_test"])
    if n_documents - n_test_docs < settings["n_training_shards"]:
        raise UserError(
            f"The corpus has {n_documents} documents ({n_documents - n_test_docs} for training), "
            f"fewer than --n_training_shards {settings['n_training_shards']}; use fewer shards or more data."
        )
    if n_test_docs < settings["n_test_shards"]:
        raise UserError(
            f"Only {n_test_docs} of {n_documents} documents go to the test set "
            f"(--fraction_test_set {settings['fraction_test']}), fewer than --n_test_shards "
            f"{settings['n_test_shards']}; lower --n_test_shards or raise --fraction_test_set."
        )


def _write_shards(stage, input_files, index_paths, n_documents, relpaths, owned, settings, progress) -> dict:
    """Assigns every document of the index files (in order, the same on every rank) and segments
    those of the `owned` shards into them with the rank's workers; lands the owned shards in the
    stage's manifest (part). Returns the assignment's figures."""
    n_test_docs = int(n_documents * settings["fraction_test"])
    heaps = {
        "training": [(0, i) for i in range(settings["n_training_shards"])],
        "test": [(0, i) for i in range(settings["n_test_shards"])],
    }
    shard_stats = {key: dict.fromkeys(("documents", *_SEGMENT_STATS, "input_bytes"), 0) for key in relpaths}
    for split in paths.SPLITS:
        os.makedirs(os.path.join(stage.directory, split), exist_ok=True)
    owned = set(owned)
    n_workers = min(settings["n_processes"], len(owned))
    owners = None
    digests = {}
    invalid_utf8 = 0
    max_chars, buffer_bytes = settings["max_sentence_chars"], settings["buffer_bytes"]
    with stage.writing([relpaths[key] for key in sorted(owned)]) as temporaries:
        targets = {key: temporaries[relpaths[key]] for key in owned}
        try:
            if n_workers > 1:
                owners = _Workers(n_workers, input_files, targets, max_chars, buffer_bytes)
            else:
                owners = _Segmenter(input_files, targets, max_chars, buffer_bytes)
            for index, (file_index, offset, size) in enumerate(_indexed_documents(index_paths)):
                is_test = (index + 1) * n_test_docs // n_documents > index * n_test_docs // n_documents
                heap = heaps["test" if is_test else "training"]
                load, shard = heapq.heappop(heap)
                heapq.heappush(heap, (load + size, shard))
                key = ("test" if is_test else "training", shard)
                shard_stats[key]["documents"] += 1
                shard_stats[key]["input_bytes"] += size
                if progress is not None:
                    progress.update(size)
                if key in owned:
                    owners.add(key, file_index, offset, size)
            for stats, invalid, shard_digests in owners.finish():
                invalid_utf8 += invalid
                digests.update({relpaths[key]: digest for key, digest in shard_digests.items()})
                for key, counts in stats.items():
                    shard_stats[key].update(counts)
        except BaseException:
            if owners is not None:
                owners.stop()
            raise
    stage.land({relpaths[key]: shard_stats[key] for key in sorted(owned)}, sha256=digests)
    loads = sorted(size for size, _ in heaps["training"])
    return {
        "training_documents": n_documents - n_test_docs,
        "test_documents": n_test_docs,
        "training_shard_bytes_min": loads[0],
        "training_shard_bytes_max": loads[-1],
        "invalid_utf8_sequences": invalid_utf8,
    }
