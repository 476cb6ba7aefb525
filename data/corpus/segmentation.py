"""Rule-based sentence segmentation: offline, deterministic, no model download, pure Python.

Why our own: NLTK's punkt needs a model download at run time, pysbd is unmaintained and slow,
and a segmenter shipped as native code adds a binary dependency for a step that BERT's
pretraining is not sensitive to (NSP pairs span several sentences anyway). The rules:

- A sentence ends at `.`, `!`, `?` or `…` (plus any closing quotes/brackets) followed by
  whitespace and then an upper-case letter, a digit, a caseless letter (CJK, Arabic, ...) or
  an opening quote/bracket before one. Lower-case continuations never split, so most
  abbreviations in running text ("approx. half", "e.g. sugarcane") are safe by construction.
- `。！？` end a sentence without needing a space.
- A `.` does not end a sentence after: a title or fixed abbreviation (Mr., Dr., St., Gen.,
  e.g., i.e., cf., vs., et al., ...); a numbering abbreviation before a number (No. 5,
  Vol. 3, p. 12, Fig. 2); a single capital letter (initials: J. R. R. Tolkien); or a dotted
  acronym (U.S., Ph.D., a.m.) unless the next word is a common sentence opener ("The", "It").
- Decimals (3.14), URLs and "1,250.00" contain no space after the dot and never split.
"""

from __future__ import annotations

import re

_NEVER_SPLIT_AFTER = frozenset(
    """
mr mrs ms mx messrs mme mlle dr prof rev hon rt st mt ft gen col lt sgt capt cpt cmdr adm gov sen
rep pres supt brig maj cpl pvt insp det gov fr sr sra srta
e.g eg i.e ie cf vs viz al approx ca esp incl resp dept univ assn bros
jan feb mar apr jun jul aug sep sept oct nov dec
""".split()
)
_NUMBERING_ABBREVIATIONS = frozenset(
    "no nos nr vol vols pp p fig figs eq eqs ch chap sec secs art op ed para paras pt pts ser tab".split()
)
_SENTENCE_OPENERS = frozenset(
    """
The This That These Those It Its He She They We I In On At A An But However After Before Since When
While There His Her Their Our As For If Although Then Thus Also During Many Some Most One Two Today
Later Other Both Each Such Yet So Because Following According Despite Under From By With Why What
How Who Where
""".split()
)
_OPENERS = "\"'“‘«([{¿¡"
_CLOSERS = "\"'”’»)]}"

_CANDIDATE = re.compile(r"[.!?…]+[\"'”’»)\]}]*(?=\s)|[。！？]+[」』”’）)]*(?=\S)")
_DOTTED_ACRONYM = re.compile(r"(?:[A-Za-z]{1,3}\.)+[A-Za-z]{1,3}")


def _starts_sentence(char: str) -> bool:
    # Upper case, digits, and letters without case (CJK, Arabic, Hebrew, Devanagari, ...).
    return char.isupper() or char.isdigit() or (char.isalpha() and not char.islower())


def _is_boundary(text: str, match: re.Match) -> bool:
    mark = match.group()
    if mark[0] in "。！？":
        return True
    n = len(text)
    k = match.end()
    while k < n and text[k].isspace():
        k += 1
    while k < n and text[k] in _OPENERS:
        k += 1
    if k >= n or not _starts_sentence(text[k]):
        return False
    punct = mark.rstrip(_CLOSERS)
    if punct != ".":
        return True  # ! ? … and "..." before a capital
    space = text.rfind(" ", 0, match.start())
    previous = text[space + 1 : match.start()].lstrip(_OPENERS)
    if not previous:
        return True
    lower = previous.lower()
    if lower in _NEVER_SPLIT_AFTER:
        return False
    if lower in _NUMBERING_ABBREVIATIONS and text[k].isdigit():
        return False
    if len(previous) == 1 and previous.isupper():
        return False  # an initial
    if "." in previous and _DOTTED_ACRONYM.fullmatch(previous):
        end = k
        while end < n and text[end].isalpha():
            end += 1
        return text[k:end] in _SENTENCE_OPENERS
    return True


def split_sentences(text: str) -> list[str]:
    """Splits one document (a single line of text) into sentences, stripped, none empty."""
    sentences, start = [], 0
    for match in _CANDIDATE.finditer(text):
        if _is_boundary(text, match):
            sentence = text[start : match.end()].strip()
            if sentence:
                sentences.append(sentence)
            start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def split_long(sentence: str, max_chars: int) -> list[str]:
    """Cuts a sentence longer than `max_chars` at spaces into pieces of at most `max_chars` (hard cut
    inside a single longer word)."""
    if len(sentence) <= max_chars:
        return [sentence]
    pieces, current = [], ""
    for word in sentence.split(" "):
        while len(word) > max_chars:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:max_chars])
            word = word[max_chars:]
        if current and len(current) + 1 + len(word) > max_chars:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces
