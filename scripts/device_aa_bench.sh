#!/usr/bin/env bash
# Issue 38 measurement on the lent TPU after the in-place AA kernels (lbm.engines.pallas.aa), in one device command:
#   run  command: "bash scripts/device_aa_bench.sh"  carry: [".whl"]  timeout_s: 600
# the device tests of the compiled kernels, the AA kernels against the push rows kernel per block height (scripts/tpu_aa_sweep.py, D3Q19 256^3), then
# `lbm bench` (the bandwidth probe in the same run) at HBM-bound sizes: D3Q19 256^3 pallas and xla, D3Q27 256^3 BGK
# and cumulant (pallas), D3Q19 512^3 (pallas: 10.2 GB of populations, on one 16 GiB chip), and the default cylinder
# and the 3D cylinder as a user runs them. In $OUT: aa.log, aa.json, bench-*.json.
set -u
source scripts/device_env.sh
log=$OUT/aa.log
python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | grep -v -i warn | tee "$log"
# the compiled kernels against xla on the chip (the 3D box and the 3D cavity run the AA pair there)
timeout 120 python3 -m pytest -q -n 0 -p no:cacheprovider -m device tests/engines/pallas/test_engines_pallas.py \
  -k equals_the_reference 2>&1 | tail -4 | tee -a "$log"
timeout 100 python3 scripts/tpu_aa_sweep.py --only d3q19 --out "$OUT/aa.json" 2>&1 \
  | grep -v "^  File\|^Traceback\|^    \|UserWarning\|warnings.warn" | tee -a "$log"
bench() {  # bench NAME LIMIT_S OVERRIDE...: one lbm bench run, its table in the log, its bench.json in $OUT
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m lbm bench "$@" repeats=3 min_time_s=0.2 kernel_profile=0 bandwidth.repeats=5 \
    "hydra.run.dir=outputs/device-aa/bench-$name" 2>&1 | grep -v "^bench \|UserWarning\|warnings.warn" | tail -22 \
    | tee -a "$log"
  cp "outputs/device-aa/bench-$name/bench.json" "$OUT/bench-$name.json" 2>/dev/null
}
bench d3q19-256 120 lattice=d3q19 "variants=[pallas,xla]" "cases=[periodic]" grid.nx=256 grid.ny=256 grid.nz=256
bench d3q27-256 120 lattice=d3q27 "variants=[pallas]" "cases=[periodic]" "collisions=[bgk,cumulant]" grid.nx=256 \
  grid.ny=256 grid.nz=256
bench d3q19-512 90 lattice=d3q19 "variants=[pallas]" "cases=[periodic]" grid.nx=512 grid.ny=512 grid.nz=512
