r"""Converts a BERT checkpoint between the trainer's layout, Google's and Hugging Face's.

    python convert_checkpoint.py --input=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --output_dir=bert-base-hf --output_format=huggingface

The input layout is detected (a model.safetensors means Hugging Face; otherwise a Google-named TF
checkpoint: Google's release, NVIDIA's, or the trainer's). The config comes from
--bert_config_file or the bert_config.json / config.json beside the input. Pretraining heads are
kept when the input has them (all of cls/predictions and cls/seq_relationship), dropped otherwise
or with --encoder_only.
"""

from __future__ import annotations

import os
import sys

from bert.checkpoints import SAVERS, convert_checkpoint, find_config  # imports no TensorFlow
from common import cli
from common.errors import UserError

PROG = "convert_checkpoint"


def define_flags(fv) -> None:
    flag = cli.Flags(fv)

    flag("input", "Checkpoint prefix, directory, or model.safetensors.", str, default=None)
    flag("output_dir", "Folder to write the converted checkpoint to.", str, default=None)
    flag(
        "output_format",
        "trainer: the trainer's checkpoint directory; google: Google's release layout; "
        "huggingface: model.safetensors + config.json.",
        list(SAVERS),
        default=None,
    )
    flag(
        "bert_config_file",
        "bert_config.json or a Hugging Face config.json (default: the one beside --input).",
        str,
        default=None,
    )
    flag("vocab_file", "vocab.txt to check against the model and copy along.", str, default=None)
    flag("encoder_only", "Drop the pretraining heads.", bool, default=False)


def run(F) -> int:
    cli.required(F, "input", "output_dir", "output_format")
    if not (os.path.exists(F.input) or os.path.exists(F.input + ".index")):
        raise UserError(
            f"--input {F.input} does not exist (give a checkpoint prefix, a directory "
            "or a model.safetensors)."
        )
    if F.bert_config_file and not os.path.isfile(F.bert_config_file):
        raise UserError(f"--bert_config_file {F.bert_config_file} does not exist.")
    config = find_config(F.input, F.bert_config_file)
    if config is None:
        raise UserError(f"No bert_config.json or config.json beside {F.input}; pass --bert_config_file.")
    written = convert_checkpoint(
        F.input, F.output_dir, F.output_format, config, vocab_file=F.vocab_file, encoder_only=F.encoder_only
    )
    print(f"{PROG}: wrote {F.output_format} checkpoint {written}")
    return 0


main = cli.entry_point(define_flags, run, __doc__, PROG)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
