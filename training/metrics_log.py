"""What a training run reports (rank 0): log.jsonl, TensorBoard events, progress lines with ETA,
and NVIDIA's closing "Throughput Average (sequences/sec)" over steady steps.

    <output_dir>/log.jsonl          one JSON object per logged step; {"step", "eval": {...}} for an
                                    evaluation during training (fine-tuning's --eval_every_n_steps);
                                    {"step", "rollback": {...}} for a divergence rolled back to step
    <output_dir>/tensorboard/       tf.summary event files (train/..., eval/...)

Throughput counts only steady updates: the first update of a process (it compiles the XLA
functions) is left out, and checkpoint writing happens between updates, outside their timings.
A resumed run rewrites log.jsonl without the lines past its checkpoint, which the interrupted
run logged and the resumed one logs again.
"""

from __future__ import annotations

import json
import math
import os
import sys

from common.files import atomic_write
from common.progress import Progress
from training.safeguard import Safeguard

LOG_NAME = "log.jsonl"
TENSORBOARD_DIR = "tensorboard"


def read_log(path: str) -> list[dict]:
    """The objects of a log.jsonl (a torn last line from a killed run is dropped)."""
    entries = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    break
    return entries


class LogFollower:
    """Reads a log.jsonl as it grows: each call of `new_entries` returns the objects of the lines
    completed since the last call (a line still being written waits for its newline). A file
    that shrank or was replaced (a resumed run rewrites it) is read again from its start."""

    def __init__(self, path: str):
        self.path = path
        self._offset = 0
        self._identity = None

    def new_entries(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                if (stat.st_dev, stat.st_ino) != self._identity or stat.st_size < self._offset:
                    self._identity, self._offset = (stat.st_dev, stat.st_ino), 0
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        entries = []
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue  # not a log object; the next lines still are
        return entries


def _json_number(value):
    """JSON has no NaN or Infinity: non-finite floats are written as strings ("nan", "inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLog(Safeguard):
    """Collects per-update metrics; writes and prints every `log_every` steps (and the last). As
    the loop's safeguard it records each applied update (the loop reads the device at its log
    steps) and the programs compiled before it, and closes at the run's end.

    sequences_per_update: the global batch (batch x accumulation x workers).
    enabled: False on every rank but 0 (then nothing is written or printed).
    tracker: a training.tracking.MlflowTracker that gets each logged entry (as train/<name>) and
    each evaluation during training, or None.
    """

    def __init__(
        self,
        output_dir: str,
        *,
        total_steps: int,
        start_step: int,
        sequences_per_update: int,
        log_every: int = 10,
        enabled: bool = True,
        stream=None,
        tracker=None,
    ):
        self.output_dir = output_dir
        self.total_steps = total_steps
        self.sequences_per_update = sequences_per_update
        self.log_every = self.every = max(1, log_every)
        self.enabled = enabled
        self.tracker = tracker if enabled else None
        self.stream = stream if stream is not None else sys.stdout
        self.steady_seconds = 0.0
        self.steady_updates = 0
        self._updates = 0
        self._interval_seconds = 0.0
        self._interval_updates = 0
        self._compiled_reported = 0
        self._traced_ahead_reported = False
        self._progress = Progress(
            "step", total=max(1, total_steps - start_step), unit="step", stream=self.stream, enabled=False
        )
        self._file = None
        self._writer = None
        if enabled:
            self._keep_through(start_step)

    def _keep_through(self, step: int) -> None:
        """log.jsonl rewritten without its lines past `step` and opened to append."""
        if self._file is not None:
            self._file.close()
        path = os.path.join(self.output_dir, LOG_NAME)
        kept = [e for e in read_log(path) if e.get("step", 0) <= step]
        with atomic_write(path) as f:
            for entry in kept:
                f.write(json.dumps(entry) + "\n")
        self._file = open(path, "a", encoding="utf-8")

    def _scalars(self, step: int, prefix: str, values: dict) -> None:
        """TensorBoard scalars through tf.summary.write: tf.summary.scalar needs the tensorboard
        package, which tensorflow-cpu 2.21 no longer installs; the events read the same."""
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
        with self._summary_writer().as_default(step=step):
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and name != "step":
                    tf.summary.write(
                        f"{prefix}/{name}", tf.constant(float(value), tf.float32), metadata=metadata
                    )

    def _summary_writer(self):
        if self._writer is None:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(os.path.join(self.output_dir, TENSORBOARD_DIR))
        return self._writer

    def after_update(self, run, metrics: dict, seconds: float) -> None:
        self.record_compiled(run.step.compiled, run.step.traced_ahead)
        self.record(run.current, metrics, seconds)

    def end(self, run) -> None:
        self.record_compiled(run.step.compiled, run.step.traced_ahead)
        self.close()

    def record(self, step: int, metrics: dict, seconds: float) -> dict | None:
        """One applied update that took `seconds` (metrics as TrainStep.read gives them, with the
        `learning_rate` it used and the `skipped` count); returns the logged entry on a log step."""
        self._updates += 1
        self._progress.update(1)
        if self._updates > 1:  # the first update of a process compiles
            self.steady_seconds += seconds
            self.steady_updates += 1
        self._interval_seconds += seconds
        self._interval_updates += 1
        if step % self.log_every and step != self.total_steps:
            return None
        rate = self.sequences_per_update * self._interval_updates / max(self._interval_seconds, 1e-9)
        self._interval_seconds, self._interval_updates = 0.0, 0
        entry = {
            "step": step,
            **{k: v for k, v in metrics.items() if isinstance(v, float) and k != "loss_scale"},
            "learning_rate": metrics["learning_rate"],
            "loss_scale": metrics["loss_scale"],
            "sequences_per_second": rate,
            "skipped": metrics["skipped"],
        }
        if self.enabled:
            self._file.write(json.dumps({k: _json_number(v) for k, v in entry.items()}) + "\n")
            self._file.flush()
            self._scalars(step, "train", entry)
            if self.tracker is not None:
                self.tracker.metrics(step, entry, prefix="train/")
            self._progress.desc = f"step {step}/{self.total_steps}"
            extra = "".join(f" {k} {metrics[k]:.4f}" for k in ("mlm_accuracy", "accuracy") if k in metrics)
            print(
                f"{self._progress.line()}  loss {metrics['loss']:.4f}{extra}  {rate:.1f} seq/s",
                file=self.stream,
                flush=True,
            )
        return entry

    def record_compiled(self, compiled: list, traced_ahead: str | None = None) -> None:
        """Prints the programs compiled since the last call (TrainStep.compiled: (program and
        shape, seconds), in order), each once, after TrainStep's sentence on the programs it
        traced ahead (once)."""
        if traced_ahead and not self._traced_ahead_reported and self.enabled:
            print(traced_ahead, file=self.stream, flush=True)
        self._traced_ahead_reported = self._traced_ahead_reported or bool(traced_ahead)
        for program, seconds in compiled[self._compiled_reported :]:
            if self.enabled:
                print(f"Compiled the {program} program in {seconds:.1f} s.", file=self.stream, flush=True)
        self._compiled_reported = len(compiled)

    def record_eval(self, step: int, results: dict) -> None:
        """Evaluation results at `step`: TensorBoard's eval/ scalars and, while training (the log
        file is open), a {"step", "eval": results} line in log.jsonl and the tracker's metrics (the
        job tracks the final evaluation from eval_results.json)."""
        if not self.enabled:
            return
        self._scalars(step, "eval", results)
        if self._file is not None:
            values = {k: _json_number(v) for k, v in results.items()}
            self._file.write(json.dumps({"step": step, "eval": values}) + "\n")
            self._file.flush()
            if self.tracker is not None:
                self.tracker.metrics(step, results)

    def record_rollback(self, record: dict, sentence: str) -> None:
        """A divergence rolled back to the checkpoint of record["step"] (training/rollback.py):
        log.jsonl loses the lines of the undone updates, as a resumed run's does, and gains
        {"step", "rollback": record}; TensorBoard's rollback/ scalars and the tracker's at the
        diverged step; `sentence` printed."""
        if not self.enabled:
            return
        self._keep_through(record["step"])
        self._file.write(json.dumps({"step": record["step"], "rollback": record}) + "\n")
        self._file.flush()
        values = {
            "to_step": record["step"],
            "updates_undone": record["updates_undone"],
            "skipped_sequences": record["skipped"][1] - record["skipped"][0],
        }
        self._scalars(record["diverged_step"], "rollback", values)
        if self.tracker is not None:
            self.tracker.metrics(record["diverged_step"], values, prefix="rollback/")
        print(sentence, file=self.stream, flush=True)

    def throughput(self) -> float | None:
        """Sequences per second over the steady updates (None before the second update)."""
        if not self.steady_updates:
            return None
        return self.sequences_per_update * self.steady_updates / max(self.steady_seconds, 1e-9)

    def close(self) -> None:
        if self.enabled and self._updates:
            rate = self.throughput()
            shown = f"{rate:.2f}" if rate is not None else "n/a (one update: compile only)"
            print(f"Throughput Average (sequences/sec) = {shown}", file=self.stream, flush=True)
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.flush()
