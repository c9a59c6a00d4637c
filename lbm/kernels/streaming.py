"""Stage ``stream``: move each population one link along its velocity (periodic wrap); :func:`streamed`, the same
with its transpose as a hand-written adjoint (what a differentiable run streams with)."""

from __future__ import annotations

import functools

import jax
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


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def streamed(post: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """lbm.kernels.streaming.stream (pull, periodic) with its transpose, the pull from x + c_i, as its adjoint."""
    return stream(post, lattice)


def _streamed_fwd(post: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, None]:
    return stream(post, lattice), None


def _streamed_bwd(lattice: Lattice, res: None, ct: jnp.ndarray) -> tuple[jnp.ndarray]:
    axes = tuple(range(lattice.d))
    out = []
    for i in range(lattice.q):
        shift = tuple(-int(s) for s in lattice.c[i])
        out.append(jnp.roll(ct[i], shift, axis=axes) if any(shift) else ct[i])
    return (jnp.stack(out),)


streamed.defvjp(_streamed_fwd, _streamed_bwd)
