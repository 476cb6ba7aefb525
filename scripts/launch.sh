# shellcheck shell=bash
# Sourced by every launcher (run_pretraining_lamb*.sh, run_squad*.sh, run_glue*.sh, run_tune.sh).
# launch/ does the thinking: it resolves NVIDIA's positional arguments, named overrides, presets
# and paths, validates them (exit 2 with the usage on a bad one), prints the resolved settings and
# the commands, checks the inputs, and writes a plan of steps; `launch NAME ARGS...` runs them in
# order and stops at the first that fails, with its exit status.

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # plan steps run `python -m launch ...` too

launch() {
  local name="$1" plan i status
  shift
  plan="$(mktemp "${TMPDIR:-/tmp}/bert-launch-plan.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap outlives this function's locals
  trap "rm -f '$plan'" EXIT
  "$PY" -m launch plan "$name" "$plan" "$PY" "$@" || exit $?
  [[ -s "$plan" ]] || exit 0  # --help or --dry_run: printed, nothing to run
  STEPS=0 DONE=""
  # shellcheck source=/dev/null  # written just now by launch/: STEPS=N, STEP_1=(...), ...
  source "$plan"
  for ((i = 1; i <= STEPS; i++)); do
    declare -n argv="STEP_$i" banner="STEP_${i}_BANNER" failure="STEP_${i}_FAILURE"
    [[ -z "$banner" ]] || echo "== $banner starts ($(date '+%F %T')) =="
    status=0
    "${argv[@]}" || status=$?
    if [[ "$status" -ne 0 ]]; then
      [[ -z "$failure" ]] || echo "${failure//\{status\}/$status}" >&2
      exit "$status"
    fi
    unset -n argv banner failure
  done
  [[ -z "$DONE" ]] || echo "== $DONE ($(date '+%F %T')) =="
}
