# shellcheck shell=bash
# Sourced by every launcher (run_pretraining_lamb*.sh, run_squad*.sh, run_glue*.sh, run_tune.sh,
# data_download.sh, quickstart.sh).
# launch/ does the thinking: it resolves NVIDIA's positional arguments, named overrides, presets
# and paths, validates them (exit 2 with the usage on a bad one), prints the resolved settings and
# the commands, checks the inputs, and writes a plan of steps; `launch NAME ARGS...` runs them in
# order and stops at the first that fails, with its exit status.
#
# Preemption: SIGTERM, SIGUSR1 or SIGINT to the launcher writes the running step's STOP file, so
# every worker stops at the same update with a checkpoint and exits 75 (horovodrun and mpirun are
# not signalled: they would kill the workers mid-save); the launcher then exits 75 and starts no
# further step. Re-running the same command continues.

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # plan steps run `python -m launch ...` too
PREEMPTED=75  # common/errors.py's PREEMPTED_EXIT_STATUS

launch() {
  local name="$1" plan i status
  shift
  plan="$(mktemp "${TMPDIR:-/tmp}/bert-launch-plan.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap outlives this function's locals
  trap "rm -f '$plan'" EXIT
  "$PY" -m launch plan "$name" "$plan" "$PY" "$@" || exit $?
  [[ -s "$plan" ]] || exit 0  # --help or --dry_run: printed, nothing to run
  STEPS=0 DONE="" STOP_REQUESTED="" CHILD="" STOP_FILE=""
  # shellcheck source=/dev/null  # written just now by launch/: STEPS=N, STEP_1=(...), ...
  source "$plan"
  trap 'request_stop TERM' TERM
  trap 'request_stop USR1' USR1
  trap 'request_stop INT' INT
  for ((i = 1; i <= STEPS; i++)); do
    declare -n argv="STEP_$i" banner="STEP_${i}_BANNER" failure="STEP_${i}_FAILURE" stop="STEP_${i}_STOP"
    [[ -z "$banner" ]] || echo "== $banner starts ($(date '+%F %T')) =="
    STOP_FILE="$stop"
    "${argv[@]}" &
    CHILD=$!
    status=0
    while true; do  # a trapped signal interrupts `wait`: wait again until the step has exited
      wait "$CHILD" || status=$?
      kill -0 "$CHILD" 2>/dev/null || break
      status=0
    done
    CHILD=""
    if [[ "$status" -eq "$PREEMPTED" || ( "$status" -eq 0 && -n "$STOP_REQUESTED" && "$i" -lt "$STEPS" ) ]]; then
      echo "== $(basename "$0"): stopped for a preemption (${STOP_REQUESTED:-a notice to the workers}): re-run the same command to continue ==" >&2
      exit "$PREEMPTED"
    fi
    if [[ "$status" -ne 0 ]]; then
      [[ -z "$failure" ]] || echo "${failure//\{status\}/$status}" >&2
      exit "$status"
    fi
    unset -n argv banner failure stop
  done
  [[ -z "$DONE" ]] || echo "== $DONE ($(date '+%F %T')) =="
}

# request_stop SIGNAL: ask the running step to stop at its next update (its STOP file), or pass the
# signal on to a step that has none.
request_stop() {
  STOP_REQUESTED="${STOP_REQUESTED:-SIG$1}"
  if [[ -n "$STOP_FILE" ]] && { mkdir -p "$(dirname "$STOP_FILE")" && : > "$STOP_FILE"; } 2>/dev/null; then
    return 0
  fi
  if [[ -n "$CHILD" ]]; then kill "-$1" "$CHILD" 2>/dev/null || true; fi
}
