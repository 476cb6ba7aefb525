"""Sharding stage: formatted documents -> N training + M test shards, one sentence per line.

Output is the format Google's create_pretraining_data reads: one sentence per line, a blank
line after each document. Documents are never split across shards.

Streaming, in two passes over the formatted input, with memory independent of corpus size:
1. count the documents (non-empty lines), to check there are enough for the shards and to pick
   exactly floor(N * fraction_test) test documents, spread evenly through the corpus
   (document i is a test document iff floor((i+1)T/N) > floor(iT/N));
2. assign each document, as it arrives, to the currently smallest shard of its split (by input
   bytes; ties to the lowest index) and append its segmented sentences to that shard through
   bounded write buffers. The final imbalance is at most one document.

The assignment depends only on the input, so a re-run that finds some shards verified
(manifest) recomputes it and segments and writes only the documents of the missing or
corrupt shards.
"""

from __future__ import annotations

import heapq
import os
import sys
import time

from common.errors import UserError
from common.files import commit, ensure_writable_dir, remove_stale_temporaries, temporary_name
from data import paths
from data.corpus.parallel import bounded_imap
from data.corpus.segmentation import split_long, split_sentences
from data.corpus.text_formatting import Utf8Decoder
from data.manifest import Manifest, input_identity

SEGMENTER_VERSION = 1
DEFAULT_MAX_SENTENCE_CHARS = 2048
DEFAULT_BUFFER_BYTES = 8 << 20


def _count_documents(input_files) -> int:
    count = 0
    for path in input_files:
        with open(path, "rb") as f:
            for line in f:
                if not line.isspace():
                    count += 1
    return count


def _iter_documents(input_files):
    """Yields every non-empty line of the formatted inputs, as bytes."""
    for path in input_files:
        with open(path, "rb") as f:
            for line in f:
                if not line.isspace():
                    yield line


_decoder = None  # one per process: codecs keeps every registered error handler forever


def segment_document(args):
    """(key, document line as bytes, max_chars) -> (key, shard block as UTF-8 bytes, sentences,
    long sentences cut, invalid UTF-8 sequences replaced).

    The worker decodes and encodes: the one process that reads and writes in order then only
    moves bytes (pickled bytes are copied, pickled text is re-encoded both ways).
    """
    global _decoder
    key, raw, max_chars = args
    if _decoder is None:
        _decoder = Utf8Decoder()
    invalid = _decoder.invalid
    sentences, cut = [], 0
    for sentence in split_sentences(_decoder.decode(raw).strip()):
        pieces = split_long(sentence, max_chars)
        cut += len(pieces) > 1
        sentences.extend(pieces)
    block = ("\n".join(sentences) + "\n\n").encode("utf-8")
    return key, block, len(sentences), cut, _decoder.invalid - invalid


class _ShardWriters:
    """Appends bytes to shard temp files through buffers bounded by `limit` bytes in total."""

    def __init__(self, targets: dict, limit: int):
        self.targets = targets  # key -> tmp path
        self.buffers = {key: [] for key in targets}
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
                parts.clear()
        self.buffered = 0


def shard_corpus(
    input_files: list[str],
    output_dir: str,
    dataset: str,
    *,
    n_training_shards: int,
    n_test_shards: int,
    fraction_test: float,
    n_processes: int = 1,
    max_sentence_chars: int = DEFAULT_MAX_SENTENCE_CHARS,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    progress_factory=None,
    verify: str = "sha256",
    log=None,
) -> dict:
    """Writes <output_dir>/{training,test}/<dataset>_{split}_<i>.txt; returns the stage stats.

    Raises UserError when the shard counts or the test fraction do not fit the corpus.
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
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
    manifest = Manifest.load(output_dir, "sharding", params)
    shards = {("training", i): paths.shard_name(dataset, "training", i) for i in range(n_training_shards)}
    shards.update({("test", i): paths.shard_name(dataset, "test", i) for i in range(n_test_shards)})
    relpaths = {key: f"{key[0]}/{name}" for key, name in shards.items()}
    todo = {key for key, rel in relpaths.items() if not manifest.verified(rel, verify)}
    if not todo:
        log(f"[sharding] all {len(relpaths)} shards in {output_dir} are complete and verified; skipped.")
        return {**manifest.totals(relpaths.values()), "shards": len(relpaths), "redone": 0, "skipped": True}
    if len(todo) < len(relpaths):
        log(f"[sharding] {len(relpaths) - len(todo)} shards verified; redoing {len(todo)}.")

    start = time.monotonic()
    n_documents = _count_documents(input_files)
    n_test_docs = int(n_documents * fraction_test)
    if n_documents - n_test_docs < n_training_shards:
        raise UserError(
            f"The corpus has {n_documents} documents ({n_documents - n_test_docs} for training), "
            f"fewer than --n_training_shards {n_training_shards}; use fewer shards or more data."
        )
    if n_test_docs < n_test_shards:
        raise UserError(
            f"Only {n_test_docs} of {n_documents} documents go to the test set "
            f"(--fraction_test_set {fraction_test}), fewer than --n_test_shards {n_test_shards}; "
            f"lower --n_test_shards or raise --fraction_test_set."
        )

    for split in paths.SPLITS:
        os.makedirs(os.path.join(output_dir, split), exist_ok=True)
    for split in paths.SPLITS:
        remove_stale_temporaries(os.path.join(output_dir, split))
    writers = _ShardWriters(
        {key: temporary_name(os.path.join(output_dir, relpaths[key])) for key in todo}, buffer_bytes
    )
    heaps = {
        "training": [(0, i) for i in range(n_training_shards)],
        "test": [(0, i) for i in range(n_test_shards)],
    }
    shard_stats = {
        key: {
            "documents": 0,
            "sentences": 0,
            "one_sentence_documents": 0,
            "long_sentences_split": 0,
            "input_bytes": 0,
        }
        for key in relpaths
    }
    invalid_utf8 = 0
    total_bytes = sum(os.path.getsize(p) for p in input_files)
    progress = progress_factory("sharding", total_bytes) if progress_factory else None

    def assignments():
        for index, line in enumerate(_iter_documents(input_files)):
            size = len(line)
            is_test = (index + 1) * n_test_docs // n_documents > index * n_test_docs // n_documents
            heap = heaps["test" if is_test else "training"]
            load, shard = heapq.heappop(heap)
            heapq.heappush(heap, (load + size, shard))
            key = ("test" if is_test else "training", shard)
            shard_stats[key]["documents"] += 1
            shard_stats[key]["input_bytes"] += size
            if progress is not None:
                progress.update(size)
            if key in todo:
                yield key, line, max_sentence_chars

    try:
        for key, block, n_sentences, cut, invalid in bounded_imap(
            segment_document, assignments(), n_processes, chunk=256
        ):
            invalid_utf8 += invalid
            stats = shard_stats[key]
            stats["sentences"] += n_sentences
            stats["one_sentence_documents"] += n_sentences == 1
            stats["long_sentences_split"] += cut
            writers.write(key, block)
        writers.flush()
    except BaseException:
        for path in writers.targets.values():
            if os.path.exists(path):
                os.remove(path)
        raise
    if progress is not None:
        progress.close()

    for key in sorted(todo):
        final = os.path.join(output_dir, relpaths[key])
        commit(writers.targets[key], final)
        manifest.record(relpaths[key], shard_stats[key], save=False)
    manifest.save()
    manifest.mark_complete()

    totals = manifest.totals(relpaths.values())
    loads = sorted(size for size, _ in heaps["training"])
    result = {
        **totals,
        "shards": len(relpaths),
        "redone": len(todo),
        "training_documents": n_documents - n_test_docs,
        "test_documents": n_test_docs,
        "training_shard_bytes_min": loads[0],
        "training_shard_bytes_max": loads[-1],
        "invalid_utf8_sequences": invalid_utf8,  # in the documents this run wrote
        "seconds": round(time.monotonic() - start, 3),
    }
    return result
