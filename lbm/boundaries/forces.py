"""Boundary condition ``Forces`` (stage ``forces``): the force on an obstacle by momentum exchange."""

from __future__ import annotations

from typing import Any

import numpy as np

from lbm.boundaries.base import BoundaryCondition, CellBlock, Footprint, StepState, pytree_dataclass
from lbm.kernels.forces import boundary_links, momentum_exchange
from lbm.lattice import Lattice


@pytree_dataclass
class Forces(BoundaryCondition):
    """Momentum exchange over the links from fluid cells into an obstacle (direction, fluid cell, solid cell)."""

    link_dir: Any
    link_src: Any
    link_dst: Any
    stage = "forces"

    @classmethod
    def on(cls, obstacle: np.ndarray, lattice: Lattice) -> Forces:
        """The links of the surface of ``obstacle`` (a boolean mask)."""
        link_dir, link_src, link_dst = boundary_links(obstacle, ~obstacle, lattice)
        return cls(link_dir=link_dir, link_src=link_src, link_dst=link_dst)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The state with ``force`` (shape ``(D,)``) on the obstacle this step."""
        return s.replace(force=momentum_exchange(s.collided, s.post, self.link_dir, self.link_src, self.link_dst,
                                                 lattice))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Reads both ends of every link (they are written by the collision and the walls)."""
        ends = np.union1d(np.asarray(self.link_src, np.int64), np.asarray(self.link_dst, np.int64))
        return Footprint(cells=ends.astype(np.int64))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same links with block positions."""
        return Forces(link_dir=np.asarray(self.link_dir), link_src=block.index_of(np.asarray(self.link_src, np.int64)),
                      link_dst=block.index_of(np.asarray(self.link_dst, np.int64)))
