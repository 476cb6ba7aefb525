#!/usr/bin/env bash
# Runs COMMAND and turns its preemption status into one that Kubernetes job controllers retry.
#
#   bash kubernetes/retryable.sh COMMAND [ARGS...]
#
# The training launchers exit 75 (EX_TEMPFAIL, common/errors.py) after a preemption notice:
# a checkpoint was written and the same command continues from it. Kubeflow's ExitCode restart
# policy reads 1-127 as permanent and 128-255 as retryable, so 75 leaves as RETRYABLE_EXIT_STATUS
# (default 143 = 128 + SIGTERM, what Kubernetes itself reports for a container stopped by SIGTERM).
# 0 stays 0 and every other status passes through unchanged (a user error, 2, stays permanent).
# SIGTERM, SIGUSR1 and SIGINT are passed on to COMMAND, which takes them as a preemption notice:
# as the container's command this script is PID 1, which the kubelet signals first.
set -uo pipefail

if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
  [[ $# -eq 0 ]] && exit 2
  exit 0
fi
retryable="${RETRYABLE_EXIT_STATUS:-143}"
if [[ ! "${retryable}" =~ ^[0-9]+$ ]] || (( retryable < 128 || retryable > 255 )); then
  echo "[retryable] RETRYABLE_EXIT_STATUS must be 128-255, got '${retryable}'" >&2
  exit 2
fi

# The traps are set before COMMAND starts, so a signal that comes while it is starting is not
# lost (it would end this script without a status of COMMAND's): it is passed on once COMMAND runs.
child=""
pending=""
# shellcheck disable=SC2329  # called from the traps below
relay() {
  if [[ -n "${child}" ]]; then kill "-$1" "${child}" 2>/dev/null || true; else pending="$1"; fi
}
trap 'relay TERM' TERM
trap 'relay USR1' USR1
trap 'relay INT' INT
"$@" &
child=$!
if [[ -n "${pending}" ]]; then relay "${pending}"; fi
# wait returns early (status > 128) when a trapped signal arrives: wait again until the child has
# ended; the last wait gives its own status (bash keeps the status of a child it reaped).
while kill -0 "${child}" 2>/dev/null; do
  wait "${child}"
done
wait "${child}"
status=$?
if [[ ${status} -eq 75 ]]; then
  echo "[retryable] the command was preempted (status 75, checkpoint written): exiting ${retryable} so the job is retried and resumes" >&2
  exit "${retryable}"
fi
exit "${status}"
