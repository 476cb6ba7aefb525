"""SQuAD v1.1 / v2.0 as a fine-tuning task of the one training job: windows of the training
file in, predictions.json / nbest_predictions.json / null_odds.json and the official metrics out.

Reading, windows and the n-best decoding are data/squad.py; the metrics data/squad_metrics.py.
"""

from __future__ import annotations

import os

from common.errors import UserError
from training.finetuning_job import FineTuningTask
from training.finetuning_objectives import SpanObjective

TRAIN_KEYS = ("input_ids", "input_mask", "segment_ids", "start_positions", "end_positions")
PREDICT_KEYS = ("input_ids", "input_mask", "segment_ids")


class SquadTask(FineTuningTask):
    """train_file / predict_file: official SQuAD JSON. --do_predict writes the predictions of
    predict_file; --do_eval also scores them (the file must hold answers)."""

    serving_outputs = {"start_logits": [-1], "end_logits": [-1]}  # dims after the batch
    triton_name = "bert_squad"

    def __init__(
        self,
        *,
        train_file: str | None,
        predict_file: str | None,
        version_2_with_negative: bool = False,
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best_size: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float = 0.0,
    ):
        self.train_file = train_file
        self.predict_file = predict_file
        self.version_2_with_negative = version_2_with_negative
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.null_score_diff_threshold = null_score_diff_threshold
        self.objective = SpanObjective()

    def validate(self, *, do_train: bool, do_eval: bool, do_predict: bool) -> None:
        for flag, value in (
            ("doc_stride", self.doc_stride),
            ("max_query_length", self.max_query_length),
            ("n_best_size", self.n_best_size),
            ("max_answer_length", self.max_answer_length),
        ):
            if value < 1:
                raise UserError(f"--{flag} must be at least 1 (got {value}).")
        needed = [("train_file", self.train_file)] if do_train else []
        if do_eval or do_predict:
            needed.append(("predict_file", self.predict_file))
        for flag, path in needed:
            if not path:
                raise UserError(
                    f"--{flag} is required with --do_{'train' if flag == 'train_file' else 'predict'}."
                )
            if not os.path.isfile(path):
                raise UserError(f"--{flag} {path} does not exist.")

    def inputs(self, s) -> list[tuple[str, str]]:
        files = [("--train_file", self.train_file)] if s.do_train else []
        if s.do_eval or s.do_predict:
            files.append(("--predict_file", self.predict_file))
        return [(flag, path) for flag, path in files if path]

    def describe(self) -> dict:
        return {
            "task": "squad",
            "train_file": self.train_file,
            "predict_file": self.predict_file,
            "version_2_with_negative": self.version_2_with_negative,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
        }

    def build_model(self, config, dtype):
        from bert.finetuning import BertSpanModel

        return BertSpanModel(config, dtype=dtype)

    def _features(self, examples, tokenizer, max_seq_length, is_training):
        from data.squad import convert_examples_to_features

        if max_seq_length < self.max_query_length + 4:
            raise UserError(
                f"--max_seq_length={max_seq_length} leaves no room for context after a question of "
                f"--max_query_length={self.max_query_length} tokens."
            )
        return convert_examples_to_features(
            examples,
            tokenizer,
            max_seq_length=max_seq_length,
            doc_stride=self.doc_stride,
            max_query_length=self.max_query_length,
            is_training=is_training,
        )

    def train_features(self, tokenizer, max_seq_length, *, seed, stream):
        from data.squad import features_to_arrays, read_examples

        examples, stats = read_examples(self.train_file, True, self.version_2_with_negative)
        features = self._features(examples, tokenizer, max_seq_length, True)
        if not features:
            raise UserError(f"--train_file {self.train_file} gives no training feature.")
        print(
            f"SQuAD training: {stats['examples']} questions ({stats['impossible']} impossible, "
            f"{stats['skipped_mismatched_answers']} skipped: answer not at answer_start) -> "
            f"{len(features)} windows.",
            file=stream,
            flush=True,
        )
        arrays = features_to_arrays(features)
        return {k: arrays[k] for k in TRAIN_KEYS}, len(examples)

    def prediction_splits(self, *, do_eval: bool, do_predict: bool) -> list[str]:
        return ["predict"] if do_eval or do_predict else []

    def predict_features(self, split, tokenizer, max_seq_length, *, stream):
        from data.squad import features_to_arrays, read_examples

        examples, _ = read_examples(self.predict_file, False, self.version_2_with_negative)
        features = self._features(examples, tokenizer, max_seq_length, False)
        print(
            f"SQuAD prediction: {len(examples)} questions -> {len(features)} windows.",
            file=stream,
            flush=True,
        )
        arrays = features_to_arrays(features)
        return {k: arrays[k] for k in PREDICT_KEYS}, (examples, features)

    def _postprocess(self, outputs: dict, context):
        """(predictions, nbest, null_odds) by Google's n-best decoding."""
        from data import squad

        examples, features = context
        return squad.postprocess(
            examples,
            features,
            outputs["start_logits"],
            outputs["end_logits"],
            n_best_size=self.n_best_size,
            max_answer_length=self.max_answer_length,
            version_2_with_negative=self.version_2_with_negative,
            null_score_diff_threshold=self.null_score_diff_threshold,
        )

    def _metrics(self, context, predictions, null_odds) -> dict | None:
        from data import squad_metrics

        examples, _ = context
        if not any(e.answers or e.is_impossible for e in examples):
            return None  # a test file without answers: predictions only
        return squad_metrics.evaluate(
            self.predict_file,
            predictions,
            na_probs=null_odds if self.version_2_with_negative else None,
            version="2.0" if self.version_2_with_negative else "1.1",
        )

    def dev_metrics(self, split, outputs: dict, context) -> dict | None:
        """The official metrics of the predictions, writing nothing (evaluations during training)."""
        predictions, _, null_odds = self._postprocess(outputs, context)
        return self._metrics(context, predictions, null_odds)

    def write_predictions(self, split, outputs: dict, context, output_dir: str) -> dict | None:
        """Writes the prediction files; returns the official metrics when the file has answers."""
        from data import squad

        predictions, nbest, null_odds = self._postprocess(outputs, context)
        squad.write_predictions(
            output_dir, predictions, nbest, null_odds if self.version_2_with_negative else None
        )
        return self._metrics(context, predictions, null_odds)
