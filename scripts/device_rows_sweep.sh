#!/usr/bin/env bash
# Issue 38 measurement on the lent TPU: the rows kernel against its block height (scripts/tpu_rows_sweep.py) and
# bench pallas/xla at HBM-bound sizes (D2Q9 4096^2, D3Q19 256^3), in one device command:
#   run  command: "bash scripts/device_rows_sweep.sh"  carry: [".whl"]  timeout_s: 600
set -u
source scripts/device_env.sh
python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tee "$OUT/chip1.log"
timeout 200 python3 scripts/tpu_rows_sweep.py --out "$OUT/rows.json" 2>&1 | grep -v "^  File\|^Traceback\|^    " \
  | tee -a "$OUT/chip1.log"
for spec in "d2q9 grid.nx=4096 grid.ny=4096" "d3q19 grid.nx=256 grid.ny=256 grid.nz=256"; do
  set -- $spec; lat=$1; shift
  timeout 150 python3 -m lbm bench lattice=$lat "variants=[pallas,xla]" "cases=[periodic]" "$@" repeats=3 \
    min_time_s=0.2 kernel_profile=0 bandwidth.repeats=5 "hydra.run.dir=$OUT/bench-$lat" 2>&1 | tail -25 \
    | tee -a "$OUT/chip1.log"
done
