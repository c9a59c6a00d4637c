#!/usr/bin/env bash
# Bench the solver under two JAX versions and compare them:
#   bash scripts/compare_jax_versions.sh 0.10.2 0.12.0.1 [bench overrides...]
# Makes .venv-jax-<version> for each (the newest Python >= 3.11 that install.sh finds), installs lbm's
# dependencies with that jax/jaxlib, runs `python -m lbm bench` in each with the same overrides
# (default: the periodic 1024^2 box, variants naive and xla, the pure-JAX paths), then
# `python -m lbm compare --remeasure 20 --base-python` (20 interleaved rounds of both
# environments, in turn), and writes docs/jax-<A>-vs-<B>.md.
# Exit code: that of compare (0 OK, 1 a regression of B against A, 3 inconclusive, 2 bad input).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 2 ]]; then
  echo "usage: bash scripts/compare_jax_versions.sh JAX_A JAX_B [bench overrides...]" >&2
  exit 2
fi
A=$1; B=$2; shift 2
overrides=("$@")
if [[ ${#overrides[@]} -eq 0 ]]; then
  overrides=("cases=[periodic]" "variants=[naive,xla]" grid.nx=1024 grid.ny=1024)
fi
py=$(bash install.sh --find-python)
deps=$("$py" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(" ".join(x for x in d if not x.startswith(("jax", "jaxlib"))))')
stamp=$(date +%Y-%m-%d/%H-%M-%S)
for v in "$A" "$B"; do
  venv=".venv-jax-$v"
  [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "jax==$v" "jaxlib==$v" $deps
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  echo "== jax $v: python -m lbm bench ${overrides[*]}"
  "$venv/bin/python" -m lbm bench "${overrides[@]}" "hydra.run.dir=outputs/jax-compare/$stamp/$v"
done
report="docs/jax-$A-vs-$B.md"
set +e
# suspect configurations are measured again in both environments, in turn (compare --base-python)
".venv-jax-$B/bin/python" -m lbm compare "outputs/jax-compare/$stamp/$A/bench.json" \
  "outputs/jax-compare/$stamp/$B/bench.json" --remeasure 20 --base-python ".venv-jax-$A/bin/python" --out "$report"
code=$?
set -e
echo "wrote $report (bench files in outputs/jax-compare/$stamp)"
exit $code
