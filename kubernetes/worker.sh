#!/usr/bin/env bash
# The command of an MPIJob worker pod: an ssh server for the launcher's mpirun, and a preemption
# relay. mpirun starts this pod's ranks through sshd, so the kubelet's SIGTERM reaches only this
# script (PID 1), never the ranks: on SIGTERM (or SIGUSR1) it writes the STOP file of every phase
# output directory under RESULTS_DIR, every rank (on every pod) stops at the same update with a
# checkpoint and exits 75, and the launcher ends with the retryable status (retryable.sh). sshd
# keeps running until the kubelet's grace period ends, so the checkpoint can finish.
# SIGUSR2 (from the launcher's retryable.sh over ssh, after a permanent failure) ends sshd and this
# script with status 0: the pod ends Succeeded, its GPUs free, and the operator leaves it so.
#
#   bash kubernetes/worker.sh      # RESULTS_DIR as the launcher has it (default /results)
#
# SSHD names the server (default /usr/sbin/sshd, which kubernetes/Dockerfile adds to the project
# image; it is started as `$SSHD -De`, after making host keys when they are missing).
set -uo pipefail

results="${RESULTS_DIR:-/results}"
sshd="${SSHD:-/usr/sbin/sshd}"
if [[ ! -x "${sshd}" ]]; then
  echo "[worker] ${sshd} is missing: build the image with kubernetes/Dockerfile" >&2
  exit 2
fi
if [[ "${sshd}" == /usr/sbin/sshd ]]; then
  mkdir -p /run/sshd
  ssh-keygen -A >/dev/null  # this pod's host keys
fi

stop_phases() {
  local dir
  for dir in "${results}"/phase_*/; do
    [[ -d "${dir}" ]] || continue
    touch "${dir}STOP" && echo "[worker] preemption notice: wrote ${dir}STOP" >&2
  done
}
sshd_pid=""
# shellcheck disable=SC2329  # called from the trap below
release() {
  echo "[worker] the launcher ended the job (a permanent failure): stopping" >&2
  # $! already names sshd when the signal comes between its start and sshd_pid's assignment.
  local pid="${sshd_pid:-${!:-}}"
  if [[ -n "${pid}" ]]; then kill "${pid}" 2>/dev/null; fi
  exit 0
}
# The traps come first: a notice that arrives while sshd starts is not lost (sshd itself starts
# with the default handlers, as a trapped signal's handler is reset in a child).
trap 'stop_phases' TERM USR1
trap 'release' USR2
"${sshd}" -De &
sshd_pid=$!
# wait returns early on a trapped signal: wait again until sshd ends (the kubelet's SIGKILL).
while kill -0 "${sshd_pid}" 2>/dev/null; do
  wait "${sshd_pid}"
done
wait "${sshd_pid}"
