"""Our WordPiece tokenization is Google's on every input, in every path that tokenizes.

The oracle is the transcription of Google's tokenization.py in tests/pretraining_reference.py,
itself first held to the cases of Google's published tokenization_test.py. Then: one test per
class of input where the Rust `tokenizers` pipeline alone parts from Google (words of 101-200
characters, private use, CJK Extension E, final sigma, characters newer than Rust's Unicode
tables), through tokenize/encode, the offsets the SQuAD reader uses, the GLUE features and the C
fast path of the pretraining records; a seeded property test over strings drawn from every
Unicode general category with words up to 250 characters, cased and uncased; and the claim the
fast path rests on: text made only of characters on which Rust agrees with Google gets Google's
tokens (and the same offsets) from Rust.
"""

import os
import random
import unicodedata

import numpy as np
import pytest

from bert import tokenization
from bert.tokenization import WordPieceTokenizer, basic_tokenize
from data import glue, squad
from data.pretraining import native
from data.pretraining.writer import read_documents
from pretraining_reference import (
    GoogleBasicTokenizer,
    GoogleFullTokenizer,
    GoogleWordpieceTokenizer,
    google_is_control,
    google_is_punctuation,
    google_is_whitespace,
    google_read_documents,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CATEGORIES = (
    "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co Cn"
).split()


@pytest.fixture(scope="module")
def minilm_vocab(minilm_dir):
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="module")
def tokenizers(minilm_vocab):
    return {lower: WordPieceTokenizer(minilm_vocab, do_lower_case=lower) for lower in (True, False)}


def _write_vocab(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return str(path)


# ---- the transcription against Google's published tokenization_test.py --------------------------

GOOGLE_TEST_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]


def test_transcription_passes_googles_published_cases(tmp_path):
    # Google's test_full_tokenizer, test_chinese, test_basic_tokenizer_(no_)lower,
    # test_wordpiece_tokenizer, test_convert_tokens_to_ids, test_is_whitespace/control/punctuation.
    full = GoogleFullTokenizer(_write_vocab(tmp_path / "vocab.txt", GOOGLE_TEST_VOCAB))
    tokens = full.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert full.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]

    assert GoogleBasicTokenizer().tokenize("ah\u535a\u63a8zz") == ["ah", "\u535a", "\u63a8", "zz"]
    lower, keep = GoogleBasicTokenizer(do_lower_case=True), GoogleBasicTokenizer(do_lower_case=False)
    assert lower.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert lower.tokenize("H\u00e9llo") == ["hello"]
    assert keep.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]

    wordpiece = GoogleWordpieceTokenizer({t: i for i, t in enumerate(GOOGLE_TEST_VOCAB[:10])})
    assert wordpiece.tokenize("") == []
    assert wordpiece.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]

    for yes in (" ", "\t", "\r", "\n", "\u00a0"):
        assert google_is_whitespace(yes)
    assert not google_is_whitespace("A") and not google_is_whitespace("-")
    assert google_is_control("\u0005")
    assert not any(google_is_control(c) for c in ("A", " ", "\t", "\r"))
    assert all(google_is_punctuation(c) for c in ("-", "$", "`", "."))
    assert not google_is_punctuation("A") and not google_is_punctuation(" ")


def test_ours_passes_googles_published_cases(tmp_path):
    # Our tokenizer needs [PAD] and [MASK] as well; appended, they leave Google's ids as they are.
    vocab = _write_vocab(tmp_path / "vocab.txt", GOOGLE_TEST_VOCAB + ["[PAD]", "[MASK]"])
    ours = WordPieceTokenizer(vocab, do_lower_case=True)
    assert ours.tokenize("UNwant\u00e9d,running") == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert ours.encode("UNwant\u00e9d,running") == [7, 4, 5, 10, 8, 9]
    assert ours.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]

    def words(text, lower):
        return [w for w, _ in basic_tokenize(text, lower)]

    assert words("ah\u535a\u63a8zz", True) == ["ah", "\u535a", "\u63a8", "zz"]
    assert words(" \tHeLLo!how  \n Are yoU?  ", True) == ["hello", "!", "how", "are", "you", "?"]
    assert words("H\u00e9llo", True) == ["hello"]
    assert words(" \tHeLLo!how  \n Are yoU?  ", False) == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert tokenization._is_control("\u0005") and not tokenization._is_control("\t")
    assert tokenization._is_whitespace("\u00a0") and not tokenization._is_whitespace("-")
    assert tokenization._is_punctuation("`") and not tokenization._is_punctuation("A")


# ---- every path that tokenizes --------------------------------------------------------------


def _squad_ids(tokenizer, text):
    example = squad.SquadExample(qas_id="q", question_text="what", context_text=text)
    (feature,) = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=512, max_query_length=8, progress=False
    )
    start = feature.tokens.index("[SEP]") + 1
    return feature.input_ids[start : len(feature.tokens) - 1]


def _glue_ids(tokenizer, text):
    example = glue.InputExample(guid="g", text_a=text)
    features = glue.convert_examples([example], glue.get_task("CoLA"), tokenizer, 512, progress=False)
    n = int(features["input_mask"][0].sum())
    return features["input_ids"][0][1 : n - 1].tolist()


def _pretraining_ids(tokenizer, lines, path, fast):
    """The sentences read_documents makes of `lines` (one document), as id lists."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = read_documents([str(path)], tokenizer, fast=fast)
    t, s = corpus.tokens.tolist(), corpus.sent_off
    return [t[s[k] : s[k + 1]] for k in range(len(s) - 1)]


def paths(tokenizer, text, tmp_path):
    """Ids of `text` from every path that tokenizes it."""
    out = {
        "encode": tokenizer.encode(text),
        "tokenize": tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)),
        "offsets": tokenizer.encode_with_offsets_batch([text])[0].ids,
        "squad": _squad_ids(tokenizer, text),
        "glue": _glue_ids(tokenizer, text),
        "pretraining_python": _pretraining_ids(tokenizer, [text], tmp_path / "p.txt", fast=False),
    }
    if native.load(required=False) is not None:
        out["pretraining_c"] = _pretraining_ids(tokenizer, [text], tmp_path / "c.txt", fast=True)
    for name in ("pretraining_python", "pretraining_c"):
        if name in out:
            (out[name],) = out[name]  # one line, one sentence
    return out


def assert_google_everywhere(tokenizer, text, expected_tokens, tmp_path):
    google = GoogleFullTokenizer(vocab=tokenizer.vocab, do_lower_case=tokenizer.do_lower_case)
    assert google.tokenize(text) == expected_tokens
    want = google.convert_tokens_to_ids(expected_tokens)
    got = paths(tokenizer, text, tmp_path)
    assert len(got) >= 6
    for name, ids in got.items():
        assert ids == want, f"{name}: {tokenizer.convert_ids_to_tokens(ids)} != {expected_tokens}"


URL = "https://example.com/" + "a1b2c3d4" * 14  # a 112-character word after the last "/"
URL_TOKENS = ["https", ":", "/", "/", "example", ".", "com", "/", "a1"]
URL_TOKENS += ["##b", "##2", "##c", "##3d", "##4", "##a1"] * 13 + ["##b", "##2", "##c", "##3d", "##4"]


@pytest.mark.parametrize("lower", [True, False])
def test_words_of_101_to_200_characters_are_wordpieces(tokenizers, lower, tmp_path):
    assert len(URL.split("/")[-1]) == 112
    assert_google_everywhere(tokenizers[lower], URL, URL_TOKENS, tmp_path)
    assert_google_everywhere(tokenizers[lower], "x" * 150, ["xx"] + ["##xx"] * 74, tmp_path)
    for n, tokens in ((200, ["xx"] + ["##xx"] * 99), (201, ["[UNK]"]), (250, ["[UNK]"])):
        assert tokenizers[lower].tokenize("x" * n) == tokens


@pytest.mark.parametrize("lower", [True, False])
def test_private_use_characters_are_kept(tokenizers, lower, tmp_path):
    # Google drops only Cc and Cf: a private-use character stays in its word ([UNK] without a piece).
    text = "pri\ue000vate use \uf8ff \U000f0000 ok"
    assert_google_everywhere(tokenizers[lower], text, ["[UNK]", "use", "[UNK]", "[UNK]", "ok"], tmp_path)


@pytest.mark.parametrize("lower", [True, False])
def test_cjk_extension_e_characters_are_words_of_their_own(tokenizers, lower, tmp_path):
    text = "\U0002b820\U0002b8a0\U0002b91f x\U0002b920"
    assert_google_everywhere(tokenizers[lower], text, ["[UNK]"] * 3 + ["x", "[UNK]"], tmp_path)


def test_final_capital_sigma_lower_cases_to_final_sigma(tokenizers, tmp_path):
    # Final only after a cased letter: a lone "Σ" is "σ" (Python's str.lower, as Google runs it).
    tokens = ["ο", "##δ", "##ος", "σ", "##ο", "##φ", "##ια", "##ς", "σ", "σ", "##ο"]
    assert_google_everywhere(tokenizers[True], "ΟΔΟΣ ΣΟΦΙΑΣ Σ ΣΟ", tokens, tmp_path)
    # Cased, nothing is lower-cased.
    assert_google_everywhere(tokenizers[False], "ΟΔΟΣ", ["[UNK]"], tmp_path)


@pytest.mark.parametrize("lower", [True, False])
def test_characters_newer_than_rusts_unicode_tables_follow_python(tokenizers, lower, tmp_path):
    # Format characters (Cf in Python's Unicode 14) are dropped, U+2E52 is punctuation.
    text = "bad\u0890ge fi\u08e2le \U00013430x well\u2e52done"
    tokens = ["badge", "file", "x", "well", "[UNK]", "done"]
    assert_google_everywhere(tokenizers[lower], text, tokens, tmp_path)
    # Combining marks (Mn) are stripped with the accents when lower-casing, and kept otherwise.
    marks = "a\u0898b a\u1ac1b"
    assert_google_everywhere(
        tokenizers[lower], marks, ["ab", "ab"] if lower else ["[UNK]", "[UNK]"], tmp_path
    )


def test_ordinary_text_never_takes_the_python_transcription(tokenizers):
    lines = [
        "Plain ASCII, with (punctuation) and 3.14 numbers!",
        "café naïve Zürich — “quoted” 東京 한국어 😀",
    ]
    for lower in (True, False):
        tokenizers[lower].encode_batch(lines)
        assert tokenizers[lower]._agreement.exact_indices(lines) == []
        assert tokenizers[lower]._agreement.exact_indices(["ΟΔΟΣ", "x\ue000"]) == ([0, 1] if lower else [1])


# ---- property test: strings from every general category ----------------------------------------


@pytest.fixture(scope="module")
def category_points():
    points = {c: [] for c in CATEGORIES}
    for cp in range(0x110000):
        points[unicodedata.category(chr(cp))].append(cp)
    assert all(points[c] for c in CATEGORIES)
    return points


# Characters the property test draws more often than their share: the classes.
SPECIAL_DRAWS = (
    "\u03a3\ue000\u0890\u08e2\u2e52\u0898\u1ac1\U00013430\U0002b820\U0002b91f\u0345\u00a0\u2028\x85"
)


PLAIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éüßøÉ"


def _draw_char(rng, points, favourites):
    r = rng.random()
    if r < 0.35:
        return rng.choice(PLAIN)
    if r < 0.55:
        return rng.choice(favourites)
    if r < 0.6:
        return rng.choice(SPECIAL_DRAWS)
    category = rng.choice(CATEGORIES)
    return chr(rng.choice(points[category])), category


def draw_strings(rng, points, favourites, n):
    """`n` strings of 1-6 words split by whitespace of several kinds; words of 1-250 characters
    mixing ASCII, characters the test vocabulary holds, the issue's classes and a character of
    every general category. Returns (strings, count of characters drawn per category)."""
    drawn = dict.fromkeys(CATEGORIES, 0)
    strings = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            short, medium, long = rng.randint(1, 12), rng.randint(13, 100), rng.randint(101, 250)
            length = short if r < 0.75 else medium if r < 0.88 else long
            # Half the long words are Latin letters and digits only, so that they stay one word.
            if length > 100 and rng.random() < 0.5:
                words.append("".join(rng.choice(PLAIN) for _ in range(length)))
                continue
            chars = []
            for _ in range(length):
                c = _draw_char(rng, points, favourites)
                if isinstance(c, tuple):
                    c, category = c
                    drawn[category] += 1
                chars.append(c)
            words.append("".join(chars))
        separators = [rng.choice([" ", " ", "  ", "\t", "\u3000", "\u00a0", "\u2029"]) for _ in words]
        strings.append("".join(w + s for w, s in zip(words, separators)).rstrip(" "))
    return strings, drawn


@pytest.fixture(scope="module")
def property_vocab(minilm_vocab, category_points, tmp_path_factory):
    """MiniLM's vocabulary plus single characters (and their lower-cased, accent-stripped forms)
    from every category, alone and as "##" pieces, and some pairs: so WordPiece matches happen
    beyond ASCII. Returns (vocab file, the added characters)."""
    rng = random.Random(34)
    with open(minilm_vocab, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    favourites = []
    for category in CATEGORIES:
        for cp in rng.sample(category_points[category], min(60, len(category_points[category]))):
            c = chr(cp)
            # A vocab line holds no line break and keeps no surrounding whitespace.
            if category in ("Cs", "Cc") or c.isspace() or c.strip() != c or c in "\r\n":
                continue
            favourites.append(c)
    extra = set()
    for c in favourites:
        forms = {c, "".join(w for w, _ in basic_tokenize(c, True))}
        for form in forms - {""}:
            extra |= {form, "##" + form}
    for _ in range(300):
        pair = rng.choice(favourites) + rng.choice(favourites)
        extra |= {pair, "##" + pair}
    extra = {t for t in extra if t.strip() == t and "\n" not in t and "\r" not in t} - set(tokens)
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return _write_vocab(path, tokens + sorted(extra)), favourites


@pytest.mark.parametrize("lower", [True, False])
def test_property_every_category_matches_google(lower, category_points, property_vocab, tmp_path):
    vocab_file, favourites = property_vocab
    ours = WordPieceTokenizer(vocab_file, do_lower_case=lower)
    google = GoogleFullTokenizer(vocab_file, do_lower_case=lower)
    assert ours.vocab == dict(google.vocab)
    strings, drawn = draw_strings(random.Random(1234 + lower), category_points, favourites, 1200)
    assert min(drawn.values()) >= 100, drawn  # every general category, many times over
    words = [w for s in strings for w in GoogleBasicTokenizer(lower).tokenize(s)]
    assert sum(100 < len(w) <= 200 for w in words) > 20 and sum(len(w) > 200 for w in words) > 10

    expected = [google.tokenize(s) for s in strings]
    assert ours.tokenize_batch(strings) == expected
    ids = [google.convert_tokens_to_ids(t) for t in expected]
    assert ours.encode_batch(strings) == ids
    encodings = ours.encode_with_offsets_batch(strings)
    assert [e.ids for e in encodings] == ids
    for text, e in zip(strings, encodings):
        assert all(0 <= s < t <= len(text) for s, t in e.offsets)

    # The pretraining reader (C fast path where it builds, else Python) against Google's, lines
    # split at "\n" only; lone surrogates cannot be written as UTF-8.
    lines = [s.replace("\n", " ") for s in strings]
    lines = ["".join("?" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s) for s in lines]
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    want = [google.convert_tokens_to_ids(s) for d in google_read_documents([str(path)], google) for s in d]
    corpus = read_documents([str(path)], ours, fast=True)
    t, o = corpus.tokens.tolist(), corpus.sent_off
    assert [t[o[k] : o[k + 1]] for k in range(len(o) - 1)] == want
    assert any(len(s) > 0 for s in want)
    # WordPiece reached beyond ASCII: pieces, not only [UNK].
    pieces = [t for s in expected for t in s if t != "[UNK]" and not t.isascii()]
    assert len(pieces) > 300 and sum(t.startswith("##") for t in pieces) > 100


@pytest.mark.parametrize("lower", [True, False])
def test_rust_is_google_on_text_of_agreeing_characters(lower, tokenizers, category_points):
    """What routing rests on: a character that agrees alone agrees in any text of such characters
    (tokens from Rust, without the transcription), with the same offsets as the transcription's."""
    ours = tokenizers[lower]
    ours.encode_batch(["warm up"])
    agreement = ours._agreement
    rng = random.Random(77 + lower)
    pool = [chr(rng.choice(category_points[c])) for c in CATEGORIES for _ in range(150)]
    pool += [chr(cp) for cp in range(0x80, 0x3000)]
    agreeing = [c for c in pool if agreement.agrees(c)]
    assert len(agreeing) > 0.7 * len(pool)
    # Rust drops private use; lone surrogates cannot reach it; unassigned code points may be marks
    # to its normalization (lower-casing strips accents).
    unlike = {"Cs", "Co"} | ({"Cn"} if lower else set())
    assert {unicodedata.category(c) for c in agreeing} == set(CATEGORIES) - unlike
    google = GoogleFullTokenizer(vocab=ours.vocab, do_lower_case=lower)
    for _ in range(1500):
        text = "".join(
            rng.choice(agreeing) if rng.random() < 0.5 else rng.choice("abcdefghij .,-")
            for _ in range(rng.randint(1, 60))
        )
        rust = ours.backend.encode(text, add_special_tokens=False)
        assert rust.tokens == google.tokenize(text), repr(text)
        assert rust.offsets == ours._exact(text).offsets, repr(text)


def test_the_c_table_is_googles_per_character(tokenizers):
    lib = native.load(required=False)
    if lib is None:
        pytest.skip(f"no native helper: {native.unavailable_reason()}")
    for lower in (True, False):
        fast = native.FastWordPiece.for_tokenizer(lib, tokenizers[lower])
        cls = fast.cls & 0x7F
        assert fast.max_chars == 200
        # Private use is part of words; new format characters dropped; U+2E52 punctuation; final
        # sigma depends on context when lower-casing.
        assert cls[0xE000] == native.C_WORD and cls[0x0890] == native.C_DROP
        assert cls[0x2E52] == native.C_ISOLATED and cls[0x4E00] == native.C_ISOLATED
        assert cls[0x03A3] == (native.C_UNKNOWN if lower else native.C_WORD)
        assert cls[0x0898] == (native.C_DROP if lower else native.C_WORD)
    block = "\n".join(["ok \ue000x", "ΣΟΦΙΑΣ", "a\u0890b"]).encode()
    kind, n_tok, ids = native.FastWordPiece.for_tokenizer(lib, tokenizers[True]).tokenize_block(block)
    assert kind.tolist() == [native.LINE_TOKENS, native.LINE_FALLBACK, native.LINE_TOKENS]
    want = tokenizers[True].encode("ok \ue000x") + tokenizers[True].encode("a\u0890b")
    assert ids.tolist() == want and n_tok.tolist() == [2, 0, 1]
    assert np.array_equal(ids, np.asarray(want, np.int32))
