#!/usr/bin/env bash
# Issue 38 on the lent TPU (2026-12-06), one device command:
#   run  command: "bash scripts/device_walls.sh"  carry: [".whl"]  timeout_s: 330
#   1. the default run as a user starts it (`python -m lbm run`: preflight, the compile guard, the memory check on
#      a TPU), and the cavity 130^2 with its automatic 100-step chunks against 1000-step chunks (the chunk's
#      per-dispatch cost on the chip), in one process;
#   2. the wall-bounded cases against the periodic box of the same size on the pallas engine (scripts/wall_cases.py:
#      the 3D cavity, cylinder and channel run the in-place AA pair with their boundary cells from the plan):
#      D2Q9 4096^2 and D3Q19 128^3, and the same D2Q9 cases on the xla engine;
#   3. (if scripts/device_aa2d.sh exists) its D2Q9 4096^2 bench.
# In $OUT: walls.log, walls-*.json, chunks.json.
set -u
source scripts/device_env.sh
log=$OUT/walls.log
step() {  # step LIMIT_S COMMAND...: one step, its output in the log
  local limit=$1; shift
  echo "=== $* (limit $limit s)" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout -k 5 "$limit" "$@" 2>&1 | grep -v "UserWarning\|warnings.warn\|^  warnings\|^bench " | tail -25 | tee -a "$log"
  echo "=== exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s" | tee -a "$log"
}
step 60 python3 -m lbm run hydra.run.dir=outputs/device-walls/default
step 60 python3 - <<'PY'
import json, os, lbm
rows = []
for every in (0, 1000):
    r = lbm.run(["case=cavity", f"output.every={every}", "output.plots=false"], run_dir=f"outputs/device-walls/cavity-{every}")
    m = r.metrics
    rows.append({"output.every": every, "chunk_steps": m.get("chunk_steps"), "steps": m["steps"], "mlups": m["mlups"],
                 "wall_time_s": m["wall_time_s"], "engine": m["engine"]})
    print(rows[-1])
json.dump(rows, open(os.path.join(os.environ["OUT"], "chunks.json"), "w"), indent=1)
PY
step 130 python3 scripts/wall_cases.py --engine pallas --d2q9 4096x4096 --d3q19 128x128x128 --rounds 3 \
  --json "$OUT/walls-pallas.json"
step 60 python3 scripts/wall_cases.py --engine xla --d2q9 4096x4096 --d3q19 '' --rounds 3 --json "$OUT/walls-xla.json"
[[ -f scripts/device_aa2d.sh ]] && step 90 bash scripts/device_aa2d.sh
ls -la "$OUT"
