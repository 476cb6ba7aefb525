"""Masked-LM predictions, exactly as Google's create_pretraining_data.py makes them.

Tokens may be strings (as in Google's code) or vocabulary ids (as our writer keeps them):
`MaskingVocab` says, in the same token type, which tokens are [CLS]/[SEP]/[MASK], which
ones continue a word ("##" pieces) and which ones a random replacement is drawn from.
The function reads no flags: whole-word masking is an argument.

The random draws, in order (each a call on the one `rng`): one `shuffle` of the candidate
groups, then per masked token `random() < 0.8` -> [MASK]; else `random() < 0.5` -> keep;
else `randint(0, len(words) - 1)` -> a random vocabulary word. data/pretraining/native.c
repeats this draw for draw.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Sequence

from bert.tokenization import CLS_TOKEN, MASK_TOKEN, SEP_TOKEN

# Google's masked-LM rate: the share of a sequence's tokens masked (rounded, at least one), for
# records written masked and for unmasked records masked as read (training/masking.py).
MASKED_LM_PROB = 0.15

MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])


def is_continuation_piece(token):
    """WordPiece marks the pieces after a word's first one with "##"."""
    return token.startswith("##")


@dataclasses.dataclass(frozen=True)
class MaskingVocab:
    """The vocabulary as masking sees it, in the token type of the instances."""

    words: Sequence[Any]  # random replacements: Google's `list(tokenizer.vocab.keys())`
    cls: Any
    sep: Any
    mask: Any
    is_continuation: Callable[[Any], bool]

    @classmethod
    def of_strings(cls, vocab):
        """Token strings, as Google's code handles them."""
        return cls(list(vocab.keys()), CLS_TOKEN, SEP_TOKEN, MASK_TOKEN, is_continuation_piece)

    @classmethod
    def of_ids(cls, vocab):
        """Token ids. `words[i]` is the id of Google's `vocab_words[i]` (the id a duplicate
        vocabulary line ends up with, as convert_tokens_to_ids gives it)."""
        continuation = bytearray(max(vocab.values()) + 1)
        for token, index in vocab.items():
            if is_continuation_piece(token):
                continuation[index] = 1
        return cls(
            list(vocab.values()),
            vocab[CLS_TOKEN],
            vocab[SEP_TOKEN],
            vocab[MASK_TOKEN],
            continuation.__getitem__,
        )


def num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq):
    """How many tokens an instance of `num_tokens` (specials included) masks."""
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def create_masked_lm_predictions(
    tokens, rng, *, masked_lm_prob, max_predictions_per_seq, vocab, do_whole_word_mask=False
):
    """Google's create_masked_lm_predictions.

    Args:
      tokens: the instance `[CLS] A [SEP] B [SEP]` (strings or ids, as `vocab`).
      rng: the random.Random every step of instance creation draws from.
      vocab: a MaskingVocab in the token type of `tokens`.
      do_whole_word_mask: mask all pieces of a word together ("##" pieces join the group of
        the piece before them, even across [SEP], as in the reference).

    Returns (output_tokens, masked_lm_positions, masked_lm_labels): the tokens with the
    replacements made, the masked positions in increasing order and their original tokens.
    """
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token == vocab.cls or token == vocab.sep:
            continue
        if do_whole_word_mask and cand_indexes and vocab.is_continuation(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])

    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    limit = num_to_predict(len(tokens), masked_lm_prob, max_predictions_per_seq)

    masked_lms = []
    words = vocab.words
    for index_set in cand_indexes:
        if len(masked_lms) >= limit:
            break
        # A whole word that would overshoot the budget is skipped, not cut.
        if len(masked_lms) + len(index_set) > limit:
            continue
        # (The reference also skips groups with an already covered index; groups are
        # disjoint, so that never happens.)
        for index in index_set:
            if rng.random() < 0.8:
                masked_token = vocab.mask
            elif rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = words[rng.randint(0, len(words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))

    masked_lms.sort(key=lambda x: x.index)
    return (output_tokens, [m.index for m in masked_lms], [m.label for m in masked_lms])
