"""Where a run's wall time goes between its chunks: lbm.run under cProfile, per-function cumulative time (issue 38).

    python scripts/chunk_costs.py [--json FILE] [--top 25] -- OVERRIDES... [-- OVERRIDES...]

Each group of overrides is one run (``python -m lbm run`` with them, in a scratch directory), all in one process.
For each it prints the run's MLUPS, its chunks, wall time and compile time, and the functions of lbm (and JAX's
device-to-host copy) that took the most cumulative time, per chunk: on an accelerator the host's work between two
chunks (the health reduction's read-back, the host copy of the populations, the case's observation, the outputs)
is time the device waits, unless the chunk is long.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lbm  # noqa: E402
import lbm.simulation  # noqa: E402

WATCHED = ("lbm/simulation/", "lbm/cases/", "lbm/engines/", "lbm/parallel", "array_methods.py", "array.py")
"""Files whose functions are listed (lbm's run loop, cases and engines; JAX's array read-back)."""


def profiled_run(overrides: list[str], top: int) -> dict:
    """One run, its chunk loop (lbm.simulation.run_chunks) under cProfile: its metrics and the ``top`` watched
    functions by cumulative time."""
    prof = cProfile.Profile()
    loop = lbm.simulation.run_chunks

    def profiled_loop(*args: object) -> None:
        prof.enable()
        try:
            loop(*args)
        finally:
            prof.disable()

    lbm.simulation.run_chunks = profiled_loop
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            metrics = lbm.run(overrides, run_dir=Path(tmp) / "run").metrics
            wall = time.perf_counter() - t0
    finally:
        lbm.simulation.run_chunks = loop
    stats = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    rows = [{"function": f"{Path(f).name}:{name}", "file": f, "calls": nc, "cum_s": ct, "self_s": tt}
            for (f, _line, name), (_cc, nc, tt, ct, _callers) in stats.items()
            if any(w in f for w in WATCHED)]
    rows.sort(key=lambda r: -r["cum_s"])
    chunks = max(1, -(-metrics["steps"] // max(1, metrics.get("chunk_steps") or 1)))
    return {"overrides": overrides, "engine": metrics["engine"], "steps": metrics["steps"],
            "chunk_steps": metrics.get("chunk_steps"), "chunks": chunks, "mlups": metrics["mlups"],
            "wall_time_s": metrics["wall_time_s"], "compile_time_s": metrics.get("compile_time_s"),
            "process_wall_s": wall, "top": rows[:top]}


def main() -> None:
    """Run each group of overrides and print its costs per chunk."""
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv[:cut])
    groups, group = [], []
    for a in argv[cut + 1:] + ["--"]:
        if a == "--":
            groups.append(group)
            group = []
        else:
            group.append(a)
    results = []
    for overrides in groups:
        r = profiled_run(overrides, args.top)
        results.append(r)
        print(f"\n{' '.join(overrides) or '(defaults)'}: engine {r['engine']}, {r['steps']} steps in {r['chunks']} "
              f"chunks of {r['chunk_steps']}, {r['mlups']:.0f} MLUPS, stepping {r['wall_time_s']:.3f} s "
              f"({1e3 * r['wall_time_s'] / r['chunks']:.3f} ms per chunk), compile {r['compile_time_s']:.2f} s",
              flush=True)
        print(f"  {'function':52} {'calls':>7} {'cum ms/chunk':>12} {'self ms/chunk':>13}")
        for row in r["top"]:
            print(f"  {row['function'][:52]:52} {row['calls']:7d} {1e3 * row['cum_s'] / r['chunks']:12.3f} "
                  f"{1e3 * row['self_s'] / r['chunks']:13.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
