# Sourced by the one-off device scripts (device_rows_sweep.sh, device_validate.sh, device_walls.sh, device_chunks.sh, ...): the carried py3.11 wheels
# (.whl/, from scripts/device_wheels.sh) installed offline into a temporary folder APPENDED to PYTHONPATH (the lent
# machine's jax stays first), this checkout in front of it, and $OUT (the device tool's folder; here: outputs/device)
# made, and matplotlib from the machine's index. scripts/device_check.sh does the same with more checks.
site=$(mktemp -d)/site
OUT=${OUT:-outputs/device}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" .whl/*.whl \
    >"$OUT/install.log" 2>&1 || echo "device_env: the carried wheels did not install (see $OUT/install.log)" >&2
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:$site PYTHONUNBUFFERED=1
# matplotlib (lbm's plots; not among the wheels): from the machine's own index where it lacks one (the lent TPU machine
# has /opt/pypi/simple). Without it every run ends in a ModuleNotFoundError when it draws its plots (2026-12-06).
if ! python3 -c 'import matplotlib' >/dev/null 2>&1 && [[ -d /opt/pypi/simple ]]; then
  env PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
    --index-url file:///opt/pypi/simple --target "$site-mpl" matplotlib >"$OUT/install-matplotlib.log" 2>&1 \
    || echo "device_env: matplotlib did not install (see $OUT/install-matplotlib.log)" >&2
  export PYTHONPATH=$PYTHONPATH:$site-mpl
fi
# step LIMIT_S COMMAND...: one step of a one-off device script, with a time limit; its output, less JAX's warnings
# and the lines matching $STEP_QUIET (a grep pattern, optional), goes to the terminal and to $log, then its exit code
# and time. A step cut by its limit leaves the earlier steps' results.
step() {
  local limit=$1; shift
  echo "=== $* (limit $limit s)" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout -k 5 "$limit" "$@" 2>&1 | grep -v "UserWarning\|warnings.warn\|^  warnings${STEP_QUIET:+\\|$STEP_QUIET}" \
    | tee -a "$log"
  echo "=== exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s" | tee -a "$log"
}
# bench_step LIMIT_S NAME OVERRIDE...: one `lbm bench` as a step (above), with the one-off scripts' timing (3 repeats of
# at least 0.2 s, no kernel profile, 3 bandwidth repeats) in outputs/device-bench/NAME; its bench.json to
# $OUT/bench-NAME.json. LBM_MAIN names another entry point than `python3 -m lbm` (scripts/pair_anywhere.py).
bench_step() {
  local limit=$1 name=$2; shift 2
  # shellcheck disable=SC2086  # LBM_MAIN is a command and its arguments
  step "$limit" ${LBM_MAIN:-python3 -m lbm} bench "$@" repeats=3 min_time_s=0.2 kernel_profile=0 bandwidth.repeats=3 \
    hydra.run.dir=outputs/device-bench/"$name"
  cp outputs/device-bench/"$name"/bench.json "$OUT/bench-$name.json" 2>/dev/null
}
