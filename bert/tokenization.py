"""Tokenization for BERT: WordPiece (Google vocab.txt) and SentencePiece.

`WordPieceTokenizer` gives exactly what Google's `FullTokenizer` (BasicTokenizer +
WordpieceTokenizer from google-research/bert's tokenization.py, run under this Python's
`unicodedata`) gives, on every input. Text runs through the Rust `tokenizers` library, so
the data pipeline can tokenize whole shards in batches, except text holding a character
that library treats otherwise (private-use and unassigned code points, characters newer
than its Unicode tables, the final-sigma rule of lower-casing, CJK Extension E, ...): that
text goes through `basic_tokenize` + `WordPieceTokenizer.wordpiece`, a transcription of
Google's code in Python. Which characters those are is found character by character, the
first time each is seen, by running both on it.
`SentencePieceTokenizer` offers the same interface over a SentencePiece model.
`encode_pair` builds the `[CLS] A [SEP] B [SEP]` layout used by feature
extraction and fine-tuning.

Both tokenizers expose: `vocab`, `inv_vocab`, `vocab_size`, `tokenize`,
`tokenize_batch`, `encode`, `encode_batch`, `convert_tokens_to_ids`,
`convert_ids_to_tokens` and the ids `pad_id`, `unk_id`, `cls_id`, `sep_id`,
`mask_id`. `encode` never adds special tokens.
"""

import os
import re
import threading
import unicodedata
from typing import NamedTuple

from bert.errors import BertError, BertFileNotFoundError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# Google's WordpieceTokenizer default (Hugging Face's is 100): longer words become [UNK] outright.
MAX_INPUT_CHARS_PER_WORD = 200


# ---- Google's BasicTokenizer, character rules from this Python's unicodedata ----------------


def _is_whitespace(char):
    # \t \n \r are Cc, but Google counts them as whitespace.
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char):
    # Only Cc and Cf: private-use (Co), unassigned (Cn) and surrogate (Cs) code points stay.
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    # Every non-letter, non-digit ASCII character counts ("$", "^", "`" are not Unicode P*).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    # Google's CJK blocks, including the whole of 0x2B820-0x2CEAF (Extension E and beyond).
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _lower(token, origins):
    """str.lower() of a whitespace token, with each output character's origin. Python lower-cases
    character by character except for final sigma, which stays one character ("ς")."""
    lowered = token.lower()
    if token.isascii():
        return lowered, origins
    return lowered, [o for c, o in zip(token, origins) for _ in range(len(c.lower()))]


def _strip_accents(text, origins):
    """Google's _run_strip_accents (NFD, then every Mn character dropped), with origins: NFD is
    each character's decomposition followed by the canonical ordering of combining marks."""
    if text.isascii():
        return text, origins
    chars = [(d, o) for c, o in zip(text, origins) for d in unicodedata.normalize("NFD", c)]
    combining = unicodedata.combining
    i = 0
    while i < len(chars):
        j = i
        while j < len(chars) and combining(chars[j][0]):
            j += 1
        if j - i > 1:  # a run of marks: stable sort by combining class, across characters too
            chars[i:j] = sorted(chars[i:j], key=lambda pair: combining(pair[0]))
        i = max(j, i + 1)
    kept = [(d, o) for d, o in chars if unicodedata.category(d) != "Mn"]
    return "".join(d for d, _ in kept), [o for _, o in kept]


def _split_on_punctuation(text, origins, words):
    """Google's _run_split_on_punc, then its final whitespace_tokenize, appending (word,
    origins) pairs to `words`."""
    start = 0
    for i, char in enumerate(text):
        if _is_punctuation(char) or char.isspace():
            if start < i:
                words.append((text[start:i], origins[start:i]))
            if not char.isspace():
                words.append((char, origins[i : i + 1]))
            start = i + 1
    if start < len(text):
        words.append((text[start:], origins[start:]))


def basic_tokenize(text, do_lower_case):
    """Google's BasicTokenizer(do_lower_case).tokenize(text), keeping where each character of
    each word comes from: list of (word, origins), origins[k] the index in `text` of the
    character that gave the word's k-th character.

    Control characters (Cc, Cf; not tab, newline, return), NUL and U+FFFD are dropped; CJK
    characters become words of their own; text splits at whitespace (Python's str.split), then,
    lower-cased and stripped of Mn marks after NFD when `do_lower_case`, at punctuation.
    """
    words = []
    token, origins = [], []

    def end_token():
        if token:
            word, where = "".join(token), origins[:]
            if do_lower_case:
                word, where = _strip_accents(*_lower(word, where))
            _split_on_punctuation(word, where, words)
            token.clear()
            origins.clear()

    for i, char in enumerate(text):
        cp = ord(char)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            continue
        # Google maps _is_whitespace characters to " ", then str.split() also splits at the
        # other isspace() characters that survive cleaning (U+2028, U+2029).
        if _is_whitespace(char) or char.isspace():
            end_token()
        elif _is_chinese_char(cp):
            end_token()
            token.append(char)
            origins.append(i)
            end_token()
        else:
            token.append(char)
            origins.append(i)
    end_token()
    return words


def depends_on_context(char, do_lower_case):
    """Whether Google's treatment of `char` can depend on its neighbours, so that it cannot be
    known from the character alone: capital sigma when lower-casing (final "ς" or "σ"), and
    characters that leave a combining mark after accent stripping (canonical ordering may move
    it past its neighbours' marks)."""
    if not do_lower_case:
        return False
    if char == "\u03a3":
        return True
    for form in {char, char.lower()}:
        for d in unicodedata.normalize("NFD", form):
            if unicodedata.combining(d) and unicodedata.category(d) != "Mn":
                return True
    return False


class Encoding(NamedTuple):
    """One text's tokens: ids, token strings and (start, end) character offsets into the text."""

    ids: list
    tokens: list
    offsets: list


class _RustAgreement:
    """Which characters the Rust pipeline (BertNormalizer + BertPreTokenizer) treats exactly as
    Google's BasicTokenizer does, learned one character at a time on first sight: a character
    agrees when it is not context-dependent and both give the same words for "a" + char + "a"
    (dropped, a boundary, part of the word, or a word of its own; the same normalized text).
    Text made only of agreeing characters gets Google's words from the Rust pipeline (each step
    of both maps characters independently), so only text with another character needs the
    Python transcription. Shared by every tokenizer of one `do_lower_case` in the process."""

    _shared = {}
    _shared_lock = threading.Lock()

    @classmethod
    def of(cls, backend, do_lower_case):
        with cls._shared_lock:
            if do_lower_case not in cls._shared:
                cls._shared[do_lower_case] = cls(backend.normalizer, backend.pre_tokenizer, do_lower_case)
            return cls._shared[do_lower_case]

    def __init__(self, normalizer, pre_tokenizer, do_lower_case):
        self._normalize = normalizer.normalize_str
        self._pre_tokenize = pre_tokenizer.pre_tokenize_str
        self.do_lower_case = do_lower_case
        self._lock = threading.Lock()
        self._agree, self._differ = set(), set()
        self._learn(map(chr, range(128)))
        self._ascii_agrees = all(chr(c) in self._agree for c in range(128))

    def agrees(self, char):
        """Whether Rust's words for any text made of `char` and other agreeing characters are
        Google's (computed, not looked up)."""
        if 0xD800 <= ord(char) <= 0xDFFF or depends_on_context(char, self.do_lower_case):
            return False  # lone surrogates cannot cross into Rust at all
        if self.do_lower_case and unicodedata.category(char) == "Cn":
            # Unassigned for Python, but maybe a combining mark to Rust's normalization, whose
            # canonical order among its neighbours' marks one character alone cannot show.
            return False
        probe = "a" + char + "a"
        google = [word for word, _ in basic_tokenize(probe, self.do_lower_case)]
        rust = [word for word, _ in self._pre_tokenize(self._normalize(probe))]
        return google == rust

    def _learn(self, chars):
        with self._lock:
            chars = set(chars) - self._agree - self._differ
            if not chars:
                return
            for char in chars:
                (self._agree if self.agrees(char) else self._differ).add(char)
            # Matches any character not (yet) known to agree; code point ranges keep it short.
            points = sorted(map(ord, self._agree))
            ranges, start = [], 0
            for k in range(1, len(points) + 1):
                if k == len(points) or points[k] != points[k - 1] + 1:
                    a, b = points[start], points[k - 1]
                    ranges.append(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}")
                    start = k
            self._unknown = re.compile(f"[^{''.join(ranges)}]")

    def exact_indices(self, texts):
        """Indices of the texts that need the Python transcription (in order)."""
        ascii_ok = self._ascii_agrees
        candidates = [
            i for i, t in enumerate(texts) if not (ascii_ok and t.isascii()) and self._unknown.search(t)
        ]
        if not candidates:
            return []
        self._learn(set().union(*(texts[i] for i in candidates)))
        return [i for i in candidates if self._unknown.search(texts[i])]


def _require_file(path, what):
    if not os.path.isfile(path):
        raise BertFileNotFoundError(f"{what} not found: {path!r} (check the path you passed).")


def load_vocab(vocab_file):
    """Reads a Google-format vocab.txt (one token per line, id = line number).

    Returns dict[str, int]. Raises BertFileNotFoundError if the file is missing and
    BertError (a ValueError naming the file) if it is not UTF-8 text or is empty.
    """
    _require_file(vocab_file, "Vocabulary file")
    vocab = {}
    try:
        with open(vocab_file, "r", encoding="utf-8") as reader:
            for index, line in enumerate(reader):
                # Google strips each line, which also tolerates CRLF files.
                vocab[line.strip()] = index
    except UnicodeDecodeError as e:
        raise BertError(f"Vocabulary file {vocab_file!r} is not UTF-8 text: {e}.") from e
    if not vocab:
        raise BertError(f"Vocabulary file {vocab_file!r} is empty.")
    return vocab


def check_special_tokens(vocab, source):
    """Raises BertError naming `source` if any of SPECIAL_TOKENS is missing from `vocab`."""
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertError(
            f"{source!r} lacks the special token(s) {', '.join(missing)}; BERT needs all of "
            f"{', '.join(SPECIAL_TOKENS)}. Use a vocabulary built for BERT or add them."
        )


class _TokenizerBase:
    """Shared id lookups; subclasses set `vocab` and implement `encode_batch`."""

    def _init_vocab(self, vocab, source):
        check_special_tokens(vocab, source)
        self.vocab = vocab
        self.inv_vocab = {i: t for t, i in vocab.items()}
        self.pad_id = vocab[PAD_TOKEN]
        self.unk_id = vocab[UNK_TOKEN]
        self.cls_id = vocab[CLS_TOKEN]
        self.sep_id = vocab[SEP_TOKEN]
        self.mask_id = vocab[MASK_TOKEN]

    @property
    def vocab_size(self):
        """Rows the embedding table needs: largest id + 1 (equals len(vocab) without duplicate lines)."""
        return max(self.vocab.values()) + 1

    def convert_tokens_to_ids(self, tokens):
        """Maps tokens to ids; a token not in the vocabulary raises KeyError (as Google's does)."""
        try:
            return [self.vocab[t] for t in tokens]
        except KeyError as e:
            raise KeyError(f"Token {e.args[0]!r} is not in the vocabulary.") from None

    def convert_ids_to_tokens(self, ids):
        """Maps ids to tokens; an unknown id raises KeyError."""
        try:
            return [self.inv_vocab[int(i)] for i in ids]
        except KeyError as e:
            raise KeyError(f"Id {e.args[0]!r} is not in the vocabulary.") from None

    def tokenize(self, text):
        """Text -> list of token strings (no special tokens added)."""
        return self.tokenize_batch([text])[0]

    def encode(self, text):
        """Text -> list of token ids (no special tokens added)."""
        return self.encode_batch([text])[0]


class WordPieceTokenizer(_TokenizerBase):
    """Google's FullTokenizer over a vocab.txt: the same tokens for every input.

    Text is cleaned (NUL, U+FFFD and Cc/Cf control characters dropped, whitespace
    normalised), CJK ideographs and punctuation become their own words, and
    with `do_lower_case` text is lower-cased (Python's str.lower) and accents
    stripped (accents are kept when not lower-casing, as in Google's code).
    Words are split by greedy longest-match-first WordPiece with `##`
    continuations; words over 200 characters become [UNK]. The Rust
    `tokenizers` library does the work for text whose every character it
    treats as Google does (all ordinary text); other text takes the Python
    transcription (see the module docstring).

    Unlike Hugging Face's BertTokenizer, literal "[MASK]" etc. in the text are
    split like any other text (Google's behaviour), so raw corpus text can
    never inject a special token.
    """

    def __init__(self, vocab_file, do_lower_case=True):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        vocab = load_vocab(vocab_file)
        self._init_vocab(vocab, vocab_file)
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = MAX_INPUT_CHARS_PER_WORD
        self._longest_token = max(map(len, vocab))
        tokenizer = Tokenizer(
            models.WordPiece(
                vocab=vocab,
                unk_token=UNK_TOKEN,
                max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
            )
        )
        # Fixed settings: _RustAgreement shares what it learns between tokenizers on that basis.
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=True,
            # Google strips accents exactly when it lower-cases.
            strip_accents=do_lower_case,
            lowercase=do_lower_case,
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tokenizer = tokenizer
        # encode_batch_fast skips offset tracking, but it also leaves the token
        # strings empty, so it serves ids only.
        self._encode_ids_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self._agreement = None  # the _RustAgreement, on first use

    @property
    def backend(self):
        """The Rust `tokenizers.Tokenizer` that tokenizes ordinary text (tests and vocabulary
        tools use its normalizer and pre-tokenizer)."""
        return self._tokenizer

    def wordpiece(self, word, origins):
        """Google's WordpieceTokenizer on one word of basic_tokenize: list of (token, start, end),
        start and end the character offsets in the text of the piece's first and last origin."""
        if len(word) > self.max_input_chars_per_word:
            return [(UNK_TOKEN, min(origins), max(origins) + 1)]
        pieces, start = [], 0
        while start < len(word):
            # Google tries every end from the word's; longer pieces than the vocabulary's cannot match.
            end = min(len(word), start + self._longest_token)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:  # a word with an unmatchable remainder is one [UNK]
                return [(UNK_TOKEN, min(origins), max(origins) + 1)]
            span = origins[start:end]
            pieces.append((piece, min(span), max(span) + 1))
            start = end
        return pieces

    def _exact(self, text):
        """The Python transcription of Google's FullTokenizer.tokenize, as an Encoding."""
        pieces = [
            p
            for word, origins in basic_tokenize(text, self.do_lower_case)
            for p in self.wordpiece(word, origins)
        ]
        tokens = [token for token, _, _ in pieces]
        return Encoding([self.vocab[t] for t in tokens], tokens, [(s, e) for _, s, e in pieces])

    def _batch(self, texts, rust, pick):
        """`rust(texts)` -> Rust encodings for the texts Rust tokenizes as Google does, the
        transcription for the others; returns `pick(encoding)` of each text, in order."""
        texts = list(texts)
        if self._agreement is None:
            self._agreement = _RustAgreement.of(self._tokenizer, self.do_lower_case)
        exact = self._agreement.exact_indices(texts)
        if not exact:
            return [pick(e) for e in rust(texts)]
        out = [None] * len(texts)
        for i in exact:
            out[i] = pick(self._exact(texts[i]))
        done = set(exact)
        rest = [i for i in range(len(texts)) if i not in done]
        for i, e in zip(rest, rust([texts[i] for i in rest]) if rest else ()):
            out[i] = pick(e)
        return out

    def _rust_encode(self, texts):
        return self._tokenizer.encode_batch(texts, add_special_tokens=False)

    def tokenize_batch(self, texts):
        """list[str] -> list of token-string lists."""
        return self._batch(texts, self._rust_encode, lambda e: e.tokens)

    def encode_batch(self, texts):
        """list[str] -> list of id lists (the Rust backend tokenizes in parallel)."""
        return self._batch(
            texts, lambda t: self._encode_ids_batch(t, add_special_tokens=False), lambda e: e.ids
        )

    def encode_with_offsets_batch(self, texts):
        """list[str] -> list of Encoding (ids, tokens, offsets): each token's (start, end)
        character offsets into its text cover the characters it came from (the SQuAD reader
        maps answers through them)."""
        return self._batch(texts, self._rust_encode, lambda e: Encoding(e.ids, e.tokens, e.offsets))


# Google users call it FullTokenizer.
FullTokenizer = WordPieceTokenizer


class SentencePieceTokenizer(_TokenizerBase):
    """The same interface over a SentencePiece .model file.

    The model must contain [PAD] [UNK] [CLS] [SEP] [MASK] as pieces (e.g. as
    user_defined_symbols, or as its pad/unk pieces). Pieces SentencePiece
    cannot encode come out as the [UNK] id, even when the model's own unknown
    piece is a different one (such as "<unk>"), so one id means "unknown".
    """

    def __init__(self, spm_model_file, do_lower_case=True):
        import sentencepiece as spm

        _require_file(spm_model_file, "SentencePiece model file")
        processor = spm.SentencePieceProcessor()
        try:
            processor.Load(spm_model_file)
        except (OSError, RuntimeError) as e:
            raise BertError(f"{spm_model_file!r} is not a readable SentencePiece model: {e}.") from e
        vocab = {processor.IdToPiece(i): i for i in range(processor.GetPieceSize())}
        self._init_vocab(vocab, spm_model_file)
        self.do_lower_case = do_lower_case
        self._sp = processor
        self._sp_unk_id = processor.unk_id()

    def _prepare(self, texts):
        texts = list(texts)
        return [t.lower() for t in texts] if self.do_lower_case else texts

    def encode_batch(self, texts):
        """list[str] -> list of id lists."""
        batch = self._sp.Encode(self._prepare(texts), out_type=int)
        if self._sp_unk_id == self.unk_id:
            return batch
        return [[self.unk_id if i == self._sp_unk_id else i for i in ids] for ids in batch]

    def tokenize_batch(self, texts):
        """list[str] -> list of piece lists; unknown pieces appear as [UNK]."""
        # Via ids, so that tokenize() and encode() always agree on [UNK].
        return [self.convert_ids_to_tokens(ids) for ids in self.encode_batch(texts)]


def build_tokenizer(vocab_file=None, spm_model_file=None, do_lower_case=True):
    """Returns a WordPieceTokenizer (vocab_file) or SentencePieceTokenizer (spm_model_file).

    Exactly one of the two must be given.
    """
    if (vocab_file is None) == (spm_model_file is None):
        raise BertError(
            "Give exactly one of vocab_file (a WordPiece vocab.txt) or spm_model_file "
            f"(a SentencePiece .model); got vocab_file={vocab_file!r}, "
            f"spm_model_file={spm_model_file!r}."
        )
    if vocab_file is not None:
        return WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)
    return SentencePieceTokenizer(spm_model_file, do_lower_case=do_lower_case)


def truncate_pair_longest_first(tokens_a, tokens_b, max_length):
    """Cuts the lists in place, from the end, until their total length is at most `max_length`.

    Deterministic (fine-tuning and feature extraction, as Google's run_classifier): unlike the
    pretraining's data.pretraining.instances.truncate_seq_pair, which cuts front or back at
    random.
    """
    # One token at a time from the longer side: a short sequence keeps more of
    # its (proportionally more valuable) tokens. Ties cut B, as Google does.
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def encode_pair(tokenizer, text_a, text_b=None, *, max_seq_length):
    """Builds BERT inputs `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, zero padded.

    An empty or None `text_b` means a single sequence (Google's convention).
    Returns a dict: input_ids, input_mask, segment_ids (list[int], length
    max_seq_length; segment 0 for [CLS] A [SEP], 1 for B [SEP]) and tokens
    (the token strings before padding).
    """
    tokens_a = tokenizer.tokenize(text_a)
    tokens_b = tokenizer.tokenize(text_b) if text_b else None
    specials = 3 if tokens_b is not None else 2
    if max_seq_length < specials:
        raise BertError(f"max_seq_length={max_seq_length} leaves no room for the {specials} special tokens.")
    if tokens_b is not None:
        truncate_pair_longest_first(tokens_a, tokens_b, max_seq_length - 3)
    else:
        del tokens_a[max_seq_length - 2 :]

    tokens = [CLS_TOKEN] + tokens_a + [SEP_TOKEN]
    segment_ids = [0] * len(tokens)
    if tokens_b is not None:
        tokens += tokens_b + [SEP_TOKEN]
        segment_ids += [1] * (len(tokens_b) + 1)

    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = max_seq_length - len(input_ids)
    # Padding uses id 0 (Google's layout) regardless of where [PAD] sits:
    # input_mask is what tells the model to ignore these positions.
    return {
        "input_ids": input_ids + [0] * padding,
        "input_mask": [1] * len(input_ids) + [0] * padding,
        "segment_ids": segment_ids + [0] * padding,
        "tokens": tokens,
    }
