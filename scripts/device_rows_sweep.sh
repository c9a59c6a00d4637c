#!/usr/bin/env bash
# Issue 38 measurement on the lent TPU: the rows kernel against its block height (scripts/tpu_rows_sweep.py) and
# bench pallas/xla at HBM-bound sizes (D2Q9 4096^2, D3Q19 256^3). run: "bash scripts/device_rows_sweep.sh" carry: [".whl"]
set -u
site=$(mktemp -d)/site
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" .whl/*.whl > $OUT/install.log 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:$site PYTHONUNBUFFERED=1
python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tee $OUT/chip1.log
timeout 200 python3 scripts/tpu_rows_sweep.py --out $OUT/rows.json 2>&1 | grep -v "^  File\|^Traceback\|^    " | tee -a $OUT/chip1.log
for spec in "d2q9 grid.nx=4096 grid.ny=4096" "d3q19 grid.nx=256 grid.ny=256 grid.nz=256"; do
  set -- $spec; lat=$1; shift
  timeout 150 python3 -m lbm bench lattice=$lat "variants=[pallas,xla]" "cases=[periodic]" "$@" repeats=3 min_time_s=0.2 kernel_profile=0 bandwidth.repeats=5 hydra.run.dir=$OUT/bench-$lat 2>&1 | tail -25 | tee -a $OUT/chip1.log
done
