r"""Pretraining TFRecords from text: a drop-in for Google's create_pretraining_data.py.

    python create_pretraining_data.py --input_file=shards/*.txt --output_file=out.tfrecord \
        --vocab_file=vocab.txt --do_lower_case=True --max_seq_length=128 \
        --max_predictions_per_seq=20 --masked_lm_prob=0.15 --random_seed=12345 --dupe_factor=5

Google's flags, names and defaults (plus --spm_model_file and --engine), the same input format
(one sentence per line, a blank line between documents) and, for the same input, vocabulary and
seed, the same examples, example for example (data/pretraining/writer.py says how and what
differs). --input_file takes comma-separated files and globs; --output_file comma-separated
files, which the instances fill round robin.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from common import cli
from common.errors import UserError
from common.files import expand_globs
from common.progress import Progress
from data.pretraining.instances import InstanceOptions
from data.pretraining.masking import MASKED_LM_PROB

PROG = "create_pretraining_data"


def define_instance_flags(
    flag,
    *,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    masked_lm_prob: float = MASKED_LM_PROB,
    random_seed: int = 12345,
    dupe_factor: int = 10,
) -> None:
    """The instance-creation flags, Google's names, help and defaults (its create_pretraining_data
    dupes 10 times); prepare_data.py's TFRecord stage defines the same with NVIDIA's recipe. The
    InstanceOptions fields give their help and kind (a value out of range is refused as parsed)."""
    defaults = {
        "max_seq_length": max_seq_length,
        "max_predictions_per_seq": max_predictions_per_seq,
        "masked_lm_prob": masked_lm_prob,
        "dupe_factor": dupe_factor,
    }
    option = cli.Flags(flag.fv, InstanceOptions, defaults)
    flag("do_lower_case", "Whether to lower case the input text.", bool, default=True)
    option("do_whole_word_mask")
    option("max_seq_length")
    option("max_predictions_per_seq")
    flag("random_seed", "Random seed for data generation.", int, default=random_seed)
    option("dupe_factor")
    option("masked_lm_prob")
    option("short_seq_prob")
    flag(
        "masking",
        "static: the masks are drawn here and written into the records (Google's layout, "
        "--dupe_factor copies); dynamic: the instances are written unmasked, once (--dupe_factor 1 "
        "unless given), and training masks every sequence anew in every epoch as it reads it.",
        ["static", "dynamic"],
        default="static",
    )


def instance_options(F) -> dict:
    """The instance-creation flags as the writers' keyword arguments (--dupe_factor resolved),
    checked together (InstanceOptions' rules across fields) before any file is read."""
    options = InstanceOptions(
        max_seq_length=F.max_seq_length,
        max_predictions_per_seq=F.max_predictions_per_seq,
        masked_lm_prob=F.masked_lm_prob,
        short_seq_prob=F.short_seq_prob,
        dupe_factor=dupe_factor(F),
        do_whole_word_mask=F.do_whole_word_mask,
    )
    return {**dataclasses.asdict(options), "random_seed": F.random_seed, "masking": F.masking}


def dupe_factor(F) -> int:
    """--dupe_factor, or 1 for dynamic masking when it is not given: one unmasked copy serves
    every epoch."""
    return 1 if F.masking == "dynamic" and not F["dupe_factor"].present else F.dupe_factor


def define_flags(fv) -> None:
    flag = cli.Flags(fv)

    flag("input_file", "Input raw text file (or comma-separated list of files / globs).", str, default=None)
    flag("output_file", "Output TF example file (or comma-separated list of files).", str, default=None)
    flag("vocab_file", "The vocabulary file that the BERT model was trained on.", str, default=None)
    flag("spm_model_file", "A SentencePiece model, instead of --vocab_file.", str, default=None)
    define_instance_flags(flag)
    flag(
        "engine",
        "auto: C when a compiler is available, else Python (same output).",
        ["auto", "native", "python"],
        default="auto",
    )


def _log(message: str) -> None:
    print(f"[{PROG}] {message}", file=sys.stderr, flush=True)


def run(F) -> int:
    from bert.tokenization import build_tokenizer
    from data.pretraining.writer import create_training_files

    cli.required(F, "input_file", "output_file")
    if not F.vocab_file and not F.spm_model_file:
        raise UserError("--vocab_file (or --spm_model_file) is required.")
    options = instance_options(F)
    try:
        input_files = expand_globs(F.input_file, "input files", "--input_file")
        output_files = [p.strip() for p in F.output_file.split(",") if p.strip()]
        tokenizer = build_tokenizer(
            vocab_file=F.vocab_file, spm_model_file=F.spm_model_file, do_lower_case=F.do_lower_case
        )
        _log(f"{len(input_files)} input file(s) -> {len(output_files)} output file(s)")
        total = sum(os.path.getsize(p) for p in input_files)
        with Progress(PROG, total, log_interval=2.0) as progress:
            stats = create_training_files(
                input_files,
                output_files,
                tokenizer,
                **options,
                progress=progress,
                log=_log,
                engine=F.engine,
            )
    except (UserError, OSError, ValueError, RuntimeError, KeyError) as e:
        # Google's script exits 1 when the work fails; 2 stays for flag errors.
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    if stats["instances"] == 0:
        _log("warning: no instances: the input holds no non-empty document.")
    print(
        f"{PROG}: {stats['documents']:,} documents, {stats['sentences']:,} sentences, "
        f"{stats['tokens']:,} tokens, {stats['instances']:,} instances, "
        f"{stats['masked_tokens']:,} masked tokens, {stats['invalid_utf8_lines']:,} lines with "
        f"invalid UTF-8 replaced, {stats['seconds']:.1f} s"
    )
    return 0


main = cli.entry_point(define_flags, run, __doc__, PROG)


if __name__ == "__main__":
    sys.exit(main())
