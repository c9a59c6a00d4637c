"""Boundary condition ``Outflow`` (stage ``outflow``): zero-gradient outlet on the face x = nx - 1."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    BulkRule,
    CellBlock,
    Footprint,
    StepState,
    contiguous,
    face_cells,
    flat_block,
    pytree_dataclass,
    static,
)
from lbm.boundaries.forms import FaceCondition
from lbm.lattice import Lattice


def outflow(f: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Zero-gradient outlet: unknown populations (c_x < 0) at the last column copy the column before."""
    unknown = np.flatnonzero(lattice.c[:, 0] < 0)
    return f.at[unknown, -1].set(f[unknown, -2])


@pytree_dataclass
class Outflow(FaceCondition):
    """Zero-gradient outlet at x = nx - 1 (populations entering from outside copy the upstream column)."""

    stage = "outflow"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Populations with the outlet's unknowns filled."""
        return s.replace(f=outflow(s.f, lattice))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the last column, reads the one before it."""
        return Footprint(face=face_cells(shape, -1), ghosts=face_cells(shape, -2))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The copy between the gathered outlet cells and their upstream neighbours."""
        return OutflowOnBlock(dst=contiguous(block.index_of(face_cells(block.shape, -1))),
                              src=contiguous(block.index_of(face_cells(block.shape, -2))))

    def bulk_rule(self) -> BulkRule:
        """A zero-gradient outflow the kernel applies on its last rows."""
        return BulkRule(outflow=True)


@pytree_dataclass
class OutflowOnBlock(BoundaryCondition):
    """:class:`Outflow` on gathered cells: the block ranges of the outlet cells and of their upstream cells."""

    dst: tuple[int, int] = static()
    src: tuple[int, int] = static()
    stage = "outflow"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Outlet unknowns copied from the upstream cells."""
        unknown = np.flatnonzero(lattice.c[:, 0] < 0)
        g = flat_block(s.f)
        copied = g[unknown, self.src[0]:self.src[1]]
        return s.replace(f=g.at[unknown, self.dst[0]:self.dst[1]].set(copied).reshape(s.f.shape))
