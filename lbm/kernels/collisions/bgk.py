"""Single-relaxation-time BGK: f - omega (f - f_eq)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lbm.kernels.collisions.moments import Rate, _guo_raw, guo_source, smagorinsky_omega
from lbm.kernels.collisions.operator import Collision, CollisionOperator, register
from lbm.kernels.directions import Pops
from lbm.lattice import Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


def bgk(f: Pops, feq: Pops, omega: Rate) -> Pops:
    """BGK collision: f - omega (f - f_eq)."""
    return f - omega * (f - feq)



class Bgk(CollisionOperator):
    """BGK: one rate, 1/tau; the native kernel computes it from the rate pair (lbm.engines.native.codegen)."""

    name = "bgk"
    smagorinsky = True
    tau_warning = True

    def relaxation(self, omega: float, params: Any) -> tuple[float, Collision | None]:
        """omega- = omega, and no spec: the engines' BGK/TRT path of the rate pair."""
        return omega, None

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """BGK (with the Smagorinsky rate where the spec has a constant) and Guo's forcing term."""
        if spec.smagorinsky:
            omega = smagorinsky_omega(f, feq, u, lattice, spec.omega, spec.smagorinsky, force)
            out = f - omega * (f - feq)
            if force is not None:
                out = out + (1.0 - 0.5 * omega) * _guo_raw(u, force, lattice).astype(out.dtype)
            return out
        out = bgk(f, feq, spec.omega)
        if force is not None:
            out = out + guo_source(u, force, lattice, spec.omega, spec.omega).astype(out.dtype)
        return out


register(Bgk())
