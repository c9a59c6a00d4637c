"""The in-place AA kernels against the push rows kernel on a TPU, at HBM-bound sizes, in one process (issue 38).

    python scripts/tpu_aa_sweep.py [--out FILE.json] [--steps 20] [--probe 667] [--only d3q19|d3q27|d2q9]

For D3Q19 and D3Q27 at 256^3, and D2Q9 at 4096^2, it times, per block height R (rows per program), ``--steps`` periodic BGK steps
inside one jitted ``lax.fori_loop`` (two steps per iteration, the array donated, as the pallas engine's chunk):

``push``        lbm.engines.pallas.kernels.rows_step twice (two buffers; reads (R + 2) / R of f: its halo rows)
``aa``          lbm.engines.pallas.aa: aa_even_step (BlockSpec blocks) then aa_odd_step (DMA ring), in place:
                what the pallas engine runs on a TPU in 3D
``aa_dma``      the same with the even step through the DMA ring too (``pipeline="dma"``)
``aa_2buf``     ``aa`` with two VMEM buffers in the odd step's ring, not three (program p then first waits for
                block p - 1's write-back)
``even``/``odd`` one kernel alone, twice per iteration (in place; the populations stay zero, so finite)

In 2D the in-place variants loop on the kernels' view of the populations (lbm.engines.pallas.planes.plane_view: y as
(ny / 128, 128) planes), as the pallas engine's chunk does; ``push`` on the grid's shape (its R: a multiple of 8).

and prints MLUPS and GB/s at the minimum traffic (read and write every population once: 2 Q 4 B per cell),
as a share of ``--probe`` GB/s (the chip's measured bandwidth; 667 GB/s on the lent v5e). A configuration the
compiler refuses is printed with its error, and the sweep goes on. The engine's own choice of R is marked
``*`` (lbm.engines.pallas.aa.aa_rows). On a CPU it rehearses on tiny grids in interpret mode (its numbers mean
nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from lbm.engines.pallas import aa, kernels, planes
from lbm.lattice import get_lattice

TPU_CASES = (("d3q19", (256, 256, 256), (2, 1, 4), ("aa", "push", "aa_dma", "aa_2buf", "even", "odd")),
             ("d3q27", (256, 256, 256), (2, 1, 4), ("aa", "push", "aa_dma", "aa_2buf", "even", "odd")),
             ("d2q9", (4096, 4096), (64, 32, 128, 8), ("aa", "push", "aa_2buf", "aa_dma")))
CPU_CASES = (("d3q19", (8, 8, 128), (2, 1), ("aa", "push", "aa_dma", "aa_2buf", "even", "odd")),
             ("d3q27", (4, 8, 128), (1,), ("aa", "push")),
             ("d2q9", (16, 1024), (8,), ("aa", "push", "aa_2buf")))
OMEGA = 1 / 0.6
"""BGK at tau 0.6."""


def step_pair(variant: str, lattice: Any, rows: int, interpret: bool, plane: tuple[int, ...] | None = None) -> Any:
    """Two steps of ``variant`` (module doc) on populations ``f`` (the in-place kernels: on a flat view, periodic at the
    grid's ``plane``), as a function of f."""
    kw = dict(omega_plus=OMEGA, omega_minus=OMEGA, force=None, interpret=interpret, rows=rows)
    even = {"aa_dma": dict(pipeline="dma")}.get(variant, {})
    odd = {"aa_2buf": dict(buffers=2)}.get(variant, {})

    def two(f: Any) -> Any:
        if variant == "push":
            return kernels.rows_step(kernels.rows_step(f, lattice, **kw), lattice, **kw)
        kw["plane"] = plane
        if variant == "even":
            return aa.aa_even_step(aa.aa_even_step(f, lattice, **kw), lattice, **kw)
        if variant == "odd":
            return aa.aa_odd_step(aa.aa_odd_step(f, lattice, **kw), lattice, **kw)
        return aa.aa_odd_step(aa.aa_even_step(f, lattice, **kw, **even), lattice, **kw, **odd)

    return two


def chunk(variant: str, lattice: Any, rows: int, steps: int, interpret: bool, plane: tuple[int, ...] | None = None
          ) -> Any:
    """``steps`` steps of ``variant``, two per iteration of a ``lax.fori_loop``, jitted, the populations donated."""
    two = step_pair(variant, lattice, rows, interpret, plane)
    return jax.jit(lambda f: lax.fori_loop(0, steps // 2, lambda _, f: two(f), f), donate_argnums=0)


def timed_chunk(fn: Any, q: int, shape: tuple[int, ...]) -> tuple[float, float, Any]:
    """A donated chunk on zero populations ``(q, *shape)`` (the array the chunk loops on): its first call's
    seconds, the median of three more calls, and the last populations."""
    f = jnp.zeros((q, *shape), jnp.float32)
    t0 = time.perf_counter()
    f = jax.block_until_ready(fn(f))
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        f = jax.block_until_ready(fn(f))
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), f


def measure(name: str, shape: tuple[int, ...], rows: int, variant: str, steps: int, cpu: bool, probe: float
            ) -> dict[str, Any]:
    """One configuration: first call, then the median of three timed calls; a row of the results."""
    lat = get_lattice(name)
    cells = 1
    for s in shape:
        cells *= s
    mark = "*" if rows == aa.aa_rows(lat, shape) else " "
    row = {"lattice": name, "grid": list(shape), "rows": rows, "variant": variant, "steps": steps,
           "engine_rows": mark == "*"}
    label = f"{name} {'x'.join(map(str, shape))} {variant:8s} R={rows}{mark}"
    try:
        looped = shape if variant == "push" else planes.view_shape(shape)  # the kernels' flat view where they take one
        plane = planes.plane_of(shape) if variant != "push" else None
        row["first_call_s"], t, f = timed_chunk(chunk(variant, lat, rows, steps, cpu, plane), lat.q, looped)
        row["finite"] = bool(jnp.isfinite(f).all())
        del f
        row["mlups"] = cells * steps / t / 1e6
        row["gbs_min_traffic"] = row["mlups"] * 1e6 * 2 * lat.q * 4 / 1e9
        print(f"{label}: {row['mlups']:6.0f} MLUPS, {row['gbs_min_traffic']:4.0f} GB/s at the minimum traffic "
              f"({100 * row['gbs_min_traffic'] / probe:3.0f}% of {probe:.0f}), first call {row['first_call_s']:.1f} s"
              + ("" if row["finite"] else ", NOT FINITE"), flush=True)
    except Exception as exc:  # a configuration the compiler refuses: say so, go on
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        print(f"{label}: {row['error']}", flush=True)
        traceback.print_exc(limit=2)
    return row


def main() -> None:
    """Run the sweep; print one line per configuration and optionally write them as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--probe", type=float, default=667.0, help="the chip's measured bandwidth, GB/s")
    ap.add_argument("--only", default=None, help="one lattice (d3q19, d3q27 or d2q9)")
    args = ap.parse_args()
    dev = jax.devices()[0]
    cpu = dev.platform == "cpu"
    steps = 2 if cpu else args.steps
    print(f"jax {jax.__version__} on {dev.device_kind}; * marks the block height the engine picks", flush=True)
    results = []
    for name, shape, heights, variants in CPU_CASES if cpu else TPU_CASES:
        if args.only and name != args.only:
            continue
        for rows in heights:
            for variant in variants:
                results.append(measure(name, shape, rows, variant, steps, cpu, args.probe))
    out = {"device_kind": dev.device_kind, "jax": jax.__version__, "probe_gbs": args.probe, "results": results}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
