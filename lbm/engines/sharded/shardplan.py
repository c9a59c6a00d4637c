"""The per-shard plan: the bulk step of each shard as a periodic grid, the boundary cells by a plan per shard.

Each shard steps as a periodic grid of its own (the Pallas kernel, or the xla step without boundary conditions).
With boundary conditions, the cells of the shard's plan (:func:`shard_plan`: lbm.engines.plan on the shard's
extended index space) are gathered from the shard's pre-step populations, those in its ghost layers sent by the
neighbours that own them (the ``halo`` stage: ``ppermute`` of those cells' Q populations), run through the case's
stages and scattered into the ``push`` slots the bulk step wrote for the shard's own cells; then the ``halo``
stage returns the populations that wrapped around a shared face to the shard they entered
(lbm.engines.sharded.halo.return_wrapped: only the crossing populations), and the plan's ghost-layer cells write
the populations they send into the shard (walls straddling a seam). Forces: each shard's links, summed over the
shards once per chunk (``psum``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from lbm.boundaries.base import BoundaryCondition, FormUnavailable, StepState, pytree_dataclass, static
from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable, program
from lbm.engines.plan import Block, plan_block, slot_maps
from lbm.engines.sharded.halo import ghost_owners, return_wrapped, send_to
from lbm.engines.sharded.layout import Layout, OnMesh, param_specs
from lbm.engines.timestep import as_arrays, outputs, run_stages, step_index, timestep
from lbm.engines.xla import FusedEngine
from lbm.lattice import Lattice
from lbm.stages import FUSED_STEP, HALO

Request = dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]
"""Neighbour offset -> (positions in the shard's plan, the neighbour's own cells there)."""


@pytree_dataclass
class ShardPlan:
    """Every shard's boundary-cell plan in one form, stacked along a leading axis of one shard per device.

    ``gather``: slots ``(Q, n)`` of the plan's cells in the shard's pre-step populations (ghost-layer cells: 0,
    filled from ``ghost``); ``write``: the ``push`` slots the bulk step wrote for the plan's written cells (ghost
    layers and padding: past the end, dropped); ``boundaries``: the conditions' block forms (on the plan's
    cells). ``send``: per neighbour offset (``offsets``), the slots of the shard's cells that neighbour reads;
    ``ghost`` and ``ghost_gather``: where the received populations go in the gathered ``(Q, n)`` cells (None: no
    shard reads a ghost cell). ``after`` and ``after_slots``: the populations the plan's ghost-layer cells send into the shard,
    and their slots (None: none do). ``halo_bytes``: bytes each shard sends per step for its ghost cells.
    """

    after: Any
    after_slots: Any
    boundaries: tuple[BoundaryCondition, ...]
    gather: Any
    ghost: Any
    ghost_gather: Any
    send: tuple[Any, ...]
    write: Any
    offsets: tuple[tuple[int, ...], ...] = static(())
    halo_bytes: int = static(0)


@dataclasses.dataclass
class OwnCells:
    """One shard's plan on the host before the shards are padded to one form."""

    gather: np.ndarray
    requests: Request
    write: np.ndarray
    after: np.ndarray
    after_slots: np.ndarray
    boundaries: list[BoundaryCondition]
    send: list[np.ndarray] = dataclasses.field(default_factory=list)
    ghost: np.ndarray | None = None
    ghost_gather: np.ndarray | None = None


def extended_boundaries(boundaries: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice,
                        coords: tuple[int, ...]) -> tuple[BoundaryCondition, ...]:
    """The boundary conditions as shard ``coords`` sees them on its extended shard (its own cells and one ghost
    layer on each shared face: :meth:`BoundaryCondition.on_extended`); EngineUnavailable for one without."""
    try:
        return tuple(bc.on_extended(layout, lattice, coords) for bc in boundaries)
    except FormUnavailable as exc:
        raise EngineUnavailable(str(exc)) from None


def shard_blocks(setup: Setup, layout: Layout) -> list[tuple[tuple[BoundaryCondition, ...], Block]]:
    """Each shard's conditions on its extended shard and the block of their cells (lbm.engines.plan.plan_block)."""
    lat, ext = setup.lattice, layout.ext
    plans = []
    for coords in layout.shards():
        local = extended_boundaries(setup.boundaries, layout, lat, coords)
        # every solid cell in the block: a shard's interior cells would need their rest state set on the shard
        blk = (plan_block(lat, ext, local, hold_at_rest=False)
               or Block(lattice=lat, shape=ext, cells=np.zeros(0, np.int64), size=0))
        e = np.stack(np.unravel_index(blk.cells, ext))
        if layout.shape[0] > 1 and any(b.footprint(ext, lat).face.size for b in local) and (
                coords[0] == 0 and np.any(e[0] == 0) or coords[0] == layout.shape[0] - 1 and np.any(e[0] == ext[0] - 1)):
            raise EngineUnavailable("a wall reads across the periodic wrap of a grid with an inlet or outflow face")
        plans.append((local, blk))
    return plans


def own_cells(lat: Lattice, layout: Layout, local: tuple[BoundaryCondition, ...], blk: Block, size: int,
              ghosts: int) -> OwnCells:
    """One shard's plan padded to ``size`` written cells and ``ghosts`` read-only ones (the last a padding cell)."""
    ext, own = layout.ext, layout.shard
    lo = np.asarray([1 if m > 1 else 0 for m in layout.shape])
    # padding: one of the shard's own cells outside the plan (a ghost-layer cell would be asked of a neighbour)
    free = np.setdiff1d(np.ravel_multi_index(tuple(np.stack(np.unravel_index(np.arange(math.prod(own)), own))
                                                   + lo[:, None]), ext), blk.cells)
    if not free.size:
        raise EngineUnavailable("a shard whose every own cell is a boundary cell")
    pad_w, pad_g = size - blk.size, ghosts - (blk.cells.size - blk.size)
    cells = np.concatenate([blk.cells[: blk.size], np.full(pad_w, free[0]), blk.cells[blk.size:],
                            np.full(pad_g, free[0])]).astype(np.int64)
    padded = Block(lattice=lat, shape=ext, cells=cells, size=size)
    ghost, offset, owned = ghost_owners(np.stack(np.unravel_index(cells, ext)), own, layout.shape)
    gather, _ = slot_maps(lat, own, np.where(ghost, 0, owned), "push")
    requests: Request = {}
    for o in {tuple(int(v) for v in col) for col in offset[:, ghost].T}:
        at = np.flatnonzero(ghost & np.all(offset == np.asarray(o)[:, None], axis=0))
        requests[o] = (at, owned[at])
    written = np.stack(np.unravel_index(cells[:size], ext)) - lo[:, None]
    inside = np.all((written >= 0) & (written < np.asarray(own)[:, None]), axis=0)
    real = np.arange(size) < blk.size
    past = lat.q * math.prod(own)
    _, write = slot_maps(lat, own, np.ravel_multi_index(tuple(written), own, mode="clip"), "push")
    write = np.where((inside & real)[None], write, past).astype(np.int32)
    # a ghost layer's cell writes the populations it sends into the shard (after the wrapped ones returned)
    after = np.full((lat.q, size), past, np.int64)
    for i, c in enumerate(lat.c):
        target = written + c[:, None]
        into = real & ~inside & np.all((target >= 0) & (target < np.asarray(own)[:, None]), axis=0)
        after[i, into] = i * math.prod(own) + np.ravel_multi_index(tuple(target[:, into]), own)
    sent = np.flatnonzero(np.any(after < past, axis=0))
    return OwnCells(gather=gather.astype(np.int32), requests=requests, write=write, after=sent,
                    after_slots=after[:, sent], boundaries=[bc.on_block(padded) for bc in local])


def exchange(per_shard: list[OwnCells], layout: Layout, lat: Lattice) -> tuple[list[tuple[int, ...]], list[int]]:
    """The ghost cells each shard reads: every neighbour (offset) sends the populations of the cells the shard
    asked for, padded to one count per offset (``send``); the shard's reads as flat positions into what it
    received (``ghost``, ``ghost_gather``). Returns the offsets and the count of cells per offset."""
    offsets = sorted({o for p in per_shard for o in p.requests})
    counts = [max(p.requests[o][0].size if o in p.requests else 0 for p in per_shard) for o in offsets]
    nb = math.prod(layout.shard)
    none = np.zeros(0, np.int64)
    for b, p in enumerate(per_shard):
        at, index, base = [], [], 0
        for o, k in zip(offsets, counts, strict=True):
            asking = per_shard[int(np.ravel_multi_index(
                tuple((c - v) % m for c, v, m in zip(layout.shards()[b], o, layout.shape, strict=True)),
                layout.shape))].requests
            theirs = asking[o][1] if o in asking else none
            p.send.append((np.arange(lat.q)[:, None] * nb + np.pad(theirs, (0, k - theirs.size))[None]).astype(np.int32))
            mine = p.requests[o][0] if o in p.requests else none
            at.append(mine)
            index.append(base + np.arange(lat.q)[:, None] * k + np.arange(mine.size)[None])
            base += lat.q * k
        p.ghost = np.concatenate(at) if at else none
        p.ghost_gather = np.concatenate(index, axis=1) if index else np.zeros((lat.q, 0), np.int64)
    return offsets, counts


def uniform(p: OwnCells, lat: Lattice, n: int, size: int, reads: int, sends: int, past: int,
            offsets: tuple[tuple[int, ...], ...], halo_bytes: int) -> ShardPlan:
    """One shard's plan with its ghost reads and sends padded to ``reads`` and ``sends``: padded reads fill the
    spare padding cell (position ``n - 1``), padded sends go past the end (dropped). Positions are flat in the
    plan's ``(Q, n)`` arrays: 1-D gathers and scatters (along axis 1, XLA transposes)."""
    assert p.ghost is not None and p.ghost_gather is not None
    k, m = reads - p.ghost.size, sends - p.after.size
    ghost = np.pad(p.ghost, (0, k), constant_values=n - 1)
    return ShardPlan(
        gather=p.gather, write=p.write, boundaries=tuple(p.boundaries),
        send=tuple(p.send) if reads else None,
        ghost=(np.arange(lat.q)[:, None] * n + ghost[None]).astype(np.int32) if reads else None,
        ghost_gather=np.pad(p.ghost_gather, ((0, 0), (0, k))).astype(np.int32) if reads else None,
        after=(np.arange(lat.q)[:, None] * size + np.pad(p.after, (0, m))[None]).astype(np.int32) if sends else None,
        after_slots=np.pad(p.after_slots, ((0, 0), (0, m)), constant_values=past).astype(np.int32) if sends else None,
        offsets=offsets, halo_bytes=halo_bytes)


def shard_plan(setup: Setup, layout: Layout) -> ShardPlan:
    """Every shard's boundary-cell plan (lbm.engines.plan on its extended shard), padded to one form and stacked
    (:class:`ShardPlan`); EngineUnavailable where a shard's conditions have no such plan."""
    lat = setup.lattice
    if np.any(lat.c[0]):
        raise EngineUnavailable("the per-shard plans pad with population 0, which must be the rest population")
    plans = shard_blocks(setup, layout)
    size = max(b.size for _, b in plans)
    ghosts = max(b.cells.size - b.size for _, b in plans) + 1  # the last one a padding cell (padded links' target)
    per_shard = [own_cells(lat, layout, local, blk, size, ghosts) for local, blk in plans]
    n = size + ghosts
    for k in range(len(setup.boundaries)):
        forms = [p.boundaries[k] for p in per_shard]
        if forms[0].link_count() is not None:
            length = max(1, max(f.link_count() for f in forms))
            for p, f in zip(per_shard, forms, strict=True):
                p.boundaries[k] = f.padded(length, n - 1)
    offsets, counts = exchange(per_shard, layout, lat)
    reads = max(p.ghost.size for p in per_shard if p.ghost is not None)
    sends = max(p.after.size for p in per_shard)
    halo_bytes = lat.q * sum(counts) * jnp.dtype(setup.dtype).itemsize
    past = lat.q * math.prod(layout.shard)
    return layout.stacked([uniform(p, lat, n, size, reads, sends, past, tuple(offsets), halo_bytes)
                           for p in per_shard])


class XlaBulk:
    """The xla timestep without boundary conditions: one periodic push step of every cell of a shard."""

    note = ""
    compiler_options = None
    """XLA's options for a program holding the step (none: the defaults)."""

    def __init__(self, setup: Setup) -> None:
        self.setup = dataclasses.replace(setup, boundaries=())

    def __call__(self, f: jnp.ndarray) -> jnp.ndarray:
        """One periodic step of ``f`` ``(Q, *shard)``; a new array."""
        return timestep(f, step_index(0), (), self.setup)[0]


class ShardedBulkEngine(OnMesh, FusedEngine):
    """A bulk step on every shard of a mesh under shard_map as a periodic grid, the boundary cells by the shards'
    :class:`ShardPlan` (see the module doc); ``bulk`` steps one shard: ``(Q, *shard) -> (Q, *shard)``."""

    kernel_text = "the bulk step"
    """How the note names the bulk step on each shard."""

    def __init__(self, setup: Setup, layout: Layout, bulk: Any, plan: ShardPlan | None,
                 storage: str = "compute") -> None:
        FusedEngine.__init__(self, setup, storage)
        self.layout, self.bulk, self.plan = layout, bulk, plan
        self.compiler_options = bulk.compiler_options
        self.dense = as_arrays(setup.boundaries)
        self.params = plan if plan is not None else ()
        self.halo_plan_bytes = plan.halo_bytes if plan is not None else 0
        self._stages = tuple(s for s in setup.stages if s != "stream")
        cells = (f"the boundary cells by a plan per shard (its ghost cells sent by their shards, "
                 f"{self.halo_plan_bytes} B/step), " if plan is not None else "")
        self.note = "; ".join(filter(None, [
            f"mesh {'x'.join(map(str, layout.shape))} ({', '.join(layout.sharded_axes)}), shards "
            f"{'x'.join(map(str, layout.shard))}, {self.kernel_text} on each shard, {cells}halo after it",
            bulk.note]))

    def _dense_params(self) -> Any:
        return self.dense

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages of the sharded timestep in order, ``halo`` included."""
        return (*self.setup.stages, HALO)

    def gathered(self, f: jnp.ndarray, plan: ShardPlan) -> jnp.ndarray:
        """The plan's cells ``(Q, n, 1[, 1])`` from the shard's pre-step populations, those in the ghost layers
        (all Q populations) sent by the neighbours that own them."""
        lat = self.setup.lattice
        g = f.reshape(-1)[plan.gather]
        if plan.ghost is not None:
            with jax.named_scope(HALO):
                got = jnp.concatenate([
                    jax.lax.ppermute(f.reshape(-1)[send], self.layout.mesh_axes, send_to(o, self.layout.shape)
                                     ).reshape(-1)
                    for o, send in zip(plan.offsets, plan.send, strict=True)])
            g = g.reshape(-1).at[plan.ghost].set(got[plan.ghost_gather]).reshape(g.shape)
        return g.reshape((lat.q, -1) + (1,) * (lat.d - 1))

    def step(self, f: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t`` on a shard: the bulk step (periodic on the shard), the shard's boundary cells into the slots
        it wrote, then the wrapped populations returned."""
        aux: dict[str, jnp.ndarray] = {}
        plan = jax.tree_util.tree_map(lambda a: a[0], params) if self.plan is not None else None
        if plan is not None:
            g = self.gathered(f, plan)
        out = self.bulk(f)
        if plan is not None:
            lat = self.setup.lattice
            s = run_stages(self._stages, StepState(f=g, t=t), plan.boundaries, self.setup)
            post = s.post.reshape(lat.q, -1)[:, : plan.write.shape[1]]
            with jax.named_scope("stream"):
                out = out.reshape(-1).at[plan.write].set(post, mode="drop").reshape(f.shape)
            aux = outputs(s)
        with jax.named_scope(HALO):
            out = return_wrapped(out, self.setup.lattice.c, self.layout.shape)
        if plan is not None and plan.after is not None:
            with jax.named_scope("stream"):
                sent = post.reshape(-1)[plan.after]
                out = out.reshape(-1).at[plan.after_slots].set(sent, mode="drop").reshape(f.shape)
        return out, aux

    def chunk_function(self, n: int) -> Any:
        """n steps on each shard, two per lax.scan iteration, inside shard_map (f donated); the shards' parts of
        the per-step forces summed over the shards once per chunk (psum)."""
        fspec = self.layout.spec()
        chunk = self.paired_chunk(n, self.step)
        axes = self.layout.mesh_axes

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
        return [program(FUSED_STEP, None, self.chunk_function(n), f, self.params, step_index(0),
                        options=self.compiler_options)]


class ShardedPallasEngine(ShardedBulkEngine):
    """The ``pallas`` engine on a mesh: the Pallas kernel on every shard (lbm.engines.pallas.engine.PallasKernel)."""

    name = "pallas"
    kernel_text = "the Pallas kernel"


class ShardedPlanEngine(ShardedBulkEngine):
    """The ``xla`` engine on a mesh for conditions without a dense mesh form (lbm.engines.sharded.dense): the xla
    step of every shard as a periodic grid (:class:`XlaBulk`), the boundary cells by the per-shard plan."""

    name = "xla"
    kernel_text = "the xla step (periodic)"


def plan_engine(setup: Setup, layout: Layout, storage: str = "compute") -> ShardedPlanEngine:
    """The xla step on every shard with the per-shard plan; EngineUnavailable where there is no such plan."""
    if storage != "compute":
        raise EngineUnavailable(f"the per-shard plan keeps populations in the compute dtype, not {storage}")
    return ShardedPlanEngine(setup, layout, XlaBulk(setup), shard_plan(setup, layout) if setup.boundaries else None,
                             storage)
