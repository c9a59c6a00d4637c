#!/usr/bin/env bash
# Creates .venv with the newest Python >= 3.11 found and installs lbm into it (editable).
#   bash install.sh          -> runtime dependencies
#   bash install.sh test     -> plus the test tools (pytest, hypothesis, ruff)
#   bash install.sh --find-python  -> print the Python >= 3.11 it would use, install nothing
# Set LBM_PYTHON=/path/to/python3.11 (or newer) to choose the interpreter. On Python 3.11 pip installs jax 0.10.2,
# the newest jax there (jax 0.11 and newer need Python >= 3.12), and several times slower on a CPU than jax 0.12.
set -euo pipefail
cd "$(dirname "$0")"
extra=""
[[ "${1:-}" == "test" ]] && extra="[test]"
find_only=""
[[ "${1:-}" == "--find-python" ]] && find_only=1

ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }
version() { "$1" -c 'import sys; print("%d %03d %03d" % sys.version_info[:3])' 2>/dev/null; }
py=""
if [[ -n "${LBM_PYTHON:-}" ]]; then
  if ! command -v "$LBM_PYTHON" >/dev/null 2>&1 || ! ok "$LBM_PYTHON"; then
    echo "install.sh: LBM_PYTHON=$LBM_PYTHON is not a Python >= 3.11" >&2
    exit 1
  fi
  py=$(command -v "$LBM_PYTHON")
else
  # the newest Python >= 3.11 on PATH or in pyenv
  candidates=(python3.14 python3.13 python3.12 python3.11 python3 python)
  pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  command -v pyenv >/dev/null 2>&1 && pyenv_root=$(pyenv root)
  for c in "$pyenv_root"/versions/*/bin/python3; do [[ -x "$c" ]] && candidates+=("$c"); done
  best=""
  for c in "${candidates[@]}"; do
    if command -v "$c" >/dev/null 2>&1 && ok "$c"; then
      v=$(version "$c")
      if [[ -z "$best" || "$v" > "$best" ]]; then best=$v; py=$(command -v "$c"); fi
    fi
  done
fi
if [[ -z "$py" ]]; then
  found=$(for c in python3 python; do command -v $c >/dev/null 2>&1 && $c -c 'import sys; print(sys.executable, sys.version.split()[0])'; done | head -1)
  echo "install.sh: lbm needs Python >= 3.11, found only: ${found:-no python}." >&2
  echo "install.sh: install one (e.g. 'pyenv install 3.13', 'apt install python3.11-venv', 'brew install python@3.13') or set LBM_PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [[ -n "$find_only" ]]; then echo "$py"; exit 0; fi
if [[ -x .venv/bin/python ]] && ! ok .venv/bin/python; then rm -rf .venv; fi
if [[ ! -x .venv/bin/python ]]; then
  echo "install.sh: creating .venv with $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
  "$py" -m venv .venv || { echo "install.sh: '$py -m venv' failed: install the venv module (e.g. apt install python3.11-venv)" >&2; exit 1; }
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extra}"
echo "install.sh: lbm installed in .venv ($(.venv/bin/python -c 'import jax, sys; print("python", sys.version.split()[0], "jax", jax.__version__)'))"
