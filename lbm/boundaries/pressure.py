"""Boundary condition ``PressureOutlet`` (stage ``outflow``): prescribed density on the face x = nx - 1 (Zou & He).

Zou & He's pressure condition, not anti-bounce-back, because:

- it acts on the outlet nodes themselves, before collision, like the zero-gradient outflow it
  replaces: the same stage (``outflow``), the same footprint (the last column, nothing else) and
  so the same block plan in every engine; anti-bounce-back acts after collision and needs a
  ghost column to reflect from plus an extrapolated wall velocity (cells two columns deep);
- it imposes the density exactly on the outlet nodes (anti-bounce-back imposes it half-way
  between nodes, to second order), which makes the outlet pressure a clean reference for Δp;
- it is the mirror image of the Zou–He velocity inlet already in lbm.boundaries.inlet, so both
  share one implementation (:func:`lbm.boundaries.inlet.face_unknowns`).

Rule, with the outlet seen from outside (directions mirrored in x so that it is an x = 0 face):
u_n = 1 - (Σ_tangential f + 2 Σ_leaving f) / ρ_out, the tangential velocity is zero, and the
unknown populations (those entering from outside, c_x < 0) are rebuilt by non-equilibrium
bounce-back, with Zou & He's transverse correction for ``kind="zou_he"`` (tangential velocity
exactly zero) or without it for ``kind="nebb"`` (tangential momentum left free). The pressure is
p = c_s² ρ_out.
"""

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
    directions,
    face_cells,
    pytree_dataclass,
    static,
)
from lbm.boundaries.forms import FaceCondition
from lbm.boundaries.inlet import face_unknowns, known_sum, put_face, take_face
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import Lattice

PRESSURE_KINDS = ("zou_he", "nebb")
"""How the unknown populations of the outlet face are built (see the module doc)."""


def mirror_x(lattice: Lattice) -> np.ndarray:
    """The permutation of directions that negates c_x (an involution)."""
    flipped = lattice.c * np.array([-1] + [1] * (lattice.d - 1))
    return np.array([int(np.flatnonzero((lattice.c == v).all(axis=1))[0]) for v in flipped])


def pressure_outlet_face(face: jnp.ndarray, rho_out: Any, lattice: Lattice, kind: str = "zou_he") -> jnp.ndarray:
    """Face populations ``(Q, *face)`` of the last column with the entering ones rebuilt for density ``rho_out``."""
    m = mirror_x(lattice)
    g = directions(face, m)  # seen from outside: the outlet is an x = 0 face whose unknowns have c_x > 0
    drho = jnp.broadcast_to(jnp.asarray(rho_out, face.dtype) - 1.0, face.shape[1:])
    un = (drho - known_sum(g, lattice)) / (1.0 + drho)  # 1 - (1 + known_sum) / rho: the deviations' form
    u = jnp.zeros((lattice.d,) + face.shape[1:], face.dtype).at[0].set(un)
    return directions(face_unknowns(g, drho, u, equilibrium(drho, u, lattice), lattice, kind), m)


def pressure_outlet(f: jnp.ndarray, rho_out: Any, lattice: Lattice, kind: str = "zou_he") -> jnp.ndarray:
    """Populations ``(Q, *grid)`` with the density ``rho_out`` (scalar or ``(*face)``) imposed on the last column."""
    return f.at[:, -1].set(pressure_outlet_face(f[:, -1], rho_out, lattice, kind))


@pytree_dataclass
class PressureOutlet(FaceCondition):
    """Density ``rho`` (scalar or shape ``(*face)``; pressure c_s² rho) imposed on the face x = nx - 1 (Zou & He)."""

    rho: Any = 1.0
    kind: str = static("zou_he")
    stage = "outflow"

    def __post_init__(self) -> None:
        if self.kind not in PRESSURE_KINDS:
            raise ValueError(f"pressure outlet kind must be one of {', '.join(PRESSURE_KINDS)}, not {self.kind!r}")

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Populations with the outlet's entering populations rebuilt for the prescribed density."""
        return s.replace(f=pressure_outlet(s.f, self.rho, lattice, self.kind))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the last column (a local rule: it reads nothing else)."""
        return Footprint(face=face_cells(shape, -1))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same rule on the gathered outlet cells."""
        return PressureOutletOnBlock(rho=self.rho, kind=self.kind, face=tuple(block.shape[1:]),
                                     cells=contiguous(block.index_of(face_cells(block.shape, -1))))


@pytree_dataclass
class PressureOutletOnBlock(PressureOutlet):
    """:class:`PressureOutlet` on gathered cells: ``cells`` is the block range of the face, in face order."""

    face: tuple[int, ...] = static(())
    cells: tuple[int, int] = static((0, 0))

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The dense rule on the face cells, laid out as a one-cell-thick face."""
        f = pressure_outlet(take_face(s.f, self.cells, self.face), self.rho, lattice, self.kind)
        return s.replace(f=put_face(s.f, self.cells, f))
