"""One cell's macroscopic + equilibrium + collide, on per-direction arrays: the body of the Pallas bulk kernels.

Pallas kernels hold the populations as Q arrays (a cell block per direction), not as one
``(Q, ...)`` array: Triton needs power-of-two tensor shapes and TPU vector registers hold a tile of
cells per direction. The reference physics is lbm.kernels (jax.numpy; the xla engine runs it). This
body calls it where a list of arrays allows: the momentum (lbm.kernels.macroscopic.momentum),
c_i . u (lbm.kernels.equilibrium.velocity_dot) and every collision operator with its forcing
(lbm.kernels.collisions, on :class:`~lbm.kernels.directions.Directions`). The density and the
equilibrium are written here in the reference's formulas and order of operations:
lbm.kernels.macroscopic (a matrix product over Q in 3D) and lbm.kernels.equilibrium (``jnp.sum``
and ``jnp.stack`` over Q) take stacked arrays, which a Triton kernel cannot hold.

Tests pin a Pallas step to the xla step to rounding: tests/engines/pallas/test_engines_pallas.py
(``test_kernels_equal_collide_then_stream`` on one periodic step, ``test_flat_kernel_engine_equals_the_reference``
on whole cases, BGK and TRT) and tests/engines/pallas/test_pallas_collisions.py (every other collision kind).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lbm.kernels.collisions import Collision, collide
from lbm.kernels.directions import Directions
from lbm.kernels.equilibrium import equilibrium_terms
from lbm.kernels.macroscopic import momentum
from lbm.lattice import Lattice


def equilibrium_directions(drho: Any, u: Sequence[Any], lattice: Lattice) -> Directions:
    """f_eq_i - w_i = w_i (δρ + ρ (3 cu + 9/2 cu^2 - 3/2 u^2)) per direction, as lbm.kernels.equilibrium.equilibrium."""
    return Directions(equilibrium_terms(drho, u, sum((v * v for v in u[1:]), u[0] * u[0]), lattice))


def collide_cell(f: Sequence[Any], lattice: Lattice, omega_plus: float, omega_minus: float,
                 force: np.ndarray | None, collision: Collision | None = None) -> list[Any]:
    """Post-collision populations of the cells in ``f`` (one array per direction, all the same shape), as every
    engine holds them: deviations f - w from the rest state (lbm.kernels.equilibrium).

    ``collision`` None: BGK when the two rates are equal, else TRT (lbm.kernels.collisions.collide); else that
    operator (any kind of lbm.kernels.collisions.COLLISION_KINDS).
    """
    f = Directions(f)
    drho = sum(f[1:], f[0])
    mom = momentum(f, lattice)
    if force is not None:
        mom = [m + 0.5 * float(force[a]) if force[a] != 0 else m for a, m in enumerate(mom)]
    rho = 1.0 + drho
    u = tuple(m / rho for m in mom)
    feq = equilibrium_directions(drho, u, lattice)
    if collision is None:
        return list(collide(f, feq, u, lattice, omega_plus, omega_minus, force))
    return list(collision(f, feq, u, lattice, force))
