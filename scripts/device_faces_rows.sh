#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-07, thirteenth session): the cylinder's face rows on the 2D
# pair's planes of k rows of x (lbm.engines.pallas.faces; before, the faces kept one row of x per plane: deviceless
# v5e planned the cylinder 3360x1440 at 1.606x the populations, now 1.210x; 2400x1100 2.10x -> 1.198x):
#   run  command: "bash scripts/device_faces_rows.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d2q9 cases=[periodic,cylinder] variants=[auto]` at 3360x1440 (k = 2; the box beside it for the
#      time per cell; before: the cylinder 5037 MLUPS, the box 8215, xla 1688);
#   2. scripts/backends_agree.py (the chip against the same process's CPU), the pallas engine on a cylinder of
#      1200 x 300 (k = 8, rows of 384 cells; the force's box across two of the planes' rows) and 1202 x 500 (k = 2,
#      rows of 512), the pair forced below its 40 MiB threshold: 1, 100 and 1000 steps;
#   3. the same bench at 2400x1100 (k = 8).
# In $OUT: faces-rows.log, bench-faces-rows-*.json.
# Rehearsal here: PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SIZES="200 60" SIZES2="160 60"
#   AGREE_GRIDS="64 20" AGREE_STEPS=1,3 OUT=/tmp/faces-rows bash scripts/device_faces_rows.sh
set -u
source scripts/device_env.sh
log=$OUT/faces-rows.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
bench() {  # bench "NX NY": the box and the cylinder on NX x NY, auto's engine
  local cx cy
  read -r cx cy <<<"$1"
  bench_step 120 "faces-rows-${cx}x$cy" lattice=d2q9 "cases=[periodic,cylinder]" "variants=[auto]" "sizes=[[$cx,$cy]]" \
    cylinder_grid.nx="$cx" cylinder_grid.ny="$cy"
}
bench "${SIZES:-3360 1440}"
IFS=, read -r -a grids <<<"${AGREE_GRIDS:-1200 300,1202 500}"
for grid in "${grids[@]}"; do
  read -r gx gy <<<"$grid"
  step 80 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "${AGREE_STEPS:-1,100,1000}" \
    --pair-2d-at-every-size -- case=cylinder lattice=d2q9 grid.nx="$gx" grid.ny="$gy"
done
bench "${SIZES2:-2400 1100}"
ls -la "$OUT"
