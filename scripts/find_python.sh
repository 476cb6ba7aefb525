# shellcheck shell=bash
# Sourced by every script that runs the project's Python (the launchers, setup.sh, test.sh,
# lint.sh): sets ROOT (the repository) and PY by one rule:
#   $BERT_PYTHON, when set;
#   else the active python3 with BERT_USE_SYSTEM_PYTHON=1 (the container: /opt/venv);
#   else the .venv at the repository root (setup.sh and lint.sh set BERT_CREATE_VENV=1 before
#   sourcing, to create it when it is missing);
#   else python3 on PATH.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${BERT_PYTHON:-}" ]]; then
  PY="$BERT_PYTHON"
elif [[ "${BERT_USE_SYSTEM_PYTHON:-0}" == "1" ]]; then
  PY="$(command -v python3 || command -v python)"
else
  if [[ ! -x "$ROOT/.venv/bin/python" && "${BERT_CREATE_VENV:-0}" == "1" ]]; then
    echo "[find_python] creating $ROOT/.venv" >&2
    python3 -m venv "$ROOT/.venv"
  fi
  if [[ -x "$ROOT/.venv/bin/python" ]]; then
    PY="$ROOT/.venv/bin/python"
  else
    PY="$(command -v python3 || command -v python)"
  fi
fi
export ROOT PY
