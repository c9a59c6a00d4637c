"""The collision spec: a kind and its relaxation rates (static, hashable: closed over by jit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from lbm.kernels.collisions.cumulant import cumulant
from lbm.kernels.collisions.kbc import kbc
from lbm.kernels.collisions.moments import _guo_raw, smagorinsky_omega
from lbm.kernels.collisions.mrt import mrt
from lbm.kernels.collisions.regularized import regularized
from lbm.kernels.collisions.trt import collide
from lbm.kernels.directions import Pops
from lbm.lattice import Lattice

COLLISION_KINDS = ("bgk", "trt", "mrt", "regularized", "recursive_regularized", "kbc", "cumulant")
"""Collision operators :class:`Collision` implements."""


@dataclass(frozen=True)
class Collision:
    """A collision operator and its relaxation rates (static, hashable: closed over by jit).

    kind         bgk | trt | mrt | regularized | recursive_regularized | kbc | cumulant (D2Q9, D3Q27)
    omega        shear rate 1/tau (sets the viscosity nu = cs2 (1/omega - 1/2))
    omega_minus  trt: the antisymmetric rate; mrt: the rate of the odd ghost moments (energy flux q, ...);
                 None = omega
    bulk         mrt: rate of the trace of the second moment (bulk viscosity); None = omega
    ghost        mrt: rate of the even ghost moments (degree >= 4, e.g. eps); None = omega
    smagorinsky  Smagorinsky constant C_s (0 = off): omega is lowered per cell from the local
                 non-equilibrium stress (bgk, mrt's shear moments, regularized, recursive_regularized)
    """

    kind: str = "bgk"
    omega: float = 1.0
    omega_minus: float | None = None
    bulk: float | None = None
    ghost: float | None = None
    smagorinsky: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in COLLISION_KINDS:
            raise ValueError(f"collision kind must be one of {', '.join(COLLISION_KINDS)}, not {self.kind!r}")
        for name in ("omega", "omega_minus", "bulk", "ghost"):
            rate = getattr(self, name)
            if rate is not None and not 0.0 < rate < 2.0:
                raise ValueError(f"collision rate {name}={rate!r} must lie in (0, 2)")
        if not self.smagorinsky >= 0.0:
            raise ValueError(f"smagorinsky constant must be >= 0, not {self.smagorinsky!r}")
        if self.smagorinsky and self.kind in ("trt", "kbc", "cumulant"):
            raise ValueError(f"the Smagorinsky model applies to bgk, mrt and the regularized kinds, not {self.kind}")

    @classmethod
    def bgk_trt(cls, omega_plus: float, omega_minus: float) -> Collision:
        """The spec :func:`collide` computes: BGK when the two rates are equal, else TRT."""
        if omega_plus == omega_minus:
            return cls("bgk", omega_plus)
        return cls("trt", omega_plus, omega_minus)

    def rates(self) -> dict[str, float]:
        """Relaxation rate of each moment class (conserved moments: 0, their change is the force's moment)."""
        shear = self.omega
        return {
            "density": 0.0, "momentum": 0.0, "bulk": shear if self.bulk is None else self.bulk, "shear": shear,
            "odd": shear if self.omega_minus is None else self.omega_minus,
            "even": shear if self.ghost is None else self.ghost,
        }

    def __call__(
        self, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
        force: np.ndarray | None = None,
    ) -> Pops:
        """Post-collision populations (in the form of ``f``), with Guo's forcing term when ``force`` is given."""
        if self.kind == "mrt":
            return mrt(f, feq, u, lattice, self, force)
        if self.kind in ("regularized", "recursive_regularized"):
            return regularized(f, feq, u, lattice, self.omega, force, self.smagorinsky, self.bulk,
                               recursive=self.kind == "recursive_regularized")
        if self.kind == "kbc":
            return kbc(f, feq, u, lattice, self.omega, force)
        if self.kind == "cumulant":
            return cumulant(f, feq, u, lattice, self.omega, force)
        if self.smagorinsky:
            omega = smagorinsky_omega(f, feq, u, lattice, self.omega, self.smagorinsky, force)
            out = f - omega * (f - feq)
            if force is not None:
                out = out + (1.0 - 0.5 * omega) * _guo_raw(u, force, lattice).astype(out.dtype)
            return out
        return collide(f, feq, u, lattice, self.omega, self.omega if self.kind == "bgk" else self.rates()["odd"],
                       force)

