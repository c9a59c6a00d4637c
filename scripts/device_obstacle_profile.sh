#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-07, sixteenth session), after device_auto_obstacles.sh found
# xla 4-12x faster than pallas for a half-way obstacle with an inflow:
#   run  command: "bash scripts/device_obstacle_profile.sh"  carry: [".whl"]  timeout_s: 560
#   1. where pallas's time goes there: `lbm run case=cylinder case.bounce_back=halfway engine=pallas` at 1680x720,
#      profiled (fused mode: the device clock per stage and kernel), and the same run on xla beside it;
#   2. whether the D3Q19 cylinder 64x30x16's 1.1e-5 in f after 101 steps (the fifteenth session, pallas) is the chip's
#      float32 or the engine's: scripts/backends_agree.py, the chip against the same process's CPU, pallas and xla.
# In $OUT: obstacle-profile.log, breakdown-ENGINE.csv, kernels-ENGINE.csv.
# Rehearsal here: PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SMALL=1 OUT=/tmp/op bash scripts/device_obstacle_profile.sh
set -u
source scripts/device_env.sh
log=$OUT/obstacle-profile.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
if [[ -n ${SMALL:-} ]]; then size=(grid.nx=84 grid.ny=36); steps=20; psteps=(profile.steps=4)
else size=(grid.nx=1680 grid.ny=720); steps=300; psteps=(profile.steps=100); fi
for engine in pallas xla; do
  dir=outputs/obstacle-profile/$engine
  step 150 python3 -m lbm run case=cylinder case.bounce_back=halfway engine=$engine "${size[@]}" steps=$steps \
    output.every=0 profile.enabled=true "${psteps[@]}" "hydra.run.dir=$dir"
  cp "$dir/profile/breakdown.csv" "$OUT/breakdown-$engine.csv" 2>/dev/null
  cp "$dir/profile/kernels.csv" "$OUT/kernels-$engine.csv" 2>/dev/null
done
if [[ -n ${SMALL:-} ]]; then cyl=(grid.nx=24 grid.ny=10 grid.nz=12); else cyl=(grid.nx=64 grid.ny=30 grid.nz=16); fi
for engine in xla pallas; do
  step 100 python3 scripts/backends_agree.py --engine $engine --stage-steps "" --steps 1,11,101 -- \
    case=cylinder lattice=d3q19 "${cyl[@]}"
done
ls -la "$OUT"
