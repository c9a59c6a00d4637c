#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command: the 2D in-place pair on y padded to the next multiple of 1024 (any ny;
# lbm.engines.pallas.planes.padded_ny), where the xla engine ran before (4098^2: 1267 MLUPS, 13.7 % of the bandwidth):
#   run  command: "bash scripts/device_pad2d.sh"  carry: [".whl"]  timeout_s: 540
#   1. `lbm bench lattice=d2q9 cases=[periodic,cavity] variants=[auto,pallas,xla]` at 4098^2 (P = 5120, 1.25x the
#      populations; deviceless v5e: 90.0 B/cell/step, the pair's 72 B times 1.25);
#   2. `lbm bench lattice=d2q9 cases=[periodic,cavity,cylinder] variants=[auto,pallas,xla]` at 3360x1440 (P = 2048,
#      1.42x; the box and the cavity on the pair; the cylinder: auto keeps xla, pallas runs the pair with the plan);
#   3. scripts/backends_agree.py --engine pallas, the chip against the same process's CPU after 1 and 1000 steps (the
#      first an odd chunk): the box at 2000^2 (P = 2048; from 128 MiB of populations the pair runs; AGREE_CASES names
#      the cases, default taylor_green: its streaming crosses the wrap at ny, the cavity's walls do not).
# In $OUT: pad2d.log, bench-pad-4098.json (bench-pad-$PAD_N.json), bench-pad-3360x1440.json.
# Limits 150 + 200 + 150 = 500 s (on the chip, seventh session: 136 s, ~170 s, 127 s; the cavity's fields too with
# AGREE_CASES="taylor_green cavity" and a timeout of 600 s)
# Rehearsal here (1 min): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH JAX_PLATFORMS=cpu PAD_N=34 CYL_NX=84
#   CYL_NY=36 AGREE_N=40 AGREE_STEPS=1,3 OUT=/tmp/pad bash scripts/device_pad2d.sh
set -u
source scripts/device_env.sh
log=$OUT/pad2d.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
n=${PAD_N:-4098}
bench_step 150 pad-$n lattice=d2q9 "cases=[periodic,cavity]" "variants=[auto,pallas,xla]" "sizes=[$n]"
cx=${CYL_NX:-3360}
cy=${CYL_NY:-1440}
bench_step 200 pad-${cx}x$cy lattice=d2q9 "cases=[periodic,cavity,cylinder]" "variants=[auto,pallas,xla]" \
  "sizes=[[$cx,$cy]]" cylinder_grid.nx=$cx cylinder_grid.ny=$cy
a=${AGREE_N:-2000}
steps=${AGREE_STEPS:-1,1000}
for case in ${AGREE_CASES:-taylor_green}; do
  step 150 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "$steps" -- case=$case \
    lattice=d2q9 grid.nx=$a grid.ny=$a
done
ls -la "$OUT"
