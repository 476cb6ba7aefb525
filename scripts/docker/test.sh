#!/usr/bin/env bash
# Builds the CPU variant of the image on a Debian 12 base made here (build.sh --cpu --local-base)
# and checks it from inside, the way a user runs it (scripts/docker/launch.sh, code baked into
# the image, data and results mounted):
#   1. horovodrun --check-build shows TensorFlow, MPI and Gloo;
#   2. a smoke subset of the test suite: the LAMB optimizer against NumPy, a 2-worker Horovod
#      pretraining run that resumes, the launchers' argument checks and dry runs;
#   3. scripts/docker/end_to_end.sh: corpus -> TFRecords -> two-phase pretraining on 2 workers ->
#      SQuAD fine-tuning and its official metric.
# .ci/run runs it after the test suite. With podman (the default where no Docker engine answers)
# it installs podman, runc, catatonit and mmdebstrap from Debian's archive when they are missing
# (as root). Layers are cached between runs on one machine; the first build takes minutes.
#
#   bash scripts/docker/test.sh [options]
#
# Options:
#   --engine NAME   docker or podman (default: $BERT_CONTAINER_ENGINE, else docker where a
#                   Docker engine answers, else podman)
#   --tag NAME      the image built and tested (default bert-tf2:cpu-test; kept afterwards)
#   --no-cache      rebuild every layer of the image (the local base is kept)
#   -h, --help      this text
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "[docker/test] $*" >&2; exit 2; }
fail() { echo "[docker/test] FAILED: $*" >&2; exit 1; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
LOG_TAG=docker/test
# shellcheck source=scripts/docker/engine.sh
source "${ROOT}/scripts/docker/engine.sh"

engine_autoselect
tag=bert-tf2:cpu-test
build_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --engine) need_value "$@"; engine_select "$2"; shift 2 ;;
    --tag) need_value "$@"; tag="$2"; shift 2 ;;
    --no-cache) build_extra+=(--no-cache); shift ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

started=${SECONDS}
timings=()
current=""
step_started=${SECONDS}
step() {
  [[ -z "${current}" ]] || timings+=("$(printf '%4d s  %s' $((SECONDS - step_started)) "${current}")")
  current="$1"
  step_started=${SECONDS}
  [[ "$1" == finished ]] || echo "== docker/test: $1 =="
}

# What podman needs on a Debian machine, installed once.
if [[ "${ENGINE}" == podman ]]; then
  missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  command -v catatonit >/dev/null 2>&1 || missing+=(catatonit)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  if [[ ${#missing[@]} -gt 0 ]]; then
    step "installing ${missing[*]} (Debian packages)"
    [[ "$(id -u)" == 0 ]] || die "${missing[*]} missing and this is not root: install them as root (apt-get install ${missing[*]})."
    command -v apt-get >/dev/null 2>&1 || die "${missing[*]} missing and there is no apt-get here: install them with the system's package manager."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

step "building the CPU image ${tag} (${ENGINE}, local Debian 12 base)"
bash "${ROOT}/scripts/docker/build.sh" --engine "${ENGINE}" --cpu --local-base --tag "${tag}" \
  ${build_extra[@]+"${build_extra[@]}"}

work="$(mktemp -d "${TMPDIR:-/tmp}/bert-tf2-docker-test.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/data" "${work}/results"
in_image() {
  bash "${ROOT}/scripts/docker/launch.sh" --engine "${ENGINE}" --image "${tag}" --gpus none --no-code-mount \
    --data "${work}/data" --results "${work}/results" --env TF_CPP_MIN_LOG_LEVEL=2 -- "$@"
}

step "horovodrun --check-build inside the image"
check="$(in_image horovodrun --check-build 2>/dev/null)"
printf '%s\n' "${check}"
for framework in TensorFlow MPI Gloo; do
  grep -q "\[X\] ${framework}" <<<"${check}" || fail "Horovod in ${tag} is built without ${framework}."
done

step "smoke tests inside the image"
in_image python -m pytest -q -p no:cacheprovider \
  tests/test_lamb.py \
  "tests/test_horovod.py::test_run_pretraining_under_horovodrun_leaves_both_workers_identical_and_resumes" \
  tests/test_pretraining_launcher.py tests/test_finetuning_launchers.py -m "not slow" \
  || fail "the smoke tests failed inside ${tag} (pytest's report is above)."

step "end to end inside the image: corpus -> TFRecords -> pretraining (2 workers) -> SQuAD"
in_image bash scripts/docker/end_to_end.sh /data /results/end_to_end \
  || fail "the end-to-end run failed inside ${tag} (its output is above)."
[[ -f "${work}/results/end_to_end/squad/eval_results.json" ]] \
  || fail "the end-to-end run left no SQuAD results in the mounted results directory."

step finished
echo "== docker/test: passed in $((SECONDS - started)) s =="
printf '  %s\n' "${timings[@]}"
