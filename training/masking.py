"""Masked-LM predictions drawn as unmasked records are read (dynamic masking, RoBERTa's finding):
Google's rules, drawn from (seed, sequence) alone, where sequence is the record's position in the
global order (training/data_order.py). A sequence is masked differently in every epoch (its
position differs), identically whichever worker reads it and in whatever micro-batch, and a
resumed or resized run draws the same masks as an uninterrupted one.

The rules, those of Google's create_masked_lm_predictions (data/pretraining/masking.py draws them
from one random.Random, draw for draw as Google's script; here every draw has its own counter):

- candidates are the real tokens other than [CLS] and [SEP]; with whole-word masking a "##" piece
  joins the group of the candidate before it (across [SEP] too, as in the reference);
- the budget is min(P, max(1, round(n x masked_lm_prob))), n counting every real token, specials
  included, rounded half to even as Python's round;
- the groups are visited in a uniformly random order (sorted by uniform keys) and taken while
  they fit: a group that would overshoot the budget is skipped and the next ones are still tried;
- each masked token becomes [MASK] with probability 0.8, else stays itself with probability 0.5,
  else becomes a uniformly random id below the vocabulary size.

Random numbers are counter-based: splitmix64's finaliser over (seed, sequence, position, draw),
53 bits to a uniform float64, 64 bits modulo the vocabulary size to a random id. That is what lets
every record be masked in one vectorised pass over a batch, with no state. The records carry what
the rules need (data/pretraining/schema.py's dynamic layout): the ids of [CLS], [SEP] and [MASK],
the vocabulary size, and word_continues for whole words.

Shapes: B sequences, S max_seq_length, P max_predictions_per_seq.
"""

from __future__ import annotations

import tensorflow as tf

from data.pretraining import schema

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
# Draws per position: the group key, the [MASK] coin, the keep coin, the random id.
KEY, MASK_COIN, KEEP_COIN, RANDOM_ID = range(4)
DRAWS = 4


def _u64(value) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """splitmix64's finaliser (uint64 arithmetic wraps)."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(30))) * _u64(_MIX1)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(27))) * _u64(_MIX2)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(31)))


def random_bits(seed: int, sequences: tf.Tensor, length: int, draw: int) -> tf.Tensor:
    """uint64 [B, length]: draw `draw` of each position of each sequence (int64 [B])."""
    key = _mix(tf.bitcast(tf.constant(seed, tf.int64), tf.uint64) + _u64(_GOLDEN))
    rows = _mix(key ^ _mix(tf.bitcast(tf.cast(sequences, tf.int64), tf.uint64)))  # [B]
    counters = tf.range(length, dtype=tf.int64) * DRAWS + draw + 1
    columns = tf.bitcast(counters, tf.uint64) * _u64(_GOLDEN)  # [length]
    return _mix(rows[:, None] + columns[None, :])


def uniform(seed: int, sequences: tf.Tensor, length: int, draw: int) -> tf.Tensor:
    """float64 [B, length] in [0, 1): the top 53 bits of random_bits."""
    bits = tf.bitwise.right_shift(random_bits(seed, sequences, length, draw), _u64(11))
    return tf.cast(bits, tf.float64) * (1.0 / (1 << 53))


def budget(num_tokens: tf.Tensor, masked_lm_prob: float, max_predictions_per_seq: int) -> tf.Tensor:
    """int32 [B]: how many tokens a sequence of num_tokens (int [B], specials included) masks."""
    rounded = tf.cast(tf.round(tf.cast(num_tokens, tf.float64) * masked_lm_prob), tf.int32)  # half to even
    return tf.minimum(max_predictions_per_seq, tf.maximum(1, rounded))


def _greedy_groups(valid, size, limit):
    """Google's walk over the groups in their random order: bool [B, S] of the sorted slots taken.

    valid: bool [B, S], the slots holding a group (a prefix); size: int32 [B, S], its tokens;
    limit: int32 [B]. Until the first group that overshoots, every group is taken (a cumulative
    sum); after it, the loop takes the next group that still fits, at most once per token left
    in the budget, vectorised over the batch."""
    S = tf.shape(size)[1]
    slots = tf.range(S)[None, :]
    take = valid & (tf.cumsum(size, axis=1) <= limit[:, None])
    left = limit - tf.reduce_sum(tf.where(take, size, 0), axis=1)
    after = tf.reduce_sum(tf.cast(take, tf.int32), axis=1) - 1  # the last slot visited

    def eligible(left, after):
        return valid & (slots > after[:, None]) & (size <= left[:, None]) & (left[:, None] > 0)

    def more(take, left, after):
        return tf.reduce_any(eligible(left, after))

    def next_group(take, left, after):
        fits = eligible(left, after)
        found = tf.reduce_any(fits, axis=1)
        first = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)
        take = take | (tf.one_hot(first, S, on_value=True, off_value=False) & found[:, None])
        left = left - tf.where(found, tf.gather(size, first, batch_dims=1), 0)
        return take, left, tf.where(found, first, S)

    take, _, _ = tf.while_loop(more, next_group, (take, left, after))
    return take


def mask_sequences(
    features: dict, sequences: tf.Tensor, *, seed: int, masked_lm_prob: float, max_predictions_per_seq: int
) -> dict:
    """Unmasked features of a batch (schema.parse_examples with a dynamic layout) -> the static
    layout's features, masked.

    Args:
      features: input_ids, input_mask, segment_ids int32 [B, S]; next_sentence_labels int32 [B, 1];
        masking_ids int32 [B, 4] ([CLS], [SEP], [MASK] ids, vocabulary size); word_continues
        int32 [B, S] when the records were written for whole-word masking.
      sequences: int64 [B], each record's position in the global order (its masks' counter).

    Returns input_ids (masked), input_mask, segment_ids int32 [B, S]; masked_lm_positions,
    masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P]; next_sentence_labels [B, 1].
    """
    ids = features[schema.INPUT_IDS]
    S, P = ids.shape[1], max_predictions_per_seq
    if S is None or P > S:
        raise ValueError(f"max_predictions_per_seq={P} must not exceed the sequence length {S}.")
    B = tf.shape(ids)[0]
    real = features[schema.INPUT_MASK] > 0
    cls, sep, mask_id, vocab_size = tf.unstack(features[schema.MASKING_IDS], axis=1)
    candidate = real & tf.not_equal(ids, cls[:, None]) & tf.not_equal(ids, sep[:, None])
    limit = budget(tf.reduce_sum(tf.cast(real, tf.int32), axis=1), masked_lm_prob, P)

    starts = candidate
    if schema.WORD_CONTINUES in features:
        earlier = tf.cumsum(tf.cast(candidate, tf.int32), axis=1, exclusive=True) > 0
        starts = candidate & ~((features[schema.WORD_CONTINUES] > 0) & earlier)
    group = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # [B, S] the group of a candidate
    rows = tf.range(B)[:, None] * S
    segments = tf.where(candidate, rows + group, B * S)  # non-candidates to a spare segment
    sizes = tf.reshape(
        tf.math.unsorted_segment_sum(tf.ones_like(group), segments, B * S + 1)[:-1], [B, S]
    )  # [B, S] tokens per group id

    # The groups in a random order: their first positions sorted by a uniform key each.
    keys = tf.where(starts, uniform(seed, sequences, S, KEY), 2.0)
    order = tf.argsort(keys, axis=1, stable=True)
    valid = tf.gather(starts, order, batch_dims=1)
    sorted_group = tf.maximum(tf.gather(group, order, batch_dims=1), 0)
    size = tf.where(valid, tf.gather(sizes, sorted_group, batch_dims=1), 0)
    take = _greedy_groups(valid, size, limit)

    taken_groups = tf.reshape(
        tf.math.unsorted_segment_max(
            tf.cast(take, tf.int32), tf.where(valid, rows + sorted_group, B * S), B * S + 1
        )[:-1],
        [B, S],
    )
    masked = candidate & (tf.gather(taken_groups, tf.maximum(group, 0), batch_dims=1) > 0)

    positions = tf.range(S)[None, :]
    first = tf.argsort(tf.where(masked, positions, S + positions), axis=1, stable=True)[:, :P]
    count = tf.reduce_sum(tf.cast(masked, tf.int32), axis=1)
    weights = tf.range(P)[None, :] < count[:, None]  # [B, P]
    masked_positions = tf.where(weights, tf.cast(first, tf.int32), 0)
    labels = tf.where(weights, tf.gather(ids, masked_positions, batch_dims=1), 0)

    random_ids = tf.cast(
        random_bits(seed, sequences, S, RANDOM_ID) % tf.cast(vocab_size, tf.uint64)[:, None], tf.int32
    )
    replaced = tf.where(
        uniform(seed, sequences, S, MASK_COIN) < 0.8,
        tf.broadcast_to(mask_id[:, None], tf.shape(ids)),
        tf.where(uniform(seed, sequences, S, KEEP_COIN) < 0.5, ids, random_ids),
    )
    return {
        schema.INPUT_IDS: tf.where(masked, replaced, ids),
        schema.INPUT_MASK: features[schema.INPUT_MASK],
        schema.SEGMENT_IDS: features[schema.SEGMENT_IDS],
        schema.MASKED_LM_POSITIONS: masked_positions,
        schema.MASKED_LM_IDS: labels,
        schema.MASKED_LM_WEIGHTS: tf.cast(weights, tf.float32),
        schema.NEXT_SENTENCE_LABELS: features[schema.NEXT_SENTENCE_LABELS],
    }
