"""Pure-jnp D2Q9 BGK periodic steps in five forms, compiled for a TPU v5e without one: bytes per cell and step.

What XLA:TPU makes of an LBM step written in jax.numpy alone, at an HBM-bound size whose width is no multiple of
1024 (where lbm's in-place Pallas pair does not run and the xla engine moved 690 B per cell and step, 9.6x the
minimum; docs/performance.md, "The xla engine's 2D forms on a TPU"). Each form runs 20 steps in a fori_loop, with and
without an optimisation barrier between steps; lbm.hlo.loop_traffic reads the compiled loop body as inspect does.

    PYTHONPATH=. ~/.cache/lbm/venv-accel-jax0102/bin/python scripts/tpu_xla_forms.py [N]   # N x N, default 4098
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.bench.targets import compile_chunk, load_target, prepare_environment, target_sharding
from lbm.hlo import loop_traffic
from lbm.lattice import D2Q9

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4098
c = np.asarray(D2Q9.c)
w = np.asarray(D2Q9.w, np.float32)
omega = 1.0 / 0.6

def collide_list(fs: list[Any]) -> list[Any]:
    """BGK collision of the nine populations of every cell."""
    rho = sum(fs)
    ux = sum(fs[i] * float(c[i, 0]) for i in range(9) if c[i, 0]) / rho
    uy = sum(fs[i] * float(c[i, 1]) for i in range(9) if c[i, 1]) / rho
    usq = 1.5 * (ux * ux + uy * uy)
    out = []
    for i in range(9):
        cu = 3.0 * (float(c[i, 0]) * ux + float(c[i, 1]) * uy)
        feq = w[i] * rho * (1 + cu + 0.5 * cu * cu - usq)
        out.append(fs[i] + omega * (feq - fs[i]))
    return out

def roll(a: Any, i: int) -> Any:
    """Population array ``a`` shifted by c_i (periodic)."""
    return jnp.roll(a, (int(c[i, 0]), int(c[i, 1])), axis=(0, 1))

def v_stack_roll(f: Any) -> Any:
    """The engine's form: a stacked array, collide, roll each population, stack."""
    post = collide_list([f[i] for i in range(9)])
    return jnp.stack([roll(post[i], i) for i in range(9)])

def v_pull(f: Any) -> Any:
    """Pull: roll the inputs, collide, write unshifted."""
    pre = [roll(f[i], i) for i in range(9)]
    return jnp.stack(collide_list(pre))

def v_tuple_push(fs: Any) -> Any:
    """The populations as a tuple of nine arrays: collide, roll each."""
    post = collide_list(list(fs))
    return tuple(roll(post[i], i) for i in range(9))

def v_tuple_pull(fs: Any) -> Any:
    """A tuple of nine arrays, pulled: roll the inputs, collide."""
    return tuple(collide_list([roll(fs[i], i) for i in range(9)]))

def v_pad_pull(f: Any) -> Any:
    """Wrap-pad by one cell, then a static slice per direction, collide."""
    p = jnp.pad(f, ((0, 0), (1, 1), (1, 1)), mode="wrap")
    pre = [p[i, 1 - int(c[i, 0]):1 - int(c[i, 0]) + N, 1 - int(c[i, 1]):1 - int(c[i, 1]) + N] for i in range(9)]
    return jnp.stack(collide_list(pre))

def chunk(step: Callable[[Any], Any], barrier: bool) -> Any:
    """20 steps of ``step`` in a fori_loop, jitted with the state donated."""
    def run(f: Any) -> Any:
        def body(_: Any, f: Any) -> Any:
            g = step(f)
            return jax.lax.optimization_barrier(g) if barrier else g
        return jax.lax.fori_loop(0, 20, body, f)
    return jax.jit(run, donate_argnums=0)


def main() -> None:
    """Compile every form and print its traffic."""
    target = load_target("v5e")
    prepare_environment(target)
    sharding = target_sharding(target)
    stacked = jax.ShapeDtypeStruct((9, N, N), jnp.float32)
    tup = tuple(jax.ShapeDtypeStruct((N, N), jnp.float32) for _ in range(9))
    for name, step, arg in [("stack_roll", v_stack_roll, stacked), ("pull", v_pull, stacked),
                            ("tuple_push", v_tuple_push, tup), ("tuple_pull", v_tuple_pull, tup),
                            ("pad_pull", v_pad_pull, stacked)]:
        for barrier in (True, False):
            text, _, planned = compile_chunk(chunk(step, barrier), (arg,), sharding, target)
            loop = loop_traffic(text, ("x",))
            steps = 20 // loop.trip_count if loop.trip_count > 1 else 20
            per = N * N * steps
            ratio = planned / (36 * N * N) if planned else float("nan")
            print(f"{name:11s} barrier={barrier!s:5s} {loop.bytes / per:7.1f} B/cell/step  "
                  f"kernels/step {len(loop.kernels) / steps:5.1f}  on-chip {loop.on_chip_bytes / per:7.1f}  "
                  f"planned {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
