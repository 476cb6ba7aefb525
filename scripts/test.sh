#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k checkpoints -x`. The files run in
# BERT_TEST_WORKERS processes (pytest-xdist; default 3 on CI's 2 cores: a test waiting on a timeout,
# a requeue or a heartbeat leaves its core to the others), each file whole in one of them
# (its module fixtures built once), the files with slow tests first (tests/conftest.py orders
# them); `bash scripts/test.sh -n 0` runs everything in this one process. `--fast` runs only the
# tests that start no process and are not marked slow (tests/conftest.py). The run ends with its
# 25 slowest tests (setup, call and teardown apart).
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" HF_HUB_OFFLINE=1
PATH="$(dirname "$PY"):$PATH"
export PATH
exec "$PY" -m pytest -n "${BERT_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder --durations=25 "$@"
