"""Candidate bandwidth probes on one device, in one process: which kernel shows what memory-bound code can reach.

    python scripts/bandwidth_candidates.py [--mib 1024] [--out FILE.json]

Each candidate moves ``--mib`` MiB arrays and is timed as the median of 5 calls after a warm-up; GB/s = 1e9 B/s of
the bytes the kernel names (a write counts once). Candidates: XLA elementwise kernels (in place, donated) on 1-D
arrays and on arrays in the TPU's (8, 128) tiling; the same inside one ``lax.fori_loop`` of 10 iterations (as an
LBM chunk runs: no dispatch between steps); several arrays updated in place at once (an LBM step's populations);
and a Pallas copy with large VMEM blocks (TPU only). On a CPU it runs with the Pallas copy in interpret mode on a
small array (a rehearsal: its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax


def timed(fn: Any, *args: Any, repeats: int = 5) -> float:
    """Median seconds of ``fn(*args)`` (arguments reused: nothing donated)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed_donated(fn: Any, x: Any, repeats: int = 5) -> tuple[float, Any]:
    """Median seconds of ``x = fn(x)`` with x donated; returns the time and the last x."""
    x = jax.block_until_ready(fn(x))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x = jax.block_until_ready(fn(x))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), x


def pallas_copy(shape: tuple[int, int], block: tuple[int, int], interpret: bool) -> Any:
    """A Pallas TPU copy (y = 1.0001 x) over ``shape`` in ``block`` tiles."""
    from jax.experimental import pallas as pl

    def kernel(x_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] * 1.0001

    grid = (shape[0] // block[0], shape[1] // block[1])
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    params = None
    if not interpret:
        from jax.experimental.pallas import tpu as pltpu

        params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                      vmem_limit_bytes=int(min(100 * 2**20, 6 * block[0] * block[1] * 4 + 8 * 2**20)))
    return jax.jit(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32), grid=grid,
                                  in_specs=[spec], out_specs=spec, interpret=interpret, compiler_params=params,
                                  input_output_aliases={0: 0}), donate_argnums=0)


def main() -> None:
    """Measure every candidate and print (and optionally write) GB/s per candidate."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = jax.devices()[0]
    cpu = dev.platform == "cpu"
    mib = 8 if cpu else args.mib
    n = mib * 2**20 // 4
    rows = []

    def record(name: str, nbytes: float, seconds: float) -> None:
        rows.append({"candidate": name, "gbs": nbytes / seconds / 1e9, "seconds": seconds, "bytes": nbytes})
        print(f"{name:58s} {nbytes / seconds / 1e9:8.1f} GB/s  ({seconds * 1e3:.3f} ms)", flush=True)

    shapes = {"1d": (n,), "2d_8192": (n // 32768, 32768), "2d_1024": (n // 1024, 1024),
              "q19_3d": (19, n // (19 * 256 * 256) or 1, 256, 256), "q9_2d": (9, int((n // 9) ** 0.5), int((n // 9) ** 0.5))}
    for label, shape in shapes.items():
        size = 1
        for s in shape:
            size *= s
        nb = size * 4
        x = jnp.ones(shape, jnp.float32)
        y = jnp.full(shape, 0.5, jnp.float32)
        t, x = timed_donated(jax.jit(lambda a: a * 1.0001 + 0.5, donate_argnums=0), x)
        record(f"xla in-place x*a+b {label} {shape}", 2 * nb, t)
        t = timed(jax.jit(lambda a, b: a * 1.0001 + b), x, y)
        record(f"xla out-of-place triad {label}", 3 * nb, t)
        loop = jax.jit(lambda a: lax.fori_loop(0, 10, lambda i, v: v * 1.0001 + 0.5, a), donate_argnums=0)
        t, x = timed_donated(loop, x)
        record(f"xla fori_loop(10) in-place x*a+b {label}", 20 * nb, t)
        loop2 = jax.jit(lambda a, b: lax.fori_loop(0, 10, lambda i, v: (v[0] * 1.0001 + v[1], v[1]), (a, b))[0])
        t = timed(loop2, x, y)
        record(f"xla fori_loop(10) in-place triad {label}", 30 * nb, t)
        del x, y
    # several arrays updated in place at once (an LBM step's Q populations as separate buffers)
    for q in (9, 19):
        per = n // q
        side = int(per ** 0.5) // 128 * 128 or 128
        arrs = tuple(jnp.ones((side, per // side), jnp.float32) for _ in range(q))
        fn = jax.jit(lambda t: lax.fori_loop(0, 10, lambda i, v: tuple(a * 1.0001 + 0.1 for a in v), t), donate_argnums=0)
        t, arrs = timed_donated(fn, arrs)
        record(f"xla fori_loop(10) {q} arrays in place", 20 * q * arrs[0].size * 4, t)
        del arrs
    # Pallas copy in large blocks
    for rows_, cols in ((n // 8192, 8192), (n // 32768, 32768)):
        for block in ((256, cols if cols <= 8192 else 4096), (512, 2048), (1024, 1024)):
            if cpu:
                rows_, cols, block = 64, 256, (32, 128)
            if rows_ % block[0] or cols % block[1]:
                continue
            try:
                fn = pallas_copy((rows_, cols), block, cpu)
                t, _ = timed_donated(fn, jnp.ones((rows_, cols), jnp.float32))
                record(f"pallas copy ({rows_},{cols}) block {block}", 2 * rows_ * cols * 4, t)
            except Exception as exc:  # a block the compiler refuses: say so, go on
                print(f"pallas copy ({rows_},{cols}) block {block}: {type(exc).__name__}: {str(exc)[:200]}")
            if cpu:
                break
        if cpu:
            break
    out = {"device": str(dev), "device_kind": dev.device_kind, "jax": jax.__version__, "mib": mib, "rows": rows}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
