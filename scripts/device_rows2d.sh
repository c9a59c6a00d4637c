#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-07, twelfth session): the 2D pair on planes of k rows of x
# (lbm.engines.pallas.planes.row_group: rows of y padded to a multiple of 128 cells, not 1024; deviceless v5e: the box
# 3360x1440 planned 1.42x -> 1.067x, the cavity 4098^2 1.45x -> 1.31x):
#   run  command: "bash scripts/device_rows2d.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d2q9 cases=[periodic,cavity] variants=[auto]` at 3360x1440 and 4098^2 (grouped, k = 2), and
#      the box 4096^2 (one row per plane, unchanged: the reference for time per cell);
#   2. the cavity 1500^2 (k = 2) against xla (auto's check);
#   3. scripts/backends_agree.py (the chip against the same process's CPU), the pallas engine: the cavity 1500^2 and
#      the box 2400x1600 (k = 8), 1 and 1000 steps.
# In $OUT: rows2d.log, bench-rows2d.json, bench-rows2d-4096.json, bench-rows2d-1500.json.
# Rehearsal here: PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SIZES="[[64,300]]" BOX=64 CAV=[[64,300]]
#   AGREE_CAV=64 AGREE_BOX=64,300 AGREE_STEPS=1,3 OUT=/tmp/rows2d bash scripts/device_rows2d.sh
set -u
source scripts/device_env.sh
log=$OUT/rows2d.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
bench_step 200 rows2d lattice=d2q9 "cases=[periodic,cavity]" "variants=[auto]" "sizes=${SIZES:-[[3360,1440],[4098,4098]]}"
bench_step 60 rows2d-4096 lattice=d2q9 "cases=[periodic]" "variants=[auto]" "sizes=[${BOX:-4096}]"
bench_step 80 rows2d-1500 lattice=d2q9 "cases=[cavity]" "variants=[auto,xla]" "sizes=${CAV:-[[1500,1500]]}"
steps=${AGREE_STEPS:-1,1000}
IFS=, read -r bx by <<<"${AGREE_BOX:-2400,1600}"
step 80 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=cavity \
  lattice=d2q9 grid.nx="${AGREE_CAV:-1500}"
step 80 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=taylor_green \
  lattice=d2q9 grid.nx="$bx" grid.ny="$by"
ls -la "$OUT"
