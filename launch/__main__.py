"""`python -m launch run LAUNCHER ARGS...`: what every scripts/ launcher execs (launch/runner.py:
plan in a child, then run the steps, relaying preemption notices). `plan LAUNCHER PLAN_FILE PYTHON
ARGS...` is that child; `verify DIR STEPS WAIT_S` and `report SCRIPT OUTPUT_DIR SINCE` are steps a
plan may hold (phase 1's final checkpoint before phase 2; the metrics a fine-tuning wrote);
`requeue COMMAND...` is scripts/run.sub's relay (run COMMAND, requeue the SLURM job on a
preemption)."""

from __future__ import annotations

import os
import sys

from common.errors import UserError
from common.tensorflow_startup import quiet_startup
from launch import data, glue, pretraining, quickstart, runner, squad, tune
from launch.engine import plan_launch, usage_line
from launch.workers import UsageError

# The launcher of each scripts/<name>.sh.
LAUNCHERS = {
    "run_pretraining_lamb": pretraining.BOTH,
    "run_pretraining_lamb_phase1": pretraining.PHASE1,
    "run_pretraining_lamb_phase2": pretraining.PHASE2,
    "run_squad": squad.TRAINING,
    "run_squad_inference": squad.INFERENCE,
    "run_glue": glue.TRAINING,
    "run_glue_inference": glue.INFERENCE,
    "run_tune": tune.LAUNCHER,
    "data_download": data.LAUNCHER,
    "quickstart": quickstart.LAUNCHER,
}
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USAGE = (
    "usage: python -m launch run LAUNCHER ARGS... | plan LAUNCHER PLAN_FILE PYTHON ARGS... | "
    "verify DIR STEPS WAIT_S | report SCRIPT OUTPUT_DIR SINCE | requeue COMMAND...   "
    f"(LAUNCHER: {', '.join(LAUNCHERS)})"
)


def main(argv=None, environ=None, out=None) -> int:
    quiet_startup()  # should a step's check import TensorFlow, its start-up notes stay hidden
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ if environ is None else environ)
    out = out or sys.stdout
    command = argv[0] if argv else ""
    script = f"{argv[1]}.sh" if command == "plan" and len(argv) > 1 else "launch"
    if command == "run" and len(argv) >= 2 and argv[1] in LAUNCHERS:
        # The plan's Python steps run with the launcher's python (scripts/find_python.sh's rule).
        return runner.launch(argv[1], argv[2:], environ.get("BERT_PYTHON") or sys.executable)
    if command == "requeue" and len(argv) >= 2:
        return runner.requeue(argv[1:], environ.get("SLURM_JOB_ID", ""))
    try:
        if command == "plan" and len(argv) >= 4 and argv[1] in LAUNCHERS:
            launcher = LAUNCHERS[argv[1]]
            try:
                return plan_launch(launcher, script, argv[2], argv[4:], environ, REPO_ROOT, argv[3], out)
            except UsageError as e:
                print(f"{script}: error: {e}", file=sys.stderr)
                print(usage_line(launcher, script), file=sys.stderr)
                return 2
        if command == "verify" and len(argv) == 4:
            pretraining.verify_phase1_checkpoint(argv[1], int(argv[2]), float(argv[3]))
            return 0
        if command == "report" and len(argv) == 4:
            from launch.finetuning import report

            return report(argv[1], argv[2], float(argv[3]), out)
    except UserError as e:
        print(f"{script}: error: {e}", file=sys.stderr)
        return 2
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
