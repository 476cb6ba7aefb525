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
#
# A permanent failure is not retried. MPIJob v2beta1 refuses the ExitCode restart policy and gives
# its launcher Job no pod failure policy, so Kubernetes retries every failure up to the job's
# backoffLimit. With LAUNCHER_JOB_UID set (the MPIJob sets it to the launcher Job's UID) and
# RESULTS_DIR on the shared volume, a status of 1-127 other than 75 is written to
# RESULTS_DIR/.failed.LAUNCHER_JOB_UID, and every later attempt of the same Job ends at once with it.
#
# Workers first. Before COMMAND, every host of the operator's hostfile (WORKER_HOSTFILE, default
# /etc/mpi/hostfile where it exists) must answer on port WORKER_SSH_PORT (22) within
# WORKER_WAIT_SECONDS (600): the operator does not recreate a worker pod that ended Failed (evicted,
# its node lost), so a missing worker ends the job as a permanent failure (2) that names it.
# After a permanent failure the worker pods are let go: `ssh HOST 'kill -USR2 1'` to each, which
# worker.sh takes as the end of the job.
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

memory=""
if [[ -n "${LAUNCHER_JOB_UID:-}" && -n "${RESULTS_DIR:-}" ]]; then
  memory="${RESULTS_DIR}/.failed.${LAUNCHER_JOB_UID}"
fi
# The operator names the launcher pod's host NAME-launcher after its MPIJob NAME.
job="NAME"
if [[ "${HOSTNAME:-}" == *-launcher ]]; then job="${HOSTNAME%-launcher}"; fi
again="fix the cause, delete the MPIJob (kubectl delete mpijob ${job}) and apply it again: the run continues from its last checkpoint"
hostfile="${WORKER_HOSTFILE:-}"
if [[ -z "${hostfile}" && -f /etc/mpi/hostfile ]]; then hostfile=/etc/mpi/hostfile; fi
port="${WORKER_SSH_PORT:-22}"
hosts=()
if [[ -n "${hostfile}" ]]; then
  while read -r host _; do
    if [[ -n "${host}" && "${host}" != \#* ]]; then hosts+=("${host}"); fi
  done < "${hostfile}"
fi

# permanent STATUS: remembered for the Job's later attempts, the worker pods let go (worker.sh ends
# on SIGUSR2, so their GPUs are free while the Job spends its remaining retries), then exit STATUS.
permanent() {
  local host
  if [[ -n "${memory}" ]]; then
    if [[ ! -f "${memory}" ]]; then
      mkdir -p "${RESULTS_DIR}" && printf '%s\n' "$1" > "${memory}"
      echo "[retryable] status $1 is a permanent failure: every later attempt of this job ends at once with it (Kubernetes retries the launcher up to the MPIJob's backoffLimit) and the worker pods end now; ${again}" >&2
    fi
    for host in "${hosts[@]}"; do
      timeout 20 ssh -p "${port}" -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "${host}" 'kill -USR2 1' 2>/dev/null || true
    done
  fi
  exit "$1"
}

if [[ -n "${memory}" && -f "${memory}" ]]; then
  earlier="$(head -n 1 "${memory}")"
  [[ "${earlier}" =~ ^[0-9]+$ ]] && (( earlier >= 1 && earlier <= 255 )) || earlier=2
  echo "[retryable] an earlier attempt of this job ended with status ${earlier}, a permanent failure (the oldest failed launcher pod's log has the reason): not running again; ${again}" >&2
  permanent "${earlier}"
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

deadline=$((SECONDS + ${WORKER_WAIT_SECONDS:-600}))
while (( ${#hosts[@]} > 0 )); do
  missing=()
  for host in "${hosts[@]}"; do
    timeout 5 bash -c ">/dev/tcp/${host}/${port}" 2>/dev/null || missing+=("${host}")
  done
  (( ${#missing[@]} == 0 )) && break
  # Preempted before anything started: nothing to save, retry.
  if [[ -n "${pending}" ]]; then exit "${retryable}"; fi
  if (( SECONDS >= deadline )); then
    echo "[retryable] worker(s) ${missing[*]} did not answer on port ${port} within ${WORKER_WAIT_SECONDS:-600} s: their pods are not Ready, still pending or ended (the MPI operator does not recreate a worker pod that ended Failed: evicted, or its node lost; kubectl get pods shows which)" >&2
    permanent 2
  fi
  sleep 1
done

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
if (( status >= 1 && status <= 127 )); then permanent "${status}"; fi
exit "${status}"
