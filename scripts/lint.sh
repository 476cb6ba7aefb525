#!/usr/bin/env bash
# Static checks: ruff (lint and format, pyproject.toml's settings) on the Python code, hadolint
# on the Dockerfile, shellcheck on every shell script. All must be clean.
#
#   bash scripts/lint.sh              # the whole repository
#   bash scripts/lint.sh FILE...      # only these files (*.py to ruff, Dockerfile* to hadolint)
#   bash scripts/lint.sh --fix        # let ruff fix what it can and format the Python code
#
# The linters come from requirements-lint.txt (pinned wheels that carry the binaries) and are
# installed into the Python scripts/find_python.sh picks, like setup.sh.
# Exit status: 0 when clean, 1 when a linter reported anything, 2 on a usage or install error.
set -euo pipefail

BERT_CREATE_VENV=1
# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
fix=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --fix) fix=1; shift ;;
  -*) echo "[lint] unknown option: $1 (see --help)" >&2; exit 2 ;;
  *) ;;
esac

BIN_DIR="$(dirname "${PY}")"

# Reinstall only when requirements-lint.txt changed since the last install into this python.
stamp_file="$("${PY}" -c 'import sys; print(sys.prefix)')/.bert-tf2-lint"
stamp_value="$(sha256sum "${ROOT}/requirements-lint.txt" | cut -c1-16)"
if [[ ! -f "${stamp_file}" || "$(cat "${stamp_file}")" != "${stamp_value}" \
      || ! -x "${BIN_DIR}/shellcheck" || ! -x "${BIN_DIR}/hadolint" || ! -x "${BIN_DIR}/ruff" ]]; then
  echo "[lint] installing the linters from requirements-lint.txt into ${BIN_DIR}"
  "${PY}" -m pip --disable-pip-version-check -q install --only-binary=:all: \
      -r "${ROOT}/requirements-lint.txt" 2>&1 | grep -v "is ignored" || true
  if [[ ! -x "${BIN_DIR}/shellcheck" || ! -x "${BIN_DIR}/hadolint" || ! -x "${BIN_DIR}/ruff" ]]; then
    echo "[lint] ruff, shellcheck or hadolint did not install; see the pip output above." >&2
    exit 2
  fi
  printf '%s' "${stamp_value}" > "${stamp_file}"
fi

cd "${ROOT}"
dockerfiles=()
scripts=()
pythons=()
if [[ $# -gt 0 ]]; then
  for path in "$@"; do
    [[ -f "${path}" ]] || { echo "[lint] no such file: ${path}" >&2; exit 2; }
    case "$(basename "${path}")" in
      Dockerfile*) dockerfiles+=("${path}") ;;
      *.py) pythons+=("${path}") ;;
      *) scripts+=("${path}") ;;
    esac
  done
else
  pythons+=(.)  # ruff finds the files itself and skips what pyproject.toml excludes
  [[ -f Dockerfile ]] && dockerfiles+=(Dockerfile)
  for path in scripts/docker/Dockerfile.* kubernetes/Dockerfile; do
    [[ -f "${path}" ]] && dockerfiles+=("${path}")
  done
  # Every *.sh and *.sub git tracks or would track (not what .gitignore keeps out, such as
  # results/), plus the CI entry.
  while IFS= read -r -d '' path; do
    [[ -f "$path" ]] && scripts+=("$path")
  done < <(git ls-files -z --cached --others --exclude-standard -- '*.sh' '*.sub' | sort -z)
  [[ -f .ci/run ]] && scripts+=(.ci/run)
fi

status=0
if [[ ${#pythons[@]} -gt 0 ]]; then
  echo "[lint] $("${BIN_DIR}/ruff" --version): ${pythons[*]}"
  if [[ ${fix} -eq 1 ]]; then
    "${BIN_DIR}/ruff" check --fix --quiet "${pythons[@]}" || status=1
    "${BIN_DIR}/ruff" format --quiet "${pythons[@]}" || status=1
  else
    "${BIN_DIR}/ruff" check --quiet "${pythons[@]}" || status=1
    "${BIN_DIR}/ruff" format --check --quiet "${pythons[@]}" || status=1
  fi
fi
if [[ ${#dockerfiles[@]} -gt 0 ]]; then
  echo "[lint] $("${BIN_DIR}/hadolint" --version): ${dockerfiles[*]}"
  "${BIN_DIR}/hadolint" --no-color "${dockerfiles[@]}" || status=1
fi
if [[ ${#scripts[@]} -gt 0 ]]; then
  echo "[lint] shellcheck $("${BIN_DIR}/shellcheck" --version | sed -n 's/^version: //p'): ${scripts[*]}"
  "${BIN_DIR}/shellcheck" --external-sources "${scripts[@]}" || status=1
fi
if [[ ${status} -eq 0 ]]; then
  echo "[lint] clean"
else
  echo "[lint] findings above: fix them (or, for a deliberate exception, add a directive with the reason)." >&2
fi
exit "${status}"
