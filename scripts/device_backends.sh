#!/usr/bin/env bash
# Issue 38, the default cylinder's fields on the TPU (2.0e-2 of u from the CPU's xla after 1000 steps, on both TPU
# engines, largest at the inlet): one device command,
#   run  command: "bash scripts/device_backends.sh"  carry: [".whl"]  timeout_s: 300
# runs scripts/backends_agree.py (the chip against the same process's CPU: one instrumented step per stage from the
# CPU's state, and the fused engine's populations after 1 and 1000 steps) on the cylinder (xla: stages and steps;
# pallas: steps), its characteristic outlet, the DFG benchmark (schafer_turek: parabolic inlet, pressure outlet) and,
# as a control that agreed, the D2Q9 cavity; $DUMP (stage@step,...) saves those stages' input and outputs.
# In $OUT: backends.log (and stage-<name>-<step>.npz).
set -u
source scripts/device_env.sh
log=$OUT/backends.log
steps=${STEPS:-1,1000}
step 90 python3 scripts/backends_agree.py --stage-steps "${STAGE_STEPS:-0,500}" --steps "$steps" \
  ${DUMP:+--dump "$DUMP" --dump-dir "$OUT"} -- case=cylinder
step 60 python3 scripts/backends_agree.py --stage-steps "" --steps "$steps" --engine pallas -- case=cylinder
step 60 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=cylinder case.outlet=characteristic
step 90 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=schafer_turek
step 40 python3 scripts/backends_agree.py --stage-steps 0 --steps "$steps" -- case=cavity
ls -la "$OUT"
