#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-06, sixth session): the wall-bounded cases at the issue's
# HBM-bound sizes, which no earlier session benched, each beside the same-size periodic box and with auto's choice:
#   run  command: "bash scripts/device_wall_sizes.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d2q9 cases=[periodic,cavity,cylinder] variants=[auto,pallas,xla]` at 4098^2 and the cylinder
#      at 3360x1440 (8x the default's cells per side): neither width is a multiple of 1024, so no 2D pair;
#   2. `lbm bench lattice=d3q19 cases=[periodic,cavity] variants=[auto,pallas,xla]` at 258^3 (the walls in the pair,
#      one row per block: 1.29x the box by the windows' model).
#   $PARTS (d2q9,d3q19) picks the parts, $VARIANTS3D (auto,pallas,xla) the 3D engines: after the walled kernels took two
#   rows per block at 258^3 (lbm.engines.pallas.walls.walls_rows): PARTS=d3q19 VARIANTS3D=pallas, about 3 minutes.
# In $OUT: wall_sizes.log, bench-d2q9-walls.json, bench-d3q19-258.json.
# Rehearsal here (3 min): PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu WALL2D=34 CYL_NX=84 CYL_NY=36 WALL3D=18
#   OUT=/tmp/ws bash scripts/device_wall_sizes.sh
set -u
source scripts/device_env.sh
log=$OUT/wall_sizes.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"

parts=${PARTS:-d2q9,d3q19}
[[ $parts == *d2q9* ]] && bench_step 330 d2q9-walls lattice=d2q9 "cases=[periodic,cavity,cylinder]" \
  "variants=[auto,pallas,xla]" "sizes=[${WALL2D:-4098}]" cylinder_grid.nx=${CYL_NX:-3360} cylinder_grid.ny=${CYL_NY:-1440}
[[ $parts == *d3q19* ]] && bench_step 230 d3q19-258 lattice=d3q19 "cases=[periodic,cavity]" \
  "variants=[${VARIANTS3D:-auto,pallas,xla}]" "sizes=[${WALL3D:-258}]"
ls -la "$OUT"
