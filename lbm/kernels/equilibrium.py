"""Stage ``equilibrium``: the second-order Maxwell-Boltzmann equilibrium."""

from __future__ import annotations

import jax.numpy as jnp

from lbm.lattice import Lattice


def velocity_dot(c_i: tuple[int, ...], u: jnp.ndarray) -> jnp.ndarray:
    """c_i . u for a static integer velocity ``c_i``; shape = grid."""
    terms = [u[a] if ca > 0 else -u[a] for a, ca in enumerate(c_i) if ca != 0]
    if not terms:
        return jnp.zeros_like(u[0])
    return sum(terms[1:], terms[0])


def equilibrium(rho: jnp.ndarray, u: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Equilibrium populations f_eq_i = w_i rho (1 + 3 cu + 9/2 cu^2 - 3/2 u^2), shape ``(Q, *grid)``."""
    usq = jnp.sum(u * u, axis=0)
    base = 1.0 - 1.5 * usq
    feq = []
    for i in range(lattice.q):
        cu = velocity_dot(tuple(lattice.c[i].tolist()), u)
        if lattice.c[i].any():
            feq.append(float(lattice.w[i]) * rho * (base + cu * (3.0 + 4.5 * cu)))
        else:
            feq.append(float(lattice.w[i]) * rho * base)
    return jnp.stack(feq)
