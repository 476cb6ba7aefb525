"""Dynamic masking (training/masking.py): Google's rules drawn from (seed, sequence position).

Exact parity with a plain-Python transcription of the rules over the same counter-based numbers
(its own splitmix64 in Python integers); then each rule on its own: hand-checked budgets, rates
within binomial bounds on many tokens, special tokens and padding never masked, whole-word groups
masked together, the same (seed, position) the same masks and another position or seed others;
and through the input pipeline: one worker and two see the same masks for every sequence, a
resumed order continues with the masks of the uninterrupted one, an epoch later masks anew, and
files of both layouts together are refused in one sentence.
"""

import math
import random

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from data.pretraining import schema, tfrecord
from training import masking
from training.input_pipeline import evaluation_dataset, training_dataset

CLS, SEP, MASK, VOCAB = 101, 102, 103, 30522
IDS = (CLS, SEP, MASK, VOCAB)
M64 = (1 << 64) - 1


# ---- an independent transcription ----------------------------------------------------------


def _mix(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _bits(seed, sequence, position, draw):
    key = _mix((seed + 0x9E3779B97F4A7C15) & M64)
    row = _mix(key ^ _mix(sequence & M64))
    return _mix((row + (position * 4 + draw + 1) * 0x9E3779B97F4A7C15) & M64)


def _uniform(seed, sequence, position, draw):
    return (_bits(seed, sequence, position, draw) >> 11) / float(1 << 53)


def reference(tokens, continues, sequence, seed, prob, P):
    """Google's create_masked_lm_predictions over `tokens` (the real ones), with each draw taken
    from the counter of its position: returns (masked tokens, positions, labels)."""
    groups = []
    for i, t in enumerate(tokens):
        if t in (CLS, SEP):
            continue
        if continues is not None and groups and continues[i]:
            groups[-1].append(i)
        else:
            groups.append([i])
    groups.sort(key=lambda g: (_uniform(seed, sequence, g[0], masking.KEY), g[0]))
    limit = min(P, max(1, round(len(tokens) * prob)))
    chosen = []
    for g in groups:
        if len(chosen) >= limit:
            break
        if len(chosen) + len(g) > limit:
            continue
        chosen += g
    out = list(tokens)
    for i in chosen:
        if _uniform(seed, sequence, i, masking.MASK_COIN) < 0.8:
            out[i] = MASK
        elif _uniform(seed, sequence, i, masking.KEEP_COIN) < 0.5:
            out[i] = tokens[i]
        else:
            out[i] = _bits(seed, sequence, i, masking.RANDOM_ID) % VOCAB
    chosen.sort()
    return out, chosen, [tokens[i] for i in chosen]


# ---- batches ----------------------------------------------------------------------------------


def _sequence(rng, S, min_length=5):
    """[CLS] A [SEP] B [SEP] of random length, ids of words with "##" pieces (flag per token)."""
    n = rng.randrange(min_length, S + 1)
    body = [rng.randrange(1000, 2000) for _ in range(n - 3)]
    continues = [0] + [int(rng.random() < 0.4) for _ in body[1:]]
    split = rng.randrange(1, len(body)) if len(body) > 1 else 1
    tokens = [CLS] + body[:split] + [SEP] + body[split:] + [SEP]
    flags = [0] + continues[:split] + [0] + continues[split:] + [0]
    segments = [0] * (split + 2) + [1] * (n - split - 2)
    return tokens, flags, segments


def _batch(rng, B, S, whole_word):
    rows = [_sequence(rng, S) for _ in range(B)]
    pad = lambda values: [v + [0] * (S - len(v)) for v in values]  # noqa: E731
    features = {
        schema.INPUT_IDS: tf.constant(pad([r[0] for r in rows]), tf.int32),
        schema.INPUT_MASK: tf.constant(pad([[1] * len(r[0]) for r in rows]), tf.int32),
        schema.SEGMENT_IDS: tf.constant(pad([r[2] for r in rows]), tf.int32),
        schema.NEXT_SENTENCE_LABELS: tf.zeros([B, 1], tf.int32),
        schema.MASKING_IDS: tf.constant([IDS] * B, tf.int32),
    }
    if whole_word:
        features[schema.WORD_CONTINUES] = tf.constant(pad([r[1] for r in rows]), tf.int32)
    return rows, features


def _mask(features, sequences, seed=5, prob=0.15, P=20):
    return masking.mask_sequences(
        features, tf.constant(sequences, tf.int64), seed=seed, masked_lm_prob=prob, max_predictions_per_seq=P
    )


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize("prob,P", [(0.15, 20), (0.5, 6), (0.9, 40)])
def test_equals_the_transcription_of_googles_rules(whole_word, prob, P):
    rng = random.Random(int(prob * 100) + P + whole_word)
    S, B = 48, 32
    rows, features = _batch(rng, B, S, whole_word)
    sequences = [rng.randrange(0, 1 << 40) for _ in range(B)]
    got = {k: v.numpy() for k, v in _mask(features, sequences, seed=-3, prob=prob, P=P).items()}
    for b, (tokens, flags, segments) in enumerate(rows):
        out, positions, labels = reference(tokens, flags if whole_word else None, sequences[b], -3, prob, P)
        n, m = len(tokens), len(positions)
        assert got[schema.INPUT_IDS][b].tolist() == out + [0] * (S - n), b
        assert got[schema.MASKED_LM_POSITIONS][b].tolist() == positions + [0] * (P - m)
        assert got[schema.MASKED_LM_IDS][b].tolist() == labels + [0] * (P - m)
        assert got[schema.MASKED_LM_WEIGHTS][b].tolist() == [1.0] * m + [0.0] * (P - m)
        assert got[schema.SEGMENT_IDS][b].tolist() == segments + [0] * (S - n)


def test_in_a_compiled_function_too():
    rows, features = _batch(random.Random(1), 8, 32, True)
    eager = _mask(features, list(range(8)))
    compiled = tf.function(lambda f: _mask(f, list(range(8))))(features)
    for name in eager:
        np.testing.assert_array_equal(eager[name].numpy(), compiled[name].numpy())


@pytest.mark.parametrize(
    "tokens,prob,P,expected",
    [
        (10, 0.15, 20, 2),
        (30, 0.15, 20, 4),
        (50, 0.15, 20, 8),
        (5, 0.15, 20, 1),
        (200, 0.15, 20, 20),
        (7, 0.0, 3, 1),
    ],
)
def test_budget_is_googles_rounded_half_to_even(tokens, prob, P, expected):
    # 30 x 0.15 = 4.5 -> 4 and 10 x 0.15 = 1.5 -> 2, as Python's round; at least 1, at most P.
    assert masking.budget(tf.constant([tokens]), prob, P).numpy().tolist() == [expected]
    assert min(P, max(1, round(tokens * prob))) == expected


def test_rates_special_tokens_and_padding():
    rng = random.Random(7)
    S, B = 128, 256
    rows, features = _batch(rng, B, S, False)
    got = _mask(features, list(range(B)), P=S)
    ids, original = got[schema.INPUT_IDS].numpy(), features[schema.INPUT_IDS].numpy()
    weights = got[schema.MASKED_LM_WEIGHTS].numpy()
    positions = got[schema.MASKED_LM_POSITIONS].numpy()
    real = features[schema.INPUT_MASK].numpy() > 0
    special = (original == CLS) | (original == SEP)
    masked = np.zeros_like(real)
    for b in range(B):
        masked[b, positions[b][weights[b] > 0]] = True
    assert not (masked & (special | ~real)).any()  # never [CLS], [SEP] or padding
    assert ((ids != original) <= masked).all()  # nothing changes outside the masked positions
    # Every sequence masks exactly its budget (plenty of candidates here).
    assert (masked.sum(1) == [min(S, max(1, round(real[b].sum() * 0.15))) for b in range(B)]).all()
    n = int(masked.sum())
    assert n > 2000
    as_mask = int((ids[masked] == MASK).sum())
    kept = int((ids[masked] == original[masked]).sum())
    replaced = n - as_mask - kept
    for count, p in ((as_mask, 0.8), (kept, 0.1), (replaced, 0.1)):
        assert abs(count - n * p) < 4.5 * math.sqrt(n * p * (1 - p)), (count, n, p)
    # Random replacements spread over the whole vocabulary.
    randoms = ids[masked & (ids != MASK) & (ids != original)]
    assert randoms.min() < VOCAB // 4 and randoms.max() > 3 * VOCAB // 4


def test_masked_positions_are_uniform_over_the_candidates():
    # 2,000 copies of one sequence at different positions: each candidate is masked about equally.
    tokens = [CLS] + list(range(1000, 1019)) + [SEP]
    B, S = 2000, len(tokens)
    features = {
        schema.INPUT_IDS: tf.constant([tokens] * B, tf.int32),
        schema.INPUT_MASK: tf.ones([B, S], tf.int32),
        schema.SEGMENT_IDS: tf.zeros([B, S], tf.int32),
        schema.NEXT_SENTENCE_LABELS: tf.zeros([B, 1], tf.int32),
        schema.MASKING_IDS: tf.constant([IDS] * B, tf.int32),
    }
    got = _mask(features, list(range(B)), P=5)
    positions = got[schema.MASKED_LM_POSITIONS].numpy()[got[schema.MASKED_LM_WEIGHTS].numpy() > 0]
    counts = np.bincount(positions, minlength=S)
    assert counts[0] == counts[-1] == 0
    expected = B * 3 / 19  # budget round(21 x 0.15) = 3 of 19 candidates
    assert (np.abs(counts[1:-1] - expected) < 4.5 * math.sqrt(expected)).all(), counts


def test_whole_words_are_masked_together():
    rng = random.Random(3)
    S, B = 64, 128
    rows, features = _batch(rng, B, S, True)
    got = _mask(features, list(range(B)), prob=0.3, P=S)
    weights, positions = got[schema.MASKED_LM_WEIGHTS].numpy(), got[schema.MASKED_LM_POSITIONS].numpy()
    words_cut = long_words_masked = 0
    for b, (tokens, flags, _) in enumerate(rows):
        chosen = set(positions[b][weights[b] > 0].tolist())
        groups = []
        for i, t in enumerate(tokens):
            if t in (CLS, SEP):
                continue
            if flags[i] and groups:
                groups[-1].append(i)
            else:
                groups.append([i])
        for g in groups:
            words_cut += 0 < len(chosen & set(g)) < len(g)
        assert sum(len(g) for g in groups if chosen & set(g)) == len(chosen)
        long_words_masked += sum(len(g) > 1 and set(g) <= chosen for g in groups)
    assert words_cut == 0 and long_words_masked > 100


def test_same_seed_and_position_same_masks_else_others():
    rows, features = _batch(random.Random(2), 64, 64, False)

    def drawn(sequences, seed=5):
        got = _mask(features, sequences, seed=seed)
        return np.concatenate([got[schema.INPUT_IDS].numpy(), got[schema.MASKED_LM_POSITIONS].numpy()], 1)

    a = drawn(list(range(64)))
    np.testing.assert_array_equal(a, drawn(list(range(64))))
    # Another position (the next epoch's) or another seed: other masks, except by chance where a
    # short sequence has few candidates.
    for other in (drawn(list(range(1000, 1064))), drawn(list(range(64)), seed=6)):
        assert (a != other).any(axis=1).sum() >= 56


# ---- through the input pipeline ---------------------------------------------------------------


def _write_unmasked(path, n, seed, S=24):
    rng = random.Random(seed)
    with tfrecord.RecordWriter(str(path)) as w:
        for _ in range(n):
            tokens, flags, segments = _sequence(rng, S, min_length=8)
            features = schema.unmasked_features(tokens, segments, rng.random() < 0.5, IDS, None, S)
            w.write(schema.serialize_example(features, schema.Layout(schema.DYNAMIC)))
    return str(path)


@pytest.fixture(scope="module")
def unmasked_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("unmasked")
    return [_write_unmasked(root / f"part-{i}.tfrecord", 50, i) for i in range(2)]


def _updates(files, workers, start=0, updates=6, B=4, accumulation=1, bin_size=0):
    """Per update: every masked sequence of it (input_ids, positions) as a sorted list of tuples."""
    streams = [
        iter(
            training_dataset(
                files,
                B,
                24,
                5,
                num_workers=workers,
                worker_index=r,
                start=start,
                seed=9,
                window=16,
                accumulation=accumulation,
                bin_size=bin_size,
            )
        )
        for r in range(workers)
    ]
    out = []
    for _ in range(updates):
        rows = []
        for stream in streams:
            for _ in range(accumulation):
                batch = next(stream)
                ids, positions = batch[schema.INPUT_IDS].numpy(), batch[schema.MASKED_LM_POSITIONS].numpy()
                rows += [(tuple(i[i > 0]), tuple(p)) for i, p in zip(ids, positions)]
        out.append(sorted(rows))
    return out


@pytest.mark.slow
def test_one_worker_and_two_see_the_same_masks_and_a_resume_continues_them(unmasked_files):
    one = _updates(unmasked_files, 1, B=8)
    two = _updates(unmasked_files, 2, B=4)
    binned = _updates(unmasked_files, 2, B=2, accumulation=2, bin_size=8)
    assert one == two == binned
    resumed = _updates(unmasked_files, 1, start=3 * 8, updates=3, B=8)
    assert resumed == one[3:]


def test_each_epoch_masks_anew(unmasked_files):
    # 100 records, batch 10: epoch 1 holds the same sequences in a new order, with new masks.
    epochs = _updates(unmasked_files, 1, B=10, updates=20)
    first, second = [row for u in epochs[:10] for row in u], [row for u in epochs[10:] for row in u]
    assert len(first) == len(second) == 100 and first != second
    unmask = lambda rows: sorted(r[0] for r in rows)  # noqa: E731
    assert unmask(first) != unmask(second)  # masked ids differ, so the sets differ too


def test_evaluation_masks_the_same_each_time(unmasked_files):
    a = [
        b[schema.INPUT_IDS].numpy() for b in evaluation_dataset(unmasked_files, 8, 24, 5, bin_size=8, seed=1)
    ]
    b = [
        b[schema.INPUT_IDS].numpy() for b in evaluation_dataset(unmasked_files, 8, 24, 5, bin_size=8, seed=1)
    ]
    assert len(a) == 13 and all((x == y).all() for x, y in zip(a, b))


def test_masked_and_unmasked_files_together_are_refused(unmasked_files, tmp_path):
    from tools import tiny_pretraining

    masked = tiny_pretraining.write_records(tmp_path / "masked.tfrecord", 4, seed=0, seq=24, predictions=5)
    with pytest.raises(UserError) as e:
        training_dataset([unmasked_files[0], masked], 4, 24, 5)
    message = str(e.value)
    assert unmasked_files[0] in message and masked in message and "mixes record layouts" in message
    assert message.count(".") >= 1 and "\n" not in message
