#!/usr/bin/env bash
# Checks the GPU image's recipe where there is neither a GPU nor a container registry: builds
# the project's Dockerfile with Horovod's NCCL operations and the GPU TensorFlow wheel on a
# stand-in for the CUDA base (scripts/docker/Dockerfile.cuda-standin: Debian 12 with Debian's
# CUDA 11.8 toolkit and the NCCL that TensorFlow pins), then asserts inside it that
# `horovodrun --check-build` shows TensorFlow, MPI, Gloo and NCCL and that horovod.tensorflow
# loads under TF 2.21 with NCCL built in. It checks the recipe (setup.sh, the Horovod patch, the
# Dockerfile's build arguments); the image that ships is built on nvidia/cuda:12.5.1-devel.
# Not part of CI (a CUDA build of Horovod and several GB of CUDA wheels); run it whenever
# scripts/setup.sh, scripts/horovod-0.28.1-tf2.21.patch or the Dockerfile changes.
#
#   bash scripts/docker/check_gpu_build.sh [options]
#
# Options:
#   --engine NAME         docker or podman (default: $BERT_CONTAINER_ENGINE, else docker where
#                         a Docker engine answers, else podman)
#   --cuda-cc-list LIST   compute capabilities for Horovod's kernels (default 80,90: fewer
#                         than the image's list, the compiler is the same)
#   --tag NAME            the checked image (default bert-tf2:gpu-check; kept afterwards)
#   -h, --help            this text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "[check_gpu_build] $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
LOG_TAG=check_gpu_build
# shellcheck source=scripts/docker/engine.sh
source "${ROOT}/scripts/docker/engine.sh"
NONFREE_BASE=localhost/bert-tf2-base:bookworm-nonfree
STANDIN=localhost/bert-tf2-cuda-standin:11.8

engine_autoselect
cc_list=80,90
tag=bert-tf2:gpu-check
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --engine) need_value "$@"; engine_select "$2"; shift 2 ;;
    --cuda-cc-list) need_value "$@"; cc_list="$2"; shift 2 ;;
    --tag) need_value "$@"; tag="$2"; shift 2 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
engine_require

started=${SECONDS}
step() { echo "[check_gpu_build] $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s: $*"; }

if ! engine_image_exists "${NONFREE_BASE}"; then
  step "making the Debian 12 base with non-free (Debian's CUDA toolkit is there)"
  local_base_build "${NONFREE_BASE}" main,contrib,non-free,non-free-firmware
fi
step "building the CUDA stand-in base ${STANDIN}"
format=()
if [[ "${ENGINE}" == podman ]]; then format=(--format docker); fi
"${ENGINE}" build "${format[@]}" --tag "${STANDIN}" --build-arg "BASE_IMAGE=${NONFREE_BASE}" \
  --file "${ROOT}/scripts/docker/Dockerfile.cuda-standin" "${ROOT}/scripts/docker"

step "building the GPU image ${tag} on it (Horovod with NCCL, tensorflow[and-cuda]==2.21.0)"
bash "${ROOT}/scripts/docker/build.sh" --engine "${ENGINE}" --tag "${tag}" --base-image "${STANDIN}" \
  --gpu-operations NCCL --nccl-link SHARED --cuda-cc-list "${cc_list}"

step "checking Horovod inside ${tag}"
report="$("${ENGINE}" run --rm "${tag}" bash -c '
  horovodrun --check-build 2>/dev/null
  python -c "import horovod.tensorflow as hvd, tensorflow as tf; print(\"loaded: tensorflow\", tf.__version__, \"nccl_built\", hvd.nccl_built())" 2>&1 | tail -n 5
')"
printf '%s\n' "${report}"
for framework in TensorFlow MPI Gloo NCCL; do
  grep -q "\[X\] ${framework}" <<<"${report}" || die "Horovod in ${tag} was built without ${framework} (check-build above)."
done
grep -Eq "^loaded: tensorflow 2\.21\.[0-9]+ nccl_built (True|[1-9][0-9]*)$" <<<"${report}" \
  || die "horovod.tensorflow did not load under TensorFlow 2.21 with NCCL in ${tag} (its error is above)."
step "passed: Horovod's NCCL operations build and load under TensorFlow 2.21 (image ${tag} kept)"
