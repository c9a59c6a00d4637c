#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command: the cylinder on the 2D in-place pair (lbm.engines.pallas.faces: the
# obstacle as the kernels' solid bit, the inflow and outflow rows and the force on the xla side, no gather of cell
# lists), where the xla engine ran before (3360x1440: 1690 MLUPS, 3.35x the time per cell of the same-size box):
#   run  command: "bash scripts/device_faces.sh"  carry: [".whl"]  timeout_s: 560
#   1. `lbm bench lattice=d2q9 cases=[periodic,cylinder] variants=[auto,pallas,xla]` at 3360x1440 (P = 2048, 1.42x
#      the populations; deviceless v5e: the cylinder 109.1 B/cell/step, the box 102.4 B, xla's cylinder 464.5 B);
#   2. the same at 6720x2880 (P = 3072, 1.07x: 19.4 M cells, 0.70 GB of populations; xla plans about 10x them);
#   3. scripts/backends_agree.py --engine pallas, the chip against the same process's CPU after 1 and 1000 steps (the
#      first an odd chunk): the cylinder at 2000x1900 (from 128 MiB of populations the pair runs; at 3360x1440 the
#      CPU's 1000 steps ran past 150 s), f, rho, u and the force of every step of the last chunk.
# In $OUT: faces.log, bench-faces-3360x1440.json, bench-faces-6720x2880.json. On the chip (eighth session): 83 s,
# 131 s, and the comparison at 2000x1900 138 s (docs/tpu-v5e/2026-12-06/session8/faces/).
# Rehearsal here (1 min): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH JAX_PLATFORMS=cpu CYL_NX=84 CYL_NY=36
#   BIG_NX=168 BIG_NY=72 AGREE_NX=84 AGREE_NY=36 AGREE_STEPS=1,3 OUT=/tmp/faces bash scripts/device_faces.sh
set -u
source scripts/device_env.sh
log=$OUT/faces.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
for size in "${CYL_NX:-3360} ${CYL_NY:-1440} 130" "${BIG_NX:-6720} ${BIG_NY:-2880} 200"; do
  read -r cx cy limit <<<"$size"
  bench_step "$limit" faces-${cx}x$cy lattice=d2q9 "cases=[periodic,cylinder]" "variants=[auto,pallas,xla]" \
    "sizes=[[$cx,$cy]]" cylinder_grid.nx=$cx cylinder_grid.ny=$cy
done
step 200 python3 scripts/backends_agree.py --engine pallas --stage-steps "" --steps "${AGREE_STEPS:-1,1000}" -- \
  case=cylinder grid.nx=${AGREE_NX:-2000} grid.ny=${AGREE_NY:-1900}
ls -la "$OUT"
