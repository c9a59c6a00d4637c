"""Block forms shared by the boundary conditions on a device mesh (lbm.engines.sharded).

A face condition on a mesh keeps its rule on the blocks that hold the grid's face (:class:`OnEdge` on the
block itself, :class:`OwnerOnly` on a block's gathered cells, :class:`FacePlane` on the block's own planes
inside its extended block); a condition that reads across block faces runs after the halo on the extended
block (:class:`OnExtended`); the momentum exchange sums each block's links over the mesh (:class:`BlockForces`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, CellBlock, Footprint, StepState, pytree_dataclass, static
from lbm.boundaries.forces import Forces
from lbm.kernels.forces import momentum_exchange
from lbm.lattice import Lattice

FACE_FIELDS = {"f": 1, "rho": 0, "u": 1, "feq": 1}
"""StepState arrays a face condition may write, with the array axis of grid x (also: their leading axes)."""


@pytree_dataclass
class OnEdge(BoundaryCondition):
    """A face condition of the grid face x = 0 (``side`` 0) or x = nx - 1 (``side`` -1), kept on the blocks holding it."""

    inner: Any
    side: int = static(0)
    blocks: int = static(1)

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def holds_face(self) -> jax.Array:
        """Whether this block (inside shard_map) holds the grid's face."""
        return jax.lax.axis_index("x") == (0 if self.side == 0 else self.blocks - 1)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner rule on the block's own face, kept only where the block holds the grid's face."""
        new = self.inner.apply(s, lattice)
        if self.blocks == 1:
            return new
        edge = self.holds_face()
        changes = {}
        for name, ax in FACE_FIELDS.items():
            old, upd = getattr(s, name), getattr(new, name)
            if upd is None or upd is old:
                continue
            i = 0 if self.side == 0 else old.shape[ax] - 1
            face = jnp.where(edge, jax.lax.slice_in_dim(upd, i, i + 1, axis=ax),
                             jax.lax.slice_in_dim(old, i, i + 1, axis=ax))
            changes[name] = jax.lax.dynamic_update_slice_in_dim(upd, face, i, axis=ax)
        return s.replace(**changes)


@pytree_dataclass
class OnExtended(BoundaryCondition):
    """A condition that reads across block faces, run after the halo on the extended block (its arrays laid out so).

    ``own_reads``: state arrays besides ``post`` that the rule reads on the block's own cells only, given to it
    zero-padded to the extended block (``ghosts`` cells per side and grid axis); ``ghost_reads``: those it also
    reads in the ghost layers, whose planes the ``halo`` exchanges (:func:`plane_extend`). ``per_block``: the
    inner condition's arrays carry a leading axis of one block per device (link lists re-mapped per block).
    """

    inner: Any
    own_reads: tuple[str, ...] = static(())
    ghost_reads: tuple[str, ...] = static(())
    ghosts: tuple[int, ...] = static(())
    per_block: bool = static(False)

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner (dense) rule on the extended block."""
        inner = jax.tree_util.tree_map(lambda a: a[0], self.inner) if self.per_block else self.inner
        if not self.own_reads:
            return inner.apply(s, lattice)
        padded = {name: jnp.pad(getattr(s, name), [(0, 0)] * (getattr(s, name).ndim - len(self.ghosts))
                                + [(g, g) for g in self.ghosts]) for name in self.own_reads}
        return inner.apply(s.replace(**padded), lattice).replace(**{name: getattr(s, name) for name in padded})


@pytree_dataclass
class BlockForces(BoundaryCondition):
    """Momentum exchange over the links whose fluid cell lies in the block, summed over all blocks (psum over
    ``axes``; none: the block's part).

    ``link_src`` indexes the block, ``link_dst`` the extended block; padding links have direction 0 (c = 0).
    """

    link_dir: Any
    link_src: Any
    link_dst: Any
    axes: tuple[str, ...] = static(())
    stage = "forces"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The state with the obstacle's total force (shape ``(D,)``), the same on every block."""
        force = momentum_exchange(s.collided, s.post, self.link_dir, self.link_src, self.link_dst, lattice)
        return s.replace(force=jax.lax.psum(force, self.axes) if self.axes else force)


@pytree_dataclass
class OwnerOnly(OnEdge):
    """A face condition's block form whose rule is kept only on the blocks holding the grid face x = 0 (``side`` 0)
    or x = nx - 1 (``side`` -1); elsewhere the cells keep what the other stages gave them."""

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner rule on the gathered cells, selected where this block holds the grid's face."""
        new = self.inner.apply(s, lattice)
        if self.blocks == 1:
            return new
        edge = self.holds_face()
        changes = {name: jnp.where(edge, getattr(new, name), getattr(s, name)) for name in FACE_FIELDS
                   if getattr(new, name) is not None and getattr(new, name) is not getattr(s, name)}
        return s.replace(**changes)


class ShiftedBlock:
    """A cell block seen through a grid of ``shape`` whose cell k is cell ``offset + k`` of the block's own grid
    (the planes of one block's own x-range inside its extended block, with the same trailing axes)."""

    def __init__(self, block: CellBlock, shape: tuple[int, ...], offset: int) -> None:
        self.block, self.shape, self.offset, self.lattice = block, shape, offset, block.lattice
        self.cells = np.asarray(block.cells, np.int64) - offset

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of cells ``flat`` of the shifted grid (all must be in the block)."""
        return self.block.index_of(np.asarray(flat, np.int64) + self.offset)

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell array ``(..., *shape)`` restricted to the block (zero at block cells outside ``shape``)."""
        values = np.asarray(values)
        lead = values.shape[: values.ndim - len(self.shape)]
        flat = values.reshape(lead + (-1,))
        inside = (self.cells >= 0) & (self.cells < flat.shape[-1])
        out = np.where(inside, flat[..., np.clip(self.cells, 0, flat.shape[-1] - 1)], 0)
        return out.reshape(lead + (self.cells.size,) + (1,) * (len(self.shape) - 1))


@pytree_dataclass
class FacePlane(BoundaryCondition):
    """A condition of the grid face x = 0 or x = nx - 1 on the block's own x-range inside its extended block
    (``own`` planes from plane ``lo``): every block holds its planes (one plan form for all), the rule acts on
    the blocks holding the grid's face (:class:`OwnerOnly`). The cells it reads are gathered with its face."""

    inner: Any
    lo: int = static(0)
    own: int = static(1)
    side: int = static(0)
    blocks: int = static(1)

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """The inner condition's cells on the block's own x-range, the cells it reads kept with its face."""
        offset = self.lo * math.prod(shape[1:])
        fp = self.inner.footprint((self.own, *shape[1:]), lattice)
        return Footprint(face=np.concatenate([fp.face, np.setdiff1d(fp.ghosts, fp.face)]) + offset,
                         cells=fp.cells + offset)

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The inner condition's block form, kept on the face's blocks."""
        shifted = ShiftedBlock(block, (self.own, *block.shape[1:]), self.lo * math.prod(block.shape[1:]))
        return OwnerOnly(inner=self.inner.on_block(shifted), side=self.side, blocks=self.blocks)


def padded_links(form: Any, length: int, spare: int) -> BoundaryCondition:
    """A block form with links (forces, interpolated walls) padded to ``length`` links that change nothing: direction
    0 (the rest population, c = 0: no force) on the padding cell at block position ``spare``, whose result is
    not kept. Forces become :class:`BlockForces` over no mesh axis: the block's part, summed after the chunk."""
    k = length - np.asarray(form.link_dir).size

    def pad(a: Any, value: int = 0) -> np.ndarray:
        a = np.asarray(a)
        return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, k)], constant_values=value)

    if isinstance(form, Forces):
        return BlockForces(link_dir=pad(form.link_dir).astype(np.int32), link_src=pad(form.link_src, spare).astype(np.int32),
                           link_dst=pad(form.link_dst, spare).astype(np.int32))
    return dataclasses.replace(form, link_dir=pad(form.link_dir), link_solid=pad(form.link_solid, spare),
                               link_fluid=pad(form.link_fluid, spare), link_far=pad(form.link_far, spare),
                               weights=pad(form.weights), q=pad(form.q))
