#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k checkpoints -x`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
if [[ "${BERT_USE_SYSTEM_PYTHON:-0}" == "1" ]]; then
  PY="$(command -v python3 || command -v python)"
else
  PY="$ROOT/.venv/bin/python"
fi
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" HF_HUB_OFFLINE=1
PATH="$(dirname "$PY"):$PATH"
export PATH
exec "$PY" -m pytest "$@"
