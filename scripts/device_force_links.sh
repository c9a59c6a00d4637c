#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command, after the fourteenth session's two changes: the faces' force box holds
# its links per slot (lbm.engines.pallas.faces.ForceBox.links; deviceless v5e, the D3Q19 cylinder 128x60x32 plans
# 1.281x the populations, 1.352x before) and the 2D pair runs from 40 MiB whether or not there are walls
# (lbm.engines.pallas.aa.AA2D_MIN_BYTES):
#   run  command: "bash scripts/device_force_links.sh"  carry: [".whl"]  timeout_s: 580
#   1. `pytest -m device` (the compiled kernels against xla on the chip, the cylinders' forces among them);
#   2. `lbm bench lattice=d3q19 cases=[cylinder] variants=[auto,xla]` at 128x60x32 and variants=[auto] at 420x180x32
#      (the eleventh session: 3029 MLUPS);
#   3. `lbm bench lattice=d2q9` as a user runs it: the box at 1024x1200 and 2000x1200 (now the pair) and the cylinder
#      2400x1100 (the thirteenth session: 6738), variants=[auto,xla];
#   4. scripts/backends_agree.py --engine pallas: the D3Q19 cylinder 128x60x32 on the chip against the same process's
#      CPU after 1 and 1000 steps (f, rho, u and the force of every step of the last chunk).
# In $OUT: force-links.log, pytest-device.log, bench-*.json.
# Rehearsal here (2 min): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH JAX_PLATFORMS=cpu SMALL=1
#   OUT=/tmp/fl bash scripts/device_force_links.sh
set -u
source scripts/device_env.sh
log=$OUT/force-links.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
if [[ -n ${SMALL:-} ]]; then c3=(40 24 8); c3b=(48 24 8); box="[[64,48]]"; c2=(84 36); steps=1,3; else
  c3=(128 60 32); c3b=(420 180 32); box="[[1024,1200],[2000,1200]]"; c2=(2400 1100); steps=1,1000; fi
step 220 python3 -m pytest -q -n 0 -p no:cacheprovider -m device tests/engines/pallas/test_engines_pallas.py
bench_step 90 cyl3d-small lattice=d3q19 "cases=[cylinder]" "variants=[auto,xla]" grid.nz=8 \
  cylinder_grid.nx=${c3[0]} cylinder_grid.ny=${c3[1]} cylinder_grid.nz=${c3[2]}
bench_step 70 cyl3d-420 lattice=d3q19 "cases=[cylinder]" "variants=[auto]" grid.nz=8 \
  cylinder_grid.nx=${c3b[0]} cylinder_grid.ny=${c3b[1]} cylinder_grid.nz=${c3b[2]}
bench_step 90 d2q9 lattice=d2q9 "cases=[periodic,cylinder]" "variants=[auto,xla]" "sizes=$box" \
  cylinder_grid.nx=${c2[0]} cylinder_grid.ny=${c2[1]}
step 100 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "$steps" -- \
  case=cylinder lattice=d3q19 grid.nx=${c3[0]} grid.ny=${c3[1]} grid.nz=${c3[2]}
ls -la "$OUT"
