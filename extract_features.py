r"""Extracts fixed contextual embeddings from a BERT checkpoint, as Google's extract_features.py.

    python extract_features.py --input_file=input.txt --output_file=output.jsonl \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
        --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
        --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=32

Each input line is one example; `text A ||| text B` is a sentence pair. The output holds one
JSON object per input line, in input order, in Google's format (its "linex_index" spelling
included):

    {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [{"index": -1, "values": [...]},
    ...]}, ...]}

over the example's tokens, [CLS] and [SEP] included, padding excluded; values are rounded to 6
decimals. Layer -1 is the last transformer layer's output; 0..L-1 count from the first.

--init_checkpoint takes a Google TF1 checkpoint (prefix or directory), a checkpoint directory of
the trainer, or a Hugging Face directory with model.safetensors. --bert_config_file and
--vocab_file may be left out when bert_config.json / config.json and vocab.txt sit beside it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import sys

import numpy as np

from common import cli
from common.errors import UserError
from common.files import atomic_write
from common.kinds import PRECISIONS as KIND_PRECISIONS
from common.progress import Progress

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.
# A batch's S is its longest example.

PROG = "extract_features"

# --precision takes the training jobs' names (training/precision.py: fp32, tf32, fp16, bf16) and,
# as this script always has, the dtype names for three of them.
PRECISION_ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
PRECISIONS = [*PRECISION_ALIASES, *KIND_PRECISIONS]

# Google's pair separator: greedy, so "a ||| b ||| c" is the pair ("a ||| b", "c").
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")

# Seconds between two progress lines on stderr (when it is not a terminal).
_PROGRESS_EVERY_S = 2.0


def define_flags(fv) -> None:
    """Google's flags (plus --spm_model_file, --precision)."""
    flag = cli.Flags(fv)

    flag("input_file", "Text file, one example per line; 'A ||| B' is a pair.", str, default=None)
    flag("output_file", "JSON-lines output, one object per input line.", str, default=None)
    flag(
        "init_checkpoint",
        "Google TF1 checkpoint (prefix or directory), a trainer checkpoint directory, or a "
        "Hugging Face directory with model.safetensors.",
        str,
        default=None,
    )
    flag(
        "bert_config_file",
        "bert_config.json (or a Hugging Face config.json); default: the one beside --init_checkpoint.",
        str,
        default=None,
    )
    flag(
        "vocab_file",
        "WordPiece vocab.txt; default: vocab.txt beside --init_checkpoint unless --spm_model_file is given.",
        str,
        default=None,
    )
    flag("spm_model_file", "SentencePiece model, instead of --vocab_file.", str, default=None)
    flag(
        "layers",
        "Comma-separated layer indexes: -1 is the last layer, 0 the first.",
        str,
        default="-1,-2,-3,-4",
    )
    flag(
        "max_seq_length",
        "Maximum tokens per example, [CLS]/[SEP] included; longer lines are truncated.",
        int,
        default=128,
    )
    flag("batch_size", "Examples per inference batch.", int, default=32)
    flag("do_lower_case", "Lower-case the input (uncased models).", bool, default=True)
    flag("precision", "Compute precision of the encoder.", list(PRECISIONS), default="float32")


# --- input ---------------------------------------------------------------------------------------


def count_lines(input_file: str) -> int:
    """Examples in `input_file`: its '\\n'-terminated lines plus a final unterminated one."""
    count, last = 0, b"\n"
    with open(input_file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def read_examples(input_file: str):
    """Yields (text_a, text_b or None) per line, as Google's read_examples (empty lines included)."""
    # Binary lines split on b"\n" only, as count_lines counts them and tf.gfile's readline does.
    with open(input_file, "rb") as f:
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                # Google decodes with errors="ignore"; silently dropping text is worse than a stop.
                raise ValueError(
                    f"{input_file} line {line_number} is not UTF-8 text ({err.reason})."
                ) from None
            match = _PAIR.match(line)
            yield (line, None) if match is None else (match.group(1), match.group(2))


def parse_layers(spec: str, num_layers: int) -> list[int]:
    """--layers -> list of indexes as given; each must lie in -num_layers..num_layers-1."""
    try:
        indexes = [int(part) for part in spec.split(",")]
    except ValueError:
        raise UserError(f"--layers={spec!r} must be comma-separated integers such as -1,-2,-3,-4.") from None
    for index in indexes:
        if not -num_layers <= index < num_layers:
            raise UserError(
                f"--layers index {index} is out of range for a model with "
                f"{num_layers} layers (use -{num_layers}..{num_layers - 1})."
            )
    return indexes


# --- model ---------------------------------------------------------------------------------------


def build_layer_fn(encoder, positions: list[int]):
    """A tf.function: {input_ids, input_mask, segment_ids} int32 [B, S] -> float32
    [B, len(positions), S, D] holding encoder_outputs[p] for p in `positions` (0 is the first)."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, None], tf.int32)

    # S is left unknown so one graph serves every batch: each batch is padded only to its own
    # longest example, and the attention mask makes the extra padding invisible to real tokens.
    @tf.function(input_signature=[{"input_ids": spec, "input_mask": spec, "segment_ids": spec}])
    def layer_fn(inputs):
        layers = encoder(inputs, training=False)["encoder_outputs"]
        return tf.stack([tf.cast(layers[p], tf.float32) for p in positions], axis=1)

    return layer_fn


# --- extraction ----------------------------------------------------------------------------------


# Examples sorted by length together: batches of similar lengths pad less (each batch is padded
# to its own longest example); the outputs of a window are held until it is written in order.
SORT_WINDOW_BATCHES = 16


def _windows(examples, tokenizer, max_seq_length, batch_size):
    """Yields lists of encoded examples (encode_pair's dicts), SORT_WINDOW_BATCHES batches each,
    in input order."""
    from bert.tokenization import encode_pair

    window = []
    for text_a, text_b in examples:
        window.append(encode_pair(tokenizer, text_a, text_b, max_seq_length=max_seq_length))
        if len(window) == batch_size * SORT_WINDOW_BATCHES:
            yield window
            window = []
    if window:
        yield window


def _batches_by_length(window, batch_size):
    """Yields (rows of `window`, {input_ids, input_mask, segment_ids} int32 [B, S]): the window's
    examples sorted by length (stable), S each batch's longest."""
    order = sorted(range(len(window)), key=lambda i: len(window[i]["tokens"]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        seq = max(len(window[i]["tokens"]) for i in rows)
        yield (
            rows,
            {
                k: np.asarray([window[i][k][:seq] for i in rows], np.int32)
                for k in ("input_ids", "input_mask", "segment_ids")
            },
        )


def round6(values: np.ndarray) -> np.ndarray:
    """Google's round(float(x), 6) for every float32 `x`, bit for bit, vectorised.

    numpy rounds as rint(x * 1e6) / 1e6 in float64. For a float32 x (24-bit mantissa) the product
    with 1e6 = 15625 * 2**6 needs at most 38 bits, so it is exact; rint then rounds half to even
    exactly as Python's round does, and the division by 1e6 returns the double nearest to
    n / 10**6, which is what round() returns. About 15x faster than a Python loop.
    """
    return np.round(np.asarray(values, np.float32).astype(np.float64), 6)


def format_example(
    index: int, tokens: list[str], layer_values: np.ndarray, layer_indexes: list[int], slots: list[int]
) -> str:
    """One output line. layer_values: float32 [len(positions), S, D]; slots[j] is the row of
    layer_indexes[j] in it."""
    rows = round6(layer_values[:, : len(tokens), :]).tolist()  # one [S][D] list per slot, S = len(tokens)
    features = [
        {
            "token": token,
            "layers": [
                {"index": layer_index, "values": rows[slot][t]}
                for layer_index, slot in zip(layer_indexes, slots)
            ],
        }
        for t, token in enumerate(tokens)
    ]
    return json.dumps({"linex_index": index, "features": features}) + "\n"


def extract(
    layer_fn,
    tokenizer,
    examples,
    layer_indexes: list[int],
    slots: list[int],
    max_seq_length: int,
    batch_size: int,
):
    """Yields one JSON line per (text_a, text_b) example, in order.

    layer_fn: {input_ids, input_mask, segment_ids} [B, S] -> [B, len(positions), S, D]
    (build_layer_fn); slots[j]: the row of layer_indexes[j] in its second axis.

    Every SORT_WINDOW_BATCHES batches of examples are sorted by length, so a batch pads little;
    the lines still come in input order. The encoder runs one window ahead in a worker thread
    (TensorFlow releases the GIL), so the JSON formatting of a window overlaps the inference of
    the next one.
    """
    index = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for window in _windows(examples, tokenizer, max_seq_length, batch_size):
            submitted = [
                (rows, pool.submit(lambda a: layer_fn(a).numpy(), arrays))
                for rows, arrays in _batches_by_length(window, batch_size)
            ]
            if pending is not None:
                yield from _format_window(index, *pending, layer_indexes, slots)
                index += len(pending[0])
            pending = (window, submitted)
        if pending is not None:
            yield from _format_window(index, *pending, layer_indexes, slots)


def _format_window(first_index, window, submitted, layer_indexes, slots):
    """The lines of a window's examples in input order, from its batches' outputs
    ([B, len(positions), S, D] each, rows of the window in `submitted`)."""
    found = [None] * len(window)
    for rows, future in submitted:
        values = future.result()
        for b, row in enumerate(rows):
            found[row] = values[b]
    for i, encoded in enumerate(window):
        yield format_example(first_index + i, encoded["tokens"], found[i], layer_indexes, slots)


def run(
    input_file: str,
    output_file: str,
    init_checkpoint: str,
    *,
    bert_config_file=None,
    vocab_file=None,
    spm_model_file=None,
    layers="-1,-2,-3,-4",
    max_seq_length=128,
    batch_size=32,
    do_lower_case=True,
    precision="float32",
    log=None,
) -> int:
    """Writes the features of every line of `input_file` to `output_file`; returns the count.

    Every check a user can fail (paths, config, vocab, layers) runs before TensorFlow is
    imported, the checkpoint's before any inference. Raises UserError with one sentence (bert/'s
    errors, CheckpointMismatchError included, are UserErrors) or OSError. Progress goes to `log`
    (stderr).
    """
    from bert.checkpoints import find_config, vocab_beside

    log = sys.stderr if log is None else log
    if not input_file:
        raise UserError("--input_file is required.")
    if not os.path.isfile(input_file):
        raise UserError(f"--input_file {input_file} does not exist.")
    if not output_file:
        raise UserError("--output_file is required.")
    if not init_checkpoint:
        raise UserError("--init_checkpoint is required.")
    if vocab_file and spm_model_file:
        raise UserError("Give --vocab_file or --spm_model_file, not both.")
    if batch_size < 1:
        raise UserError(f"--batch_size must be positive (got {batch_size}).")
    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)} (got {precision!r}).")
    output_dir = os.path.dirname(os.path.abspath(output_file))
    if not os.path.isdir(output_dir):
        raise UserError(f"The folder of --output_file {output_file} does not exist.")
    if bert_config_file and not os.path.isfile(bert_config_file):
        raise UserError(f"--bert_config_file {bert_config_file} does not exist.")

    config = find_config(init_checkpoint, bert_config_file)
    if config is None:
        raise UserError(
            f"No bert_config.json or config.json beside {init_checkpoint}; pass --bert_config_file."
        )
    layer_indexes = parse_layers(layers, config.num_hidden_layers)
    if not 2 <= max_seq_length <= config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={max_seq_length} must lie in 2.."
            f"{config.max_position_embeddings} (max_position_embeddings)."
        )
    if not vocab_file and not spm_model_file:
        vocab_file = vocab_beside(init_checkpoint)
        if vocab_file is None:
            raise UserError(f"No vocab.txt beside {init_checkpoint}; pass --vocab_file or --spm_model_file.")

    from bert.checkpoints import check_vocab_size, load_weights
    from bert.tokenization import build_tokenizer

    tokenizer = build_tokenizer(
        vocab_file=vocab_file or None, spm_model_file=spm_model_file or None, do_lower_case=do_lower_case
    )
    check_vocab_size(config, tokenizer.vocab_size, vocab_file or spm_model_file)

    from bert.encoder import BertEncoder
    from training.precision import configure_precision

    policy = configure_precision(PRECISION_ALIASES.get(precision, precision))
    encoder = BertEncoder(config, dtype=policy)
    load_weights(encoder, init_checkpoint)

    # Python-style negative indexes, as Google's all_layers[j]; each layer is computed once.
    positions = sorted({i % config.num_hidden_layers for i in layer_indexes})
    slots = [positions.index(i % config.num_hidden_layers) for i in layer_indexes]
    layer_fn = build_layer_fn(encoder, positions)

    total = count_lines(input_file)
    print(
        f"{PROG}: {total} lines from {input_file}; {config.num_hidden_layers} layers "
        f"x {config.hidden_size}; layers {','.join(map(str, layer_indexes))}; precision "
        f"{precision}; checkpoint {init_checkpoint}",
        file=log,
        flush=True,
    )
    done = 0
    with Progress(PROG, total, unit="lines", stream=log, log_interval=_PROGRESS_EVERY_S) as progress:
        with atomic_write(output_file) as writer:
            lines = extract(
                layer_fn,
                tokenizer,
                read_examples(input_file),
                layer_indexes,
                slots,
                max_seq_length,
                batch_size,
            )
            for line in lines:
                writer.write(line)
                done += 1
                progress(1)
    return done


def run_flags(F) -> int:
    """The command line: flags -> run()."""
    try:
        run(
            F.input_file,
            F.output_file,
            F.init_checkpoint,
            bert_config_file=F.bert_config_file,
            vocab_file=F.vocab_file,
            spm_model_file=F.spm_model_file,
            layers=F.layers,
            max_seq_length=F.max_seq_length,
            batch_size=F.batch_size,
            do_lower_case=F.do_lower_case,
            precision=F.precision,
        )
    except (OSError, ValueError) as err:  # an input line that is not UTF-8, an unwritable output
        raise UserError(str(err)) from None
    return 0


main = cli.entry_point(define_flags, run_flags, __doc__, PROG)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
