#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command: the D3Q19 cylinder on the 3D in-place pair with its faces
# (lbm.engines.pallas.faces: the obstacle as the kernels' solid bit, the inflow and outflow planes and the force on the
# xla side), where the xla engine ran (420x180x32: 92 MLUPS, pallas with the boundary plan 61):
#   run  command: "bash scripts/device_faces3d.sh"  carry: [".whl"]  timeout_s: 480
#   1. `lbm bench lattice=d3q19 cases=[periodic,cylinder] variants=[auto,pallas,xla]` at 256x128x128 (deviceless v5e:
#      the cylinder's traffic ratio 1.15, planned 1.08x; xla's cylinder at 420x180x32 17.2);
#   2. the same for the cylinder alone at 420x180x32 (bench's default 3D cylinder: z = 32 fills a quarter of the
#      TPU's 128 lanes; deviceless 6.99 against xla's 17.18);
#   3. scripts/backends_agree.py --engine pallas, the chip against the same process's CPU after 1 and 1000 steps: the
#      D3Q19 cylinder at 192x96x64 (f, rho, u and the force of every step of the last chunk).
# In $OUT: faces3d.log, bench-faces3d-256.json, bench-faces3d-420.json.
# Rehearsal here (1 min): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH JAX_PLATFORMS=cpu BOX=40,24,8 CYL=40,24,4
#   AGREE=40,24,4 AGREE_STEPS=1,3 OUT=/tmp/faces3d bash scripts/device_faces3d.sh
set -u
source scripts/device_env.sh
log=$OUT/faces3d.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
IFS=, read -r bx by bz <<<"${BOX:-256,128,128}"
bench_step 150 faces3d-256 lattice=d3q19 "cases=[periodic,cylinder]" "variants=[auto,pallas,xla]" \
  "sizes=[[$bx,$by,$bz]]" cylinder_grid.nx=$bx cylinder_grid.ny=$by cylinder_grid.nz=$bz
IFS=, read -r cx cy cz <<<"${CYL:-420,180,32}"
bench_step 120 faces3d-420 lattice=d3q19 "cases=[cylinder]" "variants=[auto,pallas,xla]" grid.nz=8 \
  cylinder_grid.nx=$cx cylinder_grid.ny=$cy cylinder_grid.nz=$cz
IFS=, read -r ax ay az <<<"${AGREE:-192,96,64}"
step 150 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "${AGREE_STEPS:-1,1000}" -- \
  case=cylinder lattice=d3q19 grid.nx=$ax grid.ny=$ay grid.nz=$az
ls -la "$OUT"
