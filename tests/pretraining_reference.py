"""Shared by the pretraining-records and tokenization tests: a scripted rng, a tiny vocabulary,
a corpus writer, and independent transcriptions of Google's tokenization.py (FullTokenizer) and
create_pretraining_data.py (string tokens, Google's writer) that what we write is compared
against. The transcriptions use nothing of ours: only the standard library."""

import collections
import random
import unicodedata

import pytest

from data.pretraining import native, schema, tfrecord
from data.pretraining.instances import InstanceOptions, TrainingInstance
from data.pretraining.masking import MaskingVocab

TINY_TOKENS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "un",
    "##aff",
    "##able",
    "x",
    "y",
    "##z",
]
TINY_VOCAB = {t: i for i, t in enumerate(TINY_TOKENS)}
STRINGS = MaskingVocab.of_strings(TINY_VOCAB)


def native_or_skip():
    lib = native.load(required=False)
    if lib is None:
        pytest.skip(f"no native helper: {native.unavailable_reason()}")
    return lib


class ScriptedRng:
    """An rng whose every draw is given: random() and randint() pop from scripts (randint
    checks its bounds), shuffle() applies the given permutations (identity when none left)."""

    def __init__(self, randoms=(), randints=(), permutations=()):
        self.randoms, self.randints, self.permutations = list(randoms), list(randints), list(permutations)
        self.calls = []

    def random(self):
        self.calls.append("random")
        return self.randoms.pop(0)

    def randint(self, a, b):
        value = self.randints.pop(0)
        assert a <= value <= b, (a, b, value)
        self.calls.append(f"randint({a},{b})")
        return value

    def shuffle(self, x):
        self.calls.append(f"shuffle({len(x)})")
        if self.permutations:
            order = self.permutations.pop(0)
            x[:] = [x[i] for i in order]

    def done(self):
        return not self.randoms and not self.randints


def options(**kw):
    base = dict(
        max_seq_length=16, max_predictions_per_seq=3, masked_lm_prob=0.0, short_seq_prob=0.0, dupe_factor=1
    )
    base.update(kw)
    return InstanceOptions(**base)


# ---- an independent transcription of Google's tokenization.py -------------------------------
# google-research/bert's FullTokenizer = BasicTokenizer + WordpieceTokenizer, rule for rule, as it
# runs under this Python (its unicodedata decides every category). Kept literal and slow: it is
# the oracle that bert/tokenization.py is held to.

GOOGLE_MAX_INPUT_CHARS_PER_WORD = 200  # WordpieceTokenizer's default


def google_load_vocab(vocab_file):
    vocab = collections.OrderedDict()
    with open(vocab_file, "r", encoding="utf-8") as reader:
        for index, line in enumerate(reader):
            vocab[line.strip()] = index
    return vocab


def google_whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def google_is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def google_is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def google_is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def google_is_chinese_char(cp):
    blocks = (
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF),
        (0xF900, 0xFAFF),
        (0x2F800, 0x2FA1F),
    )
    return any(lo <= cp <= hi for lo, hi in blocks)


class GoogleBasicTokenizer:
    def __init__(self, do_lower_case=True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        split_tokens = []
        for token in google_whitespace_tokenize(text):
            if self.do_lower_case:
                token = self._run_strip_accents(token.lower())
            split_tokens.extend(self._run_split_on_punc(token))
        return google_whitespace_tokenize(" ".join(split_tokens))

    def _run_strip_accents(self, text):
        text = unicodedata.normalize("NFD", text)
        return "".join(char for char in text if unicodedata.category(char) != "Mn")

    def _run_split_on_punc(self, text):
        output = []
        start_new_word = True
        for char in text:
            if google_is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        output = []
        for char in text:
            if google_is_chinese_char(ord(char)):
                output += [" ", char, " "]
            else:
                output.append(char)
        return "".join(output)

    def _clean_text(self, text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or google_is_control(char):
                continue
            output.append(" " if google_is_whitespace(char) else char)
        return "".join(output)


class GoogleWordpieceTokenizer:
    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=GOOGLE_MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text):
        output_tokens = []
        for token in google_whitespace_tokenize(text):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad = False
            start = 0
            sub_tokens = []
            while start < len(chars):
                end = len(chars)
                cur_substr = None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            if is_bad:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens


class GoogleFullTokenizer:
    """Google's FullTokenizer, from a vocab file or (for tests) a vocab dict."""

    def __init__(self, vocab_file=None, do_lower_case=True, vocab=None):
        self.vocab = vocab if vocab is not None else google_load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = GoogleBasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = GoogleWordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        split_tokens = []
        for token in self.basic_tokenizer.tokenize(text):
            split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
        return split_tokens

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]


# ---- an independent transcription of Google's create_pretraining_data.py --------------------


def google_create_training_instances(
    all_documents,
    rng,
    max_seq_length,
    dupe_factor,
    short_seq_prob,
    masked_lm_prob,
    max_predictions_per_seq,
    vocab_words,
    do_whole_word_mask,
):
    all_documents = [x for x in all_documents if x]
    rng.shuffle(all_documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(
                google_create_instances_from_document(
                    all_documents,
                    document_index,
                    max_seq_length,
                    short_seq_prob,
                    masked_lm_prob,
                    max_predictions_per_seq,
                    vocab_words,
                    rng,
                    do_whole_word_mask,
                )
            )
    rng.shuffle(instances)
    return instances


def google_create_instances_from_document(
    all_documents,
    document_index,
    max_seq_length,
    short_seq_prob,
    masked_lm_prob,
    max_predictions_per_seq,
    vocab_words,
    rng,
    do_whole_word_mask,
):
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                is_random_next = False
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1
                assert len(tokens_b) >= 1
                tokens = []
                segment_ids = []
                tokens.append("[CLS]")
                segment_ids.append(0)
                for token in tokens_a:
                    tokens.append(token)
                    segment_ids.append(0)
                tokens.append("[SEP]")
                segment_ids.append(0)
                for token in tokens_b:
                    tokens.append(token)
                    segment_ids.append(1)
                tokens.append("[SEP]")
                segment_ids.append(1)
                (tokens, masked_lm_positions, masked_lm_labels) = google_create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask
                )
                instances.append(
                    TrainingInstance(
                        tokens, segment_ids, is_random_next, masked_lm_positions, masked_lm_labels
                    )
                )
            current_chunk = []
            current_length = 0
        i += 1
    return instances


GoogleMaskedLm = collections.namedtuple("GoogleMaskedLm", ["index", "label"])


def google_create_masked_lm_predictions(
    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask
):
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if do_whole_word_mask and len(cand_indexes) >= 1 and token.startswith("##"):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        is_any_index_covered = False
        for index in index_set:
            if index in covered_indexes:
                is_any_index_covered = True
                break
        if is_any_index_covered:
            continue
        for index in index_set:
            covered_indexes.add(index)
            masked_token = None
            if rng.random() < 0.8:
                masked_token = "[MASK]"
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(GoogleMaskedLm(index=index, label=tokens[index]))
    assert len(masked_lms) <= num_to_predict
    masked_lms = sorted(masked_lms, key=lambda x: x.index)
    masked_lm_positions = []
    masked_lm_labels = []
    for p in masked_lms:
        masked_lm_positions.append(p.index)
        masked_lm_labels.append(p.label)
    return (output_tokens, masked_lm_positions, masked_lm_labels)


def google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def google_read_documents(input_files, tokenizer):
    all_documents = [[]]
    for input_file in input_files:
        with open(input_file, "rb") as reader:
            # TF's GFile yields lines split at b"\n" only.
            for raw in reader.read().split(b"\n"):
                line = raw.decode("utf-8").strip()
                if not line:
                    all_documents.append([])
                else:
                    tokens = tokenizer.tokenize(line)
                    if tokens:
                        all_documents[-1].append(tokens)
    return all_documents


def google_examples(instances, vocab, max_seq_length, max_predictions_per_seq, n_outputs):
    """Google's write_instance_to_example_files, as lists of feature dicts per output file."""
    outputs = [[] for _ in range(n_outputs)]
    for k, instance in enumerate(instances):
        input_ids = [vocab[t] for t in instance.tokens]
        input_mask = [1] * len(input_ids)
        segment_ids = list(instance.segment_ids)
        while len(input_ids) < max_seq_length:
            input_ids.append(0)
            input_mask.append(0)
            segment_ids.append(0)
        masked_lm_positions = list(instance.masked_lm_positions)
        masked_lm_ids = [vocab[t] for t in instance.masked_lm_labels]
        masked_lm_weights = [1.0] * len(masked_lm_ids)
        while len(masked_lm_positions) < max_predictions_per_seq:
            masked_lm_positions.append(0)
            masked_lm_ids.append(0)
            masked_lm_weights.append(0.0)
        outputs[k % n_outputs].append(
            {
                "input_ids": input_ids,
                "input_mask": input_mask,
                "segment_ids": segment_ids,
                "masked_lm_positions": masked_lm_positions,
                "masked_lm_ids": masked_lm_ids,
                "masked_lm_weights": masked_lm_weights,
                "next_sentence_labels": [1 if instance.is_random_next else 0],
            }
        )
    return outputs


PINNED = [
    (
        ["[CLS]", "un", "[MASK]", "[MASK]", "[SEP]", "d", "e", "f", "g", "h", "[SEP]"],
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
        True,
        [2, 3],
        ["##aff", "##able"],
    ),
    (
        ["[CLS]", "x", "y", "[SEP]", "[MASK]", "g", "[MASK]", "[SEP]"],
        [0, 0, 0, 0, 1, 1, 1, 1],
        True,
        [4, 6],
        ["f", "h"],
    ),
    (
        ["[CLS]", "[MASK]", "b", "c", "d", "e", "[SEP]", "f", "g", "h", "[SEP]"],
        [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
        False,
        [1, 8],
        ["a", "g"],
    ),
]


WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or "
    "has had not but their first new two after one also who its they been have into more other than "
    "some when time most only about over such"
).split() + [
    "café",
    "Zürich",
    "naïve",
    "résumé",
    "東京",
    "日本語を",
    "ΣΟΦΙΑ",
    "Straße",
    "l’école",
    "e-mail",
    "U.S.",
    "$100",
    "3.14",
    "C++",
    "😀",
    "x" * 120,
    "antidisestablishmentarianism",
    "unaffable",
    "Müller-Lüdenscheidt",
    "İstanbul",
    "a\u0301b",
    "ﬁne",
    "\u00a0nbsp",
    "zero\u200bwidth",
    "tab\there",
    "ctrl\x07char",
    "«quoted»",
    # Where a tokenizer can part from Google's: a 150-character word (WordPieces, not
    # [UNK]), private use, CJK Extension E, final capital sigma, characters newer than Rust's
    # Unicode tables (format U+0890, punctuation U+2E52, combining U+1AC1, astral format U+13430).
    "y" * 150,
    "pri\ue000vate",
    "\U0002b820\U0002b821",
    "ΟΔΟΣ",
    "a\u0890b\u2e52c\u1ac1d",
    "hiero\U00013430glyph",
]


def write_corpus(path, seed=0, n_docs=40):
    rng = random.Random(seed)
    lines = []
    for d in range(n_docs):
        for _ in range(rng.choice([1, 1, 2, 3, 5, 8, 12])):
            n = rng.choice([1, 2, 4, 8, 15, 30]) if rng.random() < 0.97 else 250
            lines.append(" ".join(rng.choice(WORDS) for _ in range(n)))
        if d % 9 == 3:
            lines.append("\x01\x02")  # no tokens: skipped, not a document boundary
        lines.append(rng.choice(["", "", "   ", "\u00a0", "\t"]))  # blank: next document
        if d % 11 == 5:
            lines.append("")  # an empty document
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def read_examples(path, S, P):
    from tensorflow.core.example import example_pb2

    out = []
    for data in tfrecord.read_records(path):
        example = example_pb2.Example.FromString(data)
        f = example.features.feature
        out.append(
            {
                name: list(
                    f[name].float_list.value if name == "masked_lm_weights" else f[name].int64_list.value
                )
                for name in schema.FEATURE_NAMES
            }
        )
    return out
