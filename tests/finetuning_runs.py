"""Tiny fine-tuning runs for the tests of run_classifier.py, run_squad.py and the fine-tuning job
they drive: the official-format fixtures (tests/fixtures/glue, tests/fixtures/squad), the flags
of an in-process run with a tiny BERT, and readers of what a run leaves behind. The fixtures that
train once for several test files (model_files, mrpc_run, squad_run) are in conftest.py."""

import csv
import json
import os

import tensorflow as tf

from conftest import ROOT
from tools.tiny_pretraining import CONFIG

# Shapes: B batch, S sequence, D hidden, C classes.
D = CONFIG["hidden_size"]
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
GLUE = os.path.join(FIXTURES, "glue")
SQUAD_TRAIN = os.path.join(FIXTURES, "squad", "train-v1.1-tiny.json")
SQUAD_DEV_V2 = os.path.join(FIXTURES, "squad", "dev-v2.0-tiny.json")
SEQ = 64  # the tiny config's max_position_embeddings
SQUAD = {"doc_stride": 32, "max_query_length": 16, "n_best_size": 5, "max_answer_length": 10}
SQUAD_FLAGS = [f"--{k}={v}" for k, v in SQUAD.items()]


def _fixture_texts():
    """Every cell of the GLUE fixtures and every context, question and answer of the SQuAD ones."""
    texts = []
    for task in os.listdir(GLUE):
        for name in sorted(os.listdir(os.path.join(GLUE, task))):
            with open(os.path.join(GLUE, task, name), encoding="utf-8") as f:
                texts += f.read().replace("\n", "\t").split("\t")
    for path in (SQUAD_TRAIN, SQUAD_DEV_V2):
        with open(path, encoding="utf-8") as f:
            for article in json.load(f)["data"]:
                for paragraph in article["paragraphs"]:
                    texts.append(paragraph["context"])
                    for qa in paragraph["qas"]:
                        texts += [qa["question"]] + [a["text"] for a in qa.get("answers", [])]
    return texts


def _flags(files, output_dir, *extra, **values):
    """Flags of a tiny in-process run: batch 1, no XLA (compiling costs more than these runs)."""
    values = {
        "bert_config_file": files["bert_config_file"],
        "vocab_file": files["vocab_file"],
        "output_dir": str(output_dir),
        "max_seq_length": SEQ,
        "train_batch_size": 1,
        "learning_rate": 1e-3,
        "log_every_n_steps": 1,
        "use_xla": "false",
        **values,
    }
    return [f"--{k}={v}" for k, v in values.items() if v is not None] + list(extra)


def word_order_run(task, output_dir, save_every: int, *extra) -> list:
    """The command of a run_classifier.py fine-tuning on the word-order task (tests/word_order.py)
    that tests interrupt: 2 micro-batches of 64 (dropout on, XLA), an update long enough for a
    kill or a notice to land between checkpoints; 1600 rows / 128 x 0.8 epochs = 10 updates."""
    import sys

    flags = _flags(
        task,
        output_dir,
        "--do_train",
        *extra,
        task_name="SST-2",
        data_dir=task["data_dir"],
        max_seq_length=32,
        train_batch_size=64,
        num_accumulation_steps=2,
        num_train_epochs=0.8,
        save_checkpoints_steps=save_every,
        use_xla="true",
        deterministic="true",
        seed=7,
    )
    return [sys.executable, os.path.join(ROOT, "run_classifier.py"), *flags]


def _ok(main, argv):
    status = main(argv)
    assert status == 0, f"{main.__module__} exited {status}"


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _tsv(path):
    """Rows of a TSV as written (quoting off, as GLUE's files), header included."""
    with open(path, encoding="utf-8", newline="") as f:
        return [row for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if row]


def _checkpoint(output_dir):
    prefix = tf.train.latest_checkpoint(str(output_dir))
    assert prefix is not None, f"no checkpoint in {output_dir}"
    reader = tf.train.load_checkpoint(prefix)
    return prefix, {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _log(output_dir):
    with open(os.path.join(output_dir, "log.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _error(main, argv, capsys):
    """(exit status, stderr) of an entry point that must stop with one sentence."""
    capsys.readouterr()
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return status, err
