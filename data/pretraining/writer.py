"""Pretraining TFRecords from text: the library behind create_pretraining_data.py (Google's drop-in).

Same input format (one sentence per line, a blank line
between documents) and same output: given the same input, vocabulary and seed, the examples
are Google's, example for example (data/pretraining/instances.py explains how). What differs:

- Speed and memory: tokenization runs in batches in the Rust tokenizer, documents live as
  one int32 array per input (not Python strings), instances as token ranges plus masks, and
  the draws and the protobuf/TFRecord writing run in C (data/pretraining/native.c). Without a
  C compiler the pure-Python modules give the same bytes, only slower.
- Safety: outputs are written under temporary names and renamed only when every file is
  complete; invalid UTF-8 is replaced and counted instead of crashing; a missing input, a
  vocabulary without BERT's special tokens or an unwritable output stops at once with one
  sentence naming it.
- The examples are serialized in protobuf's deterministic form (data/pretraining/schema.py says why).

One reference quirk is kept on purpose: documents continue across input files unless a file
ends with a blank line, exactly as the reference reads them.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from dataclasses import dataclass

import numpy as np

from common.files import commit, temporary_name
from data.pretraining import native, schema, tfrecord
from data.pretraining.instances import InstanceOptions, create_training_instances
from data.pretraining.masking import MASKED_LM_PROB, MaskingVocab, is_continuation_piece

_READ_BLOCK_BYTES = 4 << 20
_DOCS_PER_CALL = 4096  # documents per C call: progress granularity


@dataclass
class TokenizedCorpus:
    """All documents of the inputs, compactly: sentence s is tokens[sent_off[s]:sent_off[s+1]],
    document d holds sentences doc_sent[d]:doc_sent[d+1] (input order, none of them empty)."""

    tokens: np.ndarray  # int32 [T]
    sent_off: np.ndarray  # int64 [n_sentences + 1]
    doc_sent: np.ndarray  # int64 [n_documents + 1]
    invalid_utf8_lines: int

    @property
    def num_documents(self):
        return len(self.doc_sent) - 1

    @property
    def num_sentences(self):
        return len(self.sent_off) - 1

    def documents(self):
        """As nested lists of ids (the pure-Python path's input)."""
        t, so = self.tokens, self.sent_off
        return [
            [t[so[s] : so[s + 1]].tolist() for s in range(self.doc_sent[d], self.doc_sent[d + 1])]
            for d in range(self.num_documents)
        ]


def _decode_lines(block):
    """Bytes (without the final newline) -> (lines, count of lines with invalid UTF-8).

    Lines end at b"\\n" only, as TensorFlow's GFile reads them for the reference."""
    try:
        return block.decode("utf-8").split("\n"), 0
    except UnicodeDecodeError:
        lines, invalid = [], 0
        for raw in block.split(b"\n"):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                lines.append(raw.decode("utf-8", errors="replace"))
                invalid += 1
        return lines, invalid


def _tokenize_lines(lines, tokenizer):
    """Decoded lines -> (blank bool [L], token counts int64 [L], ids int32 [T]) in the
    reference's terms: a line is blank if it is empty after str.strip()."""
    stripped = [line.strip() for line in lines]
    blank = np.fromiter((not s for s in stripped), bool, len(stripped))
    texts = [s for s in stripped if s]
    ids = tokenizer.encode_batch(texts) if texts else []
    lengths = np.zeros(len(lines), np.int64)
    lengths[~blank] = np.fromiter(map(len, ids), np.int64, len(ids))
    tokens = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum()))
    return blank, lengths, tokens


def _tokenize_block_fast(block, fast, tokenizer):
    """As _tokenize_lines(_decode_lines(block)) via C, with the lines C leaves (invalid
    UTF-8, rare characters) done by `tokenizer`. Returns (blank, lengths, tokens, invalid)."""
    kind, n_tok, ids = fast.tokenize_block(block)
    blank = kind == native.LINE_BLANK
    lengths = n_tok.astype(np.int64)
    fallback = np.flatnonzero(kind == native.LINE_FALLBACK)
    if not len(fallback):
        return blank, lengths, ids, 0
    raw = block.split(b"\n")
    lines, invalid = _decode_lines(b"\n".join(raw[i] for i in fallback))
    f_blank, f_lengths, f_tokens = _tokenize_lines(lines, tokenizer)
    blank[fallback] = f_blank
    lengths[fallback] = f_lengths
    # Splice each fallback line's ids in at its place among the C lines' ids.
    starts = np.zeros(len(kind) + 1, np.int64)
    np.cumsum(n_tok, out=starts[1:])
    f_starts = np.zeros(len(fallback) + 1, np.int64)
    np.cumsum(f_lengths, out=f_starts[1:])
    pieces, previous = [], 0
    for j, line in enumerate(fallback):
        cut = starts[line]
        pieces += [ids[previous:cut], f_tokens[f_starts[j] : f_starts[j + 1]]]
        previous = cut
    pieces.append(ids[previous:])
    return blank, lengths, np.concatenate(pieces), invalid


def read_documents(input_files, tokenizer, *, progress=None, block_bytes=_READ_BLOCK_BYTES, fast=True):
    """Reads and tokenizes input files (one sentence per line, blank line between documents).

    As the reference: lines are stripped; an empty line starts a new document; a line with no
    tokens is skipped; documents without sentences are dropped. A WordPiece tokenizer runs in
    C where the native helper builds (`fast`), with identical results. `progress(n)` is called
    with the input bytes read. Returns a TokenizedCorpus.
    """
    lib = native.load(required=False) if fast else None
    fast_wordpiece = native.FastWordPiece.for_tokenizer(lib, tokenizer) if lib else None
    token_parts, length_parts, key_parts = [], [], []
    blank_lines = 0  # every sentence is keyed by the number of blank lines before it
    invalid = 0

    def add(block):
        nonlocal blank_lines, invalid
        if fast_wordpiece is not None:
            blank, lengths, tokens, bad = _tokenize_block_fast(block, fast_wordpiece, tokenizer)
        else:
            lines, bad = _decode_lines(block)
            blank, lengths, tokens = _tokenize_lines(lines, tokenizer)
        invalid += bad
        keys = (np.cumsum(blank) + blank_lines)[~blank]
        blank_lines += int(blank.sum())
        lengths = lengths[~blank]
        keep = lengths > 0
        token_parts.append(tokens)
        length_parts.append(lengths[keep])
        key_parts.append(keys[keep])

    for path in input_files:
        with open(path, "rb") as f:
            carry = b""
            while True:
                chunk = f.read(block_bytes)
                if not chunk:
                    break
                if progress is not None:
                    progress(len(chunk))
                block = carry + chunk
                cut = block.rfind(b"\n")
                if cut < 0:
                    carry = block
                    continue
                carry = block[cut + 1 :]
                add(block[:cut])
            if carry:
                add(carry)

    tokens = np.concatenate(token_parts) if token_parts else np.zeros(0, np.int32)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    keys = np.concatenate(key_parts) if key_parts else np.zeros(0, np.int64)
    sent_off = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=sent_off[1:])
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, np.int64)
    doc_sent = np.r_[starts, len(lengths)].astype(np.int64)
    return TokenizedCorpus(tokens, sent_off, doc_sent, invalid)


def _open_outputs(output_files):
    """Opens every output under a temporary name in its final directory (so a missing or
    read-only directory fails before any work); returns [(final, temporary, writer)]."""
    if not output_files:
        raise ValueError("No output file given.")
    if len(set(map(os.path.abspath, output_files))) != len(output_files):
        raise ValueError(f"Output files are listed more than once: {output_files}.")
    opened = []
    try:
        for path in output_files:
            directory = os.path.dirname(os.path.abspath(path))
            if os.path.isdir(path):
                raise OSError(f"Cannot write the output file {path!r}: it is a directory.")
            try:
                os.makedirs(directory, exist_ok=True)
                temporary = temporary_name(path)
                opened.append((path, temporary, tfrecord.RecordWriter(temporary)))
            except OSError as e:
                raise OSError(
                    f"Cannot write the output file {path!r}: {e.strerror or e} (check that "
                    f"{directory!r} exists and is writable)."
                ) from e
    except BaseException:
        _discard(opened)
        raise
    return opened


def _discard(opened):
    for _, temporary, writer in opened:
        writer.close()
        try:
            os.remove(temporary)
        except OSError:
            pass


def _continuation_table(vocab) -> np.ndarray:
    """uint8 [largest id + 1]: 1 where the token is a "##" piece."""
    continuation = np.zeros(max(vocab.values()) + 1, np.uint8)
    for token, index in vocab.items():
        if is_continuation_piece(token):
            continuation[index] = 1
    return continuation


def _native_instances(corpus, tokenizer, options, rng, log, lib):
    """Instances via C; leaves `rng` where the reference leaves it. Returns (store, order)."""
    vocab = tokenizer.vocab
    continuation = _continuation_table(vocab)
    state = native.MTState.from_random(rng)
    doc_perm = native.shuffled_indices(lib, state, corpus.num_documents)  # rng.shuffle(docs)
    native_corpus = native.NativeCorpus(
        corpus.tokens,
        corpus.sent_off,
        corpus.doc_sent,
        doc_perm,
        list(vocab.values()),
        continuation,
        tokenizer.cls_id,
        tokenizer.sep_id,
        tokenizer.mask_id,
        options,
    )
    # A pass makes at most one instance per sentence; the store grows as needed.
    store = native.NativeInstances(corpus.num_sentences, options.max_predictions_per_seq)
    start = time.perf_counter()
    for dupe in range(options.dupe_factor):
        for lo in range(0, corpus.num_documents, _DOCS_PER_CALL):
            native.create_instances(
                lib, state, native_corpus, lo, min(lo + _DOCS_PER_CALL, corpus.num_documents), store
            )
        elapsed = time.perf_counter() - start
        log(
            f"pass {dupe + 1}/{options.dupe_factor}: {store.count:,} instances "
            f"({store.count / max(elapsed, 1e-9):,.0f}/s)"
        )
    order = native.shuffled_indices(lib, state, store.count)  # rng.shuffle(instances)
    state.store(rng)
    return native_corpus, store, order


def _write_native(opened, native_corpus, store, order, lib, progress_bytes, layout):
    """Writes the instances round robin; returns the masked token count (0 unmasked)."""
    serializer = native.RecordSerializer(
        lib, native_corpus, native.NativeLayout(*schema.native_layout(layout))
    )
    n_out, total = len(opened), len(order)
    done = 0
    for j, (_, _, writer) in enumerate(opened):
        mine = order[j::n_out]  # round robin, as the reference's writer_index
        for lo in range(0, len(mine), serializer.batch):
            part = mine[lo : lo + serializer.batch]
            writer.write_framed(serializer.serialize(store, part))
            done += len(part)
            progress_bytes(done / max(total, 1))
    if layout.masking == schema.DYNAMIC:
        return 0
    return int(store.n_masked[: store.count].sum())


def masking_ids(tokenizer) -> tuple:
    """The dynamic layout's masking_ids: [CLS], [SEP] and [MASK] ids and the vocabulary size (one
    more than its largest id: Google's random replacements are any vocabulary line)."""
    return (tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, max(tokenizer.vocab.values()) + 1)


def _unmasked_features(inst, options, ids, continuation):
    """An instance of the reference path as the dynamic layout's features: its masks undone."""
    tokens = list(inst.tokens)
    for position, label in zip(inst.masked_lm_positions, inst.masked_lm_labels):
        tokens[position] = label
    words = [int(continuation[t]) for t in tokens] if options.do_whole_word_mask else None
    return schema.unmasked_features(
        tokens, inst.segment_ids, inst.is_random_next, ids, words, options.max_seq_length
    )


def _write_python(opened, instances, options, progress_bytes, layout, tokenizer):
    S, P = options.max_seq_length, options.max_predictions_per_seq
    masked = 0
    if layout.masking == schema.DYNAMIC:
        ids, continuation = masking_ids(tokenizer), _continuation_table(tokenizer.vocab)
    for k, inst in enumerate(instances):
        if layout.masking == schema.DYNAMIC:
            features = _unmasked_features(inst, options, ids, continuation)
        else:
            features = schema.pad_features(
                inst.tokens,
                inst.segment_ids,
                inst.masked_lm_positions,
                inst.masked_lm_labels,
                inst.is_random_next,
                S,
                P,
            )
            masked += len(inst.masked_lm_positions)
        opened[k % len(opened)][2].write(schema.serialize_example(features, layout))
        if k % 4096 == 4095:
            progress_bytes((k + 1) / len(instances))
    progress_bytes(1.0)
    return masked


def _create_training_files(
    input_files,
    output_files,
    tokenizer,
    options,
    random_seed,
    progress=None,
    log=None,
    engine="auto",
    masking=schema.STATIC,
):
    """create_training_files with the engine choice ("auto", "native", "python") and a `log`
    callable(str) for stage messages."""
    start = time.perf_counter()
    log = log or (lambda message: None)
    input_files = list(input_files)
    if not input_files:
        raise ValueError("No input files given.")
    for path in input_files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Input file not found: {path!r}.")
    if engine not in ("auto", "native", "python"):
        raise ValueError(f"engine must be auto, native or python, got {engine!r}.")
    if masking not in schema.MASKINGS:
        raise ValueError(f"masking must be static or dynamic, got {masking!r}.")
    layout = schema.Layout(masking, whole_word=masking == schema.DYNAMIC and options.do_whole_word_mask)
    rng = random.Random(random_seed)
    lib = None
    if engine != "python":
        lib = native.load(required=engine == "native")
        if lib is None:
            log(
                f"the C instance builder is unavailable ({native.unavailable_reason()}); "
                "using the pure-Python path (same output, much slower)"
            )

    # Half of the progress units (input bytes) while reading, half while writing.
    total_bytes = sum(os.path.getsize(p) for p in input_files)
    reported = [0]

    def read_progress(n):
        if progress is not None:
            step = n // 2
            reported[0] += step
            progress(step)

    def write_progress(fraction):
        if progress is not None:
            target = total_bytes // 2 + int(fraction * (total_bytes - total_bytes // 2))
            if target > reported[0]:
                progress(target - reported[0])
                reported[0] = target

    opened = _open_outputs(output_files)
    try:
        corpus = read_documents(input_files, tokenizer, progress=read_progress)
        elapsed = time.perf_counter() - start
        log(
            f"read {corpus.num_documents:,} documents, {corpus.num_sentences:,} sentences, "
            f"{len(corpus.tokens):,} tokens from {total_bytes / 1e6:,.1f} MB in {elapsed:.1f} s "
            f"({total_bytes / 1e6 / max(elapsed, 1e-9):.2f} MB/s)"
            + (
                f"; {corpus.invalid_utf8_lines:,} lines with invalid UTF-8 replaced"
                if corpus.invalid_utf8_lines
                else ""
            )
        )
        if lib is not None and native.supports(rng):
            native_corpus, store, order = _native_instances(corpus, tokenizer, options, rng, log, lib)
            num_instances = len(order)
            masked = _write_native(opened, native_corpus, store, order, lib, write_progress, layout)
        else:
            vocab = MaskingVocab.of_ids(tokenizer.vocab)
            instances = create_training_instances(corpus.documents(), rng, options, vocab)
            num_instances = len(instances)
            log(f"created {num_instances:,} instances")
            masked = _write_python(opened, instances, options, write_progress, layout, tokenizer)
        for _, _, writer in opened:
            writer.close()
        for final, temporary, _ in opened:
            commit(temporary, final)
    except BaseException:
        _discard(opened)
        raise
    write_progress(1.0)
    return {
        "documents": corpus.num_documents,
        "sentences": corpus.num_sentences,
        "tokens": int(len(corpus.tokens)),
        "instances": int(num_instances),
        "masked_tokens": int(masked),
        "invalid_utf8_lines": corpus.invalid_utf8_lines,
        "seconds": round(time.perf_counter() - start, 3),
    }


def create_training_files(
    input_files: list[str],
    output_files: list[str],
    tokenizer,
    *,
    max_seq_length=128,
    max_predictions_per_seq=20,
    masked_lm_prob=MASKED_LM_PROB,
    short_seq_prob=0.1,
    dupe_factor=10,
    random_seed=12345,
    do_whole_word_mask=False,
    masking=schema.STATIC,
    progress=None,
    log=None,
    engine="auto",
) -> dict:
    """Text files -> pretraining TFRecord files, Google's output for the same seed.

    Args:
      input_files: text files, one sentence per line, blank line between documents; read in
        order as one stream (the reference's all_documents).
      output_files: TFRecord paths; instances go round robin over them. Each is written as
        a hidden temporary in its directory (common.files) and renamed when all are complete.
      tokenizer: from bert.tokenization.build_tokenizer (vocab, encode_batch, special ids).
      progress: None or a callable(n) called with increments of work; the increments add up
        to the total size of the input files in bytes (half while reading, half while
        writing), so `progress=bar.update` fits a bar whose total is that size.
      log: None or a callable(str) for stage messages.
      engine: "auto" (C where a compiler is available), "native" (C or an error) or "python";
        every engine writes the same bytes.
      masking: "static" (Google's records, masked here) or "dynamic" (the same instances with
        their masks undone, in data/pretraining/schema.py's dynamic layout: training/masking.py
        masks them as they are read; with do_whole_word_mask they carry word_continues).

    Returns {documents, sentences, tokens, instances, masked_tokens, invalid_utf8_lines,
    seconds}.
    """
    options = InstanceOptions(
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
        dupe_factor=dupe_factor,
        do_whole_word_mask=do_whole_word_mask,
    )
    return _create_training_files(
        input_files,
        output_files,
        tokenizer,
        options,
        random_seed,
        progress=progress,
        log=log,
        engine=engine,
        masking=masking,
    )
