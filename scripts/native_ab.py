"""Interleaved A/B of native-kernel variants in one process: the same engine, each variant its own populations.

    .venv/bin/python scripts/native_ab.py --lattice d2q9 --grid 4096,4096 --variant base: \\
        --variant huge:LBM_NATIVE_HUGEPAGES=1 [--rounds 5] [--precision float32] [--case periodic]

A variant is ``name[@GRID]:VAR=value,VAR=value``: environment variables the kernel reads at each call (empty:
none) and optionally its own grid (e.g. ``pad@4100x4100:`` beside ``pow2@4096x4096:``; MLUPS count cells).
Each round times every variant once (an even number of steps lasting about --min-time seconds), in rotating
order; the table gives each variant's median MLUPS and its ratio to the first variant. Ratios within one run
are what this is for: on a shared machine absolute figures move between runs.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Any

import numpy as np


def parse_variant(text: str, grid: tuple[int, ...]) -> tuple[str, tuple[int, ...], dict[str, str]]:
    """``name[@GRID]:VAR=v,VAR=v`` -> (name, grid, {VAR: v}); GRID as for --grid, default the --grid."""
    head, _, rest = text.partition(":")
    name, _, g = head.partition("@")
    env = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, parse_grid(g) if g else grid, env


def parse_grid(text: str) -> tuple[int, ...]:
    """``4096,4096`` or ``4096x4096`` -> (4096, 4096)."""
    return tuple(int(v) for v in text.replace("x", ",").split(","))


def steppers(args: argparse.Namespace, grids: list[tuple[int, ...]]) -> dict[tuple[int, ...], Any]:
    """One compiled native stepper per grid: (stepper, initial populations, steps per call, cells)."""
    import jax

    from lbm.bench.throughput import CASES, PRECISIONS, BenchConfig, make_setup
    from lbm.engines import make_engine
    from lbm.simulation import prepare

    out = {}
    for grid in dict.fromkeys(grids):
        if args.case in CASES:
            setup = make_setup(BenchConfig(args.case, args.lattice, grid, "native", args.precision))
        else:  # any run case by name (cavity, poiseuille, ...), on this grid
            setup = prepare([f"case={args.case}", f"lattice={args.lattice}", f"precision={PRECISIONS[args.precision][0]}",
                             "steps=1", *(f"grid.{a}={v}" for a, v in zip(("nx", "ny", "nz"), grid, strict=False))])[1]
        stepper = make_engine(setup, "fused", engine="native", storage=PRECISIONS[args.precision][1])
        f0 = setup.initial_populations()
        stepper.compile(f0, 2)
        f, _ = stepper.advance(f0 + 0, 2)  # probe only
        jax.block_until_ready(f)
        t0 = time.perf_counter()
        f, _ = stepper.advance(f, 2)
        jax.block_until_ready(f)
        n = max(2, 2 * math.ceil(args.min_time / ((time.perf_counter() - t0) / 2) / 2))
        stepper.compile(f0, n)
        out[grid] = (stepper, f0, n, math.prod(setup.shape))
    return out


def main(argv: list[str]) -> int:
    """Run the rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattice", default="d2q9")
    ap.add_argument("--grid", default="4096,4096")
    ap.add_argument("--case", default="periodic", help="periodic, cylinder (bench's cases) or any run case by name")
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.4)
    args = ap.parse_args(argv)
    import jax

    variants = [parse_variant(v, parse_grid(args.grid)) for v in args.variant]
    steps = steppers(args, [g for _, g, _ in variants])
    state = [steps[g][1] + 0 for _, g, _ in variants]
    mlups: list[list[float]] = [[] for _ in variants]
    base_env = dict(os.environ)
    for r in range(args.rounds + 1):  # round 0 warms every variant up
        for j in np.roll(np.arange(len(variants)), r):
            name, grid, env = variants[j]
            stepper, _, n, cells = steps[grid]
            os.environ.clear()
            os.environ.update(base_env | env)
            t0 = time.perf_counter()
            state[j], _ = stepper.advance(state[j], n)
            jax.block_until_ready(state[j])
            if r:
                mlups[j].append(cells * n / (time.perf_counter() - t0) / 1e6)
    os.environ.clear()
    os.environ.update(base_env)
    same = all(bool((np.asarray(s) == np.asarray(state[0])).all()) for s, (_, g, _) in zip(state, variants, strict=True)
               if g == variants[0][1])
    huge = [ln for ln in open("/proc/self/smaps_rollup") if ln.startswith("AnonHugePages")]
    print(f"{args.case} {args.lattice} {args.precision}, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}, "
          f"{huge[0].split()[1] if huge else '?'} kB huge; final populations of the first grid's variants bitwise "
          f"equal: {same}")
    ref = statistics.median(mlups[0])
    for (name, grid, env), m in zip(variants, mlups, strict=True):
        med = statistics.median(m)
        print(f"  {name:14s} {'x'.join(map(str, grid)):>12s} {med:8.1f} MLUPS  x{med / ref:5.2f}  "
              f"(min {min(m):.1f}, max {max(m):.1f})  {env or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
