#!/usr/bin/env bash
# Bench the solver under two JAX versions (or one version under two XLA_FLAGS) and compare them:
#   bash scripts/compare_jax_versions.sh [options] JAX_A JAX_B [bench overrides...]
# Options (before the versions):
#   --python-a PY, --python-b PY   use this interpreter (an existing environment whose jax is that version)
#                                  instead of making .venv-jax-<version>; nothing is installed into it, and this
#                                  checkout is put first on PYTHONPATH (its own lbm may be another checkout's)
#   --xla-flags-a F, --xla-flags-b F   XLA_FLAGS of that side's bench and interleaved workers (default: $XLA_FLAGS), e.g.
#                                  --xla-flags-b=--xla_cpu_experimental_ynn_fusion_type= with JAX_A = JAX_B
#   --out PATH                     the report (default docs/jax-<A>-vs-<B>.md)
#   --remeasure N                  interleaved rounds of compare (default 20)
# Without --python-*, makes .venv-jax-<version> for each (the newest Python >= 3.11 that install.sh finds), installs
# lbm's dependencies with that jax/jaxlib. Runs `python -m lbm bench` in each with the same overrides
# (default: the periodic 1024^2 box, variants naive and xla, the pure-JAX paths), then
# `python -m lbm compare --remeasure N --base-python` (N interleaved rounds of both environments, in turn).
# Example (docs/studies.md, "JAX 0.10.2 against 0.12.0.1"):
#   bash scripts/compare_jax_versions.sh --python-a /work/main/.venv-jax-0.10.2/bin/python \
#     --python-b /work/main/.venv/bin/python --out docs/jax-0.10.2-vs-0.12.0.1-d3q27.md 0.10.2 0.12.0.1 \
#     cases=[periodic] variants=[naive,xla] lattice=d3q27 grid.nx=96 grid.ny=96 grid.nz=96
# Where compare finds a REGRESSION (a structural one is not timed), it runs again with B as the base and writes
# <report>-swapped.md: there the structure is less work, and the configurations are timed interleaved.
# Exit code: that of the first compare (0 OK, 1 a regression of B against A, 3 inconclusive, 2 bad input).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash scripts/compare_jax_versions.sh [--python-a PY] [--python-b PY] [--xla-flags-a F] [--xla-flags-b F] [--out PATH] [--remeasure N] JAX_A JAX_B [bench overrides...]"
py_a=""; py_b=""; flags_a=${XLA_FLAGS:-}; flags_b=${XLA_FLAGS:-}; report=""; rounds=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-a) py_a=$2; shift 2 ;;
    --python-a=*) py_a=${1#*=}; shift ;;
    --python-b) py_b=$2; shift 2 ;;
    --python-b=*) py_b=${1#*=}; shift ;;
    --xla-flags-a) flags_a=$2; shift 2 ;;
    --xla-flags-a=*) flags_a=${1#*=}; shift ;;
    --xla-flags-b) flags_b=$2; shift 2 ;;
    --xla-flags-b=*) flags_b=${1#*=}; shift ;;
    --out) report=$2; shift 2 ;;
    --out=*) report=${1#*=}; shift ;;
    --remeasure) rounds=$2; shift 2 ;;
    --remeasure=*) rounds=${1#*=}; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    --*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 2 ]]; then
  echo "$usage" >&2
  exit 2
fi
A=$1; B=$2; shift 2
overrides=("$@")
if [[ ${#overrides[@]} -eq 0 ]]; then
  overrides=("cases=[periodic]" "variants=[naive,xla]" grid.nx=1024 grid.ny=1024)
fi
report=${report:-docs/jax-$A-vs-$B.md}
stamp=$(date +%Y-%m-%d/%H-%M-%S)

# the interpreter of version $1 (made and filled here unless given as $2)
environment() {
  local v=$1 given=$2
  if [[ -n "$given" ]]; then
    local got
    got=$(PYTHONPATH="$PWD" "$given" -c 'import jax, lbm, os; print(jax.__version__, os.path.dirname(os.path.dirname(os.path.abspath(lbm.__file__))))') \
      || { echo "compare_jax_versions.sh: $given cannot import jax and lbm" >&2; exit 2; }
    if [[ "${got%% *}" != "$v" ]]; then
      echo "compare_jax_versions.sh: $given has jax ${got%% *}, not $v" >&2; exit 2
    fi
    if [[ "${got#* }" != "$PWD" ]]; then
      echo "compare_jax_versions.sh: $given imports lbm from ${got#* }, not this checkout ($PWD)" >&2; exit 2
    fi
    echo "$given"
    return
  fi
  local py deps venv=".venv-jax-$v"
  py=$(bash install.sh --find-python)
  deps=$("$py" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(" ".join(x for x in d if not x.startswith(("jax", "jaxlib"))))')
  [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "jax==$v" "jaxlib==$v" $deps >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e . >&2
  echo "$venv/bin/python"
}
python_a=$(environment "$A" "$py_a")
python_b=$(environment "$B" "$py_b")
# given interpreters run this checkout's lbm (their editable install may be another checkout's)
[[ -n "$py_a$py_b" ]] && export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
dir_a="outputs/jax-compare/$stamp/a-$A"; dir_b="outputs/jax-compare/$stamp/b-$B"
for side in a b; do
  if [[ $side == a ]]; then python=$python_a; flags=$flags_a; dir=$dir_a; v=$A
  else python=$python_b; flags=$flags_b; dir=$dir_b; v=$B; fi
  echo "== jax $v${flags:+ (XLA_FLAGS=$flags)}: $python -m lbm bench ${overrides[*]}"
  XLA_FLAGS="$flags" "$python" -m lbm bench "${overrides[@]}" "hydra.run.dir=$dir"
done
set +e
# suspect configurations are measured again in both environments, in turn (compare --base-python), each side
# under its own file's XLA_FLAGS
"$python_b" -m lbm compare "$dir_a/bench.json" "$dir_b/bench.json" --remeasure "$rounds" \
  --base-python "$python_a" --out "$report"
code=$?
if [[ $code -eq 1 ]]; then
  # compare does not time a configuration whose structure alone makes it a REGRESSION (more kernels, bytes or
  # flops per cell and step); the other way round that structure is less work, so A is timed against B there
  swapped="${report%.md}-swapped.md"
  echo "== REGRESSION: compare again with $B as the base, so that what the structure decided is timed too"
  "$python_a" -m lbm compare "$dir_b/bench.json" "$dir_a/bench.json" --remeasure "$rounds" \
    --base-python "$python_b" --out "$swapped"
  echo "wrote $swapped (exit $?; B as the base: a slowdown there is A slower than B)"
fi
set -e
echo "wrote $report (bench files in outputs/jax-compare/$stamp)"
exit $code
