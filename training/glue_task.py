"""A GLUE task as a fine-tuning task of the one training job: the task's TSVs in; dev metrics
(the official ones), dev predictions and the test submission files as GLUE names them out.

Reading and features are data/glue.py; the metrics data/glue_metrics.py.
"""

from __future__ import annotations

import os

from common.errors import UserError
from common.files import atomic_write
from training.finetuning_job import FineTuningTask
from training.finetuning_objectives import ClassificationObjective, RegressionObjective

FEATURE_KEYS = ("input_ids", "input_mask", "segment_ids", "label_ids")


class GlueTask(FineTuningTask):
    """task_name: any GLUE task (data.glue.get_task's names); data_dir: the GLUE root or the
    task's own directory. --do_eval scores the dev split(s) (MNLI: matched and mismatched),
    --do_predict writes the test split(s) as submission files."""

    def __init__(self, *, task_name: str, data_dir: str):
        from data.glue import get_task

        if not task_name:
            raise UserError("--task_name is required (e.g. MRPC, MNLI, STS-B).")
        if not data_dir:
            raise UserError("--data_dir is required: the GLUE root or the task's directory.")
        self.task = get_task(task_name)
        self.data_dir = data_dir
        self.objective = RegressionObjective() if self.task.is_regression else ClassificationObjective()
        self.num_classes = 1 if self.task.is_regression else len(self.task.labels)
        self.serving_outputs = {"logits": [self.num_classes]}
        self.triton_name = f"bert_glue_{self.task.name.lower().replace('-', '_')}"

    def _splits(self, prefix: str) -> list[str]:
        return [s for s in self.task.split_names if s == prefix or s.startswith(prefix + "_")]

    def validate(self, *, do_train: bool, do_eval: bool, do_predict: bool) -> None:
        from data.glue import find_split_file

        if not os.path.isdir(self.data_dir):
            raise UserError(f"--data_dir {self.data_dir} is not a directory.")
        wanted = (["train"] if do_train else []) + (self._splits("dev") if do_eval else [])
        wanted += self._splits("test") if do_predict else []
        for split in wanted:
            find_split_file(self.task, self.data_dir, self.task.split_file(split))

    def describe(self) -> dict:
        return {"task": self.task.name, "data_dir": self.data_dir, "num_classes": self.num_classes}

    def build_model(self, config, dtype):
        from bert.finetuning import BertClassifier

        return BertClassifier(config, self.num_classes, dtype=dtype)

    def _read(self, split, tokenizer, max_seq_length, stream):
        from data.glue import convert_examples, read_examples

        examples, stats = read_examples(
            self.task, self.data_dir, split, log=lambda message: print(message, file=stream, flush=True)
        )
        if not examples:
            raise UserError(f"{stats['file']} holds no examples.")
        features = convert_examples(examples, self.task, tokenizer, max_seq_length)
        skipped = stats.get("skipped_short_rows", 0)
        print(
            f"GLUE {self.task.name} {split}: {len(examples)} examples from {stats['file']}"
            + (f" ({skipped} malformed rows skipped)" if skipped else "")
            + ".",
            file=stream,
            flush=True,
        )
        return examples, features

    def train_features(self, tokenizer, max_seq_length, *, seed, stream):
        examples, features = self._read("train", tokenizer, max_seq_length, stream)
        return {k: features[k] for k in FEATURE_KEYS}, len(examples)

    def prediction_splits(self, *, do_eval: bool, do_predict: bool) -> list[str]:
        return (self._splits("dev") if do_eval else []) + (self._splits("test") if do_predict else [])

    def predict_features(self, split, tokenizer, max_seq_length, *, stream):
        examples, features = self._read(split, tokenizer, max_seq_length, stream)
        return {k: features[k] for k in FEATURE_KEYS[:3]}, (examples, features)

    def _predicted(self, outputs: dict):
        """(scores: logits, or STS-B's one score per row; label strings)."""
        from data.glue import label_strings

        logits = outputs["logits"]
        scores = logits.reshape(-1) if self.task.is_regression else logits
        return scores, label_strings(self.task, scores)

    def _metrics(self, split, context, predicted) -> dict | None:
        from data.glue_metrics import compute

        examples, features = context
        if split.startswith("test") or not features["has_labels"].all():
            return None
        gold = [str(e.label) for e in examples]
        name = {"dev_matched": "MNLI-m", "dev_mismatched": "MNLI-mm"}.get(split, self.task.name)
        return {**compute(name, gold, predicted), "examples": len(examples)}

    def dev_metrics(self, split, outputs: dict, context) -> dict | None:
        """The official metrics of a labelled split's outputs, writing nothing (evaluations
        during training)."""
        return self._metrics(split, context, self._predicted(outputs)[1])

    def write_predictions(self, split, outputs: dict, context, output_dir: str) -> dict | None:
        """Test splits: the submission file (MRPC.tsv, MNLI-m.tsv, ...). Dev splits:
        <split>_predictions.tsv (index, prediction) and the official metrics, returned."""
        from data.glue import submission_file_name, write_submission

        examples, _ = context
        scores, predicted = self._predicted(outputs)
        if split.startswith("test"):
            write_submission(
                os.path.join(output_dir, submission_file_name(self.task, split)), self.task, examples, scores
            )
            return None
        with atomic_write(os.path.join(output_dir, f"{split}_predictions.tsv")) as f:
            f.write("index\tprediction\n")
            for i, value in enumerate(predicted):
                f.write(f"{i}\t{value}\n")
        return self._metrics(split, context, predicted)
