"""Tokenization for BERT: WordPiece (Google vocab.txt) and SentencePiece.

`WordPieceTokenizer` reproduces Google's `FullTokenizer` (BasicTokenizer +
WordpieceTokenizer from google-research/bert) on top of the Rust `tokenizers`
library, so the data pipeline can tokenize whole shards in batches.
`SentencePieceTokenizer` offers the same interface over a SentencePiece model.
`encode_pair` builds the `[CLS] A [SEP] B [SEP]` layout used by feature
extraction and fine-tuning.

Both tokenizers expose: `vocab`, `inv_vocab`, `vocab_size`, `tokenize`,
`tokenize_batch`, `encode`, `encode_batch`, `convert_tokens_to_ids`,
`convert_ids_to_tokens` and the ids `pad_id`, `unk_id`, `cls_id`, `sep_id`,
`mask_id`. `encode` never adds special tokens.
"""

import os

from bert.errors import BertError, BertFileNotFoundError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# Google's WordpieceTokenizer default: longer words become [UNK] outright.
MAX_INPUT_CHARS_PER_WORD = 100


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
    """Google's FullTokenizer semantics over a vocab.txt, run by the Rust `tokenizers` library.

    Text is cleaned (NUL, U+FFFD and control characters dropped, whitespace
    normalised), CJK ideographs and punctuation become their own words, and
    with `do_lower_case` text is lower-cased and accents stripped (accents
    are kept when not lower-casing, as in Google's code). Words are split by
    greedy longest-match-first WordPiece with `##` continuations; words over
    100 characters become [UNK].

    Unlike Hugging Face's BertTokenizer, literal "[MASK]" etc. in the text are
    split like any other text (Google's behaviour), so raw corpus text can
    never inject a special token.
    """

    def __init__(self, vocab_file, do_lower_case=True):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        vocab = load_vocab(vocab_file)
        self._init_vocab(vocab, vocab_file)
        self.do_lower_case = do_lower_case
        tokenizer = Tokenizer(
            models.WordPiece(
                vocab=vocab,
                unk_token=UNK_TOKEN,
                max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
            )
        )
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

    @property
    def backend(self):
        """The Rust `tokenizers.Tokenizer` doing the work (read by data/pretraining/native.py,
        which mirrors its normalizer and pre-tokenizer in C)."""
        return self._tokenizer

    def tokenize_batch(self, texts):
        """list[str] -> list of token-string lists."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [e.tokens for e in encodings]

    def encode_batch(self, texts):
        """list[str] -> list of id lists, tokenized in parallel by the Rust backend."""
        encodings = self._encode_ids_batch(list(texts), add_special_tokens=False)
        return [e.ids for e in encodings]


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
