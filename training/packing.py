"""Sequences packed into rows within one update: the same sequences in every update, less padding.

The global order (training/data_order.py) decides which W x k x B sequences form an update, as
without packing. Packing only changes their layout: the update's sequences are placed into rows
of max_seq_length S (best fit, longest first: a sequence goes into the row whose free space fits
it most tightly), and every micro-batch of the update gets the same row count R: the rows needed,
rounded up to a multiple of `row_quantum(B)` (XLA compiles one program per R, at most B /
quantum of them) and never more than B. Rows left over are empty (all padding, no sequence). The
rows are then dealt to the W x k micro-batches (worker r's micro-batch j is slot j x W + r):

- rows of S (bin_size 0): sorted by their real tokens and dealt as a snake over the slots, so
  every worker's share of tokens is about equal;
- with bins (bin_size > 0, training/length_bins.py): sorted by their real tokens (empty rows
  first) and cut into W x k runs of R consecutive rows, the runs dealt to the workers as a snake
  (as `length_bins.deal_by_length` deals sequences); each micro-batch is then cut to the bin
  length of its fullest row, so the update's partly filled rows cost only their bins.

In a row, each sequence keeps its own positions (0 from its first token), token types and
masked-LM predictions, and attends only to itself (the model builds a block-diagonal attention
bias from `sequence_ids`); its next-sentence prediction comes from its own [CLS]. The loss sums
over the same sequences as unpacked and divides by the same update-wide counts (masked tokens,
sequences: training/objective.py), so an update's gradient is the unpacked one up to float
summation order.

Bounds per row: at most `max_sequences` M sequences and Q = P masked-LM
predictions, the P of one sequence of S tokens. Google's rule gives a sequence of n tokens
round(0.15 n) predictions (at least 1, at most P), so the sequences that fill a row of S rarely
hold more; a sequence that would break either bound goes to another row. Q = P keeps the
masked-LM head's work per row that of an unpacked sequence.

Shapes: G an update's sequences (W x k x B), S max_seq_length, P max_predictions_per_seq, M
sequences per row, Q predictions per row, R rows per micro-batch, W workers, k micro-batches per
worker.
"""

from __future__ import annotations

import numpy as np

MAX_SEQUENCES = 8  # per row: enough for phase 1's short sequences and phase 2's tails
# The packed micro-batch's features beyond the unpacked ones.
PACKED_FEATURES = ("position_ids", "sequence_ids", "cls_positions", "next_sentence_weights")


def row_quantum(batch_size: int) -> int:
    """Row counts are multiples of this: at most 16 shapes per micro-batch size."""
    return max(1, -(-batch_size // 16))


def row_counts(batch_size: int) -> tuple[int, ...]:
    """Every row count R a micro-batch of `batch_size` may have, fewest first."""
    quantum = row_quantum(batch_size)
    return (*range(quantum, batch_size, quantum), batch_size)


def pack(lengths, predictions, max_seq_length: int, max_sequences: int, max_predictions: int) -> list:
    """Rows of sequence indices (each row in the order its sequences were placed): best fit
    decreasing. lengths, predictions: int [G], each sequence's real tokens and masked-LM
    predictions. Equal lengths are placed in index order, so the rows depend on the lengths and
    predictions alone."""
    lengths = np.asarray(lengths, np.int64)
    predictions = np.asarray(predictions, np.int64)
    if len(lengths) and (lengths.min() < 1 or lengths.max() > max_seq_length):
        raise ValueError(f"sequence lengths must be within 1..{max_seq_length}.")
    if len(predictions) and predictions.max() > max_predictions:
        raise ValueError(f"a sequence has more than {max_predictions} masked-LM predictions.")
    rows: list[list[int]] = []
    room: list[int] = []  # free tokens of each row
    guessed: list[int] = []  # predictions of each row
    # open[c]: the rows with c tokens free that may still take a sequence, oldest first
    open_rows: list[list[int]] = [[] for _ in range(max_seq_length + 1)]
    for i in np.argsort(-lengths, kind="stable"):
        length, count = int(lengths[i]), int(predictions[i])
        chosen = -1
        for free in range(length, max_seq_length + 1):
            for row in open_rows[free]:
                if len(rows[row]) < max_sequences and guessed[row] + count <= max_predictions:
                    chosen = row
                    break
            if chosen >= 0:
                open_rows[free].remove(chosen)
                break
        if chosen < 0:
            chosen = len(rows)
            rows.append([])
            room.append(max_seq_length)
            guessed.append(0)
        rows[chosen].append(int(i))
        room[chosen] -= length
        guessed[chosen] += count
        if room[chosen] > 0 and len(rows[chosen]) < max_sequences:
            open_rows[room[chosen]].append(chosen)
    return rows


def deal(
    rows: list, lengths, num_workers: int, accumulation: int, batch_size: int, by_length: bool = False
) -> tuple[int, list]:
    """(R, slots): the row count of every micro-batch of the update, and for each of the W x k
    micro-batches (slot j x W + r: worker r's j-th) the indices into `rows` it holds, at most R.
    Rows are sorted by real tokens (ties by index). Without `by_length` (rows of S) they are
    dealt one by one as a snake over the slots, the fullest first; with it (bins) the sorted rows,
    emptiest first and padded with empty rows to W x k x R, are cut into runs of R, and round j's
    W runs go to workers 0..W-1 when j is even and W-1..0 when j is odd."""
    slots_count = num_workers * accumulation
    quantum = row_quantum(batch_size)
    needed = -(-len(rows) // slots_count)
    count = min(batch_size, -(-needed // quantum) * quantum) if needed else quantum
    if len(rows) > count * slots_count:
        raise ValueError(f"{len(rows)} rows do not fit {slots_count} micro-batches of {count}.")
    lengths = np.asarray(lengths, np.int64)
    tokens = np.array([int(lengths[row].sum()) for row in rows], np.int64)
    slots: list[list[int]] = [[] for _ in range(slots_count)]
    if by_length:
        empty = count * slots_count - len(rows)
        order = [*([-1] * empty), *(int(row) for row in np.argsort(tokens, kind="stable"))]
        for run in range(slots_count):
            turn, seat = divmod(run, num_workers)
            worker = seat if turn % 2 == 0 else num_workers - 1 - seat
            slots[turn * num_workers + worker] = [
                row for row in order[run * count : (run + 1) * count] if row >= 0
            ]
        return count, slots
    order = np.argsort(-tokens, kind="stable")
    for n, row in enumerate(order):
        turn, seat = divmod(n, slots_count)
        slots[seat if turn % 2 == 0 else slots_count - 1 - seat].append(int(row))
    return count, slots


def layout(
    features: dict,
    row_sequences: list,
    count: int,
    max_seq_length: int,
    max_sequences: int,
    max_predictions: int,
) -> dict:
    """One packed micro-batch of `count` rows (numpy): row n holds the sequences
    row_sequences[n] (indices into `features`, the update's unpacked features: input_ids,
    input_mask, segment_ids [G, S], masked_lm_positions, masked_lm_ids, masked_lm_weights [G, P],
    next_sentence_labels [G, 1]); rows past len(row_sequences) are empty.

    Returns input_ids, input_mask, segment_ids, position_ids, sequence_ids int32 [R, S] (sequence
    n of a row is n + 1 in sequence_ids, padding 0); masked_lm_positions, masked_lm_ids int32 and
    masked_lm_weights float32 [R, Q]; cls_positions, next_sentence_labels int32 and
    next_sentence_weights float32 [R, M]."""
    S, M, Q = max_seq_length, max_sequences, max_predictions
    out = {name: np.zeros((count, S), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    out["position_ids"] = np.zeros((count, S), np.int32)
    out["sequence_ids"] = np.zeros((count, S), np.int32)
    out["masked_lm_positions"] = np.zeros((count, Q), np.int32)
    out["masked_lm_ids"] = np.zeros((count, Q), np.int32)
    out["masked_lm_weights"] = np.zeros((count, Q), np.float32)
    out["cls_positions"] = np.zeros((count, M), np.int32)
    out["next_sentence_labels"] = np.zeros((count, M), np.int32)
    out["next_sentence_weights"] = np.zeros((count, M), np.float32)
    placed = [(n, slot, i) for n, row in enumerate(row_sequences) for slot, i in enumerate(row)]
    if not placed:
        return out
    row_of, slot_of, seq = (np.array(column, np.int64) for column in zip(*placed))
    lengths = features["input_mask"][seq].sum(axis=1).astype(np.int64)
    # Each sequence starts where the earlier ones of its row end.
    ends = np.cumsum(lengths)
    starts_in_order = ends - lengths
    first_of_row = np.searchsorted(row_of, row_of, side="left")
    offset = starts_in_order - starts_in_order[first_of_row]
    # Tokens: sequence t's token p goes to (row, offset + p).
    token_seq = np.repeat(np.arange(len(seq)), lengths)
    within = np.arange(int(ends[-1])) - np.repeat(starts_in_order, lengths)
    rows, columns = row_of[token_seq], offset[token_seq] + within
    source = seq[token_seq]
    for name in ("input_ids", "input_mask", "segment_ids"):
        out[name][rows, columns] = features[name][source, within]
    out["position_ids"][rows, columns] = within
    out["sequence_ids"][rows, columns] = slot_of[token_seq] + 1
    # Predictions: each sequence's real ones, after those of the earlier sequences of its row.
    real = np.asarray(features["masked_lm_weights"])[seq] > 0  # [T, P]
    t, p = np.nonzero(real)
    counts = real.sum(axis=1)
    pred_ends = np.cumsum(counts)
    pred_starts = pred_ends - counts
    rank = np.arange(len(t)) - pred_starts[first_of_row][t]  # counted from the row's first prediction
    if len(t) and rank.max() >= Q:
        raise ValueError(f"a row holds more than {Q} masked-LM predictions.")
    pred_rows = row_of[t]
    out["masked_lm_positions"][pred_rows, rank] = features["masked_lm_positions"][seq[t], p] + offset[t]
    out["masked_lm_ids"][pred_rows, rank] = features["masked_lm_ids"][seq[t], p]
    out["masked_lm_weights"][pred_rows, rank] = features["masked_lm_weights"][seq[t], p]
    if slot_of.max() >= M:
        raise ValueError(f"a row holds more than {M} sequences.")
    out["cls_positions"][row_of, slot_of] = offset
    out["next_sentence_labels"][row_of, slot_of] = np.asarray(features["next_sentence_labels"])[seq, 0]
    out["next_sentence_weights"][row_of, slot_of] = 1.0
    return out


def plan(
    lengths,
    predictions,
    max_seq_length: int,
    max_predictions_per_seq: int,
    num_workers: int,
    worker_index: int,
    accumulation: int,
    batch_size: int,
    max_sequences: int = MAX_SEQUENCES,
    by_length: bool = False,
) -> np.ndarray:
    """Worker `worker_index`'s k micro-batches of one update as int32 [k, R, M]: the update's
    sequences (indices into its G, in the global order; -1 for none) of each row. lengths,
    predictions: int [G], real tokens and masked-LM predictions (an upper bound will do) of each;
    by_length: rows dealt in runs for bins (`deal`)."""
    rows = pack(lengths, predictions, max_seq_length, max_sequences, max_predictions_per_seq)
    count, slots = deal(rows, lengths, num_workers, accumulation, batch_size, by_length)
    out = np.full((accumulation, count, max_sequences), -1, np.int32)
    for j in range(accumulation):
        for n, r in enumerate(slots[j * num_workers + worker_index]):
            out[j, n, : len(rows[r])] = rows[r]
    return out


def layouts(features: dict, rows: np.ndarray, max_sequences: int = MAX_SEQUENCES) -> dict:
    """`layout` of each micro-batch of `rows` (int [k, R, M], indices into `features`, -1 for
    none), stacked: {name: [k, R, ...]}."""
    S = features["input_ids"].shape[1]
    Q = features["masked_lm_positions"].shape[1]  # a row holds one sequence's P predictions
    count = rows.shape[1]
    batches = [
        layout(features, [[int(i) for i in row if i >= 0] for row in micro], count, S, max_sequences, Q)
        for micro in rows
    ]
    return {name: np.stack([b[name] for b in batches]) for name in batches[0]}


def pack_update(
    features: dict,
    num_workers: int,
    worker_index: int,
    accumulation: int,
    batch_size: int,
    max_sequences: int = MAX_SEQUENCES,
    by_length: bool = False,
) -> list:
    """Worker `worker_index`'s k packed micro-batches (layout's dicts, R rows each) of one
    update's G = W x k x B unpacked features (numpy, in the global order); by_length as `plan`
    (the micro-batches are not cut to bins here)."""
    lengths = features["input_mask"].sum(axis=1)
    predictions = (np.asarray(features["masked_lm_weights"]) > 0).sum(axis=1)
    P = features["masked_lm_positions"].shape[1]
    S = features["input_ids"].shape[1]
    rows = plan(
        lengths,
        predictions,
        S,
        P,
        num_workers,
        worker_index,
        accumulation,
        batch_size,
        max_sequences,
        by_length,
    )
    stacked = layouts(features, rows, max_sequences)
    return [{name: value[j] for name, value in stacked.items()} for j in range(accumulation)]
