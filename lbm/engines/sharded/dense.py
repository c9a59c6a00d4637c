"""The xla engine on a device mesh under ``shard_map``: the timestep of lbm.engines.timestep on shards of the mesh.

Populations are sharded along the grid axes (lbm.parallel). Each device runs the stages on its
shard: the local ones (outflow, macroscopic, equilibrium, inlet, collide, full-way bounce-back) on
the shard itself; then the ``halo`` stage gives the post-collision populations a ghost layer holding
the populations that enter the shard (``ppermute``, only those crossing each face; with a parabolic
wall also the planes of drho and u); the stages that read across a face (half-way, moving and
interpolated walls, forces, stream) run on the extended shard, and streaming crops it back.
Each boundary condition gives its mesh form (:func:`mesh_forms`, its
:meth:`~lbm.boundaries.base.BoundaryCondition.on_mesh`): face conditions act only on the edge shards,
masks and link arrays are laid out per shard, forces are summed over the shards with ``psum``.
``fused``: n steps under ``lax.scan`` in one jit, each stage (``halo`` too) in ``jax.named_scope``;
``instrumented``: each stage its own jit, annotated. The other design, a bulk step per shard with a
boundary-cell plan per shard, is lbm.engines.sharded.shardplan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from lbm.boundaries.base import BoundaryCondition, FormUnavailable, StepState
from lbm.boundaries.forms import FACE_FIELDS
from lbm.cases.base import Setup
from lbm.engines.base import Engine, EngineUnavailable, program
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.sharded.halo import crop, extend, plane_bytes
from lbm.engines.sharded.layout import Layout, OnMesh, param_specs, state_specs
from lbm.engines.timestep import as_arrays, outputs, run_stage, step_index
from lbm.engines.xla import FusedEngine
from lbm.lattice import Lattice
from lbm.stages import CORE_STAGES, FUSED_STEP, HALO, TIMESTEP


def mesh_forms(boundaries: tuple[BoundaryCondition, ...], layout: Layout, lattice: Lattice,
                dtype: Any) -> tuple[BoundaryCondition, ...]:
    """Each boundary condition in its mesh form (:meth:`BoundaryCondition.on_mesh`), arrays placed;
    EngineUnavailable if one has none."""
    try:
        return tuple(bc.on_mesh(layout, lattice, dtype) for bc in boundaries)
    except FormUnavailable as exc:
        raise EngineUnavailable(str(exc)) from None


Piece = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class DenseForms:
    """The dense mesh forms of a setup's conditions on a layout (:func:`mesh_forms`), and the timestep as pieces
    (:func:`pieces_of`)."""

    forms: tuple[BoundaryCondition, ...]
    pieces: tuple[Piece, ...]


def dense_forms(setup: Setup, layout: Layout) -> DenseForms:
    """The setup's dense mesh forms and pieces on ``layout``; EngineUnavailable where there are none."""
    forms = mesh_forms(setup.boundaries, layout, setup.lattice, setup.dtype)
    return DenseForms(forms=forms, pieces=tuple(pieces_of(setup, forms)))


def pieces_of(setup: Setup, forms: tuple[BoundaryCondition, ...]) -> list[Piece]:
    """The timestep as (stage, indices of its mesh-form conditions), with ``halo`` before the first stage that
    reads across a face; EngineUnavailable if a shard-local condition would have to follow the halo."""
    pieces: list[Piece] = []
    halo_done = False
    for name in setup.stages:
        mine = [i for i, bc in enumerate(forms) if bc.stage == name]
        ext = tuple(i for i in mine if forms[i].after_halo)
        local = tuple(i for i in mine if not forms[i].after_halo)
        if ext and local and min(ext) < max(local) or halo_done and local:
            raise EngineUnavailable(f"stage {name}: a shard-local condition follows one that reads across shards")
        if ext and name in CORE_STAGES:
            raise EngineUnavailable(f"stage {name}: a condition reading across shards in a core stage")
        if halo_done or ext or name == "stream":
            if not halo_done:
                if local:
                    pieces.append((name, local))
                pieces.append((HALO, tuple(i for i, bc in enumerate(forms) if bc.ghost_reads)))
                halo_done = True
            pieces.append((name, ext))
        else:
            pieces.append((name, local))
    return pieces


def piece_function(piece: Piece, setup: Setup, shape: tuple[int, ...]) -> Callable[[StepState, Any], StepState]:
    """One piece of the timestep on a shard (inside shard_map): a stage's part, or the halo exchange."""
    name, idx = piece
    c = setup.lattice.c

    if name == HALO:
        def halo(s: StepState, params: Any) -> StepState:
            fields = sorted({r for i in idx for r in params[i].ghost_reads})
            return s.replace(post=extend(s.post, shape, lattice_c=c),
                             **{r: extend(getattr(s, r), shape, FACE_FIELDS[r]) for r in fields})
        return halo

    def part(s: StepState, params: Any) -> StepState:
        s = run_stage(name, s, tuple(params[i] for i in idx), setup)
        if name == "stream":
            s = s.replace(f=crop(s.f, shape), post=None)
        return s

    part.__name__ = f"stage_{name}"
    return part


class ShardedSupport(OnMesh):
    """What the shard_map engines share: the layout, the mesh-form conditions, the pieces of the timestep."""

    setup: Setup

    def _shard(self, layout: Layout, dense: DenseForms) -> None:
        setup = self.setup
        self.layout = layout
        self.forms, self.pieces = dense.forms, list(dense.pieces)
        self.functions = [piece_function(p, setup, self.layout.shape) for p in self.pieces]
        self.dense = as_arrays(setup.boundaries)
        self.params = self.forms
        self.halo_plan_bytes = plane_bytes(self.forms, self.layout.shard, self.layout.shape, setup.lattice,
                                           jnp.dtype(setup.dtype).itemsize)

    def _dense_params(self) -> Any:
        return self.dense

    def shard_note(self) -> str:
        """One line: mesh, shard and halo."""
        return (f"mesh {'x'.join(map(str, self.layout.shape))} ({', '.join(self.layout.sharded_axes)}), "
                f"shards {'x'.join(map(str, self.layout.shard))}, halo before {self.pieces[self.halo_at() + 1][0]}")

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages of the sharded timestep in order, ``halo`` included (each once)."""
        return tuple(dict.fromkeys(p[0] for p in self.pieces))

    def halo_at(self) -> int:
        """Position of the halo piece among the pieces."""
        return [p[0] for p in self.pieces].index(HALO)


class ShardedEngine(ShardedSupport, FusedEngine):
    """The fused timestep on every shard of a mesh under shard_map, n steps per dispatch with lax.scan."""

    name = "xla"

    def __init__(self, setup: Setup, layout: Layout, dense: DenseForms, storage: str = "compute") -> None:
        FusedEngine.__init__(self, setup, storage)
        self._shard(layout, dense)
        self.note = self.shard_note()

    def chunk_function(self, n: int) -> Any:
        """n timesteps on each shard under lax.scan, inside shard_map (f donated)."""
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


class ShardedInstrumentedEngine(ShardedSupport, InstrumentedEngine):
    """Each piece of the sharded timestep (``halo`` included) its own jit over shard_map, annotated with its stage."""

    name = "xla"

    def __init__(self, setup: Setup, layout: Layout, dense: DenseForms, sync: bool = False) -> None:
        Engine.__init__(self, setup)
        self.sync = sync
        self._shard(layout, dense)
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
