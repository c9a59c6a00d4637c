#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-06, fourth session: the half-way walls inside the 3D AA pair):
#   run  command: "bash scripts/device_walls3d.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d3q19 cases=[periodic,cavity] variants=[auto,pallas,xla]` at $WALLS3D_SIZES (128^3 and
#      256^3): what the cavity's walls cost per cell against the box on each engine, and auto's choice (auto_check);
#   2. every engine's fields after 1000 steps, float32 (scripts/fields_agree.py run): the default cylinder, the cavity
#      130^2, the D3Q19 cavity 64^3 and taylor_green_3d 64^3, pallas and xla, saved for the comparison with this
#      CPU's xla engine here (`python scripts/fields_agree.py compare <cpu>.npz <tpu>.npz`);
#   3. `python -m lbm run case=taylor_green_3d` at $TGV3D_SIZE (256^3, D3Q27 cumulant, its defaults), as a user runs it.
# In $OUT: walls3d.log, bench-walls3d.json, fields-tpu.npz, fields-tpu.json, tgv3d.log.
# Rehearsal here (2 min): PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu WALLS3D_SIZES=16 TGV3D_SIZE=8 FIELDS_STEPS=20
#   FIELDS_TG3D=8 TGV3D_STEPS=20 OUT=/tmp/w3 bash scripts/device_walls3d.sh   (a cavity below 16^3 diverges in bench's steps)
set -u
source scripts/device_env.sh
log=$OUT/walls3d.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
bench_step 280 walls3d lattice=d3q19 "cases=[periodic,cavity]" "variants=[auto,pallas,xla]" \
  "sizes=[${WALLS3D_SIZES:-128,256}]"
tg3=${FIELDS_TG3D:-64}
step 130 python3 scripts/fields_agree.py run "$OUT" --steps "${FIELDS_STEPS:-1000}" --engines pallas,xla \
  -- case=cylinder -- case=cavity -- case=cavity lattice=d3q19 grid.nx=$tg3 grid.ny=$tg3 grid.nz=$tg3 \
  -- case=taylor_green_3d grid.nx=$tg3 grid.ny=$tg3 grid.nz=$tg3
n=${TGV3D_SIZE:-256}
log=$OUT/tgv3d.log step 100 python3 -m lbm run case=taylor_green_3d grid.nx=$n grid.ny=$n grid.nz=$n \
  steps=${TGV3D_STEPS:-600} output.plots=false hydra.run.dir=outputs/device-walls3d/tgv3d
ls -la "$OUT"
