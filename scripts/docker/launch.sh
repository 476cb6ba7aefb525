#!/usr/bin/env bash
# Starts the training container the way NVIDIA's examples do: all (or chosen) GPUs, host network,
# enough shared memory for NCCL, unlimited locked memory, this checkout at /workspace/bert,
# results at /results, and your command (an interactive shell by default).
#
#   bash scripts/docker/launch.sh [options] [--] [COMMAND [ARGS...]]
#
# Options:
#   --engine NAME        docker or podman (default: $BERT_CONTAINER_ENGINE, else docker);
#                        podman reaches GPUs through CDI (nvidia-ctk cdi generate)
#   --image NAME         image (default: $BERT_IMAGE, else bert-tf2:latest)
#   --gpus LIST          all, none, or GPU indices like 0,1,2,3
#                        (default: $NV_VISIBLE_DEVICES, else all)
#   --data DIR           host directory mounted at /data (corpora, TFRecords, checkpoints to load)
#   --results DIR        host directory mounted at /results (default: ./results, created)
#   --no-code-mount      run the code baked into the image instead of mounting this checkout
#   --mount /SRC:/DST[:ro] another bind mount (repeatable)
#   --env NAME[=VALUE]   pass an environment variable, e.g. --env NCCL_SOCKET_IFNAME=ib0
#                        (repeatable; NAME alone passes the host's value)
#   --shm-size SIZE      /dev/shm size (default 1g); --ipc-host shares the host's IPC instead
#   --ipc-host           use the host IPC namespace (what NCCL prefers on multi-GPU nodes)
#   --infiniband         pass the host's InfiniBand/RoCE devices (/dev/infiniband) and the
#                        IPC_LOCK capability, so NCCL and MPI use RDMA between nodes
#   --name NAME          container name
#   --dry-run            print the engine's command instead of running it
#   -h, --help           this text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "[launch] $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
LOG_TAG=launch
# shellcheck source=scripts/docker/engine.sh
source "${ROOT}/scripts/docker/engine.sh"

engine_select "${BERT_CONTAINER_ENGINE:-docker}"
image="${BERT_IMAGE:-bert-tf2:latest}"
gpus="${NV_VISIBLE_DEVICES:-all}"
data=""
results="${PWD}/results"
mount_code=1
shm_size="1g"
ipc_host=0
infiniband=0
name=""
dry_run=0
mounts=()
envs=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --engine) need_value "$@"; engine_select "$2"; shift 2 ;;
    --image) need_value "$@"; image="$2"; shift 2 ;;
    --gpus) need_value "$@"; gpus="$2"; shift 2 ;;
    --data) need_value "$@"; data="$2"; shift 2 ;;
    --results) need_value "$@"; results="$2"; shift 2 ;;
    --no-code-mount) mount_code=0; shift ;;
    --mount) need_value "$@"; mounts+=("$2"); shift 2 ;;
    --env) need_value "$@"; envs+=("$2"); shift 2 ;;
    --shm-size) need_value "$@"; shm_size="$2"; shift 2 ;;
    --ipc-host) ipc_host=1; shift ;;
    --infiniband) infiniband=1; shift ;;
    --name) need_value "$@"; name="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) die "unknown option: $1 (see --help)" ;;
    *) break ;;
  esac
done
command_args=("$@")
if [[ ${#command_args[@]} -eq 0 ]]; then command_args=(/bin/bash); fi

[[ "${gpus}" =~ ^(all|none|[0-9]+(,[0-9]+)*)$ ]] \
  || die "--gpus must be all, none or a list of GPU indices like 0,1 (got '${gpus}')."
[[ "${shm_size}" =~ ^[0-9]+[bkmgBKMG]?$ ]] || die "--shm-size must look like 1g or 512m (got '${shm_size}')."
if [[ -n "${data}" ]]; then
  [[ -d "${data}" ]] || die "--data ${data} is not a directory."
  data="$(cd "${data}" && pwd)"
fi
[[ "${results}" == /* ]] || results="${PWD}/${results}"
for spec in ${mounts[@]+"${mounts[@]}"}; do
  [[ "${spec}" =~ ^/[^:]*:/[^:]*(:(ro|rw))?$ ]] \
    || die "--mount '${spec}' must be /SRC:/DST or /SRC:/DST:ro (absolute paths)."
  [[ -e "${spec%%:*}" ]] || die "--mount source ${spec%%:*} does not exist."
done
for spec in ${envs[@]+"${envs[@]}"}; do
  [[ "${spec}" =~ ^[A-Za-z_][A-Za-z0-9_]*(=.*)?$ ]] || die "--env '${spec}' must be NAME or NAME=VALUE."
done
if [[ "${infiniband}" == "1" ]]; then
  [[ -d /dev/infiniband ]] || die "--infiniband: this machine has no /dev/infiniband (no RDMA driver loaded); leave the option out to use TCP."
fi
[[ -z "${name}" || "${name}" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "--name '${name}' is not a valid container name."

cmd=("${ENGINE}" run --rm --init --net=host)
# Interactive only when there is a terminal, so the same line works in scripts and CI jobs.
if [[ -t 0 && -t 1 ]]; then cmd+=(-it); fi
case "${ENGINE}:${gpus}" in
  *:none) ;;
  docker:all) cmd+=(--gpus all) ;;
  # docker parses --gpus as CSV: a device list with commas must be quoted inside the value.
  docker:*) cmd+=(--gpus "\"device=${gpus}\"") ;;
  # podman names GPUs as CDI devices (the NVIDIA Container Toolkit's nvidia-ctk writes the spec).
  podman:all) cmd+=(--device nvidia.com/gpu=all) ;;
  podman:*) for index in ${gpus//,/ }; do cmd+=(--device "nvidia.com/gpu=${index}"); done ;;
esac
# NCCL's shared-memory transport and OpenMPI's need far more than Docker's 64 MB /dev/shm;
# NCCL and InfiniBand pin (lock) host memory; 64 MB stack as in NVIDIA's launch scripts.
if [[ "${ipc_host}" == "1" ]]; then cmd+=(--ipc=host); else cmd+=(--shm-size="${shm_size}"); fi
mapfile -t ulimits < <(engine_ulimits)
cmd+=("${ulimits[@]}")
# RDMA registers (pins) memory and opens the verbs devices; without them NCCL falls back to TCP.
if [[ "${infiniband}" == "1" ]]; then cmd+=(--device=/dev/infiniband --cap-add=IPC_LOCK); fi
if [[ "${mount_code}" == "1" ]]; then cmd+=(-v "${ROOT}:/workspace/bert"); fi
if [[ -n "${data}" ]]; then cmd+=(-v "${data}:/data"); fi
cmd+=(-v "${results}:/results")
for spec in ${mounts[@]+"${mounts[@]}"}; do cmd+=(-v "${spec}"); done
for spec in ${envs[@]+"${envs[@]}"}; do cmd+=(-e "${spec}"); done
if [[ -n "${name}" ]]; then cmd+=(--name "${name}"); fi
cmd+=(--workdir /workspace/bert "${image}" "${command_args[@]}")

echo "[launch] ${ENGINE}: image ${image}; GPUs: ${gpus}; data: ${data:-(none)} -> /data; results: ${results} -> /results;" \
     "code: $([[ "${mount_code}" == "1" ]] && echo "${ROOT}" || echo "from the image")" >&2
if [[ "${dry_run}" == "1" ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
engine_require
mkdir -p "${results}" || die "cannot create the results directory ${results}."
exec "${cmd[@]}"
