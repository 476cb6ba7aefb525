"""--padding auto: the layout a phase's records train fastest in, predicted from their lengths.

The layouts (every one exact: the same sequences per update, the same gradient up to float
summation order): padded to S, length bins of 32 / 64 / 128 (training/length_bins.py), packed
rows of S, and packed rows cut to bins (training/packing.py). Before training, a sample of the
records' real-token counts is laid out in updates of W x k x B sequences exactly as the input
pipeline lays them out (drawn at random, as the global order draws them), and each update is
priced:

    cost(update) = sum over micro-batches of  R x (a L + b L^2 + h) + c

for a micro-batch of R rows of L positions. a, b and h are the model's multiply-adds from its
config (D hidden, I intermediate, V vocab, P predictions per row, n layers): a = n (4 D^2 + 2 D I)
per position (projections and feed-forward), b = 2 n D per pair of positions (attention's scores
and weighted sum: XLA computes the whole L x L block, also where packing masks it), h = P (D^2 +
D V) per row (the masked-LM head gathers P positions of every row). c is what a micro-batch costs
beyond its arithmetic (a program launch, the update's host work per micro-batch), counted as
C_POSITIONS positions of the model's per-position work. Packed rows cut to bins cost
PACKED_BINS_OVERHEAD times that: measured (`python -m bench layout_choice` against `bench
padding`'s records), they ran slower than their positions say.

The cheapest layout wins; ties (within TIE of the cheapest) go to the simpler one, in LAYOUTS'
order. The sample covers up to SAMPLE_UPDATES updates of at most SAMPLE_SEQUENCES sequences
each: a larger k packs a little better than the sample shows, never worse.

Shapes: S max_seq_length, P max_predictions_per_seq, B micro-batch, k micro-batches per update,
W workers, G = W x k x B sequences per update, R rows per micro-batch, L its length.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from training import packing
from training.length_bins import bin_length

BIN_SIZES = (32, 64, 128)
C_POSITIONS = 64  # a micro-batch's overhead, in positions of per-position work (bench/padding.py)
PAIR_WORK = 0  # attention's elementwise work per score and head (mask, softmax, dropout), in multiply-adds
# Packed rows cut to bins ran 0.70x the speed their positions predict (geometric mean over 11
# groups of `bench layout_choice`, bert_tiny and bert_small on 2 CPU cores): the most distinct
# shapes of any layout (row counts x bin lengths), each its own program. Their cost is scaled by this.
PACKED_BINS_OVERHEAD = 1.4
TIE = 0.01  # a layout within 1% of the cheapest counts as a tie: the simpler one is taken
SAMPLE_UPDATES = 16
SAMPLE_SEQUENCES = 512  # per simulated update (k is cut so that k x B fits)
MASKED_LM_PROB = 0.15  # Google's rule for the predictions a sequence of n tokens holds


@dataclasses.dataclass(frozen=True)
class Layout:
    """bin_size 0: rows of S; packing: several sequences per row."""

    bin_size: int
    packing: bool

    @property
    def name(self) -> str:
        bins = f"bins of {self.bin_size}" if self.bin_size else ""
        if self.packing:
            return f"packed, {bins}" if bins else "packed"
        return bins or "padded"

    @property
    def short(self) -> str:
        """The name in one word or two: padded, bins 64, packed, packed+64."""
        if self.packing:
            return f"packed+{self.bin_size}" if self.bin_size else "packed"
        return f"bins {self.bin_size}" if self.bin_size else "padded"


# Simplest first: a tie goes to the earlier one.
LAYOUTS = (
    Layout(0, False),
    *(Layout(b, False) for b in BIN_SIZES),
    Layout(0, True),
    *(Layout(b, True) for b in BIN_SIZES),
)


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Per micro-batch of R rows of L positions: R (a L + b L^2 + h) + c (module docstring)."""

    per_position: float  # a
    per_pair: float  # b
    per_row: float  # h
    per_micro_batch: float  # c

    @classmethod
    def of(
        cls, hidden: int, intermediate: int, layers: int, heads: int, vocab: int, predictions: int
    ) -> "CostModel":
        a = layers * (4 * hidden * hidden + 2 * hidden * intermediate)
        return cls(
            per_position=float(a),
            per_pair=float(layers * (2 * hidden + heads * PAIR_WORK)),
            per_row=float(predictions * (hidden * hidden + hidden * vocab)),
            per_micro_batch=float(C_POSITIONS * a),
        )

    def micro_batch(self, rows: int, length: int) -> float:
        return rows * (self.per_position * length + self.per_pair * length * length + self.per_row) + (
            self.per_micro_batch
        )


@dataclasses.dataclass(frozen=True)
class Prediction:
    layout: Layout
    cost: float  # per update, in multiply-adds (CostModel)
    real_share: float  # real tokens / computed positions


def _micro_batches(lengths, layout: Layout, S: int, P: int, B: int, k: int) -> list:
    """[(R, L)] of one update's k micro-batches (one worker), `lengths` int [k x B]."""
    lengths = np.asarray(lengths, np.int64)
    if not layout.packing:
        if not layout.bin_size:
            return [(B, S)] * k
        batches = np.sort(lengths).reshape(k, B)  # length_bins.deal_by_length with W = 1
        return [(B, bin_length(int(b.max()), layout.bin_size, S)) for b in batches]
    predictions = np.clip(np.round(MASKED_LM_PROB * lengths), 1, P).astype(np.int64)
    rows = packing.pack(lengths, predictions, S, packing.MAX_SEQUENCES, P)
    count, slots = packing.deal(rows, lengths, 1, k, B, by_length=layout.bin_size > 0)
    if not layout.bin_size:
        return [(count, S)] * k
    fullest = [max((int(lengths[rows[r]].sum()) for r in slot), default=0) for slot in slots]
    return [(count, bin_length(n, layout.bin_size, S)) for n in fullest]


def predict(
    lengths,
    model: CostModel,
    max_seq_length: int,
    max_predictions: int,
    batch_size: int,
    accumulation: int,
    layouts=LAYOUTS,
    seed: int = 0,
) -> list:
    """[Prediction] of each of `layouts` in their order, for updates of `accumulation` micro-batches
    of `batch_size` drawn from `lengths` (int [N], real tokens of the records, N >= 1)."""
    lengths = np.clip(np.asarray(lengths, np.int64), 1, max_seq_length)
    k = max(1, min(accumulation, SAMPLE_SEQUENCES // batch_size))
    rng = np.random.default_rng(seed)
    updates = [rng.choice(lengths, size=k * batch_size) for _ in range(SAMPLE_UPDATES)]
    out = []
    for layout in layouts:
        cost = computed = 0.0
        for update in updates:
            shapes = _micro_batches(update, layout, max_seq_length, max_predictions, batch_size, k)
            cost += sum(model.micro_batch(r, n) for r, n in shapes)
            computed += sum(r * n for r, n in shapes)
        real = float(sum(int(u.sum()) for u in updates))
        if layout.packing and layout.bin_size:
            cost *= PACKED_BINS_OVERHEAD
        out.append(Prediction(layout, cost / len(updates) * accumulation / k, real / computed))
    return out


def choose(predictions: list) -> Prediction:
    """The cheapest prediction; one within TIE of it that comes earlier (simpler) wins."""
    cheapest = min(p.cost for p in predictions)
    return next(p for p in predictions if p.cost <= cheapest * (1 + TIE))


def describe(chosen: Prediction, predictions: list) -> str:
    """'packed, bins of 64 (predicted real-token share 0.91, 2.05x padded; padded 0.45, bins 32
    0.80, ...)'."""
    padded = next(p for p in predictions if p.layout == Layout(0, False))
    shares = ", ".join(f"{p.layout.short} {p.real_share:.2f}" for p in predictions)
    return (
        f"{chosen.layout.name} (predicted real-token share {chosen.real_share:.2f}, "
        f"{padded.cost / chosen.cost:.2f}x padded; {shares})"
    )


def for_records(
    files,
    config,
    max_seq_length: int,
    max_predictions: int,
    batch_size: int,
    accumulation: int,
    layouts=LAYOUTS,
) -> tuple:
    """(chosen Prediction, [Prediction]) for a sample of the TFRecord `files`' lengths (read
    without TensorFlow) and the model of `config` (a BertConfig); None when they hold no record."""
    from data.pretraining.schema import sample_real_tokens

    lengths = sample_real_tokens(files)
    if not lengths:
        return None
    model = CostModel.of(
        config.hidden_size,
        config.intermediate_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.vocab_size,
        max_predictions,
    )
    predictions = predict(lengths, model, max_seq_length, max_predictions, batch_size, accumulation, layouts)
    return choose(predictions), predictions
