"""Two-relaxation-time collision (and :func:`collide`, the BGK/TRT entry point of a rate pair), with Guo's forcing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lbm.kernels.collisions.bgk import Bgk, bgk
from lbm.kernels.collisions.moments import guo_source
from lbm.kernels.collisions.operator import Collision, CollisionOperator, rate, register
from lbm.kernels.directions import Pops
from lbm.lattice import Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


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



def traced_magic_rate(tau: Any, magic: float) -> Any:
    """omega- from the magic parameter and a (traced) tau: :func:`trt_omega_minus` written in tau, as differentiable
    runs compute it (not bitwise the same as trt_omega_minus(1/tau))."""
    return 1.0 / (0.5 + magic / (tau - 0.5))


def pair_kind(two_rates: bool) -> str:
    """The kind the rate-pair path runs (:func:`collide`): trt with two rates, else bgk."""
    return Trt.name if two_rates else Bgk.name


MAGIC = 0.1875
"""Lambda: 3/16 puts half-way bounce-back walls exactly half-way (the default of trt and mrt, written once)."""


@dataclass(frozen=True)
class TrtRates:
    """``collision=trt``: omega- from the magic parameter Lambda = (1/omega+ - 1/2)(1/omega- - 1/2)."""

    magic: float = rate(MAGIC)


class Trt(CollisionOperator):
    """TRT: the symmetric part at 1/tau, the antisymmetric at the rate the magic parameter gives."""

    name = "trt"
    Rates = TrtRates
    two_rates = True

    def recorded(self, params: Any) -> Any:
        """The magic parameter (a checkpoint's ``trt_magic``)."""
        return params.magic

    def traced_omega_minus(self, omega_plus: Any, tau: Any, params: Any) -> Any:
        """From the magic parameter and the traced tau."""
        return traced_magic_rate(tau, params.magic)

    def relaxation(self, omega: float, params: Any) -> tuple[float, Collision | None]:
        """omega- from ``params.magic``, and no spec: the engines' BGK/TRT path of the rate pair."""
        return trt_omega_minus(omega, params.magic), None

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """TRT with Guo's forcing term (BGK where the two rates are equal)."""
        return collide(f, feq, u, lattice, spec.omega, spec.rates()["odd"], force)


register(Trt())
