#!/usr/bin/env bash
# Collision stability study (docs/physics.md, "Collision stability"): the lid-driven cavity at
# flow.u_lattice=0.1 with each collision operator at the same tau, engine=xla, float32.
#   Re 1000 on 128^2 fluid cells (130^2 grid with the walls): steps=auto (stops when steady, at most 100 L/U)
#   Re 3200 on 128^2 and Re 5000 on 256^2 (258^2 grid): 20 lid passages L/U
# Usage: scripts/stability_study.sh [OUTDIR]   (default /tmp/stability_study); about 30 min on 2 cores.
# Prints a markdown table: collision, Re, grid, steps run, diverged or not, max |u| / U, Ghia errors.
set -u
OUT=${1:-/tmp/stability_study}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
mkdir -p "$OUT"

run() {  # run NAME OVERRIDES...
    local name=$1; shift
    [ -f "$OUT/$name/metrics.json" ] && return 0
    (cd "$ROOT" && PYTHONPATH=$ROOT "$PY" -m lbm run case=cavity flow.u_lattice=0.1 engine=xla output.plots=false \
        output.progress=log "$@" hydra.run.dir="$OUT/$name") > "$OUT/$name.log" 2>&1
    echo "$name: exit $? ($(tail -n 1 "$OUT/$name.log" | cut -c1-160))"
}

RE1000="grid.nx=130 grid.ny=130 flow.reynolds=1000 steps=auto"
RE3200="grid.nx=130 grid.ny=130 flow.reynolds=3200 steps=25600"
RE5000="grid.nx=258 grid.ny=258 flow.reynolds=5000 steps=51200"
for c in bgk trt mrt regularized; do
    # shellcheck disable=SC2086
    run "re1000_$c" $RE1000 collision=$c
done
for c in bgk trt mrt regularized; do
    # shellcheck disable=SC2086
    run "re3200_$c" $RE3200 collision=$c
done
for c in bgk trt mrt regularized; do
    # shellcheck disable=SC2086
    run "re5000_$c" $RE5000 collision=$c
done
# Variants: the plain Latt-Chopard regularization (bulk rate = 1/tau) and MRT with its odd rates from
# the TRT magic parameter 3/16 (Lallemand & Luo's wall-exact choice).
# shellcheck disable=SC2086
run re5000_regularized_plain $RE5000 collision=regularized collision.bulk=null
# shellcheck disable=SC2086
run re5000_mrt_magic $RE5000 collision=mrt collision.odd=null

"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
import numpy as np
out = Path(sys.argv[1])
print("| run | collision | rates | Re | grid | tau | steps | diverged | max abs(u)/U | Ghia u err | Ghia v err |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in out.iterdir() if (p / "metrics.json").exists()):
    m = json.loads((d / "metrics.json").read_text())
    cfg = (d / ".hydra" / "config.yaml").read_text() if (d / ".hydra" / "config.yaml").exists() else ""
    coll = m["collision"]
    rates = ""
    if "collision:" in cfg:
        import yaml
        section = yaml.safe_load(cfg)["collision"]
        rates = ", ".join(f"{k}={v}" for k, v in section.items() if k != "name")
    diverged = m["status"] == "diverged"
    steps = m.get("diverged_at_step") if diverged else m.get("step_reached")
    umax = "-"
    if not diverged:
        z = np.load(d / "fields.npz")
        s = np.sqrt((z["u"] ** 2).sum(0))
        s[z["solid"]] = 0
        umax = f"{s.max() / m['u_lattice']:.2f}"
    ghia = lambda k: "-" if diverged or m.get(k) is None else f"{m[k]:.3f}"
    grid = "x".join(str(n - 2) for n in m["grid"])
    print(f"| {d.name} | {coll} | {rates} | {m['reynolds']:g} | {grid} | {m['tau']:.5f} | "
          f"{'by ' if diverged else ''}{steps} | {'yes' if diverged else 'no'} | {umax} | "
          f"{ghia('ghia_u_max_abs_error')} | {ghia('ghia_v_max_abs_error')} |")
PYEOF
