r"""Wall-bounded cases against the periodic box of the same size, one process (docs/performance.md).

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

Several engines and grids in one process (the TPU walls of issue 38: the D3Q19 box against the cavity whose walls
the pallas engine's in-place kernels apply, pallas and xla, and the cavity's fields against xla after the timed
steps):

    python3 scripts/wall_cases.py --engines pallas,xla --cases periodic,cavity --d2q9 '' --sequential \
        --d3q19 128x128x128,256x256x256 --steps 200 --rounds 3 --check xla
    JAX_PLATFORMS=cpu python3 scripts/wall_cases.py --engines pallas,xla --cases periodic,cavity --d2q9 '' \
        --sequential --d3q19 16x8x128 --steps 4 --rounds 1 --check xla --tpu-rehearsal  # its rehearsal on a CPU

``--engines``: each case on each engine (``time/periodic`` against the periodic box of the first engine);
``--sequential``: each run timed alone (its rounds back to back) and its populations freed before the next, so
that the largest grids fit one chip; ``--check ENGINE``: after its warm-up (``steps`` steps from the initial state)
each run's rho and u against ENGINE's run of the same case, as the largest difference over the largest magnitude
of ENGINE's field.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

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


def parse() -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="native", help="the engine (--engines: several)")
    ap.add_argument("--engines", default="", help="engines, comma-separated (default: --engine)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"cases, comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--d2q9", default="420x180", help="D2Q9 grids, comma-separated, e.g. 420x180 ('' to skip)")
    ap.add_argument("--d3q19", default="66x66x66", help="D3Q19 grids, comma-separated ('' to skip)")
    ap.add_argument("--steps", type=int, default=0, help="steps per timed dispatch (0: about 0.3 s of the box)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--json", default="", help="write the results here too")
    ap.add_argument("--parts", action="store_true", help="add the channel's walls and its body force apart")
    ap.add_argument("--sequential", action="store_true", help="time each run alone and free it before the next")
    ap.add_argument("--check", default="", help="compare each run's rho and u with this engine's after the warm-up")
    ap.add_argument("--tpu-rehearsal", action="store_true",
                    help="on a CPU: the pallas engine as on a TPU (its in-place kernels), in Pallas interpret mode")
    args = ap.parse_args()
    args.engines = [e for e in (args.engines or args.engine).split(",") if e]
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown or "periodic" not in args.cases:
        ap.error(f"--cases: choose among {', '.join(CASES)}, periodic included (got {args.cases})")
    if args.check and args.check not in args.engines:
        ap.error(f"--check {args.check}: not one of --engines {','.join(args.engines)}")
    return args


def build_runs(args: argparse.Namespace, lattice: str, grid: tuple[int, ...]) -> dict[str, dict]:
    """Per run name (``case`` for one engine, ``case/engine`` for several) its engine, setup and block cells."""
    setups = {name: setup_of(CASES[name], lattice, grid, args.precision) for name in args.cases}
    if args.parts and "channel" in setups:
        setups.update({name: part(setups["channel"]) for name, part in PARTS.items()})
    runs = {}
    for name, setup in setups.items():
        for eng in args.engines:
            engine = engine_for(setup, eng, args.tpu_rehearsal)
            key = name if len(args.engines) == 1 else f"{name}/{eng}"
            runs[key] = {"engine": engine, "setup": setup, "block": block_cells(engine), "case": name}
    return runs


def engine_for(setup: object, engine: str, rehearsal: bool) -> object:
    """The engine ``engine`` for ``setup``; with ``rehearsal`` pallas as a TPU runs it, interpreted on this CPU."""
    if rehearsal and engine == "pallas":
        from lbm.engines.pallas.engine import PallasEngine

        return PallasEngine(setup, platform="tpu", interpret=True)
    return make_engine(setup, "fused", engine=engine)


def steps_for(args: argparse.Namespace, box: dict) -> int:
    """--steps, or about 0.3 s of the periodic box per dispatch (even)."""
    if args.steps:
        return args.steps
    engine, setup = box["engine"], box["setup"]  # populations as a run holds them (the pallas 2D pair: its view)
    jax.block_until_ready(engine.advance(engine.place(setup.initial_populations()), 20)[0])
    t0 = time.perf_counter()
    jax.block_until_ready(engine.advance(engine.place(setup.initial_populations()), 20)[0])
    return max(2, int(0.3 / max((time.perf_counter() - t0) / 20, 1e-9)) // 2 * 2)


def warm_up(r: dict, n: int, label: str, check: bool) -> None:
    """Compile, run n steps from the initial state (kept in r["f"]; its rho and u in r["fields"] if ``check``)."""
    t0 = time.perf_counter()
    f = r["engine"].place(r["setup"].initial_populations())  # as a run holds them (the pallas 2D pair: its view)
    r["engine"].compile(f, n)
    t1 = time.perf_counter()
    r["f"] = jax.block_until_ready(r["engine"].advance(f, n)[0])
    r["times"], r["cpu"] = [], []
    print(f"{label}: {r['engine'].name}, compiled in {t1 - t0:.1f} s, {n} steps in {time.perf_counter() - t1:.3f} s "
          f"(warm-up){'; ' + r['engine'].note if r['engine'].note else ''}", flush=True)
    if check:
        r["fields"] = {k: v for k, v in r["engine"].fields(r["f"], n).items() if k in ("rho", "u")}


def timed(r: dict, n: int) -> None:
    """One timed dispatch of n steps (host wall clock and the process's CPU time)."""
    t0, c0 = time.perf_counter(), time.process_time()
    r["f"] = jax.block_until_ready(r["engine"].advance(r["f"], n)[0])
    r["times"].append(time.perf_counter() - t0)
    r["cpu"].append(time.process_time() - c0)


def time_runs(args: argparse.Namespace, runs: dict[str, dict], n: int, label: str) -> None:
    """Warm up and time every run: interleaved rounds, or (--sequential) each alone, then freed."""
    if args.sequential:
        for name, r in runs.items():
            warm_up(r, n, f"{label} {name}", bool(args.check))
            for _ in range(args.rounds):
                timed(r, n)
            del r["f"], r["engine"]
        return
    for name, r in runs.items():
        warm_up(r, n, f"{label} {name}", bool(args.check))
    for _ in range(args.rounds):
        for r in runs.values():
            timed(r, n)


def checked(args: argparse.Namespace, runs: dict[str, dict], name: str) -> float | None:
    """The largest relative difference of run ``name``'s rho and u from the --check engine's run of its case."""
    r = runs[name]
    ref = next((o for o in runs.values() if o["case"] == r["case"] and o.get("engine_name") == args.check), None)
    if not args.check or ref is None or ref is r:
        return None
    return max(float(np.abs(r["fields"][k] - ref["fields"][k]).max() / max(np.abs(ref["fields"][k]).max(), 1e-30))
               for k in ("rho", "u"))


def results_of(args: argparse.Namespace, runs: dict[str, dict], lattice: str, grid: tuple[int, ...], n: int
               ) -> list[dict]:
    """One row per run: MLUPS (median time), spread, time and CPU time against the first engine's periodic box."""
    box = next(r for r in runs.values() if r["case"] == "periodic")
    cells = math.prod(grid)
    out = []
    for name, r in runs.items():
        med = statistics.median(r["times"])
        ratios = [t / b for t, b in zip(r["times"], box["times"], strict=True)]
        cpu = [c / b if b > 0 else float("nan") for c, b in zip(r["cpu"], box["cpu"], strict=True)]  # ~0: waits
        out.append({"lattice": lattice, "grid": list(grid), "case": name, "engine": r["engine_name"], "steps": n,
                    "mlups": cells * n / med / 1e6, "spread_pct": 100 * (max(r["times"]) - min(r["times"])) / med,
                    "vs_periodic": statistics.median(ratios), "cpu_vs_periodic": statistics.median(cpu),
                    "block_cells": r["block"], "block_share": r["block"] / cells,
                    "max_rel_diff": checked(args, runs, name)})
    return out


def main() -> None:
    """Time the cases and print the table (and JSON with --json)."""
    args = parse()
    results = []
    for lattice, specs in (("d2q9", args.d2q9), ("d3q19", args.d3q19)):
        for spec in (s for s in specs.split(",") if s):
            grid = tuple(int(v) for v in spec.split("x"))
            runs = build_runs(args, lattice, grid)
            for r in runs.values():
                r["engine_name"] = r["engine"].name
            n = steps_for(args, next(iter(runs.values())))
            time_runs(args, runs, n, f"{lattice} {spec}")
            results += results_of(args, runs, lattice, grid, n)
            del runs
    order = "sequential" if args.sequential else "interleaved"
    print(f"engines {','.join(args.engines)}, {args.precision}, {args.rounds} {order} rounds, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'lattice':7} {'grid':>11} {'case':15} {'MLUPS':>8} {'spread':>7} {'time/periodic':>13} {'cpu/periodic':>12} "
          f"{'block cells':>12}{'  max rel diff vs ' + args.check if args.check else ''}")
    for r in results:
        diff = "" if r["max_rel_diff"] is None else f"  {r['max_rel_diff']:.2e}"
        print(f"{r['lattice']:7} {'x'.join(map(str, r['grid'])):>11} {r['case']:15} {r['mlups']:8.1f} "
              f"{r['spread_pct']:6.0f}% {r['vs_periodic']:12.2f}x {r['cpu_vs_periodic']:11.2f}x "
              f"{r['block_cells']:7d} ({100 * r['block_share']:.1f}%){diff}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
