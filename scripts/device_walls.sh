#!/usr/bin/env bash
# Issue 38 on the lent TPU (2026-12-06), one device command, the steps in order of need (a step cut by the session's
# device time leaves the earlier ones' results):
#   run  command: "bash scripts/device_walls.sh"  carry: [".whl"]  timeout_s: 330
#   1. the device tests of the 2D in-place AA pair (the compiled kernels against xla, ny = 1024);
#   2. `lbm bench` D2Q9 periodic 4096^2, pallas (the 2D AA pair) and xla, the bandwidth probe in the same run;
#   3. the default run as a user starts it (lbm.run: preflight, the memory check and the compile guard on a TPU), and
#      the cavity 130^2 with its automatic 100-step chunks against 1000-step chunks (the per-chunk cost on the chip),
#      in one process;
#   4. the wall-bounded cases against the periodic box of the same size on the pallas engine (scripts/wall_cases.py:
#      in 3D the cavity, cylinder and channel run the in-place AA pair with their boundary cells from the plan), D3Q19
#      128^3;
#   5. the 2D pair against the push kernel per block height (scripts/tpu_aa_sweep.py --only d2q9, 4096^2).
# In $OUT: walls.log, bench-d2q9-4096.json, chunks.json, walls-pallas.json, aa2d.json.
set -u
source scripts/device_env.sh
log=$OUT/walls.log
STEP_QUIET="^bench "
step 60 python3 -m pytest -q -n 0 -p no:cacheprovider -m device tests/engines/pallas/test_engines_pallas.py -k "equals_the_reference and aa2d"
step 90 python3 -m lbm bench lattice=d2q9 "variants=[pallas,xla]" "cases=[periodic]" grid.nx=4096 grid.ny=4096 \
  repeats=3 min_time_s=0.5 kernel_profile=0 bandwidth.repeats=5 hydra.run.dir=outputs/device-walls/bench-d2q9
cp outputs/device-walls/bench-d2q9/bench.json "$OUT/bench-d2q9-4096.json" 2>/dev/null
step 60 python3 - <<'PY'
import json, os, lbm
rows = []
for overrides in ([], ["case=cavity", "output.every=0"], ["case=cavity", "output.every=1000"]):
    name = "-".join(o.split("=")[1] for o in overrides) or "default"
    m = lbm.run(overrides, run_dir=f"outputs/device-walls/{name}").metrics
    rows.append({"overrides": overrides, "chunk_steps": m.get("chunk_steps"), "steps": m["steps"], "mlups": m["mlups"],
                 "wall_time_s": m["wall_time_s"], "engine": m["engine"], "status": m["status"]})
    print(rows[-1])
json.dump(rows, open(os.path.join(os.environ["OUT"], "chunks.json"), "w"), indent=1)
PY
step 90 python3 scripts/wall_cases.py --engine pallas --d2q9 '' --d3q19 128x128x128 --rounds 3 \
  --json "$OUT/walls-pallas.json"
step 80 python3 scripts/tpu_aa_sweep.py --only d2q9 --out "$OUT/aa2d.json"
ls -la "$OUT"
