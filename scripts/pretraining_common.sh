# shellcheck shell=bash
# Sourced by scripts/run_pretraining_lamb.sh (both phases) and scripts/run_pretraining_lamb_phase1.sh /
# _phase2.sh (one phase each), so all three take the same arguments the same way.
#
# training/launch_settings/ does the thinking: it resolves NVIDIA's positional arguments, named
# overrides and presets, validates them (exit 2 with the usage on a bad one), prints the resolved
# settings and the commands, checks the inputs, and writes a plan of bash arrays that this file runs.

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"

launch_settings() {
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m training.launch_settings "$@"
}

# run_phase SCRIPT N COMMAND...: runs one phase; a failure stops the launcher with its status.
run_phase() {
  local script="$1" phase="$2" status=0
  shift 2
  echo "== $script: phase $phase starts ($(date '+%F %T')) =="
  "$@" || status=$?
  if [[ "$status" -ne 0 ]]; then
    echo "$script: error: phase $phase stopped with exit status $status; fix the cause and re-run" \
         "the same command: each phase resumes from its latest checkpoint." >&2
    exit "$status"
  fi
}

# pretraining_main both|1|2 ARGS...: resolve, print, check, then run the chosen phases in order.
pretraining_main() {
  local which="$1" script plan_file
  shift
  script="$(basename "$0")"
  plan_file="$(mktemp "${TMPDIR:-/tmp}/bert-pretraining-plan.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap outlives this function's locals
  trap "rm -f '$plan_file'" EXIT
  launch_settings plan "$script" "$which" "$plan_file" "$PY" "$@" || exit $?
  [[ -s "$plan_file" ]] || exit 0  # --help or --dry_run: printed, nothing to run

  PHASE1_CMD=() PHASE2_VERIFY=() PHASE2_CMD=()
  # shellcheck source=/dev/null  # written just now by launch_settings: PHASE1_CMD=(...) ...
  source "$plan_file"
  if [[ ${#PHASE1_CMD[@]} -gt 0 ]]; then run_phase "$script" 1 "${PHASE1_CMD[@]}"; fi
  if [[ ${#PHASE2_VERIFY[@]} -gt 0 ]]; then launch_settings verify "${PHASE2_VERIFY[@]}" || exit $?; fi
  if [[ ${#PHASE2_CMD[@]} -gt 0 ]]; then run_phase "$script" 2 "${PHASE2_CMD[@]}"; fi
  echo "== $script: done ($(date '+%F %T')) =="
}
