"""Stage ``equilibrium``: the second-order Maxwell-Boltzmann equilibrium, as a deviation from the rest state.

The populations every engine holds are deviations from the rest state (ρ = 1, u = 0), whose populations
are the lattice weights: f̃_i = f_i − w_i, and the density the stages carry is δρ = ρ − 1 (docs/physics.md,
"What the engines store"). Float arithmetic on these small deviations rounds far less than on f_i ≈ w_i: the
closed float32 cavity keeps its mass, float16 storage its accuracy. :func:`equilibrium` returns f̃_eq
directly (f_eq − w computed in one formula, not as a difference), :func:`rest` is the state subtracted,
:func:`absolute` and :func:`shifted` convert between the two representations.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice


def velocity_dot(c_i: tuple[int, ...], u: jnp.ndarray) -> jnp.ndarray:
    """c_i . u for a static integer velocity ``c_i``; shape = grid."""
    terms = [u[a] if ca > 0 else -u[a] for a, ca in enumerate(c_i) if ca != 0]
    if not terms:
        return jnp.zeros_like(u[0])
    return sum(terms[1:], terms[0])


def equilibrium_terms(drho: Any, u: Any, usq: Any, lattice: Lattice) -> list[Any]:
    """f_eq_i - w_i = w_i (δρ + ρ (3 cu + 9/2 cu^2 - 3/2 u^2)), ρ = 1 + δρ, one array per direction (``usq`` = u.u)."""
    base = -1.5 * usq
    rho = 1.0 + drho
    feq = []
    for i in range(lattice.q):
        w = float(lattice.w[i])
        if lattice.c[i].any():
            cu = velocity_dot(tuple(lattice.c[i].tolist()), u)
            feq.append(w * (drho + rho * (base + cu * (3.0 + 4.5 * cu))))
        else:
            feq.append(w * (drho + rho * base))
    return feq


def equilibrium(drho: jnp.ndarray, u: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Equilibrium deviations f_eq_i - w_i = w_i (δρ + ρ (3 cu + 9/2 cu^2 - 3/2 u^2)), ρ = 1 + δρ; ``(Q, *grid)``."""
    return jnp.stack(equilibrium_terms(drho, u, jnp.sum(u * u, axis=0), lattice))


def rest(lattice: Lattice, dtype: Any, ndim: int) -> np.ndarray:
    """Rest-state populations w_i, shaped to broadcast against arrays ``(Q, ...)`` of ``ndim`` dimensions."""
    return np.asarray(lattice.w, dtype).reshape((-1,) + (1,) * (ndim - 1))


def absolute(f: Any, lattice: Lattice) -> Any:
    """Populations f_i from their deviations f̃_i = f_i - w_i (``(Q, ...)``, a jax or numpy array)."""
    return f + rest(lattice, f.dtype, f.ndim)


def shifted(f: Any, lattice: Lattice) -> Any:
    """Deviations f_i - w_i (what the engines hold) of populations f_i (``(Q, ...)``, a jax or numpy array)."""
    return f - rest(lattice, f.dtype, f.ndim)
