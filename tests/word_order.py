"""Test data for fine-tuning runs, shared by tests/test_finetuning_job.py and tests/test_tuning.py:
model files (a vocab holding every word of some texts and a tiny bert_config.json sized to it)
and a task a tiny BERT learns from random init in a few hundred updates (word order)."""

import json
import os
import random
import re
import sysconfig

from bert.config import BertConfig
from bert.tokenization import SPECIAL_TOKENS, WordPieceTokenizer
from data.corpus import stdlib_text
from tools.tiny_pretraining import CONFIG

# Standard-library modules whose docstrings are plain English prose.
PROSE_MODULES = (
    "argparse.py subprocess.py threading.py textwrap.py shutil.py tarfile.py zipfile.py "
    "logging/__init__.py typing.py inspect.py pathlib.py random.py socket.py ssl.py http/client.py "
    "pickle.py codecs.py datetime.py functools.py contextlib.py dataclasses.py enum.py "
    "asyncio/events.py difflib.py doctest.py pdb.py tempfile.py configparser.py statistics.py "
    "string.py mailbox.py optparse.py weakref.py ast.py"
).split()
TRAIN_SENTENCES, DEV_SENTENCES = 800, 200


def prose_sentences():
    """Real English sentences from the installed Python's docstrings (data/corpus/stdlib_text.py),
    as word and punctuation tokens, 6 to 30 of them; shuffled with a fixed seed."""
    root = sysconfig.get_paths()["stdlib"]
    found = set()
    for name in PROSE_MODULES:
        for sentence in stdlib_text.document_sentences(os.path.join(root, name)):
            tokens = re.findall(r"\w+|[^\w\s]", sentence)
            if (
                re.fullmatch(r"[A-Za-z ,.'-]+", sentence)
                and sentence.endswith(".")
                and 6 <= len(tokens) <= 30
            ):
                found.add(" ".join(tokens))
    sentences = sorted(found)
    random.Random(0).shuffle(sentences)
    return sentences


def write_model_files(directory, texts, **config):
    """vocab.txt holding every word of `texts` (as the uncased tokenizer splits them) and a tiny
    bert_config.json sized to it; returns their paths and the BertConfig."""
    os.makedirs(directory, exist_ok=True)
    boot_file = os.path.join(directory, "boot.txt")
    with open(boot_file, "w", encoding="utf-8") as f:
        f.write("\n".join(SPECIAL_TOKENS) + "\n")
    backend = WordPieceTokenizer(boot_file).backend
    words = {
        w
        for text in texts
        for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))
    }
    vocab = list(dict.fromkeys([*SPECIAL_TOKENS, *sorted(words)]))
    vocab_file = os.path.join(directory, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    values = {**CONFIG, "vocab_size": len(vocab), **config}
    config_file = os.path.join(directory, "bert_config.json")
    with open(config_file, "w") as f:
        json.dump(values, f)
    return {"bert_config_file": config_file, "vocab_file": vocab_file, "config": BertConfig(**values)}


def write_word_order_task(root):
    """Under `root` (a pathlib.Path): SST-2's layout, label 1 for a sentence as written, 0 for
    the same sentence with its tokens in reverse order (the final "." comes first). Every training sentence appears both ways, so
    no word or sentence tells the label, only the order does; the dev sentences are others, one
    way each, the labels alternating (balanced)."""
    sentences = prose_sentences()
    assert len(sentences) >= TRAIN_SENTENCES + DEV_SENTENCES, f"only {len(sentences)} prose sentences"
    splits = {"train": sentences[:TRAIN_SENTENCES], "dev": sentences[TRAIN_SENTENCES:][:DEV_SENTENCES]}
    (root / "SST-2").mkdir()
    for split, chosen in splits.items():
        lines = ["sentence\tlabel"]
        for i, sentence in enumerate(chosen):
            tokens = sentence.split(" ")
            for label in (0, 1) if split == "train" else (i % 2,):
                lines.append(f"{' '.join(tokens if label else tokens[::-1])}\t{label}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = write_model_files(str(root / "model"), splits["train"] + splits["dev"])
    return {"data_dir": str(root), **files}
