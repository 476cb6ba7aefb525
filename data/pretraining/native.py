"""Builds and binds data/pretraining/native.c (the fast path of instance creation).

The C file is compiled on first use with the system C compiler (`cc -O2 -shared`) into
data/__pycache__/ (or a per-user temporary directory when that is read-only) under a name
keyed by the source's hash, so edits rebuild and concurrent processes never load a
half-written library (they compile to a temporary that common.files.atomic_path renames).
Without a compiler, `load(required=False)` returns None and callers fall back to the pure-Python
modules (data/pretraining/instances.py, masking.py), which give identical output, only slower.

Random numbers: `MTState.from_random(rng)` copies a random.Random's Mersenne Twister state
into C; `MTState.store(rng)` copies it back, so the Python object ends exactly where the
reference would have left it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from common.files import atomic_path, atomic_write

_SOURCE = Path(__file__).with_name("native.c")
_CFLAGS = ["-O2", "-shared", "-fPIC", "-std=c99", "-ffp-contract=off", "-fno-fast-math"]
_lock = threading.Lock()
_lib = None
_error = None

_i32p = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
_i64p = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
_u8p = np.ctypeslib.ndpointer(np.uint8, flags="C_CONTIGUOUS")
_f32p = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")


class MTState(ctypes.Structure):
    """CPython's random.Random state: 624 words and the position in them."""

    _fields_ = [("mt", ctypes.c_uint32 * 624), ("index", ctypes.c_int32)]

    @classmethod
    def from_random(cls, rng):
        version, internal, _ = rng.getstate()
        if version != 3 or len(internal) != 625:
            raise ValueError(f"Unsupported random.Random state version {version}.")
        state = cls()
        state.mt[:] = internal[:624]
        state.index = internal[624]
        return state

    def store(self, rng):
        version, _, gauss_next = rng.getstate()
        rng.setstate((version, tuple(self.mt) + (self.index,), gauss_next))


def supports(rng):
    """The C path reproduces random.Random itself, not subclasses that override draws."""
    return type(rng) is random.Random


class Corpus(ctypes.Structure):
    _fields_ = [
        ("tokens", ctypes.c_void_p),
        ("sent_off", ctypes.c_void_p),
        ("doc_sent", ctypes.c_void_p),
        ("doc_perm", ctypes.c_void_p),
        ("n_docs", ctypes.c_int64),
        ("vocab_words", ctypes.c_void_p),
        ("n_vocab_words", ctypes.c_int64),
        ("is_continuation", ctypes.c_void_p),
        ("n_ids", ctypes.c_int64),
        ("cls_id", ctypes.c_int32),
        ("sep_id", ctypes.c_int32),
        ("mask_id", ctypes.c_int32),
        ("max_seq_length", ctypes.c_int32),
        ("max_predictions", ctypes.c_int32),
        ("do_whole_word_mask", ctypes.c_int32),
        ("masked_lm_prob", ctypes.c_double),
        ("short_seq_prob", ctypes.c_double),
    ]


class Instances(ctypes.Structure):
    _fields_ = [
        ("capacity", ctypes.c_int64),
        ("count", ctypes.c_int64),
        ("a_start", ctypes.c_void_p),
        ("b_start", ctypes.c_void_p),
        ("a_len", ctypes.c_void_p),
        ("b_len", ctypes.c_void_p),
        ("is_random_next", ctypes.c_void_p),
        ("n_masked", ctypes.c_void_p),
        ("masked_pos", ctypes.c_void_p),
        ("masked_token", ctypes.c_void_p),
    ]


class Layout(ctypes.Structure):
    _fields_ = [
        ("keys", ctypes.c_char_p),
        ("key_len", ctypes.c_void_p),
        ("kind", ctypes.c_void_p),
        ("n", ctypes.c_int32),
    ]


def _compiler():
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _private(directory):
    """Only load code from a directory that no other user can write into."""
    try:
        st = directory.stat()
    except FileNotFoundError:
        return True  # created below with mode 0o700
    return (not hasattr(os, "getuid") or st.st_uid == os.getuid()) and not st.st_mode & 0o022


def _build_dirs():
    yield _SOURCE.parent / "__pycache__"
    shared = Path(tempfile.gettempdir()) / f"bert-tf2-native-{os.getuid() if hasattr(os, 'getuid') else 0}"
    if _private(shared):
        yield shared


def _build():
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    source = _SOURCE.read_bytes()
    tag = hashlib.sha256(source + " ".join(_CFLAGS).encode() + sys.platform.encode()).hexdigest()[:16]
    errors = []
    for directory in _build_dirs():
        target = directory / f"instances_native-{tag}.so"
        if target.exists():
            return ctypes.CDLL(str(target))
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with atomic_path(str(target)) as partial:
                result = subprocess.run(
                    [cc, *_CFLAGS, "-o", partial, str(_SOURCE), "-lm"], capture_output=True, text=True
                )
                if result.returncode != 0:
                    raise RuntimeError(f"{cc} failed: {result.stderr.strip()[-2000:]}")
            return ctypes.CDLL(str(target))
        except OSError as e:
            errors.append(f"{directory}: {e}")
    raise RuntimeError("cannot write the compiled library: " + "; ".join(errors))


def _bind(lib):
    state = ctypes.POINTER(MTState)
    lib.bert_shuffle_i64.argtypes = [state, _i64p, ctypes.c_int64]
    lib.bert_shuffle_i64.restype = None
    lib.bert_random.argtypes = [state]
    lib.bert_random.restype = ctypes.c_double
    lib.bert_randbelow.argtypes = [state, ctypes.c_int64]
    lib.bert_randbelow.restype = ctypes.c_int64
    lib.bert_create_instances.argtypes = [
        state,
        ctypes.POINTER(Corpus),
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.POINTER(Instances),
        _i32p,
        _i64p,
    ]
    lib.bert_create_instances.restype = ctypes.c_int32
    lib.bert_crc32c.argtypes = [ctypes.c_char_p, ctypes.c_int64]
    lib.bert_crc32c.restype = ctypes.c_uint32
    lib.bert_max_record_size.argtypes = [ctypes.c_int32, ctypes.c_int32, _i32p, ctypes.c_int32]
    lib.bert_max_record_size.restype = ctypes.c_int64
    lib.bert_serialize_instances.argtypes = [
        ctypes.POINTER(Corpus),
        ctypes.POINTER(Instances),
        _i64p,
        ctypes.c_int64,
        ctypes.POINTER(Layout),
        _u8p,
        ctypes.c_int64,
        _i64p,
        _f32p,
        _i32p,
    ]
    lib.bert_serialize_instances.restype = ctypes.c_int64
    lib.bert_serialize_example.argtypes = [
        ctypes.POINTER(Layout),
        ctypes.c_int32,
        ctypes.c_int32,
        _i64p,
        _i64p,
        _i64p,
        _i64p,
        _i64p,
        _f32p,
        _i64p,
        _u8p,
    ]
    lib.bert_serialize_example.restype = ctypes.c_int64
    lib.bert_wp_build.argtypes = [ctypes.POINTER(WordPieceTables)]
    lib.bert_wp_build.restype = None
    lib.bert_wp_tokenize.argtypes = [
        ctypes.POINTER(WordPieceTables),
        ctypes.c_char_p,
        ctypes.c_int64,
        _u8p,
        _i32p,
        ctypes.c_int64,
        _i32p,
        ctypes.c_int64,
        _u8p,
        ctypes.POINTER(ctypes.c_int64),
    ]
    lib.bert_wp_tokenize.restype = ctypes.c_int64
    return lib


def load(required=True):
    """The bound library; builds it on first use.

    With required=False returns None (and remembers why, see `unavailable_reason`) when it
    cannot be built; with required=True raises RuntimeError.
    """
    global _lib, _error
    with _lock:
        if _lib is None and _error is None:
            try:
                _lib = _bind(_build())
            except (RuntimeError, OSError) as e:
                _error = str(e)
    if _lib is None and required:
        raise RuntimeError(f"The native instance builder is unavailable: {_error}.")
    return _lib


def loaded():
    """The bound library if this process has already loaded it, else None (never compiles)."""
    return _lib


def unavailable_reason():
    return _error


def crc32c(lib, data):
    data = bytes(data)
    return lib.bert_crc32c(data, len(data))


def shuffled_indices(lib, state, n):
    """What `rng.shuffle(list_of_length_n)` does to the positions: x[i] = old index."""
    order = np.arange(n, dtype=np.int64)
    lib.bert_shuffle_i64(ctypes.byref(state), order, n)
    return order


class NativeLayout:
    """The feature names and order from data/pretraining/schema.py, kept alive for C."""

    def __init__(self, keys, key_lengths, kinds):
        self.keys = keys
        self.key_len = np.asarray(key_lengths, np.int32)
        self.kind = np.asarray(kinds, np.int32)
        self.struct = Layout(keys, self.key_len.ctypes.data, self.kind.ctypes.data, len(self.kind))


class NativeCorpus:
    """Token arrays + options in C's layout; keeps every array it points to alive."""

    def __init__(
        self,
        tokens,
        sent_off,
        doc_sent,
        doc_perm,
        vocab_word_ids,
        is_continuation,
        cls_id,
        sep_id,
        mask_id,
        options,
    ):
        self.arrays = {
            "tokens": np.ascontiguousarray(tokens, np.int32),
            "sent_off": np.ascontiguousarray(sent_off, np.int64),
            "doc_sent": np.ascontiguousarray(doc_sent, np.int64),
            "doc_perm": np.ascontiguousarray(doc_perm, np.int64),
            "vocab_words": np.ascontiguousarray(vocab_word_ids, np.int32),
            "is_continuation": np.ascontiguousarray(is_continuation, np.uint8),
        }
        a = self.arrays
        self.options = options
        self.struct = Corpus(
            tokens=a["tokens"].ctypes.data,
            sent_off=a["sent_off"].ctypes.data,
            doc_sent=a["doc_sent"].ctypes.data,
            doc_perm=a["doc_perm"].ctypes.data,
            n_docs=len(a["doc_perm"]),
            vocab_words=a["vocab_words"].ctypes.data,
            n_vocab_words=len(a["vocab_words"]),
            is_continuation=a["is_continuation"].ctypes.data,
            n_ids=len(a["is_continuation"]),
            cls_id=cls_id,
            sep_id=sep_id,
            mask_id=mask_id,
            max_seq_length=options.max_seq_length,
            max_predictions=options.max_predictions_per_seq,
            do_whole_word_mask=int(options.do_whole_word_mask),
            masked_lm_prob=options.masked_lm_prob,
            short_seq_prob=options.short_seq_prob,
        )


class NativeInstances:
    """Compact storage of instances: two token ranges, the label and the masks (~40 + 8P bytes
    each, against a few kB as Python objects in the reference)."""

    _FIELDS = (
        ("a_start", np.int64, 1),
        ("b_start", np.int64, 1),
        ("a_len", np.int32, 1),
        ("b_len", np.int32, 1),
        ("is_random_next", np.uint8, 1),
        ("n_masked", np.int32, 1),
        ("masked_pos", np.int32, "P"),
        ("masked_token", np.int32, "P"),
    )

    def __init__(self, capacity, max_predictions):
        self.max_predictions = max_predictions
        self.struct = Instances(0, 0)
        self._allocate(capacity)

    def _allocate(self, capacity):
        count = self.struct.count
        pointers = []
        for name, dtype, width in self._FIELDS:
            per = self.max_predictions if width == "P" else 1
            # np.empty maps pages lazily: unused capacity costs no resident memory.
            array = np.empty(capacity * per, dtype)
            old = getattr(self, name, None)
            if old is not None:
                array[: count * per] = old[: count * per]
            setattr(self, name, array)
            pointers.append(array.ctypes.data)
        self.struct = Instances(capacity, count, *pointers)

    def reserve(self, extra):
        """Makes room for `extra` more instances (growing by at least half when it must)."""
        if self.struct.capacity - self.struct.count < extra:
            self._allocate(max(self.struct.count + extra, int(self.struct.capacity * 1.5)))

    @property
    def count(self):
        return self.struct.count


def create_instances(lib, state, corpus, doc_lo, doc_hi, out):
    """Appends the instances of shuffled documents [doc_lo, doc_hi) to `out`."""
    # Every instance moves its document's sentence cursor forward by at least one, so the
    # documents' sentence count bounds the number of instances.
    a = corpus.arrays
    docs = a["doc_perm"][doc_lo:doc_hi]
    out.reserve(int((a["doc_sent"][docs + 1] - a["doc_sent"][docs]).sum()))
    S = corpus.options.max_seq_length
    buf = np.empty(S, np.int32)
    work = np.empty(3 * S, np.int64)
    if (
        lib.bert_create_instances(
            ctypes.byref(state),
            ctypes.byref(corpus.struct),
            doc_lo,
            doc_hi,
            ctypes.byref(out.struct),
            buf,
            work,
        )
        != 0
    ):
        raise RuntimeError("instance buffer overflow (a bug: its capacity is an upper bound)")


class RecordSerializer:
    """Frames TFRecords of stored instances into a reusable buffer."""

    def __init__(self, lib, corpus, layout, batch=4096):
        o = corpus.options
        self.lib, self.corpus, self.layout, self.batch = lib, corpus, layout, batch
        self.record_bound = lib.bert_max_record_size(
            o.max_seq_length, o.max_predictions_per_seq, layout.key_len, len(layout.key_len)
        )
        self.buffer = np.empty(self.record_bound * batch, np.uint8)
        self.features = np.empty(4 * o.max_seq_length + 2 * o.max_predictions_per_seq + 5, np.int64)
        self.weights = np.empty(o.max_predictions_per_seq, np.float32)
        self.tokens = np.empty(o.max_seq_length, np.int32)

    def serialize(self, instances, order):
        """Framed records of instances `order` (at most `batch`), as a memoryview."""
        order = np.ascontiguousarray(order, np.int64)
        n = self.lib.bert_serialize_instances(
            ctypes.byref(self.corpus.struct),
            ctypes.byref(instances.struct),
            order,
            len(order),
            ctypes.byref(self.layout.struct),
            self.buffer,
            len(self.buffer),
            self.features,
            self.weights,
            self.tokens,
        )
        if n < 0:
            raise RuntimeError(
                "the native serializer failed (out of memory, or a bug: its buffer size is an upper bound)"
            )
        return memoryview(self.buffer)[:n]


def serialize_example(lib, layout, features, max_seq_length, max_predictions_per_seq):
    """One example from a padded feature dict (data/pretraining/schema.py names), via C."""

    def ints(name):
        return np.ascontiguousarray(features[name], np.int64)

    dst = np.empty(
        10 * (3 * max_seq_length + 2 * max_predictions_per_seq + 1)
        + 4 * max_predictions_per_seq
        + 64
        + int(layout.key_len.sum())
        + 24 * len(layout.key_len),
        np.uint8,
    )
    n = lib.bert_serialize_example(
        ctypes.byref(layout.struct),
        max_seq_length,
        max_predictions_per_seq,
        ints("input_ids"),
        ints("input_mask"),
        ints("segment_ids"),
        ints("masked_lm_positions"),
        ints("masked_lm_ids"),
        np.ascontiguousarray(features["masked_lm_weights"], np.float32),
        ints("next_sentence_labels"),
        dst,
    )
    return dst[:n].tobytes()


# ---- WordPiece over whole text blocks -----------------------------------------------------

C_UNKNOWN, C_DROP, C_SPACE, C_WORD, C_ISOLATED, C_PY_SPACE = 0, 1, 2, 3, 4, 0x80
LINE_BLANK, LINE_TOKENS, LINE_FALLBACK = 0, 1, 2


class WordPieceTables(ctypes.Structure):
    _fields_ = [
        ("cls", ctypes.c_void_p),
        ("rep_off", ctypes.c_void_p),
        ("rep", ctypes.c_void_p),
        ("keys", ctypes.c_void_p),
        ("key_off", ctypes.c_void_p),
        ("key_id", ctypes.c_void_p),
        ("slots", ctypes.c_void_p),
        ("mask", ctypes.c_int64),
        ("n_keys", ctypes.c_int64),
        ("unk_id", ctypes.c_int32),
        ("max_chars", ctypes.c_int32),
    ]


def _wordpiece_tokenizer(tokenizer):
    """`tokenizer` if it is a bert.tokenization.WordPieceTokenizer (Google's FullTokenizer, which
    this path mirrors), else None."""
    from bert.tokenization import WordPieceTokenizer

    return tokenizer if isinstance(tokenizer, WordPieceTokenizer) else None


def _character_table(do_lower_case):
    """Per BMP code point: class | C_PY_SPACE and its normalized UTF-8, from Google's
    BasicTokenizer as bert.tokenization transcribes it, applied to that one character alone and
    between two letters."""
    from bert.tokenization import basic_tokenize, depends_on_context

    def words(text):
        return [w for w, _ in basic_tokenize(text, do_lower_case)]

    cls = np.zeros(65536, np.uint8)
    reps = [b""] * 65536
    for cp in range(65536):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        py_space = C_PY_SPACE if ch.isspace() else 0
        if depends_on_context(ch, do_lower_case):
            cls[cp] = C_UNKNOWN | py_space
            continue
        alone, between = words(ch), words("a" + ch + "a")
        c = C_UNKNOWN
        if not alone:
            c = {("aa",): C_DROP, ("a", "a"): C_SPACE}.get(tuple(between), C_UNKNOWN)
        elif len(alone) == 1:
            if between == ["a" + alone[0] + "a"]:
                c = C_WORD
            elif between == ["a", alone[0], "a"]:
                c = C_ISOLATED  # punctuation, and CJK characters
        cls[cp] = c | py_space
        if c in (C_WORD, C_ISOLATED):
            reps[cp] = alone[0].encode("utf-8")
    rep_off = np.zeros(65537, np.int32)
    np.cumsum([len(r) for r in reps], out=rep_off[1:])
    return cls, rep_off, np.frombuffer(b"".join(reps) or b"\0", np.uint8).copy()


def _cached_character_table(do_lower_case):
    """_character_table, cached on disk: it depends only on do_lower_case, the transcription of
    Google's rules (bert/tokenization.py) and this Python's unicodedata, not on the vocabulary,
    and takes ~1 s to compute."""
    import unicodedata

    from bert import tokenization

    key = hashlib.sha256(
        b"|".join(
            [
                b"v2",
                Path(tokenization.__file__).read_bytes(),
                unicodedata.unidata_version.encode(),
                str(bool(do_lower_case)).encode(),
                sys.version.encode(),
            ]
        )
    ).hexdigest()[:16]
    for directory in _build_dirs():
        path = directory / f"wordpiece-chars-{key}.npz"
        try:
            with np.load(path) as cached:
                return cached["cls"], cached["rep_off"], cached["rep"]
        except (OSError, KeyError, ValueError):
            pass
    table = _character_table(do_lower_case)
    for directory in _build_dirs():
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            # A file object: given a path, np.savez would append ".npz" to the temporary's name.
            with atomic_write(str(directory / f"wordpiece-chars-{key}.npz"), "wb") as f:
                np.savez(f, cls=table[0], rep_off=table[1], rep=table[2])
            break
        except OSError:
            continue
    return table


class FastWordPiece:
    """Tokenizes whole text blocks in C, exactly as a bert.tokenization.WordPieceTokenizer.

    `for_tokenizer` returns None for tokenizers it does not mirror (SentencePiece); lines it
    cannot handle (characters outside the BMP, invalid UTF-8, context-dependent characters)
    come back as LINE_FALLBACK for the caller to tokenize.
    """

    _cache = {}

    @classmethod
    def for_tokenizer(cls, lib, tokenizer):
        if _wordpiece_tokenizer(tokenizer) is None:
            return None
        key = id(tokenizer)
        cached = cls._cache.get(key)
        if cached is None or cached[0] is not tokenizer:
            cached = (tokenizer, cls(lib, tokenizer))
            cls._cache = {key: cached}  # one tokenizer at a time; tables are ~0.5 MB
        return cached[1]

    def __init__(self, lib, tokenizer):
        self.lib = lib
        self.cls, self.rep_off, self.rep = _cached_character_table(bool(tokenizer.do_lower_case))
        tokens = list(tokenizer.vocab.items())
        encoded = [t.encode("utf-8") for t, _ in tokens]
        self.keys = np.frombuffer(b"".join(encoded) or b"\0", np.uint8).copy()
        self.key_off = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=self.key_off[1:])
        self.key_id = np.array([i for _, i in tokens], np.int32)
        size = 1
        while size < 2 * len(tokens) + 1:
            size *= 2
        self.slots = np.empty(size, np.int64)
        self.max_chars = int(tokenizer.max_input_chars_per_word)
        self.struct = WordPieceTables(
            self.cls.ctypes.data,
            self.rep_off.ctypes.data,
            self.rep.ctypes.data,
            self.keys.ctypes.data,
            self.key_off.ctypes.data,
            self.key_id.ctypes.data,
            self.slots.ctypes.data,
            size - 1,
            len(tokens),
            tokenizer.unk_id,
            self.max_chars,
        )
        lib.bert_wp_build(ctypes.byref(self.struct))
        self.word = np.empty(4 * self.max_chars + 16, np.uint8)

    def tokenize_block(self, block):
        """bytes (lines split at b"\\n") -> (kind uint8 [L], n_tokens int32 [L], ids int32 [T]).

        kind is LINE_BLANK (only whitespace), LINE_TOKENS, or LINE_FALLBACK (not handled: its
        n_tokens is 0 and it has no ids)."""
        max_lines = block.count(b"\n") + 1
        kind = np.empty(max_lines, np.uint8)
        n_tok = np.empty(max_lines, np.int32)
        total = ctypes.c_int64(0)
        for factor in (2, 8):
            out = np.empty(factor * len(block) + 64, np.int32)
            n = self.lib.bert_wp_tokenize(
                ctypes.byref(self.struct),
                block,
                len(block),
                kind,
                n_tok,
                max_lines,
                out,
                len(out),
                self.word,
                ctypes.byref(total),
            )
            if n >= 0:
                return kind[:n], n_tok[:n], out[: total.value].copy()
        kind[:] = LINE_FALLBACK  # cannot happen with real text; let the caller do it all
        n_tok[:] = 0
        return kind, n_tok, np.zeros(0, np.int32)
