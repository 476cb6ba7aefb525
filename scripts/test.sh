#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k checkpoints -x`.
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" HF_HUB_OFFLINE=1
PATH="$(dirname "$PY"):$PATH"
export PATH
exec "$PY" -m pytest "$@"
