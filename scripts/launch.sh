# shellcheck shell=bash
# Sourced by every launcher (run_pretraining_lamb*.sh, run_squad*.sh, run_glue*.sh, run_tune.sh,
# data_download.sh, quickstart.sh): `launch NAME ARGS...` execs `python -m launch run NAME ARGS...`
# (launch/runner.py), which resolves NVIDIA's positional arguments, named overrides, presets and
# paths, validates them (exit 2 with the usage on a bad one), prints the resolved settings and the
# commands, checks the inputs, then runs the steps in order and stops at the first that fails, with
# its exit status.
#
# Preemption: SIGTERM, SIGUSR1 or SIGINT to the launcher writes the running step's STOP file, so
# every worker stops at the same update with a checkpoint and exits 75; the launcher then exits 75
# and starts no further step. Re-running the same command continues.

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # the steps run `python -m launch ...` too

launch() {
  exec "$PY" -m launch run "$@"
}
