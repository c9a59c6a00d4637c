"""Boundary condition ``Inlet`` (stage ``inlet``): prescribed velocity on the face x = 0."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    CellBlock,
    Footprint,
    StepState,
    contiguous,
    face_cells,
    flat_block,
    pytree_dataclass,
    static,
)
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import Lattice

INLET_KINDS = ("zou_he", "nebb", "equilibrium")
"""How the unknown populations of the inlet face are built (see :func:`inlet`)."""


def inlet_density(f0: jnp.ndarray, ux: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Density at the x = 0 face implied by the known populations and a prescribed u_x (Zou-He)."""
    tangential = np.flatnonzero(lattice.c[:, 0] == 0)
    leaving = np.flatnonzero(lattice.c[:, 0] < 0)
    return (jnp.sum(f0[tangential], axis=0) + 2.0 * jnp.sum(f0[leaving], axis=0)) / (1.0 - ux)


def inlet(
    f: jnp.ndarray,
    rho: jnp.ndarray,
    u: jnp.ndarray,
    feq: jnp.ndarray,
    u_in: jnp.ndarray,
    lattice: Lattice,
    kind: str = "zou_he",
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Prescribed velocity ``u_in`` (shape ``(D, *face)``) on the x = 0 face; returns updated f, rho, u, feq.

    ``nebb``: density from the known populations, unknown populations (c_x > 0) by
    non-equilibrium bounce-back f_i = feq_i + f_opp(i) - feq_opp(i) (the scheme of
    Palabos' lbmFlowAroundCylinder.py, which calls it Zou/He); imposes u_x exactly.
    ``zou_he``: the same plus Zou & He's transverse correction (Hecht & Harting's
    form for 3D), so every velocity component is imposed exactly.
    ``equilibrium``: all populations at the face set to the equilibrium.
    """
    rho0 = inlet_density(f[:, 0], u_in[0], lattice)
    feq0 = equilibrium(rho0, u_in, lattice)
    rho = rho.at[0].set(rho0)
    u = u.at[:, 0].set(u_in)
    feq = feq.at[:, 0].set(feq0)
    if kind == "equilibrium":
        return f.at[:, 0].set(feq0), rho, u, feq
    c = lattice.c
    unknown = np.flatnonzero(c[:, 0] > 0)
    opp = lattice.opposite[unknown]
    f0 = f[:, 0].at[unknown].set(feq0[unknown] + f[opp, 0] - feq0[opp])
    if kind == "zou_he":
        for t in range(1, lattice.d):
            moving = [i for i in unknown if c[i, t] != 0]
            carriers = np.flatnonzero(c[:, t] != 0)
            mom = sum(float(c[j, t]) * f0[j] for j in carriers)
            excess = mom - rho0 * u_in[t]
            share = jnp.asarray(c[moving, t] / len(moving), f0.dtype).reshape((-1,) + (1,) * (lattice.d - 1))
            f0 = f0.at[np.array(moving)].add(-excess * share)
    return f.at[:, 0].set(f0), rho, u, feq


@pytree_dataclass
class Inlet(BoundaryCondition):
    """Velocity ``u`` (shape ``(D, *face)``) imposed on the face x = 0 by the scheme ``kind`` (INLET_KINDS)."""

    u: Any
    kind: str = static("zou_he")
    stage = "inlet"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Face populations, density, velocity and equilibrium with the inflow imposed."""
        f, rho, u, feq = inlet(s.f, s.rho, s.u, s.feq, self.u, lattice, self.kind)
        return s.replace(f=f, rho=rho, u=u, feq=feq)

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the face x = 0."""
        return Footprint(face=face_cells(shape, 0))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same inflow on the gathered face cells."""
        return InletOnBlock(u=self.u, cells=contiguous(block.index_of(face_cells(block.shape, 0))), kind=self.kind)


@pytree_dataclass
class InletOnBlock(BoundaryCondition):
    """:class:`Inlet` on gathered cells: ``cells`` is the block range of the face, in face order."""

    u: Any
    cells: tuple[int, int] = static()
    kind: str = static("zou_he")
    stage = "inlet"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The dense rule on the face cells, laid out as a one-cell-thick face."""
        face = self.u.shape[1:]

        lo, hi = self.cells

        def take(a: jnp.ndarray) -> jnp.ndarray:
            return flat_block(a)[:, lo:hi].reshape((a.shape[0], 1, *face))

        def put(a: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
            return flat_block(a).at[:, lo:hi].set(v.reshape(a.shape[0], -1)).reshape(a.shape)

        rho = s.rho[None]
        f, r, u, feq = inlet(take(s.f), take(rho)[0], take(s.u), take(s.feq), self.u, lattice, self.kind)
        return s.replace(f=put(s.f, f), rho=put(rho, r[None])[0], u=put(s.u, u), feq=put(s.feq, feq))
