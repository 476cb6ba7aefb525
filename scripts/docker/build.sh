#!/usr/bin/env bash
# Builds the training image from the repository's Dockerfile.
#
#   bash scripts/docker/build.sh [options] [-- EXTRA_DOCKER_BUILD_ARGS...]
#
# Options:
#   --tag NAME            image name[:tag] (default: $BERT_IMAGE, else bert-tf2:latest)
#   --user                run as an unprivileged user `bert` with your uid/gid, so files it
#                         writes to mounted volumes are yours (default: root, as NVIDIA's images)
#   --uid N / --gid N     the same with explicit ids
#   --base-image IMAGE    CUDA base image (default: the pinned one in the Dockerfile)
#   --tf-package REQ      TensorFlow requirement (default: tensorflow[and-cuda]==2.21.0)
#   --cuda-cc-list LIST   GPU compute capabilities for Horovod's kernels, e.g. 80,90
#                         (default: 70,75,80,86,89,90)
#   --no-cache            rebuild every layer
#   --dry-run             print the docker command instead of running it
#   -h, --help            this text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "[build] $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }

tag="${BERT_IMAGE:-bert-tf2:latest}"
uid=""
gid=""
base_image=""
tf_package=""
cc_list=""
dry_run=0
extra=()
build_args=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --tag) need_value "$@"; tag="$2"; shift 2 ;;
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
if [[ -n "${base_image}" ]]; then
  build_args+=(--build-arg "BASE_IMAGE=${base_image}")
fi
if [[ -n "${tf_package}" ]]; then
  [[ "${tf_package}" == tensorflow* ]] || die "--tf-package must be a tensorflow requirement (got '${tf_package}')."
  build_args+=(--build-arg "BERT_TF_PACKAGE=${tf_package}")
fi
if [[ -n "${cc_list}" ]]; then
  [[ "${cc_list}" =~ ^[0-9]{2,3}(,[0-9]{2,3})*$ ]] \
    || die "--cuda-cc-list must look like 80,90 (compute capabilities without the dot; got '${cc_list}')."
  build_args+=(--build-arg "HOROVOD_BUILD_CUDA_CC_LIST=${cc_list}")
fi

cmd=(docker build --tag "${tag}" --file "${ROOT}/Dockerfile" "${build_args[@]}" "${extra[@]}" "${ROOT}")
echo "[build] image ${tag}; user: ${uid:-root}${gid:+:${gid}}; base: ${base_image:-Dockerfile default};" \
     "TensorFlow: ${tf_package:-Dockerfile default}; CUDA CCs: ${cc_list:-Dockerfile default}"
if [[ "${dry_run}" == "1" ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
command -v docker >/dev/null 2>&1 || die "docker is not installed on this machine (see "Running in a container" in README.md)."
exec "${cmd[@]}"
