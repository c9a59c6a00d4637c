#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-07, sixteenth session): engine=auto picks xla for a half-way
# or interpolated obstacle with an inflow (the pair's faces kernels take only the full-way one), while the pair with
# its boundary plan plans 1.34x the populations' bytes against xla's 5.5x at 2400x1100 (deviceless v5e). Is xla the
# faster there? auto against pallas and xla (scripts/auto_sweep.py: chunks of 100 steps, as `lbm run` advances) for
# the half-way and interpolated cylinder from the default 420x180 to 3360x1440, Schafer-Turek 2D-2 and a finer 2D-1,
# and the D3Q19 half-way cylinder:
#   run  command: "bash scripts/device_auto_obstacles.sh"  carry: [".whl"]  timeout_s: 560
# In $OUT: auto-obstacles.log, auto-obstacles-2d.json, auto-obstacles-3d.json. $PARTS (2d,3d) picks the parts.
# Rehearsal here (pallas in interpret mode: tiny grids): PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SMALL=1
#   SWEEP="--rounds 1 --min-time 0.05 --chunk 2" OUT=/tmp/obstacles bash scripts/device_auto_obstacles.sh
set -u
source scripts/device_env.sh
log=$OUT/auto-obstacles.log
parts=${PARTS:-2d,3d}
if [[ -n ${SMALL:-} ]]; then
  sizes2d=("84 36"); st="case.cells_per_diameter=6"; st_fine="case.cells_per_diameter=8"; box3d="32 16 8"
else
  sizes2d=("420 180" "1680 720" "3360 1440"); st=""; st_fine="case.cells_per_diameter=120"; box3d="256 120 64"
fi
if [[ $parts == *2d* ]]; then
  configs=()
  for size in "${sizes2d[@]}"; do
    read -r nx ny <<<"$size"
    for rule in halfway interpolated; do configs+=("case=cylinder case.bounce_back=$rule grid.nx=$nx grid.ny=$ny"); done
  done
  configs+=("case=schafer_turek case.variant=2D-2 $st" "case=schafer_turek $st_fine")
  # shellcheck disable=SC2086  # SWEEP holds options
  step 330 python3 scripts/auto_sweep.py ${SWEEP:-} --out "$OUT/auto-obstacles-2d.json" "${configs[@]}"
fi
if [[ $parts == *3d* ]]; then
  read -r nx ny nz <<<"$box3d"
  # shellcheck disable=SC2086
  step 200 python3 scripts/auto_sweep.py ${SWEEP:-} --out "$OUT/auto-obstacles-3d.json" \
    "case=cylinder lattice=d3q19 case.bounce_back=halfway grid.nx=$nx grid.ny=$ny grid.nz=$nz"
fi
ls -la "$OUT"
