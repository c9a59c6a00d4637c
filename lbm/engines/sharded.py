"""The ``sharded`` engine: the timestep of lbm.engines.timestep on blocks of a device mesh, under ``shard_map``.

Populations are sharded along the grid axes (lbm.parallel). Each device runs the stages on its
block: the local ones (outflow, macroscopic, equilibrium, inlet, collide, full-way bounce-back) on
the block itself; then the ``halo`` stage gives the post-collision populations a ghost layer holding
the populations that enter the block (``ppermute``, only those crossing each face; with a parabolic
wall also the planes of rho and u); the stages that read across a face (half-way, moving and
interpolated walls, forces, stream) run on the extended block, and streaming crops it back.
Boundary conditions get a block form here (:func:`block_forms`): face conditions act only on the
edge blocks, masks and link arrays are laid out per block, forces are summed over the blocks with
``psum``. ``fused``: n steps under ``lax.scan`` in one jit, each stage
(``halo`` too) in ``jax.named_scope``; ``instrumented``: each stage its own jit, annotated.

The ``pallas`` engine on a mesh (:class:`ShardedPallasEngine`) runs the Pallas bulk kernel on each
block as a periodic grid of its own, and the boundary cells by the native engine's plan
(lbm.engines.native.plan.plan_block) built per block on the block's extended index space
(:func:`block_plan`), padded to one form for all blocks.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lbm import parallel
from lbm.boundaries import (
    CharacteristicOutlet,
    Forces,
    FullwayBounceBack,
    HalfwayBounceBack,
    Inlet,
    InterpolatedBounceBack,
    MovingWall,
    Outflow,
    ParabolicBounceBack,
    PressureOutlet,
)
from lbm.boundaries.base import (
    BoundaryCondition,
    CellBlock,
    Footprint,
    StepState,
    pytree_dataclass,
    static,
)
from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable, program
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.native.plan import Block, plan_block, slot_maps
from lbm.engines.timestep import CORE, as_arrays, outputs, run_stage, run_stages, step_index, timestep
from lbm.engines.xla import FusedEngine, XlaEngine
from lbm.kernels.forces import momentum_exchange
from lbm.lattice import Lattice
from lbm.stages import FUSED_STEP, HALO, TIMESTEP

FACE_FIELDS = {"f": 1, "rho": 0, "u": 1, "feq": 1}
"""StepState arrays a face condition may write, with the array axis of grid x (also: their leading axes)."""
FACE_CONDITIONS = (Outflow, Inlet, PressureOutlet, CharacteristicOutlet)
"""Conditions of the grid face x = 0 or x = nx - 1 whose rule reads only planes near that face (:class:`OnEdge`)."""


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


EXTENDED = (OnExtended, BlockForces)
"""Block forms that run on the extended block (after the halo)."""


class Layout:
    """How one grid is split: the mesh, its shape per grid axis, and the placement of per-block arrays.

    ``devices`` (default: JAX's) may be those of a deviceless topology (lbm.bench.inspect): per-block
    arrays are then described (shape, dtype, sharding) instead of placed, which is all a compile needs.
    """

    def __init__(self, setup: Setup, shape: tuple[int, ...], devices: Any = None) -> None:
        self.setup, self.shape = setup, tuple(shape) + (1,) * (len(setup.shape) - len(shape))
        self.mesh = parallel.make_mesh(self.shape, devices)
        self._place = parallel.place if devices is None else parallel.describe_placement
        self.ndim = len(self.shape)
        self.block = tuple(n // m for n, m in zip(setup.shape, self.shape, strict=True))
        self.ext = tuple(b + 2 if m > 1 else b for b, m in zip(self.block, self.shape, strict=True))
        self.sharded_axes = tuple(parallel.AXES[a] for a, m in enumerate(self.shape) if m > 1)

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
        """A per-cell array laid out as extended blocks (periodic ghost layers), sharded one block per device."""
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

    def interpolated(self, bc: InterpolatedBounceBack, lattice: Lattice) -> OnExtended:
        """An interpolated wall on every extended block: the links whose fluid cell the block owns, their cells as
        extended-block positions, padded to one length (:func:`padded_links`, on ghost cell 0, never streamed into
        the block) and stacked one block per device. The parabolic rule also reads f at the fluid cell (zero-padded)
        and rho, u at the far cell, whose planes the halo exchanges."""
        if not self.sharded_axes:
            raise EngineUnavailable("an interpolated wall's block form needs a sharded axis (its padding ghost cell)")
        fluid = np.asarray(bc.link_fluid, np.int64)
        owner = np.stack(np.unravel_index(fluid, self.setup.shape)) // np.asarray(self.block)[:, None]
        per_block = []
        for coords in self.blocks():
            mine = np.all(owner == np.asarray(coords)[:, None], axis=0)
            ends = [self.to_extended(np.asarray(a, np.int64)[mine], coords)
                    for a in (bc.link_solid, bc.link_fluid, bc.link_far)]
            if not all(ok.all() for _, ok in ends):
                raise EngineUnavailable(f"{type(bc).__name__}: a link reaching past a block's ghost layer")
            per_block.append(dataclasses.replace(
                bc, solid=self.own_extended(np.asarray(bc.solid, bool), coords, lead=0),
                link_dir=np.asarray(bc.link_dir)[mine], link_solid=ends[0][0], link_fluid=ends[1][0],
                link_far=ends[2][0], weights=np.asarray(bc.weights)[:, mine], q=np.asarray(bc.q)[mine]))
        length = max(1, max(np.asarray(form.link_dir).size for form in per_block))
        stacked = self.stacked([padded_links(form, length, 0) for form in per_block])
        parabolic = isinstance(bc, ParabolicBounceBack)
        return OnExtended(inner=stacked, own_reads=("f",) if parabolic else (),
                          ghost_reads=("rho", "u") if parabolic else (),
                          ghosts=tuple(1 if m > 1 else 0 for m in self.shape), per_block=True)

    def owns_planes(self, bc: BoundaryCondition, lattice: Lattice) -> int:
        """The side (0: x = 0, -1: x = nx - 1) of a face condition whose cells (written and read) lie in the first
        or last block along x; EngineUnavailable otherwise."""
        fp = bc.footprint(self.setup.shape, lattice)
        x = np.unravel_index(np.concatenate([fp.face, fp.cells, fp.ghosts]), self.setup.shape)[0]
        nx, bx = self.setup.shape[0], self.block[0]
        if x.size and x.max() < bx and 0 in x:
            return 0
        if x.size and x.min() >= nx - bx and nx - 1 in x:
            return -1
        raise EngineUnavailable(f"{type(bc).__name__} reads planes beyond the first or last block along x "
                                f"(blocks of {bx} planes)")

    def links(self, bc: Forces, lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The obstacle's links split by the block of their fluid cell: direction, owner block (flat), fluid
        cell in its block (flat) and solid cell in the owner's extended block (flat)."""
        dirs, src = np.asarray(bc.link_dir, np.int64), np.asarray(bc.link_src, np.int64)
        if not src.size:
            return dirs, src, src, src
        coords = np.stack(np.unravel_index(src, self.setup.shape))
        block = np.asarray(self.block)[:, None]
        owner = coords // block
        local = coords % block
        c = lattice.c[dirs].T
        sharded = (np.asarray(self.shape) > 1)[:, None]
        dst_local = np.where(sharded, local + 1 + c, (local + c) % block)
        return (dirs, np.ravel_multi_index(tuple(owner), self.shape), np.ravel_multi_index(tuple(local), self.block),
                np.ravel_multi_index(tuple(dst_local), self.ext))

    def forces(self, bc: Forces, lattice: Lattice) -> BlockForces:
        """The obstacle's links split by the block of their fluid cell, padded to one length."""
        if np.any(lattice.c[0]):
            raise EngineUnavailable("the sharded forces pad with population 0, which must be the rest population")
        dirs, owner_flat, src_flat, dst_flat = self.links(bc, lattice)
        count = math.prod(self.shape)
        length = max(1, int(np.bincount(owner_flat, minlength=count).max()) if dirs.size else 1)
        out = np.zeros((3, count, length), np.int32)
        for b in range(count):
            sel = owner_flat == b
            k = int(sel.sum())
            out[0, b, :k], out[1, b, :k], out[2, b, :k] = dirs[sel], src_flat[sel], dst_flat[sel]
        spec = P(parallel.AXES[: self.ndim])
        placed = [self._place(a.reshape(-1), self.mesh, spec) for a in out]
        return BlockForces(link_dir=placed[0], link_src=placed[1], link_dst=placed[2],
                           axes=parallel.AXES[: self.ndim])

    def blocks(self) -> list[tuple[int, ...]]:
        """Mesh coordinates of every block, in device order."""
        return [tuple(int(i) for i in np.unravel_index(b, self.shape)) for b in range(math.prod(self.shape))]

    def own_extended(self, a: Any, coords: tuple[int, ...], lead: int = 1, axes: slice = slice(None)) -> np.ndarray:
        """Block ``coords``'s extended block (periodic ghost layers) of a per-cell array ``(*lead, *grid[axes])``."""
        shape, ext = self.shape[axes], self.ext[axes]
        out = parallel.extended(np.asarray(a), shape, lead)
        return out[(slice(None),) * lead + tuple(slice(c * e, (c + 1) * e) for c, e in zip(coords[axes], ext,
                                                                                          strict=True))]

    def to_extended(self, flat: np.ndarray, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Grid cells ``flat`` as cells of block ``coords``'s extended block (flat), and whether each lies in it."""
        g = np.stack(np.unravel_index(np.asarray(flat, np.int64), self.setup.shape))
        e = np.empty_like(g)
        for a, (m, b, n) in enumerate(zip(self.shape, self.block, self.setup.shape, strict=True)):
            e[a] = (g[a] - (coords[a] * b - 1)) % n if m > 1 else g[a]
        ok = np.all(e < np.asarray(self.ext)[:, None], axis=0)
        return np.ravel_multi_index(tuple(np.where(ok, e, 0)), self.ext), ok

    def stacked(self, per_block: list[Any]) -> Any:
        """Per-block pytrees of one form, stacked along a leading device axis and sharded over the mesh;
        EngineUnavailable if their forms differ."""
        flat = [jax.tree_util.tree_flatten(t) for t in per_block]
        tree = flat[0][1]
        shapes = [tuple(np.shape(x) for x in leaves) for leaves, _ in flat]
        if any(t != tree for _, t in flat) or any(s != shapes[0] for s in shapes):
            raise EngineUnavailable("the blocks' boundary plans differ in form")
        spec = P(parallel.AXES[: self.ndim])
        leaves = [self._place(np.stack([np.asarray(leaves[k]) for leaves, _ in flat]), self.mesh, spec)
                  for k in range(len(flat[0][0]))]
        return jax.tree_util.tree_unflatten(tree, leaves)


def block_forms(boundaries: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice,
                dtype: Any) -> tuple[BoundaryCondition, ...]:
    """Each boundary condition in its block form, its arrays placed on the mesh; EngineUnavailable if it has none."""
    out: list[BoundaryCondition] = []
    for bc in boundaries:
        if isinstance(bc, FACE_CONDITIONS):
            out.append(OnEdge(inner=layout.on_face(bc, dtype), side=layout.owns_planes(bc, lattice),
                              blocks=layout.shape[0]))
        elif isinstance(bc, FullwayBounceBack):
            out.append(FullwayBounceBack(solid=layout.grid(np.asarray(bc.solid, bool), lead=0)))
        elif isinstance(bc, HalfwayBounceBack):
            arrays = {"solid": layout.extended(np.asarray(bc.solid, bool), lead=0),
                      "links": layout.extended(np.asarray(bc.links, bool))}
            if getattr(bc, "wall_term", None) is not None:
                arrays["wall_term"] = layout.extended(np.asarray(bc.wall_term))
            out.append(OnExtended(inner=type(bc)(**arrays)))
        elif isinstance(bc, InterpolatedBounceBack):
            out.append(layout.interpolated(bc, lattice))
        elif isinstance(bc, Forces):
            out.append(layout.forces(bc, lattice))
        else:
            raise EngineUnavailable(f"the sharded engine has no block form of {type(bc).__name__}")
    return tuple(out)


Piece = tuple[str, tuple[int, ...]]


def plane_extend(a: jnp.ndarray, shape: tuple[int, ...], lead: int) -> jnp.ndarray:
    """A block array ``(*lead, *b)`` with ghost layers on its sharded faces holding the neighbours' planes, every
    component (ppermute; axis by axis, so the corner ghosts are filled too): what :func:`lbm.parallel.extended`
    lays out on the host."""
    e = a
    for axis, m in enumerate(shape):
        if m == 1:
            continue
        ax = lead + axis
        high = jax.lax.slice_in_dim(e, e.shape[ax] - 1, e.shape[ax], axis=ax)
        low = jax.lax.slice_in_dim(e, 0, 1, axis=ax)
        from_below = jax.lax.ppermute(high, parallel.AXES[axis], [(i, (i + 1) % m) for i in range(m)])
        from_above = jax.lax.ppermute(low, parallel.AXES[axis], [(i, (i - 1) % m) for i in range(m)])
        e = jnp.concatenate([from_below, e, from_above], axis=ax)
    return e


def plane_bytes(forms: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice, itemsize: int) -> int:
    """Bytes per device and step that the halo's plane exchanges (:func:`plane_extend`) send for ``forms``."""
    fields = {r for bc in forms for r in getattr(bc, "ghost_reads", ())}
    components = sum(lattice.d if FACE_FIELDS[r] else 1 for r in fields)
    ext, total = list(layout.block), 0
    for axis, m in enumerate(layout.shape):
        if m > 1:
            total += 2 * components * math.prod(ext[:axis] + ext[axis + 1:])
            ext[axis] += 2
    return total * itemsize


def plan(setup: Setup, forms: tuple[BoundaryCondition, ...]) -> list[Piece]:
    """The timestep as (stage, indices of its block-form conditions), with ``halo`` before the first stage that
    reads across a face; EngineUnavailable if a block-local condition would have to follow the halo."""
    pieces: list[Piece] = []
    halo_done = False
    for name in setup.stages:
        mine = [i for i, bc in enumerate(forms) if bc.stage == name]
        ext = tuple(i for i in mine if isinstance(forms[i], EXTENDED))
        local = tuple(i for i in mine if not isinstance(forms[i], EXTENDED))
        if ext and local and min(ext) < max(local) or halo_done and local:
            raise EngineUnavailable(f"stage {name}: a block-local condition follows one that reads across blocks")
        if ext and name in CORE:
            raise EngineUnavailable(f"stage {name}: a condition reading across blocks in a core stage")
        if halo_done or ext or name == "stream":
            if not halo_done:
                if local:
                    pieces.append((name, local))
                pieces.append((HALO, tuple(i for i, bc in enumerate(forms) if getattr(bc, "ghost_reads", ()))))
                halo_done = True
            pieces.append((name, ext))
        else:
            pieces.append((name, local))
    return pieces


def piece_function(piece: Piece, setup: Setup, shape: tuple[int, ...]) -> Callable[[StepState, Any], StepState]:
    """One piece of the timestep on a block (inside shard_map): a stage's part, or the halo exchange."""
    name, idx = piece
    c = setup.lattice.c

    if name == HALO:
        def halo(s: StepState, params: Any) -> StepState:
            fields = sorted({r for i in idx for r in params[i].ghost_reads})
            return s.replace(post=parallel.halo_extend(s.post, c, shape),
                             **{r: plane_extend(getattr(s, r), shape, FACE_FIELDS[r]) for r in fields})
        return halo

    def part(s: StepState, params: Any) -> StepState:
        s = run_stage(name, s, tuple(params[i] for i in idx), setup)
        if name == "stream":
            s = s.replace(f=parallel.crop(s.f, shape), post=None)
        return s

    part.__name__ = f"stage_{name}"
    return part


STATE_SPECS = ("f", "u", "feq", "collided", "post")
"""StepState arrays shaped ``(Q or D, *grid)``; ``rho`` is ``(*grid)``; ``t`` and ``force`` are replicated."""


def state_specs(ndim: int) -> StepState:
    """PartitionSpecs of a StepState on the mesh (a prefix of any StepState)."""
    g = parallel.grid_spec(ndim)
    return StepState(f=g, t=P(), rho=parallel.grid_spec(ndim, 0), u=g, feq=g, collided=g, post=g, force=P())


def param_specs(params: Any) -> Any:
    """The PartitionSpec of every placed array of the block-form conditions."""
    return jax.tree_util.tree_map(lambda a: a.sharding.spec, params)


class OnMesh:
    """What every engine on a mesh shares: populations and masks placed on its layout, fields gathered to the host."""

    layout: Layout

    def place(self, f: Any) -> jax.Array:
        """Populations (host or one device) sharded over the mesh."""
        return self.layout.grid(parallel.to_host(f))

    def place_cells(self, a: Any) -> jax.Array:
        """A per-cell array ``(*grid)`` (a mask) sharded like the grid."""
        return self.layout.grid(np.asarray(a), lead=0)

    def fields(self, f: Any, step: int = 0) -> dict[str, np.ndarray]:
        """Host copies of rho, u and solid (gathered from the blocks, computed on one device as a 1-device run does)."""
        return super().fields(jnp.asarray(parallel.to_host(f)), step)  # type: ignore[misc]


class ShardedSupport(OnMesh):
    """What the shard_map engines share: the layout, the block-form conditions, the plan."""

    setup: Setup

    def _shard(self, shape: tuple[int, ...], devices: Any = None) -> None:
        setup = self.setup
        self.layout = Layout(setup, shape, devices)
        self.forms = block_forms(setup.boundaries, self.layout, setup.lattice, setup.dtype)
        self.pieces = plan(setup, self.forms)
        self.functions = [piece_function(p, setup, self.layout.shape) for p in self.pieces]
        self.dense = as_arrays(setup.boundaries)
        self.params = self.forms
        self.plan_halo_bytes = plane_bytes(self.forms, self.layout, setup.lattice, jnp.dtype(setup.dtype).itemsize)

    def _dense_params(self) -> Any:
        return self.dense

    def shard_note(self) -> str:
        """One line: mesh, block and halo."""
        return (f"mesh {'x'.join(map(str, self.layout.shape))} ({', '.join(self.layout.sharded_axes)}), "
                f"blocks {'x'.join(map(str, self.layout.block))}, halo before {self.pieces[self.halo_at() + 1][0]}")

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages of the sharded timestep in order, ``halo`` included (each once)."""
        return tuple(dict.fromkeys(p[0] for p in self.pieces))

    def halo_at(self) -> int:
        """Position of the halo piece in the plan."""
        return [p[0] for p in self.pieces].index(HALO)


class ShardedEngine(ShardedSupport, FusedEngine):
    """The fused timestep on every block of a mesh under shard_map, n steps per dispatch with lax.scan."""

    name = "sharded"

    def __init__(self, setup: Setup, shape: tuple[int, ...], storage: str = "compute", devices: Any = None) -> None:
        FusedEngine.__init__(self, setup, storage)
        self._shard(shape, devices)
        self.note = self.shard_note()

    def chunk_function(self, n: int) -> Any:
        """n timesteps on each block under lax.scan, inside shard_map (f donated)."""
        setup, functions, pieces = self.setup, self.functions, self.pieces
        fspec = self.layout.spec()

        def local(f: jnp.ndarray, params: Any, t0: jnp.ndarray) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            def body(carry: tuple[jnp.ndarray, jnp.ndarray], _: None) -> tuple[Any, dict[str, jnp.ndarray]]:
                s_enc, t = carry
                with jax.named_scope(TIMESTEP):
                    s = StepState(f=self.decode(s_enc), t=t)
                    for (name, _), fn in zip(pieces, functions, strict=True):
                        with jax.named_scope(name):
                            s = fn(s, params)
                    return (self.encode(s.f), t + 1), outputs(s)
            (s_enc, _), aux = jax.lax.scan(body, (self.encode(f), t0), None, length=n)
            return self.decode(s_enc), aux

        del setup
        mapped = jax.shard_map(local, mesh=self.layout.mesh, in_specs=(fspec, param_specs(self.params), P()),
                               out_specs=(fspec, P()), check_vma=False)
        return jax.jit(mapped, donate_argnums=0)

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """The sharded fused chunk of ``n`` steps, as data."""
        f = jax.ShapeDtypeStruct((self.setup.lattice.q, *self.setup.shape), jnp.dtype(self.setup.dtype),
                                 sharding=self.layout.sharding())
        return [program(FUSED_STEP, None, self.chunk_function(n), f, self.params, step_index(0))]


class GspmdEngine(OnMesh, XlaEngine):
    """The unsharded xla step with sharded populations: XLA's SPMD partitioner splits it (the comparison)."""

    name = "gspmd"

    def __init__(self, setup: Setup, shape: tuple[int, ...], storage: str = "compute") -> None:
        super().__init__(setup, storage)
        self.layout = Layout(setup, shape)
        self.params = jax.device_put(self.params, NamedSharding(self.layout.mesh, P()))
        self.note = f"mesh {'x'.join(map(str, shape))}, XLA SPMD partitioning of the dense step"

    def chunk_function(self, n: int) -> Any:
        """The xla chunk, jitted with the populations sharded in and out."""
        inner = super().chunk_function(n)
        fs = self.layout.sharding()
        rep = NamedSharding(self.layout.mesh, P())
        return jax.jit(inner, in_shardings=(fs, rep, rep), out_shardings=(fs, rep), donate_argnums=0)


class ShardedInstrumentedEngine(ShardedSupport, InstrumentedEngine):
    """Each piece of the sharded timestep (``halo`` included) its own jit over shard_map, annotated with its stage."""

    name = "instrumented"

    def __init__(self, setup: Setup, shape: tuple[int, ...], sync: bool = False) -> None:
        from lbm.engines.base import Engine

        Engine.__init__(self, setup)
        self.sync = sync
        self._shard(shape)
        specs = state_specs(self.layout.ndim)
        pspecs = param_specs(self.params)
        self._jitted_pieces = [
            jax.jit(jax.shard_map(fn, mesh=self.layout.mesh, in_specs=(specs, pspecs), out_specs=specs,
                                  check_vma=False))
            for fn in self.functions]
        self.piece_runs = [self._instrument(name, j) for (name, _), j in zip(self.pieces, self._jitted_pieces,
                                                                              strict=True)]
        self.note = self.shard_note()

    def step(self, f: jnp.ndarray, t: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t``, piece by piece."""
        s = StepState(f=f, t=step_index(t))
        for run in self.piece_runs:
            s = run(s, self.params)
        return s.f, outputs(s)

    def compile(self, f: jnp.ndarray, n: int) -> None:
        """Compile every piece on a throw-away step."""
        t0 = time.perf_counter()
        jax.block_until_ready(self.step(jnp.copy(f))[0])
        self.compile_times.setdefault("first_step", time.perf_counter() - t0)

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """Every piece's executable, as data."""
        seen: list[Any] = []
        s = StepState(f=jax.ShapeDtypeStruct((self.setup.lattice.q, *self.setup.shape), jnp.dtype(self.setup.dtype),
                                             sharding=self.layout.sharding()), t=step_index(0))
        for j in self._jitted_pieces:
            seen.append(s)
            s = jax.eval_shape(j, s, self.params)
        return [program(name, name, j, spec, self.params)
                for (name, _), j, spec in zip(self.pieces, self._jitted_pieces, seen, strict=True)]


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


def extended_boundaries(boundaries: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice,
                        coords: tuple[int, ...]) -> tuple[BoundaryCondition, ...]:
    """The boundary conditions as block ``coords`` sees them on its extended block (its own cells and one ghost
    layer on each shared face); EngineUnavailable for a condition without such a form.

    Walls: their masks on the extended block, minus the links that would leave it. Forces: the links whose fluid
    cell the block owns. Inlet and outflow: :class:`FacePlane` on the block's first and last own plane.
    """
    lo = 1 if layout.shape[0] > 1 else 0
    out: list[BoundaryCondition] = []
    for bc in boundaries:
        face = bc.footprint(layout.setup.shape, lattice).face
        if face.size:
            x = np.unique(np.unravel_index(face, layout.setup.shape)[0])
            if x.size != 1 or x[0] not in (0, layout.setup.shape[0] - 1):
                raise EngineUnavailable(f"{type(bc).__name__}: a face that is not the grid face x = 0 or x = nx - 1")
            if isinstance(bc, Inlet):
                bc = dataclasses.replace(bc, u=layout.own_extended(np.asarray(bc.u), coords, lead=1,
                                                                   axes=slice(1, None)))
            out.append(FacePlane(inner=bc, lo=lo, own=layout.block[0], side=0 if x[0] == 0 else -1,
                                 blocks=layout.shape[0]))
        elif type(bc) is FullwayBounceBack:
            out.append(FullwayBounceBack(solid=layout.own_extended(np.asarray(bc.solid, bool), coords, lead=0)))
        elif type(bc) in (HalfwayBounceBack, MovingWall):
            links = layout.own_extended(np.asarray(bc.links, bool), coords).copy()
            for j, c in enumerate(lattice.c):
                for axis, m in enumerate(layout.shape):
                    if m > 1 and c[axis]:  # a link from the outermost ghost layer leaves the extended block
                        edge = -1 if c[axis] > 0 else 0
                        links[(j,) + (slice(None),) * axis + (edge,)] = False
            arrays = {"solid": layout.own_extended(np.asarray(bc.solid, bool), coords, lead=0), "links": links}
            if type(bc) is MovingWall:
                arrays["wall_term"] = layout.own_extended(np.asarray(bc.wall_term), coords)
            out.append(type(bc)(**arrays))
        elif isinstance(bc, InterpolatedBounceBack):  # linear BFL and its subclasses (the parabolic wall)
            ends = [layout.to_extended(np.asarray(a, np.int64), coords) for a in (bc.link_solid, bc.link_fluid,
                                                                                    bc.link_far)]
            mine = ends[0][1] & ends[1][1] & ends[2][1]  # every link whose cells lie in the extended block
            out.append(dataclasses.replace(
                bc, solid=layout.own_extended(np.asarray(bc.solid, bool), coords, lead=0),
                link_dir=np.asarray(bc.link_dir)[mine], link_solid=ends[0][0][mine], link_fluid=ends[1][0][mine],
                link_far=ends[2][0][mine], weights=np.asarray(bc.weights)[:, mine], q=np.asarray(bc.q)[mine]))
        elif type(bc) is Forces:
            dirs, owner, _, dst = layout.links(bc, lattice)
            mine = owner == np.ravel_multi_index(coords, layout.shape)
            src, _ = layout.to_extended(np.asarray(bc.link_src, np.int64)[mine], coords)
            out.append(Forces(link_dir=dirs[mine], link_src=src, link_dst=dst[mine]))
        else:
            raise EngineUnavailable(f"no per-block plan for {type(bc).__name__}")
    return tuple(out)


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


def block_plan(setup: Setup, layout: Layout) -> tuple[dict[str, Any], list[tuple[int, ...]], int]:
    """Every block's boundary-cell plan (lbm.engines.native.plan on its extended block), padded to one form and
    stacked: gather slots into the block's extended pre-step populations, write slots into the ``push`` slots of
    the block's own periodic step (cells of the ghost layers and padding: past the end, dropped), and the block
    forms of the conditions (forces summed over the blocks). With it, the offsets of the neighbours whose cells
    the blocks read, and the bytes each block sends them per step."""
    lat = setup.lattice
    if np.any(lat.c[0]):
        raise EngineUnavailable("the per-block plans pad with population 0, which must be the rest population")
    ext, own = layout.ext, layout.block
    lo = np.asarray([1 if m > 1 else 0 for m in layout.shape])
    plans = []
    for coords in layout.blocks():
        local = extended_boundaries(setup.boundaries, layout, lat, coords)
        blk = plan_block(lat, ext, local) or Block(lattice=lat, shape=ext, cells=np.zeros(0, np.int64), size=0)
        e = np.stack(np.unravel_index(blk.cells, ext))
        if layout.shape[0] > 1 and any(isinstance(b, FacePlane) for b in local) and (
                coords[0] == 0 and np.any(e[0] == 0) or coords[0] == layout.shape[0] - 1 and np.any(e[0] == ext[0] - 1)):
            raise EngineUnavailable("a wall reads across the periodic wrap of a grid with an inlet or outflow face")
        plans.append((local, blk))
    size = max(b.size for _, b in plans)
    ghosts = max(b.cells.size - b.size for _, b in plans) + 1  # the last one a padding cell (padded links' target)
    per_block = []
    for local, blk in plans:
        # padding: one of the block's own cells outside the plan (a ghost-layer cell would be asked of a neighbour)
        free = np.setdiff1d(np.ravel_multi_index(tuple(np.stack(np.unravel_index(np.arange(math.prod(own)), own))
                                                       + lo[:, None]), ext), blk.cells)
        if not free.size:
            raise EngineUnavailable("a block whose every own cell is a boundary cell")
        pad_w, pad_g = size - blk.size, ghosts - (blk.cells.size - blk.size)
        cells = np.concatenate([blk.cells[: blk.size], np.full(pad_w, free[0]), blk.cells[blk.size:],
                                np.full(pad_g, free[0])]).astype(np.int64)
        padded = Block(lattice=lat, shape=ext, cells=cells, size=size)
        coords_e = np.stack(np.unravel_index(cells, ext))
        ghost, offset, owned = parallel.ghost_owners(coords_e, own, layout.shape)
        gather, _ = slot_maps(lat, own, np.where(ghost, 0, owned), "push")
        requests: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}  # neighbour -> (positions, its cells)
        for o in {tuple(int(v) for v in col) for col in offset[:, ghost].T}:
            at = np.flatnonzero(ghost & np.all(offset == np.asarray(o)[:, None], axis=0))
            requests[o] = (at, owned[at])
        written = np.stack(np.unravel_index(cells[:size], ext)) - lo[:, None]
        inside = np.all((written >= 0) & (written < np.asarray(own)[:, None]), axis=0)
        real = np.arange(size) < blk.size
        past = lat.q * math.prod(own)
        _, write = slot_maps(lat, own, np.ravel_multi_index(tuple(written), own, mode="clip"), "push")
        write = np.where((inside & real)[None], write, past).astype(np.int32)
        # a ghost layer's cell writes the populations it sends into the block (after the wrapped ones returned)
        after = np.full((lat.q, size), past, np.int64)
        for i, c in enumerate(lat.c):
            target = written + c[:, None]
            into = real & ~inside & np.all((target >= 0) & (target < np.asarray(own)[:, None]), axis=0)
            after[i, into] = i * math.prod(own) + np.ravel_multi_index(tuple(target[:, into]), own)
        sent = np.flatnonzero(np.any(after < past, axis=0))
        per_block.append({"gather": gather.astype(np.int32), "requests": requests, "write": write, "after": sent,
                          "after_slots": after[:, sent], "boundaries": [bc.on_block(padded) for bc in local]})
    for k in range(len(setup.boundaries)):
        forms = [p["boundaries"][k] for p in per_block]
        if isinstance(forms[0], (Forces, InterpolatedBounceBack)):
            length = max(1, max(np.asarray(f.link_dir).size for f in forms))
            for p, f in zip(per_block, forms, strict=True):
                p["boundaries"][k] = padded_links(f, length, len(cells) - 1)
    # the ghost cells a block reads: each neighbour (offset) sends the populations of the cells the block asked
    # for, padded to one count per offset; the block's reads as flat positions into what it received
    offsets = sorted({o for p in per_block for o in p["requests"]})
    counts = [max(p["requests"][o][0].size if o in p["requests"] else 0 for p in per_block) for o in offsets]
    nb = math.prod(own)
    for b, p in enumerate(per_block):
        p["send"], at, index, base = [], [], [], 0
        for o, k in zip(offsets, counts, strict=True):
            asking = per_block[int(np.ravel_multi_index(
                tuple((c - v) % m for c, v, m in zip(layout.blocks()[b], o, layout.shape, strict=True)),
                layout.shape))]["requests"]
            cells_o = np.pad(asking[o][1] if o in asking else np.zeros(0, np.int64), (0, k - (asking[o][1].size
                                                                                        if o in asking else 0)))
            p["send"].append((np.arange(lat.q)[:, None] * nb + cells_o[None]).astype(np.int32))
            mine = p["requests"][o][0] if o in p["requests"] else np.zeros(0, np.int64)
            at.append(mine)
            index.append(base + np.arange(lat.q)[:, None] * k + np.arange(mine.size)[None])
            base += lat.q * k
        p["ghost"] = np.concatenate(at) if at else np.zeros(0, np.int64)
        p["ghost_gather"] = np.concatenate(index, axis=1) if index else np.zeros((lat.q, 0), np.int64)
    for p in per_block:
        del p["requests"]
    # the ghost cells' reads and their sends into the block as position lists padded to one length: padded reads
    # fill the spare padding cell, padded sends go past the end (dropped)
    reads = max(p["ghost"].size for p in per_block)
    sends = max(p["after"].size for p in per_block)
    past = lat.q * math.prod(own)
    for p in per_block:
        p["boundaries"] = tuple(p["boundaries"])
        k, m = reads - p["ghost"].size, sends - p["after"].size
        # flat positions in the plan's (Q, n) arrays: 1-D gathers and scatters (along axis 1, XLA transposes)
        n = len(cells)
        ghost = np.pad(p["ghost"], (0, k), constant_values=n - 1)
        p["ghost"] = (np.arange(lat.q)[:, None] * n + ghost[None]).astype(np.int32)
        p["ghost_gather"] = np.pad(p["ghost_gather"], ((0, 0), (0, k))).astype(np.int32)
        p["after"] = (np.arange(lat.q)[:, None] * size + np.pad(p["after"], (0, m))[None]).astype(np.int32)
        p["after_slots"] = np.pad(p["after_slots"], ((0, 0), (0, m)), constant_values=past).astype(np.int32)
        if not reads:
            del p["ghost"], p["ghost_gather"], p["send"]
        if not sends:
            del p["after"], p["after_slots"]
    itemsize = jnp.dtype(setup.dtype).itemsize
    return layout.stacked(per_block), offsets, lat.q * sum(counts) * itemsize


class ShardedPallasEngine(OnMesh, FusedEngine):
    """The Pallas bulk kernel on every block of a mesh under shard_map, the boundary cells by a plan per block.

    Each block steps as a periodic grid of its own; with boundary conditions, the cells of the
    block's plan (:func:`block_plan`: the native engine's plan on the block's extended index space)
    are gathered from the block's pre-step populations, those in its ghost layers sent by the
    neighbours that own them (the ``halo`` stage: ``ppermute`` of those cells' Q populations), run through
    the case's stages and scattered into the ``push`` slots the kernel wrote for the block's own
    cells; then the ``halo`` stage returns the populations that wrapped around a shared face to the
    block they entered (lbm.parallel.return_wrapped: only the crossing populations), and the plan's
    ghost-layer cells write the populations they send into the block (walls straddling a seam).
    Forces: each block's links, summed over the blocks once per chunk (``psum``).
    """

    name = "pallas"
    kernel_text = "the Pallas kernel"
    """How the note names the bulk step on each block."""

    def __init__(self, setup: Setup, shape: tuple[int, ...], storage: str = "compute", platform: str | None = None,
                 devices: Any = None, interpret: bool | None = None) -> None:
        FusedEngine.__init__(self, setup, storage)
        self.layout = Layout(setup, shape, devices)
        self.kernel = self.make_kernel(storage, platform, interpret)
        self.dense = as_arrays(setup.boundaries)
        self.params, self.offsets, self.plan_halo_bytes = block_plan(setup, self.layout) if setup.boundaries else (
            {}, [], 0)
        self._stages = tuple(s for s in setup.stages if s != "stream")
        plan = (f"the boundary cells by a plan per block (its ghost cells sent by their blocks, "
                f"{self.plan_halo_bytes} B/step), " if setup.boundaries else "")
        self.note = "; ".join(filter(None, [
            f"mesh {'x'.join(map(str, self.layout.shape))} ({', '.join(self.layout.sharded_axes)}), blocks "
            f"{'x'.join(map(str, self.layout.block))}, {self.kernel_text} on each block, {plan}halo after it",
            self.kernel.note]))

    def make_kernel(self, storage: str, platform: str | None, interpret: bool | None) -> Any:
        """The bulk step of one block: every cell as periodic fluid, push scheme, a new array."""
        from lbm.engines.pallas.engine import PallasKernel

        return PallasKernel(self.setup, self.layout.block, storage, platform, interpret)

    def _dense_params(self) -> Any:
        return self.dense

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages of the sharded timestep in order, ``halo`` included."""
        return (*self.setup.stages, HALO)

    def step(self, f: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t`` on a block: the kernel (periodic on the block), the block's boundary cells into the slots it
        wrote, then the wrapped populations returned."""
        aux: dict[str, jnp.ndarray] = {}
        if params:
            plan = jax.tree_util.tree_map(lambda a: a[0], params)
            lat = self.setup.lattice
            cells = (lat.q, -1) + (1,) * (lat.d - 1)
            g = f.reshape(-1)[plan["gather"]]
            if "ghost" in plan:  # the plan's cells in the ghost layers: all Q populations of the neighbours' faces
                axes = parallel.AXES[: self.layout.ndim]
                with jax.named_scope(HALO):
                    got = jnp.concatenate([
                        jax.lax.ppermute(f.reshape(-1)[send], axes, parallel.send_to(o, self.layout.shape)).reshape(-1)
                        for o, send in zip(self.offsets, plan["send"], strict=True)])
                g = g.reshape(-1).at[plan["ghost"]].set(got[plan["ghost_gather"]]).reshape(g.shape)
            g = g.reshape(cells)
        out = self.kernel(f)
        if params:
            s = run_stages(self._stages, StepState(f=g, t=t), plan["boundaries"], self.setup)
            post = s.post.reshape(lat.q, -1)[:, : plan["write"].shape[1]]
            with jax.named_scope("stream"):
                out = out.reshape(-1).at[plan["write"]].set(post, mode="drop").reshape(f.shape)
            aux = outputs(s)
        with jax.named_scope(HALO):
            out = parallel.return_wrapped(out, self.setup.lattice.c, self.layout.shape)
        if params and "after" in plan:
            with jax.named_scope("stream"):
                sent = post.reshape(-1)[plan["after"]]
                out = out.reshape(-1).at[plan["after_slots"]].set(sent, mode="drop").reshape(f.shape)
        return out, aux

    def chunk_function(self, n: int) -> Any:
        """n steps on each block, two per lax.scan iteration, inside shard_map (f donated); the blocks' parts of
        the per-step forces summed over the blocks once per chunk (psum)."""
        fspec = self.layout.spec()
        chunk = self.paired_chunk(n, self.step)
        axes = parallel.AXES[: self.layout.ndim]

        def summed(f: jnp.ndarray, params: Any, t0: jnp.ndarray) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            f, aux = chunk(f, params, t0)
            with jax.named_scope("forces"):
                return f, {k: jax.lax.psum(v, axes) for k, v in aux.items()}

        mapped = jax.shard_map(summed, mesh=self.layout.mesh,
                               in_specs=(fspec, param_specs(self.params), P()), out_specs=(fspec, P()),
                               check_vma=False)
        return jax.jit(mapped, donate_argnums=0)

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """The sharded chunk of ``n`` steps, as data."""
        f = jax.ShapeDtypeStruct((self.setup.lattice.q, *self.setup.shape), jnp.dtype(self.setup.dtype),
                                 sharding=self.layout.sharding())
        return [program(FUSED_STEP, None, self.chunk_function(n), f, self.params, step_index(0))]


class XlaBulk:
    """The xla timestep without boundary conditions: one periodic push step of every cell of a block."""

    note = ""

    def __init__(self, setup: Setup) -> None:
        self.setup = dataclasses.replace(setup, boundaries=())

    def __call__(self, f: jnp.ndarray) -> jnp.ndarray:
        """One periodic step of ``f`` ``(Q, *block)``; a new array."""
        return timestep(f, step_index(0), (), self.setup)[0]


class ShardedPlanEngine(ShardedPallasEngine):
    """The xla step on every block as a periodic grid, the boundary cells by the per-block plan of the sharded pallas
    engine: the xla engine on a mesh for boundary conditions without a dense block form (:func:`block_forms`)."""

    name = "xla"
    kernel_text = "the xla step (periodic)"

    def make_kernel(self, storage: str, platform: str | None, interpret: bool | None) -> Any:
        """The dense xla timestep of the setup without its boundary conditions."""
        if storage != "compute":
            raise EngineUnavailable(f"the per-block plan keeps populations in the compute dtype, not {storage}")
        return XlaBulk(self.setup)


def make_sharded(setup: Setup, shape: tuple[int, ...], mode: str = "fused", engine: str = "auto",
                 storage: str = "compute", sync: bool = False, partitioner: str = "shard_map",
                 platform: str | None = None, devices: Any = None) -> Any:
    """The engine on a mesh of ``shape`` blocks (over ``devices``, default JAX's); see lbm.engines.make_engine.

    ``pallas`` (and ``auto`` on a GPU or TPU) runs the Pallas kernel on each block with the boundary cells by a
    plan per block; where that is unavailable (no kernel for the dtype or the block, a wall reading across the
    periodic wrap of a grid with inlet or outlet faces), the xla step on each block, and the note says why;
    ``native`` is refused. ``xla`` composes the boundary conditions' dense block forms on each block; for a
    condition without one, the xla step runs on each block as periodic and the boundary cells by the per-block
    plan (:class:`ShardedPlanEngine`), and the note says why. Instrumented mode needs the dense block forms.
    """
    from lbm.engines.pallas import ACCELERATORS

    if engine == "native":
        raise EngineUnavailable("the native engine is single-device: use engine=xla or parallel.devices=1")
    if mode == "instrumented":
        try:
            return ShardedInstrumentedEngine(setup, shape, sync=sync)
        except EngineUnavailable as exc:
            raise EngineUnavailable(f"mode=instrumented on several devices: {exc}; run mode=fused on several "
                                    "devices, or mode=instrumented on one (parallel.devices=1)") from None
    if partitioner == "gspmd":
        return GspmdEngine(setup, shape, storage)
    platform = platform or jax.default_backend()
    if engine == "pallas" or engine == "auto" and platform in ACCELERATORS:
        try:
            return ShardedPallasEngine(setup, shape, storage, platform, devices)
        except EngineUnavailable as exc:
            chosen = xla_on_blocks(setup, shape, storage, devices)
            chosen.note = f"{chosen.note}; the xla step on each block ({exc})"
            return chosen
    return xla_on_blocks(setup, shape, storage, devices)


def xla_on_blocks(setup: Setup, shape: tuple[int, ...], storage: str, devices: Any) -> FusedEngine:
    """The xla engine on a mesh: the dense block forms, else the xla step with the per-block plan (the note says why)."""
    try:
        return ShardedEngine(setup, shape, storage, devices)
    except EngineUnavailable as exc:
        chosen = ShardedPlanEngine(setup, shape, storage, devices=devices)
        chosen.note = f"{chosen.note}; not the dense block forms ({exc})"
        return chosen
