#!/usr/bin/env bash
# Issue 38 on the lent TPU, after scripts/device_walls3d.sh (whose bench ran the D3Q19 box and cavity at 128^3 and the
# cavity's auto at 256^3 before its step limit, and whose other steps ran out of time): one device command,
#   run  command: "bash scripts/device_kernel_walls.sh"  carry: [".whl"]  timeout_s: 420
#   1. the device tests of the walled cases and of the 3D grids that aborted XLA's TPU compiler (the compiled kernels,
#      walls inside the in-place pair included, against xla on the chip within 1e-5 over 20 steps);
#   2. the pallas engine's fields after 1000 steps (scripts/fields_agree.py run, saved after each run), for the
#      comparison with this CPU's xla engine: the D3Q19 cavity 64^3 (its walls in the kernels), taylor_green_3d 64^3,
#      and the default cylinder and cavity with pallas and xla (the xla engine's 3D compiles on the chip take a minute);
#   3. `python -m lbm run case=taylor_green_3d` at 256^3 (D3Q27 cumulant, its defaults), as a user runs it.
# In $OUT: kernel_walls.log, pytest-device.xml, fields-tpu.npz, fields-tpu.json, tgv3d.log.
set -u
source scripts/device_env.sh
log=$OUT/kernel_walls.log
STEP_QUIET="^lbm: step \\|LbmWarning\\|nu, tau"
XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=3" step 130 python3 -m pytest -v -n 0 \
  -p no:cacheprovider -m device -k "cavity or grids_that_aborted" tests/engines/pallas/test_engines_pallas.py \
  tests/engines/pallas/test_device_sizes.py --junitxml="$OUT/pytest-device.xml"
step 90 python3 scripts/fields_agree.py run "$OUT" --steps "${FIELDS_STEPS:-1000}" --engines pallas \
  -- case=cavity lattice=d3q19 grid.nx=64 grid.ny=64 grid.nz=64 -- case=taylor_green_3d grid.nx=64 grid.ny=64 grid.nz=64
mv "$OUT/fields-tpu.npz" "$OUT/fields-tpu-3d.npz" 2>/dev/null; mv "$OUT/fields-tpu.json" "$OUT/fields-tpu-3d.json" 2>/dev/null
step 60 python3 scripts/fields_agree.py run "$OUT" --steps "${FIELDS_STEPS:-1000}" --engines pallas,xla \
  -- case=cylinder -- case=cavity
n=${TGV3D_SIZE:-256}
log=$OUT/tgv3d.log step 150 python3 -m lbm run case=taylor_green_3d grid.nx=$n grid.ny=$n grid.nz=$n \
  steps=${TGV3D_STEPS:-600} output.plots=false hydra.run.dir=outputs/device-kernel-walls/tgv3d
ls -la "$OUT"
