"""Formulations of one D2Q9 BGK periodic step, timed back to back in one process, with what XLA made of them.

The study behind docs/performance.md ("variants tried"): pure-JAX formulations of the
same step (streaming by roll, by shifted slices in a lane layout, tuple-of-planes
carries, one fused output in an AoSoA layout, two passes split by an optimisation barrier) and the native
kernels (two-buffer push, in-place AA pairs). For each: median MLUPS over repeats,
fusions in the loop body of the optimised HLO, copies, XLA's bytes-accessed estimate per
cell and step, compile seconds, and the largest difference from the reference step.

    .venv/bin/python scripts/engine_variants.py --n 1024 --steps 40 --repeats 5
    XLA_FLAGS=--xla_backend_extra_options=xla_cpu_use_multi_output_fusion .venv/bin/python scripts/engine_variants.py

"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lbm.bench.naive import naive_step  # noqa: E402
from lbm.engines.native import build as native  # noqa: E402
from lbm.engines.native.codegen import KernelSpec  # noqa: E402
from lbm.kernels.equilibrium import equilibrium  # noqa: E402
from lbm.kernels.macroscopic import macroscopic  # noqa: E402
from lbm.kernels.streaming import stream  # noqa: E402
from lbm.lattice import D2Q9  # noqa: E402

LAT = D2Q9
C = [tuple(int(v) for v in c) for c in LAT.c]
W = [float(w) for w in LAT.w]
OMEGA = 1 / 0.6


def feq_planes(drho: jnp.ndarray, ux: jnp.ndarray, uy: jnp.ndarray) -> list[jnp.ndarray]:
    """Equilibrium populations as a list of planes, as deviations f - w (what lbm's engines hold)."""
    usq = 1.5 * (ux * ux + uy * uy)
    rho = 1.0 + drho
    out = []
    for (cx, cy), w in zip(C, W, strict=True):
        cu = cx * ux + cy * uy if (cx or cy) else None
        out.append(w * (drho - rho * usq) if cu is None else w * (drho + rho * (3 * cu + 4.5 * cu * cu - usq)))
    return out


def collide_planes(fs: list[jnp.ndarray]) -> list[jnp.ndarray]:
    """BGK on a list of planes; moments by explicit sums."""
    drho = sum(fs[1:], fs[0])
    mx = sum(cx * f for (cx, _), f in zip(C, fs, strict=True) if cx)
    my = sum(cy * f for (_, cy), f in zip(C, fs, strict=True) if cy)
    feq = feq_planes(drho, mx / (1.0 + drho), my / (1.0 + drho))
    return [f - OMEGA * (f - e) for f, e in zip(fs, feq, strict=True)]


def roll(a: jnp.ndarray, c: tuple[int, int]) -> jnp.ndarray:
    """Periodic shift of one plane by c (jnp.roll)."""
    return jnp.roll(a, c, axis=(0, 1)) if any(c) else a


# --- pure-JAX steps (f -> f, or a tuple of planes -> tuple) ------------------------------------

def reference_step(f: jnp.ndarray) -> jnp.ndarray:
    """lbm's own stage kernels (the xla engine without boundaries)."""
    drho, u = macroscopic(f, LAT)
    return stream(f - OMEGA * (f - equilibrium(drho, u, LAT)), LAT)


def push_stack_step(f: jnp.ndarray) -> jnp.ndarray:
    """Collide planes, roll each, stack: the usual single-array formulation with explicit sums."""
    fs = collide_planes([f[i] for i in range(9)])
    return jnp.stack([roll(fs[i], C[i]) for i in range(9)])


def planes_push_step(fs: tuple) -> tuple:
    """Carry a tuple of 9 planes (no stack): XLA may emit one output per plane."""
    out = collide_planes(list(fs))
    return tuple(roll(out[i], C[i]) for i in range(9))


def lanes_shift(a: jnp.ndarray, c: tuple[int, int]) -> jnp.ndarray:
    """Shift in the lane layout (nx, J, V), y = k*J + j: y moves along j (not the minor axis), wrap carries k."""
    cx, cy = c
    if cy == 1:
        a = jnp.concatenate([jnp.roll(a[:, -1:, :], 1, axis=2), a[:, :-1, :]], axis=1)
    elif cy == -1:
        a = jnp.concatenate([a[:, 1:, :], jnp.roll(a[:, :1, :], -1, axis=2)], axis=1)
    if cx == 1:
        a = jnp.concatenate([a[-1:], a[:-1]], axis=0)
    elif cx == -1:
        a = jnp.concatenate([a[1:], a[:1]], axis=0)
    return a


def lanes_push_step(fs: tuple) -> tuple:
    """Tuple of planes in a lane layout: streaming concatenates along a major axis, which XLA:CPU can fuse."""
    out = collide_planes(list(fs))
    return tuple(lanes_shift(out[i], C[i]) for i in range(9))


def two_pass_step(fs: tuple) -> tuple:
    """Moments in one pass, the update in a second; an optimization_barrier stops CSE from merging the reads."""
    drho = sum(fs[1:], fs[0])
    mx = sum(cx * f for (cx, _), f in zip(C, fs, strict=True) if cx)
    my = sum(cy * f for (_, cy), f in zip(C, fs, strict=True) if cy)
    drho, ux, uy, fs2 = lax.optimization_barrier((drho, mx / (1.0 + drho), my / (1.0 + drho), fs))
    feq = feq_planes(drho, ux, uy)
    return tuple(roll(f - OMEGA * (f - e), C[i]) for i, (f, e) in enumerate(zip(fs2, feq, strict=True)))


def aosoa_step(f: jnp.ndarray) -> jnp.ndarray:
    """One fused output: state (nx, J, Q, V), the 9 results joined along Q by a concatenate of 8 plus a pad.

    XLA fuses it into one loop, but computes each output element on its own: the density and
    velocity are recomputed for every one of the 9 populations of a cell.
    """
    fs = [lanes_shift(f[:, :, i, :], (0, 0)) for i in range(9)]
    out = [o[:, :, None, :] for o in collide_planes(fs)]
    out = [lanes_shift(o[:, :, 0, :], C[i])[:, :, None, :] for i, o in enumerate(out)]
    zero = jnp.zeros((), f.dtype)
    pad = lambda lo, hi: [(0, 0, 0), (0, 0, 0), (lo, hi, 0), (0, 0, 0)]  # noqa: E731
    return lax.pad(jnp.concatenate(out[:8], axis=2), zero, pad(0, 1)) + lax.pad(out[8], zero, pad(8, 0))


def aosoa(n: int, v: int) -> Callable:
    def run(f: jnp.ndarray) -> jnp.ndarray:
        g = jnp.moveaxis(to_lanes(f, v), 0, 2)
        g = lax.fori_loop(0, n, lambda _, c: aosoa_step(c), g)
        return from_lanes(jnp.moveaxis(g, 2, 0))
    return jax.jit(run, donate_argnums=0)


def to_lanes(f: jnp.ndarray, v: int) -> jnp.ndarray:
    q, nx, ny = f.shape
    return jnp.swapaxes(f.reshape(q, nx, v, ny // v), -1, -2)


def from_lanes(f: jnp.ndarray) -> jnp.ndarray:
    q, nx, j, v = f.shape
    return jnp.swapaxes(f, -1, -2).reshape(q, nx, v * j)


# --- runners -------------------------------------------------------------------------------------

def single(step: Callable, n: int) -> Callable:
    return jax.jit(lambda f: lax.fori_loop(0, n, lambda _, g: step(g), f), donate_argnums=0)


def planes(step: Callable, n: int, lanes: int = 0) -> Callable:
    def run(f: jnp.ndarray) -> jnp.ndarray:
        g = to_lanes(f, lanes) if lanes else f
        fs = lax.fori_loop(0, n, lambda _, c: step(c), tuple(g[i] for i in range(9)))
        out = jnp.stack(fs)
        return from_lanes(out) if lanes else out
    return jax.jit(run, donate_argnums=0)


def native_push(n: int) -> Callable:
    spec = KernelSpec(LAT, "float32", False, False)

    def run(f: jnp.ndarray) -> jnp.ndarray:
        def two(_: int, c: tuple) -> tuple:
            a, b = c
            b = native.push(spec, a, b, OMEGA, OMEGA)[0]
            return native.push(spec, b, a, OMEGA, OMEGA)[0], b
        return lax.fori_loop(0, n // 2, two, (f, jnp.zeros_like(f)))[0]
    return jax.jit(run, donate_argnums=0)


def native_aa(n: int) -> Callable:
    spec = KernelSpec(LAT, "float32", False, False)

    def run(f: jnp.ndarray) -> jnp.ndarray:
        def pair(_: int, a: jnp.ndarray) -> jnp.ndarray:
            a = native.aa_step(spec, a, 0, OMEGA, OMEGA)[0]
            return native.aa_step(spec, a, 1, OMEGA, OMEGA)[0]
        return lax.fori_loop(0, n // 2, pair, f)
    return jax.jit(run, donate_argnums=0)


def hlo_counts(text: str) -> tuple[int, int]:
    """(fusions, copies) in the while body of an optimised HLO module."""
    m = re.search(r" while\(.*?body=%?([\w.\-]+)", text)
    if not m:
        return text.count(" fusion("), text.count(" copy(")
    body = re.search(r"\n%?" + re.escape(m.group(1)) + r" .*?\n}\n", text, re.S)
    block = body.group(0) if body else ""
    return block.count(" fusion("), block.count(" copy(")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024, help="box size n (n x n cells)")
    p.add_argument("--steps", type=int, default=40, help="steps per timed call (even)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    n, steps = args.n, args.steps + args.steps % 2
    rng = np.random.default_rng(0)
    ux = 0.01 * rng.standard_normal((n, n))
    f0 = np.asarray(jnp.stack(feq_planes(jnp.zeros((n, n)), jnp.asarray(ux), jnp.zeros((n, n)))), np.float32)
    variants: dict[str, Callable] = {
        "naive (lbm.bench.naive)": single(lambda f: naive_step(f, LAT, OMEGA), steps),
        "lbm stage kernels (xla engine)": single(reference_step, steps),
        "explicit sums, roll, stack": single(push_stack_step, steps),
        "tuple of planes, roll": planes(planes_push_step, steps),
        "tuple of planes, lane layout V=16": planes(lanes_push_step, steps, lanes=16),
        "two passes (barrier)": planes(two_pass_step, steps),
        "one fused output (AoSoA, V=16)": aosoa(steps, 16),
    }
    if native.available():
        variants["native push (two buffers)"] = native_push(steps)
        variants["native AA pairs (in place)"] = native_aa(steps)
    print(f"D2Q9 BGK periodic {n}x{n} float32, {steps} steps per call, median of {args.repeats}; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'variant':36s} {'MLUPS':>8s} {'spread':>7s} {'fusions':>7s} {'copies':>6s} {'B/cell/step':>11s} "
          f"{'compile':>8s} {'max |diff|':>10s}")
    reference = None
    for name, fn in variants.items():
        f = jnp.asarray(f0)
        t0 = time.perf_counter()
        compiled = fn.lower(f).compile()
        compile_s = time.perf_counter() - t0
        out = np.asarray(compiled(jnp.asarray(f0)))
        if reference is None:
            reference = out
        times = []
        g = jnp.asarray(f0)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            g = compiled(g)
            g.block_until_ready()
            times.append(time.perf_counter() - t0)
        mlups = [n * n * steps / t / 1e6 for t in times]
        fusions, copies = hlo_counts(compiled.as_text())
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        per_cell = (cost or {}).get("bytes accessed", float("nan")) / (n * n)
        med = statistics.median(mlups)
        print(f"{name:36s} {med:8.1f} {100 * (max(mlups) - min(mlups)) / med:6.1f}% {fusions:7d} {copies:6d} "
              f"{per_cell:11.1f} {compile_s:7.2f}s {np.abs(out - reference).max():10.2e}", flush=True)
    print("MLUPS: million lattice updates per second (host clock around each call, synchronised); fusions and copies:\n"
          "in the optimised while-loop body (one step); B/cell/step: XLA cost_analysis bytes accessed of the loop\n"
          "body per cell (custom calls count 0); max |diff|: largest population difference from the first variant.")


if __name__ == "__main__":
    main()
