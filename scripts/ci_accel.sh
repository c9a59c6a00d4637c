#!/usr/bin/env bash
# CI's second lane: the accelerator path compiled for an H100 and a TPU v5e without either (tests marked accel), in
# a separate, cached environment: the CUDA plugin and libtpu must not enter .venv (a CUDA plugin on a CPU machine
# prints an initialisation error at every start). The environment lives outside the clone so that CI runs reuse it.
#   LBM_SKIP_ACCEL=1      skip this lane, saying so (for a machine that cannot reach the package registry)
#   LBM_ACCEL_ENV_CMD     the command that builds the environment (default: bash scripts/accel_env.sh)
#   --prepare             build the environment only (.ci/run does, in the background, while the first lane runs)
# A failure to build the environment fails the lane, so the deviceless compiles can never vanish from a green run.
set -euo pipefail
cd "$(dirname "$0")/.."
export LBM_ACCEL_VENV="${LBM_ACCEL_VENV:-$HOME/.cache/lbm/venv-accel}"
if [[ "${LBM_SKIP_ACCEL:-}" == "1" ]]; then
  echo "ci: LBM_SKIP_ACCEL=1: the deviceless accelerator compiles (tests marked accel) are NOT run" >&2
  exit 0
fi
if ! ${LBM_ACCEL_ENV_CMD:-bash scripts/accel_env.sh}; then
  echo "ci: error: the accelerator compile environment could not be built (see above); fix it, or set" \
       "LBM_SKIP_ACCEL=1 on a machine without the package registry" >&2
  exit 1
fi
[[ "${1:-}" == "--prepare" ]] && { echo "ci: the accelerator lane's environment is ready"; exit 0; }
# every test marked accel, wherever it lives; LBM_REQUIRE_ACCEL=1: one that skips (a plugin missing) fails.
# Among them tests/scripts/test_compile_matrix.py: the pairwise design of scripts/compile_matrix.py compiled for a TPU v5e,
# in four child processes (an abort of XLA's TPU compiler fails the test naming it, not pytest; the configurations
# after it go on in a new child).
start=$SECONDS
LBM_REQUIRE_ACCEL=1 PYTHONPATH="$PWD" "$LBM_ACCEL_VENV/bin/python" -m pytest -q -m accel --durations=5
echo "ci: the accelerator lane's tests took $((SECONDS - start)) s"
