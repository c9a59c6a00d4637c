"""Stage ``macroscopic``: density and velocity moments of the populations."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice


def momentum(f: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """First moment sum_i c_i f_i, shape ``(D, *grid)``."""
    comps = []
    for a in range(lattice.d):
        terms = [f[i] if lattice.c[i, a] > 0 else -f[i] for i in range(lattice.q) if lattice.c[i, a] != 0]
        comps.append(sum(terms[1:], terms[0]))
    return jnp.stack(comps)


def macroscopic(
    f: jnp.ndarray, lattice: Lattice, force: np.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Density ``rho`` and velocity ``u`` (half-force shifted when a body force acts)."""
    rho = jnp.sum(f, axis=0)
    mom = momentum(f, lattice)
    if force is not None:
        mom = mom + 0.5 * jnp.asarray(force, f.dtype).reshape((-1,) + (1,) * lattice.d)
    return rho, mom / rho
