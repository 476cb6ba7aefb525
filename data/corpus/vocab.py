"""Vocabulary stage: validate an existing vocab.txt, or train WordPiece / SentencePiece on the shards.

Special tokens. Google's released vocabularies put [PAD] at id 0, then [unused0..98], [UNK]=100,
[CLS]=101, [SEP]=102, [MASK]=103 and more [unusedN] slots; everything in this project looks the
special tokens up by name, so any positions work. Vocabularies trained here use the compact
order of the same convention: [PAD]=0 (zero padding stays [PAD], as in Google's TFRecords),
[UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then `unused_tokens` slots [unused0]... (default 0; reserve
some to add domain words later without resizing the embeddings), then the learned pieces.
SentencePiece models get the same five pieces at the same ids (pad/unk as the model's own
pad/unk, the other three as user-defined symbols) and no <s>/</s>.

Training reads only the training shards (never the test shards). WordPiece uses Hugging Face
tokenizers' BertWordPiece trainer with the normalisation our WordPieceTokenizer applies (BERT
cleaning, CJK splitting, lower-casing and accent stripping when do_lower_case), so the vocab
matches how text will be tokenized. SentencePiece samples at most `max_sentences` sentences
(reservoir sampling inside the trainer), which bounds its memory on any corpus size.
"""

from __future__ import annotations

import os
import shutil
import time

from bert.tokenization import SPECIAL_TOKENS, check_special_tokens, load_vocab
from common.errors import UserError
from common.files import atomic_path, atomic_write, commit, ensure_writable_dir, temporary_name
from data.manifest import input_identity
from data.stage import Runtime, Stage

VOCAB_KINDS = ("wordpiece", "sentencepiece")
VOCAB_FILE = "vocab.txt"
SPM_MODEL_FILE = "spm.model"
# Beyond this share of cased entries a vocab is taken as cased (Google's uncased vocab has none
# outside [unused], its cased one about 30%).
_CASED_THRESHOLD = 0.02  # (a few symbols such as "ℝ" count as upper case in uncased vocabs)


def vocab_case(vocab: dict) -> float:
    """Share of ordinary entries (not [..] slots) containing an upper-case letter."""
    entries = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    if not entries:
        return 0.0
    return sum(any(c.isupper() for c in t) for t in entries) / len(entries)


def validate_vocab(vocab_file: str, do_lower_case: bool | None = None) -> dict:
    """Checks an existing vocab.txt; returns {size, special ids, cased_share, warnings}.

    Raises UserError naming the file if it is missing, not UTF-8, empty, or lacks a special token.
    """
    try:
        vocab = load_vocab(vocab_file)
        check_special_tokens(vocab, vocab_file)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    with open(vocab_file, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    warnings = []
    if lines != len(vocab):
        warnings.append(
            f"{vocab_file} has {lines - len(vocab)} duplicate or blank lines; the last "
            f"occurrence of a duplicate wins, as in Google's loader."
        )
    cased = vocab_case(vocab)
    if do_lower_case is True and cased > _CASED_THRESHOLD:
        warnings.append(
            f"{vocab_file} looks cased ({100 * cased:.0f}% of entries have capitals) but "
            f"--do_lower_case is on: capitalised pieces will never be used."
        )
    if do_lower_case is False and cased < 0.001:
        warnings.append(
            f"{vocab_file} looks uncased but --do_lower_case is off: most capitalised "
            f"words will become [UNK] or split badly."
        )
    return {
        "vocab_file": vocab_file,
        "size": len(vocab),
        "lines": lines,
        "special_ids": {t: vocab[t] for t in SPECIAL_TOKENS},
        "cased_share": round(cased, 4),
        "warnings": warnings,
    }


def special_tokens(unused_tokens: int = 0) -> list[str]:
    return list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(unused_tokens)]


def train_wordpiece(
    files: list[str],
    output_file: str,
    *,
    vocab_size: int,
    do_lower_case: bool,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    unused_tokens: int = 0,
) -> int:
    """Trains a WordPiece vocab on `files`, writes it (atomically) to `output_file`; returns its size."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    tokenizer.train(
        files,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=special_tokens(unused_tokens),
        show_progress=False,
        wordpieces_prefix="##",
    )
    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    with atomic_write(output_file) as f:
        for token in tokens:
            f.write(token + "\n")
    return len(tokens)


def train_sentencepiece(
    files: list[str],
    output_file: str,
    *,
    vocab_size: int,
    do_lower_case: bool,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    max_sentences: int = 2_000_000,
    unused_tokens: int = 0,
    n_threads: int = 1,
) -> int:
    """Trains a SentencePiece model with BERT's special pieces; writes `output_file` (.model)."""
    import sentencepiece as spm

    directory = os.path.dirname(os.path.abspath(output_file))
    # SentencePiece names its outputs <prefix>.model and <prefix>.vocab itself; a temporary_name
    # prefix makes a killed run's files ones that readers ignore and build_vocab clears.
    prefix = temporary_name(os.path.join(directory, "spm_training"))
    extra = special_tokens(unused_tokens)[2:]  # [CLS] [SEP] [MASK] [unused..]
    try:
        with open(os.devnull, "w") as quiet:
            spm.SentencePieceTrainer.Train(
                input=files,
                model_prefix=prefix,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                seed_sentencepiece_size=1_000_000,
                pad_id=0,
                pad_piece="[PAD]",
                unk_id=1,
                unk_piece="[UNK]",
                bos_id=-1,
                eos_id=-1,
                user_defined_symbols=extra,
                hard_vocab_limit=False,
                num_threads=n_threads,
                normalization_rule_name="nmt_nfkc_cf" if do_lower_case else "nmt_nfkc",
                logstream=quiet,
            )
    except (RuntimeError, OSError) as e:
        raise UserError(f"SentencePiece training on {len(files)} shard(s) failed: {e}") from None
    # The listing first: a model under its final name always has its listing beside it.
    commit(prefix + ".vocab", os.path.splitext(output_file)[0] + ".vocab")
    commit(prefix + ".model", output_file)
    processor = spm.SentencePieceProcessor(model_file=output_file)
    return processor.GetPieceSize()


def build_vocab(
    training_files: list[str],
    output_dir: str,
    *,
    kind: str = "wordpiece",
    vocab_size: int,
    do_lower_case: bool = True,
    min_frequency: int = 2,
    unused_tokens: int = 0,
    spm_model_type: str = "unigram",
    spm_max_sentences: int = 2_000_000,
    runtime: Runtime | None = None,
    **runtime_fields,
) -> dict:
    """Trains a vocabulary on the training shards into output_dir (restartable); returns stats.
    `runtime` (data.stage.Runtime; its fields may be given alone, e.g. `log=`) says how it runs:
    one process, its verify and log."""
    runtime = Runtime.of(runtime, **runtime_fields)
    log = runtime.log
    if kind not in VOCAB_KINDS:
        raise UserError(f"Unknown --vocab_type {kind!r}; choose from {', '.join(VOCAB_KINDS)}.")
    if vocab_size < len(SPECIAL_TOKENS) + unused_tokens + 1:
        raise UserError(
            f"--vocab_size {vocab_size} leaves no room for pieces after the "
            f"{len(SPECIAL_TOKENS) + unused_tokens} special tokens."
        )
    if not training_files:
        raise UserError("No training shards to train a vocabulary on; run --action sharding first.")
    for path in training_files:
        if not os.path.isfile(path):
            raise UserError(f"Training shard {path!r} does not exist; run --action sharding first.")
    ensure_writable_dir(output_dir)
    name = VOCAB_FILE if kind == "wordpiece" else SPM_MODEL_FILE
    params = {
        "inputs": [input_identity(p) for p in training_files],
        "kind": kind,
        "vocab_size": vocab_size,
        "do_lower_case": do_lower_case,
        "min_frequency": min_frequency,
        "unused_tokens": unused_tokens,
        "spm_model_type": spm_model_type,
        "spm_max_sentences": spm_max_sentences,
    }
    stage = Stage(output_dir, f"vocab_{kind}", params, runtime)
    output = os.path.join(output_dir, name)

    def work(run):
        if run.removed:
            log(f"[vocab] removed the temporary files of an interrupted run in {output_dir}.")
        start = time.monotonic()
        if kind == "wordpiece":
            size = train_wordpiece(
                training_files,
                output,
                vocab_size=vocab_size,
                do_lower_case=do_lower_case,
                min_frequency=min_frequency,
                unused_tokens=unused_tokens,
            )
            check_special_tokens(load_vocab(output), output)
        else:
            size = train_sentencepiece(
                training_files,
                output,
                vocab_size=vocab_size,
                do_lower_case=do_lower_case,
                model_type=spm_model_type,
                max_sentences=spm_max_sentences,
                unused_tokens=unused_tokens,
            )
        if size < vocab_size:
            log(f"[vocab] the corpus supports only {size} entries (asked for {vocab_size}).")
        stats = {
            "vocab_size": size,
            "training_shards": len(training_files),
            "input_bytes": sum(os.path.getsize(p) for p in training_files),
            "seconds": round(time.monotonic() - start, 3),
        }
        stage.land({name: stats})
        return {**stats, "path": output}

    run = stage.run_on_ranks([name], work)
    if run.skipped:
        log(f"[vocab] {output} is complete and verified; skipped.")
        return {**stage.manifest.counts(name), "path": output, "skipped": True}
    return run.result


def copy_vocab(vocab_file: str, output_dir: str) -> str:
    """Copies a validated vocab.txt next to the data it was used for (for provenance)."""
    ensure_writable_dir(output_dir)
    target = os.path.join(output_dir, VOCAB_FILE)
    with atomic_path(target) as temporary:
        shutil.copyfile(vocab_file, temporary)
    return target
