"""Converts a BERT checkpoint between our layout, Google's and Hugging Face's.

    python -m bert.convert --input uncased_L-12_H-768_A-12/bert_model.ckpt \
        --output_dir bert-base-hf --output_format huggingface

The input format is detected (a model.safetensors means Hugging Face; otherwise a Google-named
TF checkpoint: Google's release, NVIDIA's, or ours). The config comes from --bert_config_file or
the bert_config.json / config.json beside the input. Pretraining heads are kept when the input
has them (all of cls/predictions and cls/seq_relationship), dropped otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

FORMATS = ("ours", "google", "huggingface")


def convert(input_path: str, output_dir: str, output_format: str, config=None,
            vocab_file: str | None = None, encoder_only: bool = False) -> str:
    """Reads `input_path` strictly and writes it in `output_format`; returns the written path."""
    from bert import checkpoints
    from bert.encoder import BertEncoder
    from bert.pretraining import BertPretrainer

    if output_format not in FORMATS:
        raise ValueError(f"--output_format must be one of {', '.join(FORMATS)} (got {output_format!r}).")
    if config is None:
        config = checkpoints.read_config_beside(input_path)
        if config is None:
            raise ValueError(f"No bert_config.json or config.json beside {input_path}; "
                             "pass --bert_config_file.")
    weights = checkpoints.read_checkpoint(input_path)
    if vocab_file:
        from bert.tokenization import load_vocab
        checkpoints.check_vocab_size(config, len(load_vocab(vocab_file)), vocab_file)
    has_heads = any(name.startswith("cls/predictions/") for name in weights)
    model = BertPretrainer(config) if has_heads and not encoder_only else BertEncoder(config)
    checkpoints.assign_weights(model, weights, source=input_path,
                               ignore_prefixes=("cls/",) if not hasattr(model, "masked_lm") else ())
    writers = {"ours": checkpoints.save_ours, "google": checkpoints.save_google,
               "huggingface": checkpoints.save_huggingface}
    return writers[output_format](model, output_dir, vocab_file=vocab_file)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="checkpoint prefix, directory or model.safetensors")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--output_format", required=True, choices=FORMATS)
    parser.add_argument("--bert_config_file", help="bert_config.json (default: the one beside --input)")
    parser.add_argument("--vocab_file", help="vocab.txt to check against the model and copy along")
    parser.add_argument("--encoder_only", action="store_true", help="drop the pretraining heads")
    args = parser.parse_args(argv)
    from bert.checkpoints import CheckpointMismatchError
    from bert.config import BertConfig
    try:
        config = BertConfig.from_json_file(args.bert_config_file) if args.bert_config_file else None
        written = convert(args.input, args.output_dir, args.output_format, config=config,
                          vocab_file=args.vocab_file, encoder_only=args.encoder_only)
    except (ValueError, FileNotFoundError, CheckpointMismatchError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.output_format} checkpoint {written}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
