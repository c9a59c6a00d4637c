#!/usr/bin/env bash
# CI's oldest lane: Python 3.11 with the oldest jax lbm supports (pyproject.toml's floor, jax>=0.10.2: the newest jax
# on Python 3.11, preinstalled on the lent TPU v5e machine), in .venv-py311; runs the fast lane (pytest -m "not slow").
#   LBM_PYTHON311   the Python 3.11 to use (default: python3.11 on PATH, else the newest 3.11 in pyenv)
#   --prepare       build .venv-py311 only (.ci/run does, in the background, while the first lane's tests run)
# No Python 3.11 found: the lane fails with one line (it is never skipped).
# Cost on a 2-core machine (clean clone, cold pip, JAX and kernel caches): the install 36 s, the fast lane 156 s at
# load 2-3 and 351 s at load 6-7 (260 CPU-s).
# Why the whole fast lane, not a subset (weighed for issue 39, item 13): what can break only here is Python 3.12+
# syntax or library (PEP 695 generics and f-string quoting did: commit cea746c) and jax 0.10.2's API or its XLA's
# rounding (one device against a 2x2 mesh an ulp apart at XLA level 0: commit 2127f5f), i.e. any line that calls
# jax, and the fast lane's cost is those calls' compiles: its tests that compile nothing cost 49 of its 209 CPU-s
# (Python 3.13, cold caches, one process), and one parametrisation of each test function still costs 167.
set -euo pipefail
cd "${0%/*}/.."
venv=.venv-py311

is311() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1; }
py=""
if [[ -n "${LBM_PYTHON311:-}" ]]; then
  is311 "$LBM_PYTHON311" || { echo "ci_py311: LBM_PYTHON311=$LBM_PYTHON311 is not a Python 3.11" >&2; exit 1; }
  py=$LBM_PYTHON311
else
  shopt -s nullglob
  for c in python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python3.11; do
    if command -v "$c" >/dev/null 2>&1 && is311 "$c"; then py=$(command -v "$c"); break; fi
  done
fi
if [[ -z "$py" ]]; then
  echo "ci_py311: error: no Python 3.11 on PATH or in pyenv (install one, e.g. 'pyenv install 3.11', or set LBM_PYTHON311)" >&2
  exit 1
fi

# the floor of jax and jaxlib in pyproject.toml's dependencies
floor() { sed -n "s/^ *\"$1>=\([0-9][0-9.]*\)\".*/\1/p" pyproject.toml; }
jax=$(floor jax) jaxlib=$(floor jaxlib)
if [[ -z "$jax" || -z "$jaxlib" ]]; then
  echo "ci_py311: error: no \"jax>=X\" and \"jaxlib>=X\" dependency lines in pyproject.toml" >&2
  exit 1
fi

if [[ -x "$venv/bin/python" ]] && ! is311 "$venv/bin/python"; then rm -rf "$venv"; fi
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" "jax==$jax" "jaxlib==$jaxlib" -e ".[test]"
[[ "${1:-}" == "--prepare" ]] && { echo "ci_py311: .venv-py311 ready"; exit 0; }
echo "ci_py311: $("$venv/bin/python" -c 'import jax, sys; print("python", sys.version.split()[0], "jax", jax.__version__)'):" \
     "the fast lane"
# LBM_REQUIRE_NATIVE=1: as in .ci/run's first lane, a missing compiler fails instead of skipping the native tests
LBM_REQUIRE_NATIVE=1 "$venv/bin/python" -m pytest -q -m "not slow"
