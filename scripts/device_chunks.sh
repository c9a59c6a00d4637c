#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command (2026-12-06, after scripts/device_walls.sh):
#   run  command: "bash scripts/device_chunks.sh"  carry: [".whl"]  timeout_s: 420
#   1. where a user's run spends its time between chunks (scripts/chunk_costs.py: the run loop under cProfile): the
#      default cylinder and the cavity with the automatic chunks (1000 steps on an accelerator at these sizes) and
#      with 100-step chunks (the automatic chunk before, and on a CPU);
#   2. the wall-bounded cases against the periodic box of the same size (scripts/wall_cases.py), xla then pallas,
#      D2Q9 $WALLS_2D and D3Q19 $WALLS_3D, a fixed number of steps per dispatch so that a slow case cannot eat the call.
#   3. `lbm bench` of the default cylinder with auto, pallas and xla (auto's choice against the others, same run).
# In $OUT: chunks.log, chunk_costs.json, walls-xla.json, walls-pallas.json, bench-auto-cylinder.json.
# Rehearsal here: JAX_PLATFORMS=cpu WALLS_2D=64x64 WALLS_3D=16x16x16 CHUNK_STEPS=2000 OUT=/tmp/dc bash scripts/device_chunks.sh
set -u
source scripts/device_env.sh
log=$OUT/chunks.log
STEP_QUIET="^lbm: \\|LbmWarning\\|nu, tau"
steps=${CHUNK_STEPS:+steps=$CHUNK_STEPS}
only=${DEVICE_CHUNKS_ONLY:-}  # "costs": step 1 alone
step 100 python3 scripts/chunk_costs.py --top 8 --json "$OUT/chunk_costs.json" -- $steps -- case=cavity $steps \
  -- case=cavity output.every=100 $steps -- output.every=100 $steps
[[ $only == costs ]] && exit 0
step 110 python3 scripts/wall_cases.py --engine xla --d2q9 "${WALLS_2D:-2048x2048}" --d3q19 "${WALLS_3D:-64x64x64}" \
  --steps 200 --rounds 3 --json "$OUT/walls-xla.json"
step 150 python3 scripts/wall_cases.py --engine pallas --d2q9 "${WALLS_2D:-2048x2048}" --d3q19 "${WALLS_3D:-64x64x64}" \
  --steps 200 --rounds 3 --json "$OUT/walls-pallas.json"
step 90 python3 -m lbm bench lattice=d2q9 "variants=[auto,pallas,xla]" "cases=[cylinder]" repeats=3 min_time_s=0.3 \
  kernel_profile=0 bandwidth.repeats=3 hydra.run.dir=outputs/device-chunks/bench-auto
cp outputs/device-chunks/bench-auto/bench.json "$OUT/bench-auto-cylinder.json" 2>/dev/null
ls -la "$OUT"
