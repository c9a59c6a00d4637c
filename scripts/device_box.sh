#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-06, sixth session): the xla engine's curved wall and momentum
# exchange on the box around the obstacle (lbm.boundaries.box), where the dense rules viewed every population as
# (Q, cells) (the cylinder 3360x1440: 297 MLUPS, 14.19x the populations planned, docs/tpu-v5e/2026-12-06/session6/):
#   run  command: "bash scripts/device_box.sh"  carry: [".whl"]  timeout_s: 420
#   1. `lbm bench lattice=d2q9 cases=[cylinder] variants=[auto,xla]` at 3360x1440, then at the default 420x180;
#   2. scripts/backends_agree.py, the chip against the same process's CPU after 1000 steps: the default cylinder and
#      DFG 2D-1 (schafer_turek), both with the box forms.
# In $OUT: box.log, bench-cylinder-3360.json, bench-cylinder-420.json.
# Rehearsal here (2 min): PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu CYL_NX=84 CYL_NY=36 AGREE_STEPS=1,5
#   OUT=/tmp/bx bash scripts/device_box.sh
set -u
source scripts/device_env.sh
log=$OUT/box.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
for grid in "${CYL_NX:-3360} ${CYL_NY:-1440}" "420 180"; do
  set -- $grid
  bench_step 100 cylinder-$1 lattice=d2q9 "cases=[cylinder]" "variants=[auto,xla]" cylinder_grid.nx=$1 cylinder_grid.ny=$2
done
steps=${AGREE_STEPS:-1,1000}
step 60 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=cylinder
step 60 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" -- case=schafer_turek
ls -la "$OUT"
