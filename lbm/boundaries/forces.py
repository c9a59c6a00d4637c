"""Boundary condition ``Forces`` (stage ``forces``): the force on an obstacle by momentum exchange."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    BulkRule,
    CellBlock,
    Footprint,
    FormUnavailable,
    MeshLayout,
    StepState,
    pytree_dataclass,
)
from lbm.boundaries.forms import ShardForces, pad_links
from lbm.kernels.forces import boundary_links, momentum_exchange
from lbm.lattice import Lattice


@pytree_dataclass
class Forces(BoundaryCondition):
    """Momentum exchange over the links from fluid cells into an obstacle (direction, fluid cell, solid cell)."""

    link_dir: Any
    link_src: Any
    link_dst: Any
    stage = "forces"
    box_form = True

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

    def bulk_rule(self) -> BulkRule:
        """A momentum exchange the kernel's post-step populations give."""
        return BulkRule(links=True)

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The links split by the shard of their fluid cell, padded to one length, summed over the shards."""
        if np.any(lattice.c[0]):
            raise FormUnavailable("the sharded forces pad with population 0, which must be the rest population")
        dirs, owner_flat, src_flat, dst_flat = mesh.links(self, lattice)
        count = math.prod(mesh.shape)
        length = max(1, int(np.bincount(owner_flat, minlength=count).max()) if dirs.size else 1)
        out = np.zeros((3, count, length), np.int32)
        for b in range(count):
            sel = owner_flat == b
            k = int(sel.sum())
            out[0, b, :k], out[1, b, :k], out[2, b, :k] = dirs[sel], src_flat[sel], dst_flat[sel]
        placed = [mesh.per_device(a.reshape(-1)) for a in out]
        return ShardForces(link_dir=placed[0], link_src=placed[1], link_dst=placed[2], axes=mesh.mesh_axes)

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The links whose fluid cell shard ``coords`` owns, as cells of its extended shard."""
        dirs, owner, _, dst = mesh.links(self, lattice)
        mine = owner == np.ravel_multi_index(coords, mesh.shape)
        src, _ = mesh.to_extended(np.asarray(self.link_src, np.int64)[mine], coords)
        return dataclasses.replace(self, link_dir=dirs[mine], link_src=src, link_dst=dst[mine])

    def link_count(self) -> int:
        """The number of links."""
        return int(np.asarray(self.link_dir).size)

    def padded(self, length: int, spare: int) -> BoundaryCondition:
        """A :class:`~lbm.boundaries.forms.ShardForces` over no mesh axis (the shard's part, summed after the chunk),
        padded with direction 0 (the rest population, c = 0: no force) on the padding cell."""
        return ShardForces(link_dir=pad_links(self.link_dir, length).astype(np.int32),
                           link_src=pad_links(self.link_src, length, spare).astype(np.int32),
                           link_dst=pad_links(self.link_dst, length, spare).astype(np.int32))
