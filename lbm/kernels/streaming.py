"""Stage ``stream``: move each population one link along its velocity (periodic wrap)."""

from __future__ import annotations

import jax.numpy as jnp

from lbm.lattice import Lattice


def stream(f: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Pull streaming f_i(x) <- f_i(x - c_i) with periodic wrap on every axis."""
    axes = tuple(range(lattice.d))
    out = []
    for i in range(lattice.q):
        shift = tuple(int(s) for s in lattice.c[i])
        out.append(jnp.roll(f[i], shift, axis=axes) if any(shift) else f[i])
    return jnp.stack(out)
