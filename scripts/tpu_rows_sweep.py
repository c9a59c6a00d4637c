"""The TPU rows kernel's speed against its block height, at HBM-bound sizes, in one process (issue 38).

    python scripts/tpu_rows_sweep.py [--out FILE.json] [--steps 20]

For each lattice and grid it runs the periodic BGK push step of lbm.engines.pallas.kernels.rows_step with several
block heights (rows per program), ``--steps`` steps inside one jitted ``lax.fori_loop`` (two steps per iteration,
the buffer donated, as the pallas engine's chunk runs), and prints MLUPS and GB/s at the minimum traffic (read and
write every population once: 2 Q 4 B per cell). A height the compiler refuses is printed with its error, and the
sweep goes on. On a CPU it rehearses on tiny grids in interpret mode (its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import traceback
from typing import Any

import jax
from jax import lax
from tpu_aa_sweep import timed_chunk  # scripts/ is on sys.path when this script runs

from lbm.engines.pallas import kernels
from lbm.lattice import get_lattice

TPU_CASES = (("d2q9", (4096, 4096), (8, 16, 32, 64, 128)),
             ("d3q19", (256, 256, 256), (1, 2, 4)),
             ("d3q27", (256, 256, 256), (1, 2)))
CPU_CASES = (("d2q9", (32, 128), (8, 16)), ("d3q19", (8, 8, 128), (1, 2)))


def chunk(lattice: Any, rows: int, steps: int, interpret: bool) -> Any:
    """``steps`` periodic BGK push steps (tau 0.6) of the rows kernel with ``rows`` rows per block, jitted, donated."""
    omega = 1 / 0.6

    def two(_: Any, f: Any) -> Any:
        for _ in range(2):
            f = kernels.rows_step(f, lattice, omega, omega, None, interpret=interpret, rows=rows)
        return f

    return jax.jit(lambda f: lax.fori_loop(0, steps // 2, two, f), donate_argnums=0)


def main() -> None:
    """Run the sweep; print one line per configuration and optionally write them as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    dev = jax.devices()[0]
    cpu = dev.platform == "cpu"
    steps = 2 if cpu else args.steps
    results = []
    for name, shape, heights in CPU_CASES if cpu else TPU_CASES:
        lat = get_lattice(name)
        cells = 1
        for s in shape:
            cells *= s
        for rows in heights:
            row = {"lattice": name, "grid": list(shape), "rows": rows, "steps": steps}
            try:
                row["first_call_s"], t, f = timed_chunk(chunk(lat, rows, steps, cpu), lat.q, shape)
                row["mlups"] = cells * steps / t / 1e6
                row["gbs_min_traffic"] = row["mlups"] * 1e6 * 2 * lat.q * 4 / 1e9
                print(f"{name} {'x'.join(map(str, shape))} rows={rows}: {row['mlups']:.0f} MLUPS, "
                      f"{row['gbs_min_traffic']:.0f} GB/s at the minimum traffic ({100 * row['gbs_min_traffic'] / 819:.0f}% "
                      f"of 819), first call {row['first_call_s']:.1f} s", flush=True)
                del f
            except Exception as exc:  # a height the compiler refuses: say so, go on
                row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
                print(f"{name} {'x'.join(map(str, shape))} rows={rows}: {row['error']}", flush=True)
                traceback.print_exc(limit=2)
            results.append(row)
    out = {"device_kind": dev.device_kind, "jax": jax.__version__, "results": results}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
