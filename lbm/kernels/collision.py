"""Stage ``collide``: BGK and TRT relaxation, with Guo's forcing term."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.kernels.equilibrium import velocity_dot
from lbm.lattice import CS2, Lattice


def bgk(f: jnp.ndarray, feq: jnp.ndarray, omega: float) -> jnp.ndarray:
    """BGK collision: f - omega (f - f_eq)."""
    return f - omega * (f - feq)


def trt(f: jnp.ndarray, feq: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float) -> jnp.ndarray:
    """Two-relaxation-time collision: symmetric part relaxed with omega+, antisymmetric with omega-."""
    opp = lattice.opposite
    neq = f - feq
    neq_opp = neq[opp]
    sym = 0.5 * (neq + neq_opp)
    anti = 0.5 * (neq - neq_opp)
    return f - omega_plus * sym - omega_minus * anti


def guo_source(
    u: jnp.ndarray, force: np.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float
) -> jnp.ndarray:
    """Guo forcing term with the relaxation prefactors of the symmetric and antisymmetric parts."""
    force = np.asarray(force, dtype=np.float64)
    uf = sum(float(force[a]) * u[a] for a in range(lattice.d) if force[a] != 0.0)
    terms = []
    for i in range(lattice.q):
        c_i = tuple(lattice.c[i].tolist())
        cf = float(np.dot(lattice.c[i], force))
        cu = velocity_dot(c_i, u)
        sym = float(lattice.w[i]) * (-uf / CS2 + cu * cf / CS2**2)
        anti = float(lattice.w[i]) * cf / CS2
        terms.append((1.0 - 0.5 * omega_plus) * sym + (1.0 - 0.5 * omega_minus) * anti)
    return jnp.stack(terms)


def collide(
    f: jnp.ndarray,
    feq: jnp.ndarray,
    u: jnp.ndarray,
    lattice: Lattice,
    omega_plus: float,
    omega_minus: float,
    force: np.ndarray | None = None,
) -> jnp.ndarray:
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
