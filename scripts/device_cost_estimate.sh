#!/usr/bin/env bash
# The DMA-ring kernels' declared bytes (pl.CostEstimate, twelfth session) on the lent TPU, one device command: the
# 3D cavity's fused fixture captured again (its chunk program now named jit_chunk, as on every engine), and the
# walled kernels benched beside the box where the cost estimate could change XLA's schedule:
#   run  command: "bash scripts/device_cost_estimate.sh"  carry: [".whl"]  timeout_s: 600
# In $OUT: device-fixture-fused.tgz (python scripts/device_fixture.py <files_at> tpu-v5-lite-cavity3d-fused here),
# cost-estimate.log, bench-d3q19-258.json, bench-d2q9-4098.json.
set -u
OUT=${OUT:-outputs/device}
mkdir -p "$OUT"
python3 scripts/device_fixture.py capture fused -- case=cavity lattice=d3q19 2>&1 | grep -v "^I0000\|^W0000" | tail -30
source scripts/device_env.sh
log=$OUT/cost-estimate.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
bench_step 200 d3q19-258 lattice=d3q19 "cases=[periodic,cavity]" "variants=[auto]" "sizes=[${SIZE3D:-258}]"
bench_step 120 d2q9-4098 lattice=d2q9 "cases=[cavity]" "variants=[auto]" "sizes=[${SIZE2D:-4098}]"
ls -la "$OUT"
