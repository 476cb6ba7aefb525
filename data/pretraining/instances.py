"""Pretraining instances (NSP pairs + MLM masks), exactly as Google's create_pretraining_data.py.

Pure functions of (documents, rng, options, vocab): given the same tokenized documents and a
random.Random seeded the same, they make the same instances as the reference, instance for
instance, because they draw from `rng` in the reference's order:

    rng.shuffle(documents)                           once
    for each of dupe_factor passes, for each document (create_instances_from_document):
        random() < short_seq_prob [-> randint(2, max_num_tokens)]   the target length
        per chunk: [randint(1, len(chunk) - 1)]                      the A/B split
                   [random() < 0.5]                                  random next?
                   [randint(0, len(documents) - 1) up to 10 times, randint(0, len(doc) - 1)]
                   random() < 0.5 per truncated token                front or back
                   masking (data/pretraining/masking.py)
    rng.shuffle(instances)                           once

This module is the readable specification and the fallback; data/pretraining/native.c
implements the same draws in C for speed, and the tests hold the two to identical output.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from common.cli import check_settings, setting
from common.errors import UserError
from data.pretraining.masking import MASKED_LM_PROB, create_masked_lm_predictions


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """Google's flags for instance creation, each declared once: its kind, Google's default and
    the help text that create_pretraining_data.py's and prepare_data.py's flags read."""

    max_seq_length: int = setting("count", 128, "Maximum sequence length.")
    max_predictions_per_seq: int = setting(
        "count", 20, "Maximum number of masked LM predictions per sequence."
    )
    masked_lm_prob: float = setting("proportion", MASKED_LM_PROB, "Masked LM probability.")
    short_seq_prob: float = setting(
        "proportion", 0.1, "Probability of creating sequences which are shorter than the maximum length."
    )
    dupe_factor: int = setting(
        "count", 10, "Number of times to duplicate the input data (with different masks)."
    )
    do_whole_word_mask: bool = setting(
        "bool", False, "Whether to use whole word masking rather than per-WordPiece masking."
    )

    def __post_init__(self):
        check_settings(self)
        # [CLS] A [SEP] B [SEP] with A and B non-empty, and randint(2, max_num_tokens).
        if self.max_seq_length < 5:
            raise UserError(f"--max_seq_length must be at least 5 (got {self.max_seq_length}).")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise UserError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} exceeds "
                f"--max_seq_length={self.max_seq_length}."
            )


@dataclasses.dataclass
class TrainingInstance:
    """One sentence pair: tokens `[CLS] A [SEP] B [SEP]` after masking."""

    tokens: list[Any]
    segment_ids: list[int]
    is_random_next: bool  # next_sentence_labels = 1 when True
    masked_lm_positions: list[int]
    masked_lm_labels: list[Any]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """Truncates in place to at most `max_num_tokens` in total: one token at a time from the
    longer list (B on ties), from the front or the back at random (avoids a position bias)."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def create_instances_from_document(all_documents, document_index, rng, options, vocab):
    """Google's create_instances_from_document: the instances of one document.

    all_documents: list of documents, each a non-empty list of non-empty sentences (token
    lists). Segment A is one or more whole sentences; B either follows A (label 0) or is taken
    from a random other document (label 1, always when the chunk has one sentence), in which
    case the sentences not used for A are put back for the next instance.
    """
    document = all_documents[document_index]
    max_num_tokens = options.max_seq_length - 3  # [CLS], [SEP], [SEP]

    # Mostly fill the sequence (padding is wasted compute); sometimes (short_seq_prob) aim
    # shorter so pretraining also sees the short inputs of fine-tuning. Drawn once per document.
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
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
                tokens_a = [t for sentence in current_chunk[:a_end] for t in sentence]

                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Rarely more than one try on a real corpus; a one-document corpus keeps
                    # the last draw, i.e. itself.
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
                    # The segments not used for A go back to the document.
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert tokens_a and tokens_b

                tokens = [vocab.cls, *tokens_a, vocab.sep, *tokens_b, vocab.sep]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, masked_lm_positions, masked_lm_labels = create_masked_lm_predictions(
                    tokens,
                    rng,
                    masked_lm_prob=options.masked_lm_prob,
                    max_predictions_per_seq=options.max_predictions_per_seq,
                    vocab=vocab,
                    do_whole_word_mask=options.do_whole_word_mask,
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


def clean_documents(documents):
    """Drops empty sentences and then empty documents, as the reference's reader does."""
    out = []
    for document in documents:
        sentences = [list(s) for s in document if len(s)]
        if sentences:
            out.append(sentences)
    return out


def create_training_instances(documents, rng, options, vocab):
    """Google's create_training_instances after reading: all instances, shuffled.

    documents: tokenized documents (lists of sentences, each a list of tokens in the type of
    `vocab`), in input order. Empty sentences and documents are dropped, the documents are
    shuffled, each pass of dupe_factor makes fresh instances (fresh masks) of every document,
    and the whole list is shuffled at the end.
    """
    all_documents = clean_documents(documents)
    rng.shuffle(all_documents)
    instances = []
    for _ in range(options.dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(
                create_instances_from_document(all_documents, document_index, rng, options, vocab)
            )
    rng.shuffle(instances)
    return instances
