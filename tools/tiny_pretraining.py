"""A tiny pretraining setup on disk (config, vocab and TFRecords) for the tests and the fault soak.

Records hold learnable structure (token k+1 follows token k) so that a few updates move the
loss, different numbers of masks per row, and both NSP labels. With masking="dynamic" they are
the same sequences unmasked (schema's dynamic layout), masked as the input pipeline reads them.
"""

from __future__ import annotations

import json
import os
import random

from data.pretraining import schema, tfrecord

SEQ, PREDICTIONS, VOCAB = 16, 4, 99
CONFIG = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}


def tiny_bert_config(dropout: bool = True):
    """The tests' tiny BertConfig (L2/H32/N4, vocab 99); dropout off where runs in separate
    processes must not depend on per-process random streams."""
    from bert.config import BertConfig

    values = dict(CONFIG)
    if not dropout:
        values.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**values)


MASKING_IDS = (2, 3, 4, VOCAB)  # [CLS], [SEP], [MASK], vocabulary size


def example(
    rng: random.Random, seq=SEQ, predictions=PREDICTIONS, nan_weight=False, min_length=8, masking="static"
) -> bytes:
    """One record; nan_weight writes NaN as its first masked_lm_weight (a poisoned record)."""
    length = rng.randrange(min_length, seq + 1)
    start = rng.randrange(5, VOCAB - seq)
    body = [start + i for i in range(length - 3)]
    split = rng.randrange(1, len(body))
    ids = [2] + body[:split] + [3] + body[split:] + [3]
    segments = [0] * (split + 2) + [1] * (len(ids) - split - 2)
    candidates = [i for i, t in enumerate(ids) if t not in (2, 3)]
    positions = sorted(rng.sample(candidates, rng.randrange(1, min(predictions, len(candidates)) + 1)))
    labels = [ids[p] for p in positions]
    masked = list(ids)
    for p in positions:
        masked[p] = 4  # [MASK]
    is_random_next = rng.random() < 0.5
    if masking == "dynamic":
        features = schema.unmasked_features(ids, segments, is_random_next, MASKING_IDS, None, seq)
        return schema.serialize_example(features, schema.Layout(schema.DYNAMIC))
    features = schema.pad_features(masked, segments, positions, labels, is_random_next, seq, predictions)
    if nan_weight:
        features[schema.MASKED_LM_WEIGHTS][0] = float("nan")
    return schema.serialize_example(features)


def write_records(path: str, n: int, seed: int, **options) -> str:
    rng = random.Random(seed)
    with tfrecord.RecordWriter(str(path)) as w:
        for _ in range(n):
            w.write(example(rng, **options))
    return str(path)


def setup(
    root,
    files: int = 2,
    per_file: int = 40,
    eval_per_file: int = 16,
    dropout: bool = True,
    min_length: int = 8,
    masking: str = "static",
) -> dict:
    """Writes config, vocab, training and eval files under `root` (masked records, or unmasked
    ones with masking="dynamic"); returns their paths."""
    root = str(root)
    os.makedirs(os.path.join(root, "train"), exist_ok=True)
    os.makedirs(os.path.join(root, "eval"), exist_ok=True)
    config = dict(CONFIG)
    if not dropout:
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_file = os.path.join(root, "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(config, f)
    vocab_file = os.path.join(root, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write(
            "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, VOCAB)])
            + "\n"
        )
    for i in range(files):
        write_records(
            os.path.join(root, "train", f"part-{i:02d}.tfrecord"),
            per_file,
            seed=i,
            min_length=min_length,
            masking=masking,
        )
    write_records(
        os.path.join(root, "eval", "part-00.tfrecord"),
        eval_per_file,
        seed=100,
        min_length=min_length,
        masking=masking,
    )
    return {
        "bert_config_file": config_file,
        "vocab_file": vocab_file,
        "input_files": os.path.join(root, "train", "*.tfrecord"),
        "eval_files": os.path.join(root, "eval", "*.tfrecord"),
    }


def flags(paths: dict, output_dir, **overrides) -> list[str]:
    """run_pretraining.py flags for a tiny run (overrides as name=value)."""
    values = {
        **paths,
        "output_dir": str(output_dir),
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PREDICTIONS,
        "train_batch_size": 4,
        "eval_batch_size": 8,
        "learning_rate": 1e-3,
        "num_train_steps": 4,
        "num_warmup_steps": 1,
        "save_checkpoints_steps": 2,
        "log_every_n_steps": 1,
        "shuffle_buffer": 32,
        # Records hold 8 to 16 tokens: bins of 4 make micro-batches of 8, 12 and 16 positions.
        "bin_size": 4,
        # Not every length's programs traced before the first update: a few updates meet one or
        # two of them. tests/test_preemption.py runs the default (on with the tests' XLA cache).
        "trace_ahead": False,
        **overrides,
    }
    return [f"--{k}={v}" for k, v in values.items() if v is not None]


def poison(files: list, places, *, seed: int, window: int) -> None:
    """Rewrites the records at `places` of the data order (training/data_order.py with `seed` and
    `window`) with a NaN first masked_lm_weight; the record counts, and so the order, stay."""
    import tensorflow as tf

    from training.data_order import records_in_order

    counts = [sum(1 for _ in tf.data.TFRecordDataset(f)) for f in files]
    order = records_in_order(files, counts, seed=seed, window=window).take(max(places) + 1)
    targets = {bytes(r.numpy()) for i, r in enumerate(order) if i in places}
    found = 0
    for path in files:
        records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(path)]
        with tfrecord.RecordWriter(path) as writer:
            for record in records:
                if record in targets:
                    example = tf.train.Example.FromString(record)
                    example.features.feature[schema.MASKED_LM_WEIGHTS].float_list.value[0] = float("nan")
                    record, found = example.SerializeToString(), found + 1
                writer.write(record)
    if found != len(places):
        raise ValueError(f"{found} records poisoned for {len(places)} places: some records repeat in {files}")
