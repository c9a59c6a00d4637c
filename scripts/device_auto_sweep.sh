#!/usr/bin/env bash
# Issue 38 item 4 on the lent TPU, one device command (2026-12-07, twelfth session): engine=auto's pick against the
# other engines for every case with its defaults (as `lbm run` runs them: chunks of 100 steps) and at small sizes no
# bench row had compared (3D below 64^3, the duct, the channel, the 2D box below 1024^2):
#   run  command: "bash scripts/device_auto_sweep.sh"  carry: [".whl"]  timeout_s: 600
# In $OUT: auto-sweep.log, auto-sweep-defaults.json, auto-sweep-sizes.json. $PARTS (defaults,sizes) picks the parts.
# Rehearsal here: PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu SWEEP="--rounds 1 --min-time 0.05 --chunk 2"
#   PARTS=defaults OUT=/tmp/sweep bash scripts/device_auto_sweep.sh  (the defaults, pallas in interpret mode: slow)
set -u
source scripts/device_env.sh
log=$OUT/auto-sweep.log
parts=${PARTS:-defaults,sizes}
# shellcheck disable=SC2086  # SWEEP holds options
if [[ $parts == *defaults* ]]; then
step 290 python3 scripts/auto_sweep.py ${SWEEP:-} --out "$OUT/auto-sweep-defaults.json" \
  "case=taylor_green" "case=poiseuille" "case=duct lattice=d3q19 grid.nz=18" "case=cavity" "case=cylinder" \
  "case=schafer_turek" "case=cavity lattice=d3q19" "case=cavity lattice=d3q27" "case=taylor_green_3d"
fi
# shellcheck disable=SC2086
if [[ $parts == *sizes* ]]; then
step 250 python3 scripts/auto_sweep.py ${SWEEP:-} --out "$OUT/auto-sweep-sizes.json" \
  "case=taylor_green_3d lattice=d3q19 grid.nx=32 grid.ny=32 grid.nz=32" \
  "case=taylor_green_3d grid.nx=32 grid.ny=32 grid.nz=32" \
  "case=cavity lattice=d3q19 grid.nx=18" "case=cavity lattice=d3q19 grid.nx=34" \
  "case=duct lattice=d3q19 grid.nx=64 grid.ny=34 grid.nz=34" \
  "case=cylinder lattice=d3q19 grid.nx=128 grid.ny=60 grid.nz=32" \
  "case=taylor_green grid.nx=256 grid.ny=256" "case=taylor_green grid.nx=512 grid.ny=512" \
  "case=taylor_green grid.nx=2000 grid.ny=1000" "case=cavity grid.nx=514" "case=poiseuille grid.nx=256 grid.ny=130" \
  "case=taylor_green_3d grid.nx=48 grid.ny=48 grid.nz=48"
fi
ls -la "$OUT"
