"""The per-block plan: the bulk step of each block as a periodic grid, the boundary cells by a plan per block."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from lbm import parallel
from lbm.boundaries.base import BoundaryCondition, FormUnavailable, StepState
from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable, program
from lbm.engines.plan import Block, plan_block, slot_maps
from lbm.engines.sharded.layout import Layout, OnMesh, param_specs
from lbm.engines.timestep import as_arrays, outputs, run_stages, step_index, timestep
from lbm.engines.xla import FusedEngine
from lbm.lattice import Lattice
from lbm.stages import FUSED_STEP, HALO


def extended_boundaries(boundaries: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice,
                        coords: tuple[int, ...]) -> tuple[BoundaryCondition, ...]:
    """The boundary conditions as block ``coords`` sees them on its extended block (its own cells and one ghost
    layer on each shared face: :meth:`BoundaryCondition.on_extended`); EngineUnavailable for one without."""
    try:
        return tuple(bc.on_extended(layout, lattice, coords) for bc in boundaries)
    except FormUnavailable as exc:
        raise EngineUnavailable(str(exc)) from None


def block_plan(setup: Setup, layout: Layout) -> tuple[dict[str, Any], list[tuple[int, ...]], int]:
    """Every block's boundary-cell plan (lbm.engines.plan on its extended block), padded to one form and
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
        if layout.shape[0] > 1 and any(b.footprint(ext, lat).face.size for b in local) and (
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
        if forms[0].link_count() is not None:
            length = max(1, max(f.link_count() for f in forms))
            for p, f in zip(per_block, forms, strict=True):
                p["boundaries"][k] = f.padded(length, len(cells) - 1)
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
