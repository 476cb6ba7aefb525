"""The GLUE tasks as distributed, read into examples and features with Google's conventions.

The layout is the one GLUE's download script (and scripts/data_download.sh glue, which puts it
under <BERT_DATA_DIR>/download/glue) produces:

    glue_data/CoLA/{train,dev,test}.tsv     likewise SST-2, MRPC, STS-B, QQP, QNLI, RTE, WNLI
    glue_data/MNLI/train.tsv, {dev,test}_{matched,mismatched}.tsv
    glue_data/diagnostic/diagnostic.tsv     AX (the GLUE host serves it as AX.tsv)

Files are tab-separated UTF-8 read with quoting off, as Google's run_classifier.py does: the
texts hold lone `"` characters (MRPC, MNLI), which a quoting reader would swallow together with
the tabs after them. Labels keep the order of Google's processors (MNLI contradiction = 0), so
label ids and checkpoints fine-tuned with Google's code agree; STS-B is regression (a float).

A guid is `<split>-<id>`: the file's index column where it has one, else the 0-based line
number (Google's `i`; the header, where there is one, is line 0). `index` keeps the index
column for the GLUE server's submission files, written by `write_submission`.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from dataclasses import dataclass

import numpy as np

from bert.tokenization import encode_pair
from common.errors import UserError
from common.files import atomic_write
from data import paths

MNLI_LABELS = ("contradiction", "entailment", "neutral")
STSB_MAX_SCORE = 5.0
# Rows tokenized per tokenize_batch call: large enough for the Rust backend's parallelism,
# small enough that a chunk's token lists stay a few MB.
_CHUNK = 4096
_PROGRESS_MIN_EXAMPLES = 5000


@dataclass(frozen=True)
class SplitFile:
    """Where one split lives and how its TSV is laid out: 0-based columns, -1 = the last column.

    `file_names` are tried in order (the diagnostic set is diagnostic.tsv in GLUE's layout and
    AX.tsv as served). `label` None means unlabelled (test); `index` None means no index column.
    """

    split: str
    file_names: tuple[str, ...]
    text_a: int
    text_b: int | None
    label: int | None
    index: int | None
    header: bool

    @property
    def min_columns(self) -> int:
        used = [c for c in (self.text_a, self.text_b, self.label, self.index) if c is not None and c >= 0]
        # A last-column label must come after the texts (MNLI has 12 columns in train, 16 in dev).
        return max(used) + 1 + (1 if self.label == -1 else 0)


@dataclass(frozen=True)
class Task:
    """One GLUE task: its directory, label set (None for regression), metrics and split files."""

    name: str
    directory: str
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    splits: tuple[SplitFile, ...]
    # QQP holds a few rows with too few columns; Hugging Face's reader skips them too.
    skip_short_rows: bool = False

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(s.split for s in self.splits)

    def resolve_split(self, split: str) -> str:
        """The split's name in this task: MNLI's "dev"/"test" mean the matched sets."""
        names = self.split_names
        if split in names:
            return split
        if f"{split}_matched" in names:
            return f"{split}_matched"
        raise UserError(f"GLUE task {self.name} has no split {split!r}; choose one of {', '.join(names)}.")

    def split_file(self, split: str) -> SplitFile:
        resolved = self.resolve_split(split)
        return next(s for s in self.splits if s.split == resolved)


def _pair_task(name: str, labels: tuple[str, ...]) -> Task:
    """QNLI, RTE, WNLI: index, text_a, text_b, label (test: no label), with a header."""
    labelled = dict(text_a=1, text_b=2, label=3, index=0, header=True)
    return Task(
        name,
        name,
        labels,
        ("accuracy",),
        (
            SplitFile("train", ("train.tsv",), **labelled),
            SplitFile("dev", ("dev.tsv",), **labelled),
            SplitFile("test", ("test.tsv",), text_a=1, text_b=2, label=None, index=0, header=True),
        ),
    )


def _mnli_split(split: str, labelled: bool) -> SplitFile:
    # index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse
    # sentence2_parse sentence1 sentence2 [label1 ... label5] [gold_label]
    return SplitFile(
        split, (f"{split}.tsv",), text_a=8, text_b=9, label=-1 if labelled else None, index=0, header=True
    )


_BINARY = ("0", "1")

TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        # CoLA train/dev: source, label, original judgement ("*" or empty), sentence; no header.
        Task(
            "CoLA",
            "CoLA",
            _BINARY,
            ("matthews_corr",),
            (
                SplitFile("train", ("train.tsv",), text_a=3, text_b=None, label=1, index=None, header=False),
                SplitFile("dev", ("dev.tsv",), text_a=3, text_b=None, label=1, index=None, header=False),
                SplitFile("test", ("test.tsv",), text_a=1, text_b=None, label=None, index=0, header=True),
            ),
        ),
        # SST-2: sentence, label / test: index, sentence.
        Task(
            "SST-2",
            "SST-2",
            _BINARY,
            ("accuracy",),
            (
                SplitFile("train", ("train.tsv",), text_a=0, text_b=None, label=1, index=None, header=True),
                SplitFile("dev", ("dev.tsv",), text_a=0, text_b=None, label=1, index=None, header=True),
                SplitFile("test", ("test.tsv",), text_a=1, text_b=None, label=None, index=0, header=True),
            ),
        ),
        # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String / test: index instead of Quality.
        Task(
            "MRPC",
            "MRPC",
            _BINARY,
            ("f1", "accuracy"),
            (
                SplitFile("train", ("train.tsv",), text_a=3, text_b=4, label=0, index=None, header=True),
                SplitFile("dev", ("dev.tsv",), text_a=3, text_b=4, label=0, index=None, header=True),
                SplitFile("test", ("test.tsv",), text_a=3, text_b=4, label=None, index=0, header=True),
            ),
        ),
        # STS-B: index genre filename year old_index source1 source2 sentence1 sentence2 score;
        # the score is read from the last column, as Hugging Face's processor does.
        Task(
            "STS-B",
            "STS-B",
            None,
            ("pearson", "spearman"),
            (
                SplitFile("train", ("train.tsv",), text_a=7, text_b=8, label=-1, index=0, header=True),
                SplitFile("dev", ("dev.tsv",), text_a=7, text_b=8, label=-1, index=0, header=True),
                SplitFile("test", ("test.tsv",), text_a=7, text_b=8, label=None, index=0, header=True),
            ),
        ),
        # QQP: id qid1 qid2 question1 question2 is_duplicate / test: id question1 question2.
        Task(
            "QQP",
            "QQP",
            _BINARY,
            ("f1", "accuracy"),
            (
                SplitFile("train", ("train.tsv",), text_a=3, text_b=4, label=5, index=0, header=True),
                SplitFile("dev", ("dev.tsv",), text_a=3, text_b=4, label=5, index=0, header=True),
                SplitFile("test", ("test.tsv",), text_a=1, text_b=2, label=None, index=0, header=True),
            ),
            skip_short_rows=True,
        ),
        Task(
            "MNLI",
            "MNLI",
            MNLI_LABELS,
            ("accuracy",),
            (
                _mnli_split("train", True),
                _mnli_split("dev_matched", True),
                _mnli_split("dev_mismatched", True),
                _mnli_split("test_matched", False),
                _mnli_split("test_mismatched", False),
            ),
        ),
        _pair_task("QNLI", ("entailment", "not_entailment")),  # index question sentence label
        _pair_task("RTE", ("entailment", "not_entailment")),  # index sentence1 sentence2 label
        _pair_task("WNLI", _BINARY),  # index sentence1 sentence2 label
        # The diagnostic set is scored with an MNLI model, hence MNLI's labels; GLUE reports R3
        # (a Matthews correlation over the three classes).
        Task(
            "AX",
            "diagnostic",
            MNLI_LABELS,
            ("matthews_corr",),
            (
                SplitFile(
                    "test", ("diagnostic.tsv", "AX.tsv"), text_a=1, text_b=2, label=None, index=0, header=True
                ),
            ),
        ),
    )
}

_ALIASES = {
    "sst2": "SST-2",
    "stsb": "STS-B",
    # The split, not the task name, picks matched or mismatched.
    "mnli-m": "MNLI",
    "mnli-mm": "MNLI",
    "diagnostic": "AX",
}


def get_task(name: str) -> Task:
    """The task for a case-insensitive name or alias (sst2, stsb, mnli-m, mnli-mm, diagnostic; _ for -)."""
    key = name.strip().lower().replace("_", "-")
    lookup = {task.lower(): task for task in TASKS} | _ALIASES
    if key not in lookup:
        raise UserError(
            f"Unknown GLUE task {name!r}; choose one of {', '.join(TASKS)} "
            f"(case-insensitive; also {', '.join(_ALIASES)})."
        )
    return TASKS[lookup[key]]


@dataclass
class InputExample:
    """One row. label: a label string, a float (STS-B) or None (test); index: the file's index column."""

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None
    index: str | None = None


def find_split_file(task: Task, data_dir: str, split_file: SplitFile) -> str:
    """The split's file in `data_dir` itself (the task's directory) or in data_dir/<task dir> (the GLUE root)."""
    candidates = [
        os.path.join(directory, file_name)
        for directory in (data_dir, os.path.join(data_dir, task.directory))
        for file_name in split_file.file_names
    ]
    for path in candidates:
        if os.path.isfile(path):
            return path
    where = os.path.join(paths.download_dir("<BERT_DATA_DIR>", "glue"), task.directory)
    raise UserError(
        f"GLUE {task.name} {split_file.split} file not found: looked for "
        f"{' and '.join(repr(c) for c in candidates)}; pass the GLUE root (holding "
        f"{task.directory}/{split_file.file_names[0]}) or the task's own directory "
        f"(`bash scripts/data_download.sh glue` puts it in {where})."
    )


def read_examples(task: Task, data_dir: str, split: str, log=None) -> tuple[list[InputExample], dict]:
    """Reads one split of `task` from `data_dir` (the GLUE root or the task's own directory).

    Returns (examples, stats) with stats {file, examples, skipped_short_rows}. Raises UserError
    naming the file (and line) for a missing file, a short row (QQP skips and counts them,
    reported through `log`), a label outside the task's set, or a score that is not a number.
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    layout = task.split_file(split)
    path = find_split_file(task, data_dir, layout)
    allowed = set(task.labels or ())
    examples: list[InputExample] = []
    skipped, first_skipped = 0, None
    try:
        # utf-8-sig: a BOM some editors add must not become part of the first cell.
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            for row in reader:
                line = reader.line_num
                if layout.header and line == 1:
                    continue
                if not row:
                    continue  # a blank line, usually the file's last
                if len(row) < layout.min_columns:
                    if task.skip_short_rows:
                        skipped += 1
                        first_skipped = first_skipped or line
                        continue
                    raise UserError(
                        f"{path}, line {line}: {len(row)} tab-separated column(s), but GLUE {task.name} "
                        f"{layout.split} rows have at least {layout.min_columns}; the file is damaged or "
                        f"not {task.name}'s."
                    )
                label = None
                if layout.label is not None:
                    label = _parse_label(task, row[layout.label], allowed, path, line)
                index = row[layout.index] if layout.index is not None else None
                examples.append(
                    InputExample(
                        guid=f"{layout.split}-{index if index is not None else line - 1}",
                        text_a=row[layout.text_a],
                        text_b=row[layout.text_b] if layout.text_b is not None else None,
                        label=label,
                        index=index,
                    )
                )
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except csv.Error as e:  # a field over csv's size limit: not a GLUE file
        raise UserError(f"{path}, line {reader.line_num}: {e}; the file is not a GLUE TSV file.") from None
    except OSError as e:
        raise UserError(f"Cannot read the GLUE file {path!r} ({e.strerror or e}).") from None
    if skipped:
        log(
            f"warning: {path}: skipped {skipped:,} malformed row(s) with fewer than "
            f"{layout.min_columns} columns (the first at line {first_skipped})."
        )
    return examples, {"file": path, "examples": len(examples), "skipped_short_rows": skipped}


def _parse_label(task: Task, value: str, allowed: set, path: str, line: int):
    if task.is_regression:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise UserError(f"{path}, line {line}: the {task.name} score {value!r} is not a number.")
        return score
    if value not in allowed:
        raise UserError(
            f"{path}, line {line}: label {value!r} is not one of GLUE {task.name}'s labels "
            f"{', '.join(repr(v) for v in task.labels)}."
        )
    return value


class _Pretokenized:
    """Hands encode_pair tokens from one tokenize_batch call, so a chunk of texts is tokenized in
    a single call to the (parallel) backend while the layout and truncation stay encode_pair's."""

    def __init__(self, tokenizer, texts):
        unique = list(dict.fromkeys(texts))
        self._tokens = dict(zip(unique, tokenizer.tokenize_batch(unique)))
        self.convert_tokens_to_ids = tokenizer.convert_tokens_to_ids

    def tokenize(self, text):
        return list(self._tokens[text])  # a copy: encode_pair truncates it in place


def convert_examples(examples, task: Task, tokenizer, max_seq_length: int = 128, progress=True) -> dict:
    """Examples -> features, `[CLS] A [SEP] B [SEP]` truncated longest-first (bert.tokenization.encode_pair).

    Returns numpy arrays (n examples):
      input_ids, input_mask, segment_ids  int32 [n, max_seq_length], zero padded
      label_ids   int32 [n] (index into task.labels), float32 [n] for STS-B; 0 where unlabelled
      has_labels  bool [n]: False for test examples (label None)
    `progress`: True shows a common.progress bar for large sets, or a callable gets counts.
    """
    n = len(examples)
    labels = [e.label for e in examples]
    features = {
        k: np.zeros((n, max_seq_length), np.int32) for k in ("input_ids", "input_mask", "segment_ids")
    }
    features["has_labels"] = np.array([label is not None for label in labels], bool).reshape(n)
    if task.is_regression:
        features["label_ids"] = np.array([label or 0.0 for label in labels], np.float32).reshape(n)
    else:
        label_id = {label: i for i, label in enumerate(task.labels)}
        unknown = [label for label in labels if label is not None and label not in label_id]
        if unknown:
            raise ValueError(f"Label {unknown[0]!r} is not one of {task.name}'s labels {task.labels}.")
        features["label_ids"] = np.array([label_id.get(label, 0) for label in labels], np.int32).reshape(n)

    bar = None
    if progress is True and n >= _PROGRESS_MIN_EXAMPLES:
        from common.progress import Progress

        bar = progress = Progress(f"{task.name} features", total=n, unit="examples")
    elif not callable(progress):
        progress = None
    try:
        for start in range(0, n, _CHUNK):
            chunk = examples[start : start + _CHUNK]
            texts = [e.text_a for e in chunk] + [e.text_b for e in chunk if e.text_b]
            pretokenized = _Pretokenized(tokenizer, texts)
            for i, example in enumerate(chunk, start):
                encoded = encode_pair(
                    pretokenized, example.text_a, example.text_b, max_seq_length=max_seq_length
                )
                for key in ("input_ids", "input_mask", "segment_ids"):
                    features[key][i] = encoded[key]
            if progress is not None:
                progress(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return features


def submission_file_name(task: Task, split: str = "test") -> str:
    """The name the GLUE server expects: CoLA.tsv ... AX.tsv, MNLI-m.tsv / MNLI-mm.tsv."""
    resolved = task.resolve_split(split)
    if resolved.endswith("_mismatched"):
        return f"{task.name}-mm.tsv"
    if resolved.endswith("_matched"):
        return f"{task.name}-m.tsv"
    return f"{task.name}.tsv"


def label_strings(task: Task, predictions) -> list[str]:
    """Predictions -> the strings GLUE files hold.

    Classification: label ids int [n], or scores [n, len(task.labels)] (argmax taken) ->
    task.labels[id]. Regression (STS-B): scores [n] -> clipped to [0, 5], 3 decimals.
    """
    values = np.asarray(predictions)
    if values.size == 0:
        return []
    if task.is_regression:
        values = values.astype(np.float64).reshape(-1)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{task.name} predictions contain non-finite scores.")
        return [f"{v:.3f}" for v in np.clip(values, 0.0, STSB_MAX_SCORE)]
    if values.ndim == 2:
        values = values.argmax(axis=-1)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"{task.name} predictions must be label ids [n] or scores [n, {len(task.labels)}]; "
            f"got {values.dtype} {values.shape}."
        )
    if values.min() < 0 or values.max() >= len(task.labels):
        raise ValueError(
            f"{task.name} label ids must be in [0, {len(task.labels)}); got {values.min()}..{values.max()}."
        )
    return [task.labels[i] for i in values.tolist()]


def write_submission(path: str, task: Task, examples, predictions) -> None:
    """Writes `index<TAB>prediction` rows (with that header) for `examples` (read from a test
    file, which has the index column), atomically."""
    strings = label_strings(task, predictions)
    if len(strings) != len(examples):
        raise ValueError(f"{len(examples)} examples but {len(strings)} predictions for {path}.")
    missing = next((e.guid for e in examples if e.index is None), None)
    if missing is not None:
        raise ValueError(f"Example {missing} has no index column; submissions are written for test splits.")
    with atomic_write(path) as f:
        f.write("index\tprediction\n")
        for example, prediction in zip(examples, strings):
            f.write(f"{example.index}\t{prediction}\n")
