"""Accuracy of each storage type on the lid-driven cavity: mass drift, Ghia errors, distance from a float64 run.

    .venv/bin/python scripts/storage_accuracy.py --grid 130 --steps 60000 --engines native,xla \\
        --storages float64,compute,float16,bfloat16 [--reynolds 100] [--reference native] [--out table.json]

Every combination runs the same case (``case=cavity``, the grid ``N x N``) for the same steps with
``make_engine(setup, engine=E, storage=S)``; ``float64`` is the compute storage of a float64 setup, the
others compute in float32. Each row gives the relative mass drift of the fluid, the case's Ghia errors
(``ghia_u_max_abs_error``, ``ghia_v_max_abs_error``, in units of the lid speed) and the largest
difference |u - u_64| of the velocity from a float64 run (of the engine ``--reference``, run first) and its
rms over the grid, in units of the lid speed (``du_vs_float64``, ``du_rms_vs_float64``). It reads only what
the engines give (``initial_populations``, ``advance``, ``fields``), so it measures any version of lbm alike.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np


def run_one(grid: int, steps: int, reynolds: float, engine: str, storage: str, chunk: int) -> dict[str, Any]:
    """One run: its mass drift, Ghia errors and final velocity."""
    import jax

    from lbm.engines import make_engine
    from lbm.simulation import prepare

    precision = "float64" if storage == "float64" else "float32"
    case, setup = prepare(["case=cavity", f"grid.nx={grid}", f"grid.ny={grid}", f"precision={precision}",
                           f"flow.reynolds={reynolds}", f"steps={steps}"])
    eng = make_engine(setup, "fused", engine=engine, storage="compute" if storage == "float64" else storage)
    fluid = ~np.asarray(setup.solid, bool)
    f = setup.initial_populations()
    mass0 = mass(eng.fields(f, 0)["rho"], fluid)
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        n = min(chunk, steps - done)
        f, _ = eng.advance(f, n, first_step=done)
        done += n
    jax.block_until_ready(f)
    wall = time.perf_counter() - t0
    fields = setup.written_fields(eng.fields(f, steps))
    metrics = case.metrics(setup, fields, steps)
    return {"engine": eng.name, "storage": storage, "steps": steps, "wall_s": round(wall, 2),
            "mass_rel_drift": mass(fields["rho"], fluid) / mass0 - 1.0,
            "ghia_u_max_abs_error": metrics.get("ghia_u_max_abs_error"),
            "ghia_v_max_abs_error": metrics.get("ghia_v_max_abs_error"),
            "u": np.asarray(fields["u"], np.float64), "u_lid": float(setup.derived["u_lattice"])}


def mass(rho: np.ndarray, fluid: np.ndarray) -> float:
    """The fluid's mass, summed in float64 (the densities' deviations from 1 added to the cell count)."""
    r = np.asarray(rho, np.float64)[fluid]
    return float(r.size + np.sum(r - 1.0))


def main() -> None:
    """Run every engine and storage, print the table (and write it as JSON with --out)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", type=int, default=130)
    p.add_argument("--steps", default="60000", help="steps, or a comma-separated list of step counts")
    p.add_argument("--reynolds", type=float, default=100.0)
    p.add_argument("--engines", default="native,xla")
    p.add_argument("--storages", default="float64,compute,float16,bfloat16")
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--reference", default="native", help="engine of the float64 run the velocities are compared with")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = []
    for steps in (int(v) for v in args.steps.split(",")):
        reference = run_one(args.grid, steps, args.reynolds, args.reference, "float64", args.chunk)["u"]
        rows += compare(args, steps, reference)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def compare(args: argparse.Namespace, steps: int, reference: np.ndarray) -> list[dict[str, Any]]:
    """Every engine and storage of ``args`` run for ``steps``, each compared with the float64 velocity ``reference``."""
    rows = []
    for engine in args.engines.split(","):
        for storage in args.storages.split(","):
            try:
                row = run_one(args.grid, steps, args.reynolds, engine, storage, args.chunk)
            except ValueError as exc:  # a storage the engines refuse: its reason
                print(f"engine={engine} storage={storage} steps={steps} {exc}", flush=True)
                continue
            u = row.pop("u")
            du = np.sqrt(np.sum((u - reference) ** 2, axis=0)) / row["u_lid"]
            row["du_vs_float64"] = float(du.max())
            row["du_rms_vs_float64"] = float(np.sqrt(np.mean(du**2)))
            rows.append(row)
            shown = {k: (f"{v:.3g}" if isinstance(v, float) and not math.isnan(v) else v) for k, v in row.items()}
            print(" ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
    return rows


if __name__ == "__main__":
    main()
