#!/usr/bin/env bash
# Device check: on a machine with an NVIDIA GPU (or a TPU VM), in under 8 minutes,
#   1. installs the runtime's jax with the accelerator's wheels (jax[cuda12] or jax[tpu]) and lbm into .venv-device/,
#   2. runs the tests marked `device` (pallas vs xla on the device, a profiled run's device-clock breakdown),
#   3. runs `lbm bench` for the pallas (auto) and xla engines, D2Q9 (1024^2) and D3Q19 (128^3), bandwidth measured
#      in the same run,
#   4. runs the default case (cylinder) profiled, fused and instrumented,
# and leaves everything under outputs/device-check/ (logs, bench.json files, run directories with profile/).
#   bash scripts/device_check.sh            # everything
# Environment: LBM_PYTHON (interpreter >= 3.12), LBM_JAX_VERSION (default: the version in .venv, else 0.12.0.1),
#              LBM_DEVICE_VENV (default <repo>/.venv-device), LBM_DEVICE (cuda | tpu; default: detected).
# Every step fails loudly: the script stops at the first failure with the step's name and its log's tail.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=outputs/device-check
venv=${LBM_DEVICE_VENV:-$root/.venv-device}
mkdir -p "$out"
start=$(date +%s)
summary="$out/summary.txt"
: > "$summary"

say() { echo "device_check: $*" | tee -a "$summary"; }
die() { echo "device_check: FAILED: $*" | tee -a "$summary" >&2; exit 1; }
step() {  # step NAME TIMEOUT_S LOG COMMAND...: run with a time limit; on failure print the log's tail and stop
  local name=$1 limit=$2 log=$3; shift 3
  local t0; t0=$(date +%s)
  say "$name ..."
  local rc=0
  timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
  if (( rc != 0 )); then
    tail -n 40 "$log" >&2
    (( rc == 124 )) && die "$name: timed out after $limit s (full log: $log)"
    die "$name (exit $rc after $(( $(date +%s) - t0 )) s; full log: $log)"
  fi
  say "$name: ok in $(( $(date +%s) - t0 )) s (log: $log)"
}

# --- which accelerator ----------------------------------------------------------------------------------------
device=${LBM_DEVICE:-}
if [[ -z "$device" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    device=cuda
  elif ls /dev/accel* >/dev/null 2>&1 || ls /dev/vfio/* >/dev/null 2>&1; then
    device=tpu
  else
    die "no NVIDIA GPU (nvidia-smi -L) and no TPU (/dev/accel*, /dev/vfio) here; set LBM_DEVICE=cuda|tpu to force"
  fi
fi
case "$device" in
  cuda) extra="cuda12"; jax_extra="cuda12" ;;
  tpu) extra="tpu"; jax_extra="tpu" ;;
  *) die "LBM_DEVICE must be cuda or tpu, not '$device'" ;;
esac
[[ "$device" == cuda ]] && nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
say "device: $device"

# --- environment ------------------------------------------------------------------------------------------------
jax_version=${LBM_JAX_VERSION:-}
if [[ -z "$jax_version" && -x "$root/.venv/bin/python" ]]; then
  jax_version=$("$root/.venv/bin/python" -c 'import jax; print(jax.__version__)' 2>/dev/null || true)
fi
jax_version=${jax_version:-0.12.0.1}
py=$(LBM_PYTHON="${LBM_PYTHON:-}" bash "$root/install.sh" --find-python) || die "no python >= 3.12 (set LBM_PYTHON)"
if [[ ! -x "$venv/bin/python" ]]; then
  "$py" -m venv "$venv" || die "could not create $venv with $py"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --quiet)
step "install jax[$jax_extra]==$jax_version and lbm[test]" 300 "$out/install.log" \
  "${pip[@]}" "jax[$jax_extra]==$jax_version" -e "$root[test]"
python="$venv/bin/python"
step "jax sees the $device" 120 "$out/devices.log" "$python" - "$device" <<'PY'
import sys
import jax
want = {"cuda": "gpu", "tpu": "tpu"}[sys.argv[1]]
print(jax.__version__, jax.devices())
if jax.default_backend() != want:
    sys.exit(f"jax's default backend is {jax.default_backend()}, not {want}: the {sys.argv[1]} wheels did not load")
from lbm.engines import make_engine  # auto must pick pallas here
from lbm.simulation import make_case
from lbm.config import load
engine = make_engine(make_case(load([])).setup())
print("auto engine on this device:", engine.name, engine.note)
if engine.name != "pallas":
    sys.exit(f"engine=auto picked {engine.name}, not pallas: {engine.note}")
PY

# --- tests marked device ----------------------------------------------------------------------------------------
step "pytest -m device" 240 "$out/pytest-device.log" \
  env PYTHONPATH="$root" "$python" -m pytest -q -m device tests/test_engines_pallas.py \
  --junitxml="$out/pytest-device.xml"
grep -q " passed" "$out/pytest-device.log" || die "pytest -m device passed nothing (all skipped?): $out/pytest-device.log"

# --- bench: pallas (auto) and xla, D2Q9 and D3Q19, bandwidth in the same run --------------------------------------
lbm=(env PYTHONPATH="$root" "$python" -m lbm)
step "bench d2q9 1024^2 (auto=pallas, xla)" 240 "$out/bench-d2q9.log" "${lbm[@]}" bench lattice=d2q9 \
  "variants=[auto,xla]" "cases=[periodic,cylinder]" grid.nx=1024 grid.ny=1024 repeats=3 min_time_s=0.3 \
  bandwidth.repeats=5 "hydra.run.dir=$out/bench-d2q9"
step "bench d3q19 128^3 (auto=pallas, xla)" 240 "$out/bench-d3q19.log" "${lbm[@]}" bench lattice=d3q19 \
  "variants=[auto,xla]" "cases=[periodic,cylinder]" grid.nx=128 grid.ny=128 grid.nz=128 cylinder_grid.nz=32 \
  repeats=3 min_time_s=0.3 bandwidth.repeats=5 "hydra.run.dir=$out/bench-d3q19"
for b in bench-d2q9 bench-d3q19; do
  [[ -s "$out/$b/bench.json" ]] || die "$out/$b/bench.json is missing"
  grep -q '"pallas"' "$out/$b/bench.json" || die "$out/$b/bench.json has no pallas record (auto did not pick pallas)"
done

# --- the default case, profiled, both modes ----------------------------------------------------------------------
for mode in fused instrumented; do
  steps=2000; [[ $mode == instrumented ]] && steps=200
  step "profiled run, mode=$mode" 180 "$out/profile-$mode.log" "${lbm[@]}" run mode=$mode steps=$steps \
    profile.enabled=true "hydra.run.dir=$out/profile-$mode"
  [[ -s "$out/profile-$mode/profile/breakdown.csv" ]] || die "$out/profile-$mode/profile/breakdown.csv is missing"
done

say "done in $(( $(date +%s) - start )) s; results under $out (summary.txt, bench-*/bench.json, profile-*/profile/)"
