#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-07, eleventh session): the 3D pair on flat planes
# (lbm.engines.pallas.planes.flat_plane: a (y, z) plane viewed as rows of 128 cells where the (8, 128) tiles of (ny, nz)
# would pad more; deviceless v5e: 64^3 planned 2.00x -> 1.00x, 258^3 1.52x -> 1.015x, the cylinder 420x180x32
# 5.31x -> 1.20x):
#   run  command: "bash scripts/device_flat3d.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d3q19 cases=[periodic,cavity] variants=[auto,xla]` at 64^3, 160^3 and 258^3 (flat), and the
#      periodic box at 256^3 (whole tiles, the reference for time per cell);
#   2. `lbm bench lattice=d3q27 collision=cumulant cases=[periodic] variants=[auto,xla]` at 96^3 (flat);
#   3. `lbm bench lattice=d3q19 cases=[cylinder] variants=[auto,xla]` at 420x180x32 (the faces on flat planes);
#   4. scripts/backends_agree.py (the chip against the same process's CPU): the pallas engine on the D3Q19 cavity
#      66^3 (kernel walls on flat planes padded 1.175x) and the cylinder 128x60x32 (faces), 1 and 1000 steps.
#   5. (PARTS=more) the D3Q19 cavity 258^3 and the D3Q27 BGK box 96^3 (auto), which 1. and 2. left out.
# $PARTS (bench,agree,more; default bench,agree) picks the parts.
# In $OUT: flat3d.log, bench-d3q19-flat.json, bench-d3q19-256.json, bench-d3q27-flat.json, bench-cylinder3d.json,
# bench-more-*.json.
# Rehearsal here: PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SIZES3D=12 BOX3D=8 SIZE27=8 CYL3D=24,12,8
#   AGREE_STEPS=1,3 AGREE_N=12 OUT=/tmp/flat3d bash scripts/device_flat3d.sh
set -u
source scripts/device_env.sh
log=$OUT/flat3d.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
IFS=, read -r cyl_nx cyl_ny cyl_nz <<<"${CYL3D:-420,180,32}"
parts=${PARTS:-bench,agree}
if [[ $parts == *bench* ]]; then
bench_step 240 d3q19-flat lattice=d3q19 "cases=[periodic,cavity]" "variants=[auto,xla]" "sizes=[${SIZES3D:-64,160,258}]"
bench_step 60 d3q19-256 lattice=d3q19 "cases=[periodic]" "variants=[auto]" "sizes=[${BOX3D:-256}]"
bench_step 80 d3q27-flat lattice=d3q27 collision=cumulant "cases=[periodic]" "variants=[auto,xla]" \
  "sizes=[${SIZE27:-96}]"
bench_step 60 cylinder3d lattice=d3q19 "cases=[cylinder]" "variants=[auto,xla]" cylinder_grid.nx="$cyl_nx" \
  cylinder_grid.ny="$cyl_ny" cylinder_grid.nz="$cyl_nz"
fi
if [[ $parts == *agree* ]]; then
steps=${AGREE_STEPS:-1,1000}
n=${AGREE_N:-66}
step 50 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=cavity \
  lattice=d3q19 grid.nx="$n" grid.ny="$n" grid.nz="$n"
step 50 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=cylinder \
  lattice=d3q19 grid.nx=128 grid.ny=60 grid.nz=32
fi
if [[ $parts == *more* ]]; then
  bench_step 100 more-cavity lattice=d3q19 "cases=[cavity]" "variants=[auto]" "sizes=[${WALL3D:-258}]"
  bench_step 60 more-d3q27 lattice=d3q27 "cases=[periodic]" "variants=[auto]" "sizes=[${SIZE27:-96}]"
fi
ls -la "$OUT"
