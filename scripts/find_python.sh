# shellcheck shell=bash
# Sourced by the launchers: sets ROOT (the repository) and PY (the Python that runs the project):
# $BERT_PYTHON, else the .venv that scripts/setup.sh made, else python3 on PATH.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${BERT_PYTHON:-}" ]]; then
  PY="$BERT_PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="$(command -v python3 || command -v python)"
fi
export ROOT PY
