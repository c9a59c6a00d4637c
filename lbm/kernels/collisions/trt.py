"""Two-relaxation-time collision (and :func:`collide`, the BGK/TRT entry point of a rate pair), with Guo's forcing."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from lbm.kernels.collisions.bgk import bgk
from lbm.kernels.collisions.moments import guo_source
from lbm.kernels.directions import Pops
from lbm.lattice import Lattice


def trt(f: Pops, feq: Pops, lattice: Lattice, omega_plus: float, omega_minus: float) -> Pops:
    """Two-relaxation-time collision: symmetric part relaxed with omega+, antisymmetric with omega-."""
    opp = lattice.opposite
    neq = f - feq
    neq_opp = neq[opp]
    sym = 0.5 * (neq + neq_opp)
    anti = 0.5 * (neq - neq_opp)
    return f - omega_plus * sym - omega_minus * anti


def collide(
    f: Pops,
    feq: Pops,
    u: jnp.ndarray | Sequence[jnp.ndarray],
    lattice: Lattice,
    omega_plus: float,
    omega_minus: float,
    force: np.ndarray | None = None,
) -> Pops:
    """Post-collision populations: BGK when omega+ == omega-, else TRT; Guo forcing if ``force``."""
    if omega_plus == omega_minus:
        out = bgk(f, feq, omega_plus)
    else:
        out = trt(f, feq, lattice, omega_plus, omega_minus)
    if force is not None:
        out = out + guo_source(u, force, lattice, omega_plus, omega_minus).astype(out.dtype)
    return out


def trt_omega_minus(omega_plus: float, magic: float) -> float:
    """Antisymmetric rate omega- from omega+ and the magic parameter Lambda=(1/w+ - 1/2)(1/w- - 1/2)."""
    tau_minus = 0.5 + magic / (1.0 / omega_plus - 0.5)
    return 1.0 / tau_minus

