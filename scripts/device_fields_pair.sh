#!/usr/bin/env bash
# Issue 38 on the lent TPU, one device command, after the fifth session (2026-12-06: the inlet's static slices, the
# characteristic outlet's density as a deviation, and the pallas 2D pair holding its view of the populations between
# chunks; none of them benched on the chip yet):
#   run  command: "bash scripts/device_fields_pair.sh"  carry: [".whl"]  timeout_s: 600
#   1. `lbm bench lattice=d2q9 cases=[periodic,cavity] variants=[auto,pallas,xla]` at 4096^2: the pair with its state
#      in the view (planned 1.00x and 1.17x the populations deviceless) and the cavity's wall bits read from HBM;
#   2. `lbm bench lattice=d2q9 cases=[cylinder] variants=[auto,pallas,xla]` at the default 420x180: the inlet's new
#      form (one more kernel per step deviceless; xla 2161 MLUPS before, 1197 with the outflow in slices, taken back);
#   3. scripts/backends_agree.py (the chip against the same process's CPU, 1000 steps): the default cylinder on xla and
#      pallas, DFG 2D-1 (the characteristic outlet's new form), the cylinder with the characteristic outlet.
# In $OUT: fields_pair.log, bench-d2q9-4096.json, bench-cylinder.json.
# Rehearsal here (2 min): PATH=<a venv with jax>/bin:$PATH JAX_PLATFORMS=cpu PAIR_SIZE=1024 AGREE_STEPS=1,5
#   OUT=/tmp/fp bash scripts/device_fields_pair.sh
set -u
source scripts/device_env.sh
log=$OUT/fields_pair.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
bench_step 200 d2q9-4096 lattice=d2q9 "cases=[periodic,cavity]" "variants=[auto,pallas,xla]" "sizes=[${PAIR_SIZE:-4096}]"
bench_step 100 cylinder lattice=d2q9 "cases=[cylinder]" "variants=[auto,pallas,xla]"
steps=${AGREE_STEPS:-1,1000}
step 60 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=cylinder
step 60 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=cylinder
step 60 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=schafer_turek
step 50 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" -- case=cylinder case.outlet=characteristic
ls -la "$OUT"
