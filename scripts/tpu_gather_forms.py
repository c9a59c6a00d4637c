r"""How fast the device gathers and scatters the boundary plan's slots, in the forms XLA offers (issue 38).

On the v5e the half-way cylinder 1680x720 on pallas spends 78 % of its step in the plan's XLA element gathers
(`f.reshape(-1)[slots]`, 4.1 ms for ~2 % of the populations) and 19 % in its scatters (docs/performance.md, "Half-way
and interpolated obstacles"). This times, for the plan of any run configuration, each form alone in a loop of
``--calls`` calls in one program (the populations changed by one element per call, so that nothing is hoisted):

- gathers: ``element`` (as the engine does), ``sorted`` (the slots sorted, XLA told so), ``rows`` (the rows of
  (Q * nx, ny) that hold a slot gathered whole, then the slots from that small array), ``2d`` (row and column indices);
- scatters: ``element`` (as the engine does) and ``rows`` (the rows gathered, the slots set in them, the rows scattered
  back whole).

Every form's values are checked against ``element``'s. One line per form (microseconds per call), and ``--out`` JSON::

    python3 scripts/tpu_gather_forms.py --calls 200 -- case=cylinder case.bounce_back=halfway grid.nx=1680 grid.ny=720

Rehearsal on a CPU: ``JAX_PLATFORMS=cpu python3 scripts/tpu_gather_forms.py --calls 5 -- case=cylinder
case.bounce_back=halfway grid.nx=84 grid.ny=36``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def row_form(idx: np.ndarray, ny: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of (Q * nx, ny) that hold ``idx`` (flat slots), and each slot's flat position in those rows gathered."""
    rows = idx // ny
    unique, where = np.unique(rows, return_inverse=True)
    return unique.astype(np.int32), (where * ny + idx % ny).astype(np.int32)


def gathers(idx: np.ndarray, shape: tuple[int, ...]) -> dict[str, Callable[[Any], Any]]:
    """The gather forms (name -> function of the populations (Q, nx, ny) giving the slots' values, in idx's order)."""
    ny = int(np.prod(shape[2:]))
    flat = jnp.asarray(idx)
    order = np.argsort(idx, kind="stable")
    back = jnp.asarray(np.argsort(order).astype(np.int32))
    ordered = jnp.asarray(idx[order])
    rows, local = (jnp.asarray(a) for a in row_form(idx, ny))
    r2, c2 = jnp.asarray((idx // ny).astype(np.int32)), jnp.asarray((idx % ny).astype(np.int32))
    return {
        "element": lambda f: f.reshape(-1)[flat],
        "sorted": lambda f: f.reshape(-1).at[ordered].get(indices_are_sorted=True, unique_indices=True)[back],
        "rows": lambda f: jnp.take(f.reshape(-1, ny), rows, axis=0, unique_indices=True,
                                   indices_are_sorted=True).reshape(-1)[local],
        "2d": lambda f: f.reshape(-1, ny)[r2, c2],
    }


def scatters(idx: np.ndarray, shape: tuple[int, ...]) -> dict[str, Callable[[Any, Any], Any]]:
    """The scatter forms (name -> function of the populations and the slots' new values giving the populations)."""
    ny = int(np.prod(shape[2:]))
    flat = jnp.asarray(idx)
    rows, local = (jnp.asarray(a) for a in row_form(idx, ny))

    def by_rows(f: Any, v: Any) -> Any:
        g = f.reshape(-1, ny)
        block = jnp.take(g, rows, axis=0, unique_indices=True, indices_are_sorted=True).reshape(-1)
        block = block.at[local].set(v, unique_indices=True).reshape(-1, ny)
        return g.at[rows].set(block, unique_indices=True, indices_are_sorted=True).reshape(f.shape)

    return {"element": lambda f, v: f.reshape(-1).at[flat].set(v, unique_indices=True).reshape(f.shape),
            "rows": by_rows}


def timed(fn: Callable[[Any], Any], f: Any, calls: int, rounds: int = 3) -> float:
    """Microseconds per call of ``fn`` (populations -> populations), the median of ``rounds`` loops of ``calls``."""
    loop = jax.jit(lambda f: jax.lax.fori_loop(0, calls, lambda _, g: fn(g), f), donate_argnums=0)
    f = jax.block_until_ready(loop(f))  # compile and warm
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f = jax.block_until_ready(loop(f))
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return float(np.median(out))


def main(argv: list[str] | None = None) -> int:
    """Time every form on the plan of the configuration given; exit 1 where a form's values differ."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="+", help="one run configuration's overrides")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--scheme", default="aa_even", help="the slots' streaming scheme (push | aa_even | aa_odd)")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    from lbm.engines.plan import plan_block
    from lbm.simulation import prepare

    _, setup = prepare(a.overrides)
    lat, shape = setup.lattice, tuple(setup.shape)
    block = plan_block(lat, shape, setup.boundaries)
    slots = block.slots(a.scheme)
    gidx, widx = np.asarray(slots.gather).reshape(-1), np.asarray(slots.write).reshape(-1)
    rng = np.random.default_rng(0)
    f0 = rng.standard_normal((lat.q, *shape)).astype(np.float32)
    print(f"backend {jax.default_backend()}, jax {jax.__version__}; grid {'x'.join(map(str, shape))}, {lat.name}; "
          f"{block.cells.size} block cells; {gidx.size} gathered and {widx.size} written slots of {f0.size} "
          f"({len(row_form(gidx, int(np.prod(shape[1:])))[0])} and {len(row_form(widx, int(np.prod(shape[1:])))[0])}"
          f" rows of {int(np.prod(shape[1:]))})", flush=True)
    recs: dict[str, Any] = {"overrides": a.overrides, "grid": list(shape), "gathered": int(gidx.size),
                            "written": int(widx.size), "gather_us": {}, "scatter_us": {}}
    bad = 0
    ref = np.asarray(f0.reshape(-1)[gidx])
    for name, g in gathers(gidx, shape).items():
        same = np.array_equal(np.asarray(jax.jit(g)(jnp.asarray(f0))), ref)
        bad += not same
        us = timed(lambda f, g=g: f.at[(0,) * f.ndim].add(g(f).sum() * 1e-30), jnp.asarray(f0), a.calls)
        recs["gather_us"][name] = us
        print(f"gather  {name:8s} {us:10.1f} us per call{'' if same else '  VALUES DIFFER'}", flush=True)
    v = jnp.asarray(rng.standard_normal(widx.size).astype(np.float32))
    want = f0.reshape(-1).copy()
    want[widx] = np.asarray(v)
    for name, s in scatters(widx, shape).items():
        same = np.array_equal(np.asarray(jax.jit(s)(jnp.asarray(f0), v)).reshape(-1), want)
        bad += not same
        us = timed(lambda f, s=s: s(f, v + f[(0,) * f.ndim] * 1e-30), jnp.asarray(f0), a.calls)
        recs["scatter_us"][name] = us
        print(f"scatter {name:8s} {us:10.1f} us per call{'' if same else '  VALUES DIFFER'}", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(recs, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
