"""MLflow tracking (rank 0): a run's resolved settings as params, its training metrics at their
steps and its evaluations, beside the local log.jsonl, TensorBoard events and eval_results.json.

    target = MlflowTarget.from_environ(os.environ)   # None unless MLFLOW_TRACKING_URI is set
    tracker = open_tracker(target, stream)           # on rank 0 only; None without a target
    tracker.params(resolved)
    tracker.metrics(step, {"loss": ...}, prefix="train/")
    tracker.close("FINISHED")

Training metrics are named as TensorBoard's (train/loss, train/learning_rate, ...); evaluations
as eval_results.json names them (f1, exact_match, accuracy, ...), which is what an Azure ML sweep's
primary_metric names. The run is the active one of this process, else MLFLOW_RUN_ID's (Azure ML
starts one per job), else a new one in MLflow's current experiment; only a new one is ended here.

mlflow is imported only when a target exists. The tracking server is a convenience, not the
record: the first call that fails is reported once and tracking stops, while training and the
local logs go on.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import time

from common.errors import UserError

# MLflow's limits per log_batch request.
_PARAMS_PER_BATCH = 100
_PARAM_VALUE_CHARS = 6000
_STEPS = ("step", "global_step")  # the step a metric is logged at, not a metric


@dataclasses.dataclass(frozen=True)
class MlflowTarget:
    """Where a run's metrics go: the tracking URI and, when the launcher made one, the run's id."""

    tracking_uri: str
    run_id: str | None = None

    @classmethod
    def from_environ(cls, environ) -> MlflowTarget | None:
        """MLflow's own variables (MLFLOW_TRACKING_URI, MLFLOW_RUN_ID); None when the URI is unset.
        UserError when it is set but mlflow is not installed: every rank stops before training."""
        uri = environ.get("MLFLOW_TRACKING_URI", "").strip()
        if not uri:
            return None
        if importlib.util.find_spec("mlflow") is None:
            raise UserError(
                "MLFLOW_TRACKING_URI is set but the mlflow-skinny package is not installed: "
                "pip install it (requirements.txt pins it) or unset MLFLOW_TRACKING_URI."
            )
        return cls(uri, environ.get("MLFLOW_RUN_ID", "").strip() or None)


def _numbers(values: dict, prefix: str) -> dict:
    """{prefix + name: float} of the numeric values; a nested dict (MNLI's splits) as name/...;
    flags, strings and the step itself are left out."""
    flat = {}
    for name, value in values.items():
        if isinstance(value, dict):
            flat.update(_numbers(value, f"{prefix}{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and name not in _STEPS:
            flat[prefix + name] = float(value)
    return flat


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class MlflowTracker:
    """One MLflow run that a job logs into (see the module docstring)."""

    def __init__(self, client, run_id: str, owned: bool, stream):
        self.client = client
        self.run_id = run_id
        self.owned = owned  # started here, so ended here
        self.stream = stream
        self.working = True

    def _failed(self, what: str, error: Exception) -> None:
        print(
            f"Warning: MLflow tracking stopped: {what} failed ({_first_line(error)}); training goes on and "
            "log.jsonl, TensorBoard and eval_results.json still have every metric.",
            file=self.stream,
            flush=True,
        )
        self.working = False

    def params(self, values: dict) -> None:
        """The resolved settings as params (JSON values). A resumed run logging into the same run
        again may not change a param (MLflow refuses): then params are left as they were."""
        if not self.working:
            return
        from mlflow.entities import Param

        params = [Param(k, json.dumps(v)[:_PARAM_VALUE_CHARS]) for k, v in sorted(values.items())]
        for i in range(0, len(params), _PARAMS_PER_BATCH):
            try:
                self.client.log_batch(self.run_id, params=params[i : i + _PARAMS_PER_BATCH], synchronous=True)
            except Exception as error:  # MLflow raises many types; none may stop training
                print(
                    f"Warning: MLflow kept the run's earlier params ({_first_line(error)}).", file=self.stream
                )
                return

    def metrics(self, step: int, values: dict, prefix: str = "") -> None:
        """The numeric `values` at `step`, each named prefix + its name."""
        if not self.working:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(name, value if math.isfinite(value) else float("nan"), now, step)
            for name, value in _numbers(values, prefix).items()
        ]
        if not metrics:
            return
        try:
            self.client.log_batch(self.run_id, metrics=metrics, synchronous=True)
        except Exception as error:  # a lost tracking server must not stop training
            self._failed(f"logging step {step}", error)

    def close(self, status: str) -> None:
        """Ends the run with `status` (FINISHED, FAILED, KILLED) if it was started here."""
        if not self.owned:
            return
        import mlflow

        try:  # the fluent API's end: the run is no longer this process's active one
            mlflow.end_run(status)
        except Exception as error:  # the job's outcome stands whatever the server says
            if self.working:
                self._failed("ending the run", error)


def open_tracker(target: MlflowTarget | None, stream) -> MlflowTracker | None:
    """The tracker of `target` (None without one): the active run, else target.run_id's, else a
    new run. A server that cannot be reached is reported and the job runs untracked."""
    if target is None:
        return None
    import mlflow

    try:
        mlflow.set_tracking_uri(target.tracking_uri)
        client = mlflow.MlflowClient(target.tracking_uri)
        active = mlflow.active_run()
        if active is not None:
            run_id, owned = active.info.run_id, False
        elif target.run_id:
            run_id, owned = client.get_run(target.run_id).info.run_id, False
        else:
            # In MLflow's current experiment (MLFLOW_EXPERIMENT_NAME or _ID, else the default).
            run_id, owned = mlflow.start_run().info.run_id, True
    except Exception as error:  # a wrong URI or a server down: train, untracked
        print(
            f"Warning: MLflow tracking is off: MLFLOW_TRACKING_URI could not open a run "
            f"({_first_line(error)}); the run's metrics are in log.jsonl, TensorBoard and "
            "eval_results.json.",
            file=stream,
            flush=True,
        )
        return None
    # The URI is not printed: it may carry credentials.
    print(f"MLflow: logging to run {run_id}.", file=stream, flush=True)
    return MlflowTracker(client, run_id, owned, stream)
