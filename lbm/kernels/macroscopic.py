"""Stage ``macroscopic``: density and velocity moments of the populations.

How the moments are written decides how XLA fuses them (compiled for h100; docs/performance.md,
"The xla engine on accelerators: variants tried"). In 2D, unrolled sums of single populations
(elementwise, no reduction over Q): XLA computes rho and u in one kernel that reads each
population once (a ``jnp.sum`` over Q was a reduction kernel of its own, the stacked momentum a
second kernel). In 3D it keeps rho apart from u in every elementwise form, reading the populations
once more; there one matrix product with the (D+1) x Q matrix [1; c] gives rho and the momentum
in one kernel.

The populations are deviations from the rest state, f̃_i = f_i - w_i (lbm.kernels.equilibrium): their sum is
the density deviation δρ = ρ - 1, their first moment the momentum (the weights carry none).
"""

from __future__ import annotations

import jax
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


def density_momentum(f: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, list[jnp.ndarray]]:
    """Density deviation δρ = sum_i f̃_i and the D momentum components sum_i c_i f̃_i."""
    if lattice.d == 2:
        return sum((f[i] for i in range(1, lattice.q)), f[0]), momentum(f, lattice)
    basis = np.concatenate([np.ones((1, lattice.q)), lattice.c.T]).astype(f.dtype)
    m = jnp.einsum("mq,q...->m...", basis, f, precision=jax.lax.Precision.HIGHEST)
    return m[0], [m[1 + a] for a in range(lattice.d)]


def macroscopic(
    f: jnp.ndarray, lattice: Lattice, force: np.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Density deviation ``drho`` = ρ - 1 and velocity ``u`` (half-force shifted when a body force acts)."""
    drho, mom = density_momentum(f, lattice)
    if force is not None:
        mom = [m + 0.5 * float(force[a]) if force[a] != 0 else m for a, m in enumerate(mom)]
    rho = 1.0 + drho
    return drho, jnp.stack([m / rho for m in mom])
