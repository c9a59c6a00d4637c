#!/usr/bin/env bash
# Issue 38 item 2, D2Q9 periodic 4096^2 on the lent TPU after the 2D in-place AA pair (lbm.engines.pallas.aa), in one
# device command (under 240 s of device time):
#   run  command: "bash scripts/device_aa2d.sh"  carry: [".whl"]  timeout_s: 300
# the device tests of the 2D pair (the compiled kernels against xla: a periodic box and the cavity, ny = 1024), the
# 2D pair against the push rows kernel per block height (scripts/tpu_aa_sweep.py --only d2q9, 4096^2), then one
# `lbm bench` (the bandwidth probe in the same run) of D2Q9 periodic 4096^2, pallas and xla. In $OUT: aa2d.log,
# aa2d.json, bench-d2q9-4096.json. min_time_s=0.5: steps per chunk = 0.5 s over the step time, rounded up to a power
# of two (lbm.bench.throughput), some hundreds at 4096^2, so that the 2D chunk's two copies into and out of the
# kernels' view (about 4 population passes) weigh little against 2 passes per step.
# Rehearsal on a CPU (interpret mode, tiny grids, numbers meaningless):
#   JAX_PLATFORMS=cpu LBM_DEVICE_REHEARSAL=1 AA2D_N=1024 OUT=/tmp/aa2d-out bash scripts/device_aa2d.sh
set -u
source scripts/device_env.sh
n=${AA2D_N:-4096}
log=$OUT/aa2d.log
python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | grep -v -i warn | tee "$log"
timeout 60 python3 -m pytest -q -n 0 -p no:cacheprovider -m device tests/engines/pallas/test_engines_pallas.py \
  -k "equals_the_reference and aa2d" 2>&1 | tail -4 | tee -a "$log"
timeout 80 python3 scripts/tpu_aa_sweep.py --only d2q9 --out "$OUT/aa2d.json" 2>&1 \
  | grep -v "^  File\|^Traceback\|^    \|UserWarning\|warnings.warn" | tee -a "$log"
timeout 90 python3 -m lbm bench lattice=d2q9 "variants=[pallas,xla]" "cases=[periodic]" grid.nx="$n" grid.ny="$n" \
  repeats=3 min_time_s=0.5 kernel_profile=0 bandwidth.repeats=5 hydra.run.dir=outputs/device-aa2d/bench-d2q9 2>&1 \
  | grep -v "^bench \|UserWarning\|warnings.warn" | tail -22 | tee -a "$log"
cp outputs/device-aa2d/bench-d2q9/bench.json "$OUT/bench-d2q9-$n.json" 2>/dev/null
