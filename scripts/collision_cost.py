"""The cost of each collision against BGK on one engine, timed interleaved in one process (docs/physics.md).

    .venv/bin/python scripts/collision_cost.py --lattice d3q27 --grid 64 --grid 128 \\
        [--collision bgk --collision kbc ...] [--engine native] [--rounds 7] [--min-time 1.0] [--json OUT.json]

For every grid, each collision gets its own compiled stepper and populations (the periodic box of
``lbm bench``, ``cases=[periodic]``); each round then times every collision once (an even number of steps
lasting about --min-time seconds on BGK; the same number for all), in rotating order, so a change of the
machine's load within a round hits them alike. The table gives the median MLUPS by the wall clock and by the
process's CPU time (all its threads; time other processes hold the cores does not count in it; n/a where the
work runs on an accelerator, whose host CPU time is its dispatch), and each
collision's slowdown against BGK: the median over rounds of its time / BGK's time in the same round.
Ratios within one run are what this is for: on a shared machine the absolute figures move between runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

COLLISIONS = ("bgk", "trt", "mrt", "regularized", "recursive_regularized", "kbc", "cumulant")


def prepare(lattice: str, grid: tuple[int, ...], collision: str, engine: str, precision: str) -> tuple[Any, Any]:
    """A compiled-on-demand fused stepper of the periodic box and its initial populations."""
    from lbm.bench.throughput import PRECISIONS, BenchConfig, make_setup
    from lbm.engines import make_engine

    setup = make_setup(BenchConfig("periodic", lattice, grid, engine, precision, collision))
    stepper = make_engine(setup, "fused", engine=engine, storage=PRECISIONS[precision][1])
    if stepper.name != engine:
        raise SystemExit(f"collision_cost: {collision} runs on the {stepper.name} engine here, not {engine}")
    return stepper, stepper.place(setup.initial_populations())  # as a run holds them (the pallas 2D pair: its view)


def steps_for(stepper: Any, f0: Any, min_time: float) -> int:
    """An even number of steps that lasts about ``min_time`` seconds."""
    import jax

    stepper.compile(f0, 2)
    f, _ = stepper.advance(f0 + 0, 2)
    jax.block_until_ready(f)
    t0 = time.perf_counter()
    f, _ = stepper.advance(f, 2)
    jax.block_until_ready(f)
    return max(2, 2 * math.ceil(min_time / ((time.perf_counter() - t0) / 2) / 2))


def measure_grid(args: argparse.Namespace, grid: tuple[int, ...]) -> list[dict[str, Any]]:
    """Time every collision on one grid, interleaved; one record per collision."""
    import jax

    prepared = [prepare(args.lattice, grid, c, args.engine, args.precision) for c in args.collision]
    n = steps_for(*prepared[0], args.min_time)
    for stepper, f0 in prepared:
        stepper.compile(f0, n)
    state = [f0 + 0 for _, f0 in prepared]
    wall: list[list[float]] = [[] for _ in prepared]
    cpu: list[list[float]] = [[] for _ in prepared]
    loads = []
    for r in range(args.rounds + 1):  # round 0 warms every collision up
        for j in np.roll(np.arange(len(prepared)), r):
            c0, t0 = time.process_time(), time.perf_counter()
            state[j], _ = prepared[j][0].advance(state[j], n)
            jax.block_until_ready(state[j])
            if r:
                wall[j].append(time.perf_counter() - t0)
                cpu[j].append(time.process_time() - c0)
        loads.append(os.getloadavg()[0])
    cells = math.prod(grid)
    # on an accelerator the process's CPU time is the host's dispatch, not the work: no CPU-time figures there
    host = jax.default_backend() == "cpu"
    records = []
    for c, w, p, f in zip(args.collision, wall, cpu, state, strict=True):
        if not bool(np.isfinite(np.asarray(f)).all()):
            raise SystemExit(f"collision_cost: {c} on {grid} became non-finite")
        records.append({
            "lattice": args.lattice, "grid": list(grid), "collision": c, "engine": args.engine,
            "precision": args.precision, "steps_per_repeat": n, "rounds": args.rounds,
            "mlups_wall": statistics.median(cells * n / t / 1e6 for t in w),
            "mlups_cpu": statistics.median(cells * n / t / 1e6 for t in p) if host else None,
            "time_over_bgk_wall": statistics.median(a / b for a, b in zip(w, wall[0], strict=True)),
            "time_over_bgk_cpu": statistics.median(a / b for a, b in zip(p, cpu[0], strict=True)) if host else None,
            "wall_s": w, "cpu_s": p, "load_average_1min": loads})
    return records


def main(argv: list[str]) -> int:
    """Measure, print the table, optionally write the records as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattice", default="d3q27")
    ap.add_argument("--grid", type=int, action="append", help="cells per side of the cube (repeatable); default 64")
    ap.add_argument("--collision", action="append", choices=COLLISIONS,
                    help="repeatable; the first is the baseline (default: bgk mrt regularized recursive_regularized kbc)")
    ap.add_argument("--engine", default="native", choices=("native", "xla", "pallas"))
    ap.add_argument("--precision", default="float32", choices=("float32", "float64"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of one BGK repeat")
    ap.add_argument("--json", default=None, help="write the records here")
    args = ap.parse_args(argv)
    args.collision = args.collision or ["bgk", "mrt", "regularized", "recursive_regularized", "kbc"]
    import jax

    from lbm.environment import use_precision

    use_precision(args.precision)
    d = 2 if args.lattice == "d2q9" else 3
    records = []
    for n in args.grid or [64]:
        records += measure_grid(args, (n,) * d)
    print(f"{args.lattice} {args.precision}, engine {args.engine}, {args.rounds} rounds each, load average "
          f"{os.getloadavg()[0]:.2f} at the end, jax {jax.__version__}")
    print("| grid | collision | MLUPS (wall) | MLUPS (CPU time) | time / BGK (wall) | time / BGK (CPU) |")
    print("|---|---|---|---|---|---|")
    na = f"n/a ({jax.default_backend()})"
    for r in records:
        mlups_cpu = na if r["mlups_cpu"] is None else f"{r['mlups_cpu']:.1f}"
        ratio_cpu = na if r["time_over_bgk_cpu"] is None else f"{r['time_over_bgk_cpu']:.2f}"
        print(f"| {r['grid'][0]}³ | {r['collision']} | {r['mlups_wall']:.1f} | {mlups_cpu} | "
              f"{r['time_over_bgk_wall']:.2f} | {ratio_cpu} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"command": "scripts/collision_cost.py " + " ".join(argv), "records": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
