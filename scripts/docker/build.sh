#!/usr/bin/env bash
# Builds the training image from the repository's Dockerfile, with docker or podman.
#
#   bash scripts/docker/build.sh [options] [-- EXTRA_BUILD_ARGS...]
#
# Options:
#   --engine NAME         docker or podman (default: $BERT_CONTAINER_ENGINE, else docker)
#   --tag NAME            image name[:tag] (default: $BERT_IMAGE, else bert-tf2:latest)
#   --cpu                 a CPU image: tensorflow-cpu==2.21.0, Horovod without GPU operations
#   --gpu-operations OPS  Horovod's GPU operations: NCCL (default) or none
#   --nccl-link MODE      STATIC (default; libnccl_static.a of the CUDA base) or SHARED
#   --local-base          build on a Debian 12 base made here from Debian's archive with
#                         mmdebstrap (for machines that reach no container registry; made
#                         once, then reused: localhost/bert-tf2-base:bookworm)
#   --refresh-base        make that local base again
#   --user                run as an unprivileged user `bert` with your uid/gid, so files it
#                         writes to mounted volumes are yours (default: root, as NVIDIA's images)
#   --uid N / --gid N     the same with explicit ids
#   --base-image IMAGE    base image (default: the pinned CUDA one in the Dockerfile)
#   --tf-package REQ      TensorFlow requirement (default: tensorflow[and-cuda]==2.21.0)
#   --cuda-cc-list LIST   GPU compute capabilities for Horovod's kernels, e.g. 80,90
#                         (default: 70,75,80,86,89,90)
#   --no-cache            rebuild every layer
#   --dry-run             print the build command instead of running it
#   -h, --help            this text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "[build] $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
LOG_TAG=build
# shellcheck source=scripts/docker/engine.sh
source "${ROOT}/scripts/docker/engine.sh"
LOCAL_BASE=localhost/bert-tf2-base:bookworm

engine_select "${BERT_CONTAINER_ENGINE:-docker}"
tag="${BERT_IMAGE:-bert-tf2:latest}"
uid=""
gid=""
base_image=""
tf_package=""
cc_list=""
gpu_ops=""
nccl_link=""
local_base=0
refresh_base=0
dry_run=0
extra=()
build_args=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --engine) need_value "$@"; engine_select "$2"; shift 2 ;;
    --tag) need_value "$@"; tag="$2"; shift 2 ;;
    --cpu) tf_package="tensorflow-cpu==2.21.0"; gpu_ops=none; shift ;;
    --gpu-operations) need_value "$@"; gpu_ops="$2"; shift 2 ;;
    --nccl-link) need_value "$@"; nccl_link="$2"; shift 2 ;;
    --local-base) local_base=1; shift ;;
    --refresh-base) local_base=1; refresh_base=1; shift ;;
    --user) uid="$(id -u)"; gid="$(id -g)"; shift ;;
    --uid) need_value "$@"; uid="$2"; shift 2 ;;
    --gid) need_value "$@"; gid="$2"; shift 2 ;;
    --base-image) need_value "$@"; base_image="$2"; shift 2 ;;
    --tf-package) need_value "$@"; tf_package="$2"; shift 2 ;;
    --cuda-cc-list) need_value "$@"; cc_list="$2"; shift 2 ;;
    --no-cache) extra+=(--no-cache); shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; extra+=("$@"); break ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

# Docker reference: [registry[:port]/]name[/name...][:tag], lower-case name components.
[[ "${tag}" =~ ^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$ ]] \
  || die "--tag '${tag}' is not a valid image name (lower-case name, optional :tag)."
if [[ -n "${uid}" || -n "${gid}" ]]; then
  [[ -n "${uid}" && -n "${gid}" ]] || die "--uid and --gid go together."
  [[ "${uid}" =~ ^[0-9]+$ && "${gid}" =~ ^[0-9]+$ ]] || die "--uid/--gid must be numbers (got '${uid}', '${gid}')."
  build_args+=(--build-arg "BERT_UID=${uid}" --build-arg "BERT_GID=${gid}")
fi
if [[ "${local_base}" == 1 ]]; then
  [[ -z "${base_image}" ]] || die "--local-base and --base-image exclude each other."
  base_image="${LOCAL_BASE}"
fi
if [[ -n "${base_image}" ]]; then
  build_args+=(--build-arg "BASE_IMAGE=${base_image}")
fi
case "${gpu_ops}" in
  "") ;;
  NCCL) build_args+=(--build-arg "HOROVOD_GPU_OPERATIONS=NCCL") ;;
  none) build_args+=(--build-arg "HOROVOD_GPU_OPERATIONS=") ;;
  *) die "--gpu-operations must be NCCL or none (got '${gpu_ops}')." ;;
esac
case "${nccl_link}" in
  "") ;;
  STATIC|SHARED) build_args+=(--build-arg "HOROVOD_NCCL_LINK=${nccl_link}") ;;
  *) die "--nccl-link must be STATIC or SHARED (got '${nccl_link}')." ;;
esac
if [[ -n "${tf_package}" ]]; then
  [[ "${tf_package}" == tensorflow* ]] || die "--tf-package must be a tensorflow requirement (got '${tf_package}')."
  build_args+=(--build-arg "BERT_TF_PACKAGE=${tf_package}")
fi
if [[ -n "${cc_list}" ]]; then
  [[ "${cc_list}" =~ ^[0-9]{2,3}(,[0-9]{2,3})*$ ]] \
    || die "--cuda-cc-list must look like 80,90 (compute capabilities without the dot; got '${cc_list}')."
  build_args+=(--build-arg "HOROVOD_BUILD_CUDA_CC_LIST=${cc_list}")
fi

cmd=("${ENGINE}" build)
# podman writes OCI images by default, which have no SHELL instruction; the Dockerfile's
# SHELL (bash with pipefail) needs the docker format.
if [[ "${ENGINE}" == podman ]]; then cmd+=(--format docker); fi
cmd+=(--tag "${tag}" --file "${ROOT}/Dockerfile" ${build_args[@]+"${build_args[@]}"} ${extra[@]+"${extra[@]}"} "${ROOT}")
echo "[build] ${ENGINE}: image ${tag}; user: ${uid:-root}${gid:+:${gid}}; base: ${base_image:-Dockerfile default};" \
     "TensorFlow: ${tf_package:-Dockerfile default}; Horovod GPU operations: ${gpu_ops:-Dockerfile default (NCCL)};" \
     "CUDA CCs: ${cc_list:-Dockerfile default}"
if [[ "${dry_run}" == "1" ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
engine_require
if [[ "${local_base}" == 1 ]] && { [[ "${refresh_base}" == 1 ]] || ! engine_image_exists "${LOCAL_BASE}"; }; then
  local_base_build "${LOCAL_BASE}" main
fi
exec "${cmd[@]}"
