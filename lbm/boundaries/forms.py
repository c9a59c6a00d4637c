"""Mesh forms shared by the boundary conditions on a device mesh (lbm.engines.sharded).

A face condition on a mesh keeps its rule on the shards that hold the grid's face (:class:`OnEdge` on the
shard itself, :class:`OwnerOnly` on a shard's gathered cells, :class:`FacePlane` on the shard's own planes
inside its extended shard); a condition that reads across shard faces runs after the halo on the extended
shard (:class:`OnExtended`); the momentum exchange sums each shard's links over the mesh (:class:`ShardForces`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    CellBlock,
    Footprint,
    FormUnavailable,
    MeshLayout,
    StepState,
    pytree_dataclass,
    static,
)
from lbm.kernels.forces import momentum_exchange
from lbm.lattice import Lattice

FACE_FIELDS = {"f": 1, "drho": 0, "u": 1, "feq": 1}
"""StepState arrays a face condition may write, with the array axis of grid x (also: their leading axes)."""


@pytree_dataclass
class OnEdge(BoundaryCondition):
    """A face condition of the grid face x = 0 (``side`` 0) or x = nx - 1 (``side`` -1), kept on the shards holding it."""

    inner: Any
    side: int = static(0)
    shards: int = static(1)

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def holds_face(self) -> jax.Array:
        """Whether this shard (inside shard_map) holds the grid's face."""
        return jax.lax.axis_index("x") == (0 if self.side == 0 else self.shards - 1)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner rule, its changes kept only where this shard holds the grid's face (:meth:`kept`)."""
        new = self.inner.apply(s, lattice)
        if self.shards == 1:
            return new
        edge = self.holds_face()
        changes = {}
        for name, ax in FACE_FIELDS.items():
            old, upd = getattr(s, name), getattr(new, name)
            if upd is not None and upd is not old:
                changes[name] = self.kept(edge, old, upd, ax)
        return s.replace(**changes)

    def kept(self, edge: jax.Array, old: jax.Array, upd: jax.Array, ax: int) -> jax.Array:
        """``upd`` on the shard's own face plane (grid axis x at array axis ``ax``) where ``edge``, else ``old``."""
        i = 0 if self.side == 0 else old.shape[ax] - 1
        face = jnp.where(edge, jax.lax.slice_in_dim(upd, i, i + 1, axis=ax), jax.lax.slice_in_dim(old, i, i + 1, axis=ax))
        return jax.lax.dynamic_update_slice_in_dim(upd, face, i, axis=ax)


@pytree_dataclass
class OnExtended(BoundaryCondition):
    """A condition that reads across shard faces, run after the halo on the extended shard (its arrays laid out so).

    ``own_reads``: state arrays besides ``post`` that the rule reads on the shard's own cells only, given to it
    zero-padded to the extended shard (``ghosts`` cells per side and grid axis); ``ghost_reads``: those it also
    reads in the ghost layers, whose planes the ``halo`` exchanges (lbm.engines.sharded.halo.extend). ``per_shard``: the
    inner condition's arrays carry a leading axis of one shard per device (link lists re-mapped per shard).
    """

    inner: Any
    own_reads: tuple[str, ...] = static(())
    ghost_reads: tuple[str, ...] = static(())
    ghosts: tuple[int, ...] = static(())
    per_shard: bool = static(False)
    after_halo = True

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner (dense) rule on the extended shard."""
        inner = jax.tree_util.tree_map(lambda a: a[0], self.inner) if self.per_shard else self.inner
        if not self.own_reads:
            return inner.apply(s, lattice)
        padded = {name: jnp.pad(getattr(s, name), [(0, 0)] * (getattr(s, name).ndim - len(self.ghosts))
                                + [(g, g) for g in self.ghosts]) for name in self.own_reads}
        return inner.apply(s.replace(**padded), lattice).replace(**{name: getattr(s, name) for name in padded})


@pytree_dataclass
class ShardForces(BoundaryCondition):
    """Momentum exchange over the links whose fluid cell lies in the shard, summed over all shards (psum over
    ``axes``; none: the shard's part).

    ``link_src`` indexes the shard, ``link_dst`` the extended shard; padding links have direction 0 (c = 0).
    """

    link_dir: Any
    link_src: Any
    link_dst: Any
    axes: tuple[str, ...] = static(())
    stage = "forces"
    after_halo = True

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The state with the obstacle's total force (shape ``(D,)``), the same on every shard."""
        force = momentum_exchange(s.collided, s.post, self.link_dir, self.link_src, self.link_dst, lattice)
        return s.replace(force=jax.lax.psum(force, self.axes) if self.axes else force)


@pytree_dataclass
class OwnerOnly(OnEdge):
    """A face condition's block form whose rule is kept only on the shards holding the grid face x = 0 (``side`` 0)
    or x = nx - 1 (``side`` -1); elsewhere the cells keep what the other stages gave them."""

    def kept(self, edge: jax.Array, old: jax.Array, upd: jax.Array, ax: int) -> jax.Array:
        """``upd`` on every gathered cell where ``edge``, else ``old``."""
        return jnp.where(edge, upd, old)


class ShiftedBlock:
    """A cell block seen through a grid of ``shape`` whose cell k is cell ``offset + k`` of the block's own grid
    (the planes of one shard's own x-range inside its extended shard, with the same trailing axes)."""

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
    """A condition of the grid face x = 0 or x = nx - 1 on the shard's own x-range inside its extended shard
    (``own`` planes from plane ``lo``): every shard holds its planes (one plan form for all), the rule acts on
    the shards holding the grid's face (:class:`OwnerOnly`). The cells it reads are gathered with its face."""

    inner: Any
    lo: int = static(0)
    own: int = static(1)
    side: int = static(0)
    shards: int = static(1)

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """The inner condition's cells on the shard's own x-range, the cells it reads kept with its face."""
        offset = self.lo * math.prod(shape[1:])
        fp = self.inner.footprint((self.own, *shape[1:]), lattice)
        return Footprint(face=np.concatenate([fp.face, np.setdiff1d(fp.ghosts, fp.face)]) + offset,
                         cells=fp.cells + offset)

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The inner condition's block form, kept on the face's shards."""
        shifted = ShiftedBlock(block, (self.own, *block.shape[1:]), self.lo * math.prod(block.shape[1:]))
        return OwnerOnly(inner=self.inner.on_block(shifted), side=self.side, shards=self.shards)


def pad_links(a: Any, length: int, value: int = 0) -> np.ndarray:
    """A link array ``(..., L)`` padded to ``length`` links with ``value``."""
    a = np.asarray(a)
    return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, length - a.shape[-1])], constant_values=value)


class FaceCondition(BoundaryCondition):
    """A condition of the grid face x = 0 or x = nx - 1 whose rule reads only planes near that face: on a mesh it
    acts on the shards that hold the face (:class:`OnEdge`; in a shard's plan :class:`FacePlane`)."""

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The rule on every shard's own face planes, kept on the shards holding the grid's face."""
        return OnEdge(inner=mesh.on_face(self, dtype), side=mesh.owns_planes(self, lattice), shards=mesh.shape[0])

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The rule on the shard's own x-range of planes (:class:`FacePlane`), kept on the face's shards."""
        return self.face_plane(mesh, lattice)

    def face_plane(self, mesh: MeshLayout, lattice: Lattice) -> FacePlane:
        """This condition (its arrays as the shard sees them) as a :class:`FacePlane` of the shard's own planes."""
        face = self.footprint(mesh.grid_shape, lattice).face
        x = np.unique(np.unravel_index(face, mesh.grid_shape)[0])
        if x.size != 1 or x[0] not in (0, mesh.grid_shape[0] - 1):
            raise FormUnavailable(f"{type(self).__name__}: a face that is not the grid face x = 0 or x = nx - 1")
        return FacePlane(inner=self, lo=1 if mesh.shape[0] > 1 else 0, own=mesh.shard[0],
                         side=0 if x[0] == 0 else -1, shards=mesh.shape[0])


__all__ = ["FACE_FIELDS", "FaceCondition", "FacePlane", "OnEdge", "OnExtended", "OwnerOnly", "ShardForces",
           "ShiftedBlock", "pad_links"]
