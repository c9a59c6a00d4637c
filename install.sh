#!/usr/bin/env bash
# Creates .venv with a Python >= 3.12 and installs lbm into it (editable).
#   bash install.sh          -> runtime dependencies
#   bash install.sh test     -> plus the test tools (pytest, hypothesis, ruff)
#   bash install.sh --find-python  -> print the Python >= 3.12 it would use, install nothing
# Set LBM_PYTHON=/path/to/python3.12 to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")"
extra=""
[[ "${1:-}" == "test" ]] && extra="[test]"
find_only=""
[[ "${1:-}" == "--find-python" ]] && find_only=1

ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
candidates=()
[[ -n "${LBM_PYTHON:-}" ]] && candidates+=("$LBM_PYTHON")
candidates+=(python3.13 python3.12 python3 python)
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for v in $(ls -1 "$root/versions" 2>/dev/null | sort -rV); do candidates+=("$root/versions/$v/bin/python3"); done
fi
py=""
for c in "${candidates[@]}"; do
  if command -v "$c" >/dev/null 2>&1 && ok "$c"; then py=$(command -v "$c"); break; fi
done
if [[ -z "$py" ]]; then
  found=$(for c in python3 python; do command -v $c >/dev/null 2>&1 && $c -c 'import sys; print(sys.executable, sys.version.split()[0])'; done | head -1)
  echo "install.sh: lbm needs Python >= 3.12, found only: ${found:-no python}." >&2
  echo "install.sh: install one (e.g. 'pyenv install 3.12', 'apt install python3.12-venv', 'brew install python@3.12') or set LBM_PYTHON=/path/to/python3.12" >&2
  exit 1
fi
if [[ -n "$find_only" ]]; then echo "$py"; exit 0; fi
if [[ -x .venv/bin/python ]] && ! ok .venv/bin/python; then rm -rf .venv; fi
if [[ ! -x .venv/bin/python ]]; then
  echo "install.sh: creating .venv with $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
  "$py" -m venv .venv || { echo "install.sh: '$py -m venv' failed: install the venv module (e.g. apt install python3.12-venv)" >&2; exit 1; }
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extra}"
echo "install.sh: lbm installed in .venv ($(.venv/bin/python -c 'import jax, sys; print("python", sys.version.split()[0], "jax", jax.__version__)'))"
