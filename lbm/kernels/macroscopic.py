"""Stage ``macroscopic``: density and velocity moments of the populations.

Written as unrolled sums of single populations (elementwise, no reduction over Q): XLA then
computes rho and u in one kernel that reads each population once (compiled for h100: one
multi-output loop fusion; a ``jnp.sum`` over Q became a reduction kernel of its own and the
stacked momentum a second kernel; docs/performance.md, "The xla engine on accelerators").
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice


def momentum(f: jnp.ndarray, lattice: Lattice) -> list[jnp.ndarray]:
    """The D components of the first moment sum_i c_i f_i, each shaped like the grid."""
    comps = []
    for a in range(lattice.d):
        terms = [f[i] if lattice.c[i, a] > 0 else -f[i] for i in range(lattice.q) if lattice.c[i, a] != 0]
        comps.append(sum(terms[1:], terms[0]))
    return comps


def macroscopic(
    f: jnp.ndarray, lattice: Lattice, force: np.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Density ``rho`` and velocity ``u`` (half-force shifted when a body force acts)."""
    rho = sum((f[i] for i in range(1, lattice.q)), f[0])
    mom = momentum(f, lattice)
    if force is not None:
        mom = [m + 0.5 * float(force[a]) if force[a] != 0 else m for a, m in enumerate(mom)]
    return rho, jnp.stack([m / rho for m in mom])
