"""How one grid is split over a device mesh: the layout of shards, and what every engine on a mesh shares."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lbm import parallel
from lbm.boundaries.base import BoundaryCondition, StepState
from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable
from lbm.lattice import Lattice


class Layout:
    """How one grid is split: the mesh, its shape per grid axis, and the placement of per-shard arrays.

    ``devices`` (default: JAX's) may be those of a deviceless topology (lbm.bench.inspect): per-shard
    arrays are then described (shape, dtype, sharding) instead of placed, which is all a compile needs.
    """

    def __init__(self, setup: Setup, shape: tuple[int, ...], devices: Any = None) -> None:
        self.setup, self.shape = setup, tuple(shape) + (1,) * (len(setup.shape) - len(shape))
        self.mesh = parallel.make_mesh(self.shape, devices)
        self._place = parallel.place if devices is None else parallel.describe_placement
        self.ndim = len(self.shape)
        self.shard = tuple(n // m for n, m in zip(setup.shape, self.shape, strict=True))
        self.ext = tuple(b + 2 if m > 1 else b for b, m in zip(self.shard, self.shape, strict=True))
        self.sharded_axes = tuple(parallel.AXES[a] for a, m in enumerate(self.shape) if m > 1)
        self.mesh_axes = parallel.AXES[: self.ndim]
        self.grid_shape = tuple(setup.shape)

    def spec(self, lead: int = 1) -> P:
        """PartitionSpec of an array ``(*lead, *grid)``."""
        return parallel.grid_spec(self.ndim, lead)

    def sharding(self, lead: int = 1) -> NamedSharding:
        """NamedSharding of an array ``(*lead, *grid)``."""
        return NamedSharding(self.mesh, self.spec(lead))

    def grid(self, a: Any, lead: int = 1) -> jax.Array:
        """A per-cell array ``(*lead, *grid)`` sharded like the grid."""
        return self._place(a, self.mesh, self.spec(lead))

    def extended(self, a: Any, lead: int = 1) -> jax.Array:
        """A per-cell array laid out as extended shards (periodic ghost layers), one per device."""
        return self._place(parallel.extended(np.asarray(a), self.shape, lead), self.mesh, self.spec(lead))

    def face(self, u: Any) -> jax.Array:
        """An array ``(*lead, *face)`` on the face x = const, sharded along the face's own grid axes."""
        u = np.asarray(u)
        lead = u.ndim - (self.ndim - 1)
        if lead < 0 or u.shape[lead:] != tuple(self.setup.shape[1:]):
            raise EngineUnavailable(f"an array of shape {u.shape} on a face of {self.setup.shape[1:]} cells")
        return self._place(u, self.mesh, P(*([None] * lead), *parallel.AXES[1:self.ndim]))

    def on_face(self, bc: BoundaryCondition, dtype: Any) -> BoundaryCondition:
        """A face condition with its arrays placed: those on the face sharded along its grid axes (:meth:`face`),
        scalars replicated (Python floats in the compute ``dtype``, as jit would take them)."""
        def put(a: Any) -> Any:
            if np.ndim(a):
                return self.face(a)
            host = np.asarray(a, dtype) if isinstance(a, float) else np.asarray(a)
            return self._place(host, self.mesh, P())
        return jax.tree_util.tree_map(put, bc)

    def owns_planes(self, bc: BoundaryCondition, lattice: Lattice) -> int:
        """The side (0: x = 0, -1: x = nx - 1) of a face condition whose cells (written and read) lie in the first
        or last shard along x; EngineUnavailable otherwise."""
        fp = bc.footprint(self.setup.shape, lattice)
        x = np.unravel_index(np.concatenate([fp.face, fp.cells, fp.ghosts]), self.setup.shape)[0]
        nx, bx = self.setup.shape[0], self.shard[0]
        if x.size and x.max() < bx and 0 in x:
            return 0
        if x.size and x.min() >= nx - bx and nx - 1 in x:
            return -1
        raise EngineUnavailable(f"{type(bc).__name__} reads planes beyond the first or last shard along x "
                                f"(shards of {bx} planes)")

    def links(self, bc: Any, lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The obstacle's links split by the shard of their fluid cell: direction, owner shard (flat), fluid
        cell in its shard (flat) and solid cell in the owner's extended shard (flat)."""
        dirs, src = np.asarray(bc.link_dir, np.int64), np.asarray(bc.link_src, np.int64)
        if not src.size:
            return dirs, src, src, src
        coords = np.stack(np.unravel_index(src, self.setup.shape))
        shard = np.asarray(self.shard)[:, None]
        owner = coords // shard
        local = coords % shard
        c = lattice.c[dirs].T
        sharded = (np.asarray(self.shape) > 1)[:, None]
        dst_local = np.where(sharded, local + 1 + c, (local + c) % shard)
        return (dirs, np.ravel_multi_index(tuple(owner), self.shape), np.ravel_multi_index(tuple(local), self.shard),
                np.ravel_multi_index(tuple(dst_local), self.ext))

    def per_device(self, a: np.ndarray) -> jax.Array:
        """A host array ``(shards * k,)`` placed one slice of k per device (sharded over every mesh axis)."""
        return self._place(a, self.mesh, P(self.mesh_axes))

    def shards(self) -> list[tuple[int, ...]]:
        """Mesh coordinates of every shard, in device order."""
        return [tuple(int(i) for i in np.unravel_index(b, self.shape)) for b in range(math.prod(self.shape))]

    def own_extended(self, a: Any, coords: tuple[int, ...], lead: int = 1, axes: slice = slice(None)) -> np.ndarray:
        """Shard ``coords``'s extended shard (periodic ghost layers) of a per-cell array ``(*lead, *grid[axes])``."""
        shape, ext = self.shape[axes], self.ext[axes]
        out = parallel.extended(np.asarray(a), shape, lead)
        return out[(slice(None),) * lead + tuple(slice(c * e, (c + 1) * e) for c, e in zip(coords[axes], ext,
                                                                                          strict=True))]

    def to_extended(self, flat: np.ndarray, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Grid cells ``flat`` as cells of shard ``coords``'s extended shard (flat), and whether each lies in it."""
        g = np.stack(np.unravel_index(np.asarray(flat, np.int64), self.setup.shape))
        e = np.empty_like(g)
        for a, (m, b, n) in enumerate(zip(self.shape, self.shard, self.setup.shape, strict=True)):
            e[a] = (g[a] - (coords[a] * b - 1)) % n if m > 1 else g[a]
        ok = np.all(e < np.asarray(self.ext)[:, None], axis=0)
        return np.ravel_multi_index(tuple(np.where(ok, e, 0)), self.ext), ok

    def stacked(self, per_shard: list[Any]) -> Any:
        """Per-shard pytrees of one form, stacked along a leading device axis and sharded over the mesh;
        EngineUnavailable if their forms differ."""
        flat = [jax.tree_util.tree_flatten(t) for t in per_shard]
        tree = flat[0][1]
        shapes = [tuple(np.shape(x) for x in leaves) for leaves, _ in flat]
        if any(t != tree for _, t in flat) or any(s != shapes[0] for s in shapes):
            raise EngineUnavailable("the shards' boundary plans differ in form")
        spec = P(self.mesh_axes)
        leaves = [self._place(np.stack([np.asarray(leaves[k]) for leaves, _ in flat]), self.mesh, spec)
                  for k in range(len(flat[0][0]))]
        return jax.tree_util.tree_unflatten(tree, leaves)


STATE_SPECS = ("f", "u", "feq", "collided", "post")
"""StepState arrays shaped ``(Q or D, *grid)``; ``drho`` is ``(*grid)``; ``t`` and ``force`` are replicated."""


def state_specs(ndim: int) -> StepState:
    """PartitionSpecs of a StepState on the mesh (a prefix of any StepState)."""
    g = parallel.grid_spec(ndim)
    return StepState(f=g, t=P(), drho=parallel.grid_spec(ndim, 0), u=g, feq=g, collided=g, post=g, force=P())


def param_specs(params: Any) -> Any:
    """The PartitionSpec of every placed array of the mesh-form conditions."""
    return jax.tree_util.tree_map(lambda a: a.sharding.spec, params)


class OnMesh:
    """What every engine on a mesh shares: populations and masks placed on its layout, fields gathered to the host."""

    layout: Layout
    partitioner: str | None = "shard_map"

    def place(self, f: Any) -> jax.Array:
        """Populations (host or one device) sharded over the mesh."""
        return self.layout.grid(parallel.to_host(f))

    def place_cells(self, a: Any) -> jax.Array:
        """A per-cell array ``(*grid)`` (a mask) sharded like the grid."""
        return self.layout.grid(np.asarray(a), lead=0)

    def fields(self, f: Any, step: int = 0) -> dict[str, np.ndarray]:
        """Host copies of rho, u and solid (gathered from the shards, computed on one device as a 1-device run does)."""
        return super().fields(jnp.asarray(parallel.to_host(f)), step)  # type: ignore[misc]
