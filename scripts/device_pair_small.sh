#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command: the 2D in-place pair below the 128 MiB of populations from which it
# runs (lbm.engines.pallas.aa.AA2D_MIN_BYTES), on the wall-bounded cases, where the push rows kernel would gather and
# scatter the boundary cells and engine=auto therefore runs xla (deviceless v5e, the cavity 1500^2 on xla: 458.6 B per
# cell and step, 6.37x the populations' traffic, planned 2.62x the populations):
#   run  command: "bash scripts/device_pair_small.sh"  carry: [".whl"]  timeout_s: 560
# `lbm bench lattice=d2q9 variants=[pallas,xla]` with AA2D_MIN_BYTES set to 0 in the process (scripts/pair_anywhere.py),
# so that the pallas rows run the pair at every size:
#   1. the periodic box and the cavity at 1024^2 (P = ny: the pair against the push kernel for the box) and 1500^2
#      (P = 2048, 1.37x), 2. the cylinder at 1680x720 (4x the default's cells per side; P = 1024, 1.42x) and 1050x450.
# (Second call: BOX_SIZES="[[600,600],[1024,520],[2000,1200],[700,700]]" CYL_SIZES="1200 600 2400 1100".)
# In $OUT: pair-small.log, bench-pair-small-*.json.
# Rehearsal here (1 min; on a CPU the pallas engine runs its flat kernel, not the pair): PATH=$HOME/.cache/lbm/venv-accel-jax0102/bin:$PATH
#   JAX_PLATFORMS=cpu SMALL=1 OUT=/tmp/pair bash scripts/device_pair_small.sh
set -u
source scripts/device_env.sh
log=$OUT/pair-small${LOG_TAG:-}.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
# BOX_SIZES (bench's sizes list for the box and the cavity) and CYL_SIZES ("NX NY" pairs) choose other grids.
if [[ -n ${SMALL:-} ]]; then box="[[64,48]]"; cyls=("84 36" "60 30"); else
  box=${BOX_SIZES:-"[[1024,1024],[1500,1500]]"}; read -r -a flat <<<"${CYL_SIZES:-1680 720 1050 450}"
  cyls=(); for ((i = 0; i < ${#flat[@]}; i += 2)); do cyls+=("${flat[i]} ${flat[i+1]}"); done; fi
LBM_MAIN="python3 scripts/pair_anywhere.py"  # bench_step (device_env.sh) through it
bench_step 200 pair-small-box lattice=d2q9 "cases=[periodic,cavity]" "variants=[pallas,xla]" "sizes=$box"
for size in "${cyls[@]}"; do
  read -r cx cy <<<"$size"
  bench_step 150 pair-small-cyl-${cx}x$cy lattice=d2q9 "cases=[cylinder]" "variants=[pallas,xla]" \
    cylinder_grid.nx=$cx cylinder_grid.ny=$cy
done
ls -la "$OUT"
