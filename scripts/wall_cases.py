"""Wall-bounded cases against the periodic box of the same size, one engine, one process (docs/performance.md).

For each lattice: the periodic box (Taylor-Green), the lid-driven cavity (moving and resting
half-way walls), the cylinder (inlet, outflow, walls, forces) and the channel (Poiseuille:
half-way walls, body force), all on the same grid, timed back to back in interleaved rounds
so that a neighbour's load hits every case alike. Prints MLUPS (median over rounds) and
each case's slowdown against the periodic box of the same round (median of the ratios).

    .venv/bin/python scripts/wall_cases.py                      # D2Q9 420x180 and D3Q19 66^3, native engine
    .venv/bin/python scripts/wall_cases.py --engine xla --d2q9 256x256 --d3q19 48x48x48 --rounds 3
    .venv/bin/python scripts/wall_cases.py --engine xla --parts   # + the channel's walls and force apart

``--parts`` adds two rows that split the channel: ``walls`` (its half-way walls without the body
force) and ``forced`` (its body force on the periodic box: no walls).

Clock: host wall clock around one dispatch of ``steps`` steps, synchronised with
block_until_ready; compilation excluded. The process's CPU time around the same dispatch (all its
threads) is recorded too: on a machine shared with other work it counts the work done rather than
the time spent waiting for a core, so its ratios scatter less (``cpu/periodic``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lbm.config import compose  # noqa: E402
from lbm.config.run import validate  # noqa: E402
from lbm.engines import make_engine  # noqa: E402
from lbm.simulation import make_case  # noqa: E402

CASES = {"periodic": "taylor_green", "cavity": "cavity", "cylinder": "cylinder", "channel": "poiseuille"}
"""Row name -> case config name."""
PARTS = {"walls": lambda s: dataclasses.replace(s, force=None), "forced": lambda s: dataclasses.replace(s, boundaries=())}
"""Rows of --parts: the channel's setup without its body force, and without its walls."""


def setup_of(case: str, lattice: str, grid: tuple[int, ...], precision: str) -> object:
    """The Setup of ``case`` on ``grid``, composed and validated as ``python -m lbm run`` does."""
    overrides = [f"case={case}", f"lattice={lattice}", f"precision={precision}", "steps=1",
                 *(f"grid.n{a}={n}" for a, n in zip("xyz", grid, strict=False))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_case(validate(compose(overrides))).setup()


def block_cells(engine: object) -> int:
    """Cells the engine treats apart from the bulk (the native engine's block; 0 for others)."""
    block = getattr(engine, "block", None)
    return 0 if block is None else int(block.cells.size)


def main() -> None:
    """Time the cases and print the table (and JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="native")
    ap.add_argument("--d2q9", default="420x180", help="D2Q9 grid, e.g. 420x180 ('' to skip)")
    ap.add_argument("--d3q19", default="66x66x66", help="D3Q19 grid ('' to skip)")
    ap.add_argument("--steps", type=int, default=0, help="steps per timed dispatch (0: about 0.3 s of the box)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--json", default="", help="write the results here too")
    ap.add_argument("--parts", action="store_true", help="add the channel's walls and its body force apart")
    args = ap.parse_args()
    results = []
    for lattice, spec in (("d2q9", args.d2q9), ("d3q19", args.d3q19)):
        if not spec:
            continue
        grid = tuple(int(v) for v in spec.split("x"))
        runs = {}
        setups = {name: setup_of(case, lattice, grid, args.precision) for name, case in CASES.items()}
        if args.parts:
            setups.update({name: part(setups["channel"]) for name, part in PARTS.items()})
        for name, setup in setups.items():
            engine = make_engine(setup, "fused", engine=args.engine)
            runs[name] = {"engine": engine, "setup": setup, "block": block_cells(engine)}
        # steps: about 0.3 s of the periodic box per dispatch, even, the same for every case
        n = args.steps
        box = runs["periodic"]
        if not n:
            jax.block_until_ready(box["engine"].advance(box["setup"].initial_populations(), 20)[0])
            t0 = time.perf_counter()
            jax.block_until_ready(box["engine"].advance(box["setup"].initial_populations(), 20)[0])
            n = max(2, int(0.3 / max((time.perf_counter() - t0) / 20, 1e-9)) // 2 * 2)
        for name, r in runs.items():
            t0 = time.perf_counter()
            f = r["setup"].initial_populations()
            r["engine"].compile(f, n)
            t1 = time.perf_counter()
            r["f"] = jax.block_until_ready(r["engine"].advance(f, n)[0])  # warm-up
            r["times"], r["cpu"] = [], []
            print(f"{lattice} {spec} {name}: {r['engine'].name}, compiled in {t1 - t0:.1f} s, {n} steps in "
                  f"{time.perf_counter() - t1:.3f} s (warm-up)", flush=True)
        ratios: dict[str, list[float]] = {k: [] for k in runs}
        cpu_ratios: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.rounds):
            for r in runs.values():
                t0, c0 = time.perf_counter(), time.process_time()
                r["f"] = jax.block_until_ready(r["engine"].advance(r["f"], n)[0])
                r["times"].append(time.perf_counter() - t0)
                r["cpu"].append(time.process_time() - c0)
            for k, r in runs.items():
                ratios[k].append(r["times"][-1] / runs["periodic"]["times"][-1])
                box_cpu = runs["periodic"]["cpu"][-1]  # ~0 on an accelerator: the host only waits
                cpu_ratios[k].append(r["cpu"][-1] / box_cpu if box_cpu > 0 else float("nan"))
        cells = 1
        for v in grid:
            cells *= v
        for k, r in runs.items():
            med = statistics.median(r["times"])
            results.append({"lattice": lattice, "grid": list(grid), "case": k, "engine": r["engine"].name,
                            "steps": n, "mlups": cells * n / med / 1e6,
                            "spread_pct": 100 * (max(r["times"]) - min(r["times"])) / med,
                            "vs_periodic": statistics.median(ratios[k]),
                            "cpu_vs_periodic": statistics.median(cpu_ratios[k]), "block_cells": r["block"],
                            "block_share": r["block"] / cells})
    print(f"engine {args.engine}, {args.precision}, {args.rounds} interleaved rounds, load {os.getloadavg()[0]:.1f}")
    print(f"{'lattice':7} {'grid':>10} {'case':9} {'MLUPS':>8} {'spread':>7} {'time/periodic':>13} {'cpu/periodic':>12} "
          f"{'block cells':>12}")
    for r in results:
        print(f"{r['lattice']:7} {'x'.join(map(str, r['grid'])):>10} {r['case']:9} {r['mlups']:8.1f} "
              f"{r['spread_pct']:6.0f}% {r['vs_periodic']:12.2f}x {r['cpu_vs_periodic']:11.2f}x "
              f"{r['block_cells']:7d} ({100 * r['block_share']:.1f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
