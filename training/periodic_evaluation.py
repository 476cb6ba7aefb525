"""Fine-tuning's evaluation during training (--eval_every_n_steps), a safeguard of the loop: every
`every` updates before the last (whose evaluation follows training), the official metrics of one
split into the log: log.jsonl's {"step", "eval"} lines and TensorBoard's eval/ scalars, printed.
Rank 0 alone predicts; the other workers go on at once."""

from __future__ import annotations

import json

from training.finetuning_data import predict
from training.safeguard import Safeguard


class PeriodicEvaluation(Safeguard):
    """task: the training.finetuning_job.FineTuningTask (its dev_metrics); split: the split it
    evaluates; last: the run's last step; features: (arrays, context) of the split on rank 0,
    None on the others; log: the run's training.metrics_log.MetricsLog; by_length: predict's
    bin_size and sequence_outputs."""

    def __init__(
        self, task, split: str, every: int, last: int, features, batch_size: int, log, by_length: dict
    ):
        self.task, self.split, self.every, self.last = task, split, every, last
        self.features, self.batch_size, self.log, self.by_length = features, batch_size, log, by_length

    def after_boundary(self, run, saved: bool) -> None:
        current = run.current
        if current % self.every or current >= self.last or not self.log.enabled:
            return
        arrays, context = self.features  # rank 0's (None on the others, which never get here)
        outputs = predict(
            run.step,
            arrays,
            self.batch_size,
            f"evaluate {self.split} at step {current}",
            self.log.stream,
            **self.by_length,
        )
        metrics = self.task.dev_metrics(self.split, outputs, context)
        if metrics is not None:
            self.log.record_eval(current, {"split": self.split, **metrics})
            print(f"{self.split} at step {current}: " + json.dumps(metrics), file=self.log.stream, flush=True)
