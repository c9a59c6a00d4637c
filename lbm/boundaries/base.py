"""What every boundary condition is: a frozen pytree dataclass acting in one stage of the timestep.

A boundary condition (BC) answers everything an engine asks of it, so that no engine switches on
its class:

- its dense stage rule (:meth:`BoundaryCondition.apply`, on arrays shaped ``(Q, *grid)``) and the
  cells it touches (:meth:`~BoundaryCondition.footprint`);
- its block form (:meth:`~BoundaryCondition.on_block`): the same rule on a block of gathered cells,
  which engines whose bulk kernel treats every cell as fluid (native, Pallas) run on those cells;
- its rule for the bulk kernels (:meth:`~BoundaryCondition.bulk_rule`): what the native kernel needs
  to apply it itself, or None; and its form applied while streaming (:meth:`~BoundaryCondition.folded`);
- its forms on a device mesh (:meth:`~BoundaryCondition.on_mesh` for the dense mesh forms,
  :meth:`~BoundaryCondition.on_extended` for a shard's plan), from a :class:`MeshLayout`;
- what a differentiable run (lbm.diff) asks: its form with hand-written adjoints
  (:meth:`~BoundaryCondition.with_adjoint`; a half-way wall's, lbm.boundaries.bounce_back), whether its rule is affine,
  and its continuous inputs
  (:meth:`~BoundaryCondition.with_velocity_scaled`, :meth:`~BoundaryCondition.moved_to`,
  :meth:`~BoundaryCondition.nodes_on_the_wall`).

A subclass inherits all of them: one that changes the rule overrides the forms that no longer hold.
Arrays (masks, velocities, link lists) are pytree leaves and reach jitted code as arguments; options
are static fields (``field(metadata={"static": True})``). Adding a boundary condition is one module
in this package; lbm.boundaries.forms holds the block forms several conditions share on a mesh.

:class:`StepState` carries what the stages of one timestep produce (lbm.stages order):
``f`` (populations before collision), ``drho``, ``u``, ``feq``, ``collided`` (after collision),
``post`` (after bounce-back: what streams), ``force`` (momentum exchange on obstacles) and ``t``,
the index of the step being computed (an int32 scalar; 0 for the first step of a run), for
boundary conditions that change in time. Populations (``f``, ``feq``, ``collided``, ``post``) are deviations
from the rest state, f_i - w_i, and ``drho`` is the density's, ρ - 1 (lbm.kernels.equilibrium): a rule that
sets populations sets their deviations (a solid cell at rest holds zeros), one that needs ρ takes 1 + drho.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import jax
import numpy as np

from lbm.lattice import Lattice

T = TypeVar("T")


def pytree_dataclass(cls: type[T]) -> type[T]:
    """A frozen dataclass registered as a pytree: array fields are leaves, ``static`` fields are metadata."""
    frozen = dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(frozen)


def static(default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that is static under jit (hashable metadata, not an array)."""
    return field(default=default, default_factory=default_factory, metadata={"static": True})


@pytree_dataclass
class StepState:
    """The arrays one timestep produces, stage by stage (populations as f - w, density as ρ - 1); unset ones are None."""

    f: Any
    t: Any = None
    drho: Any = None
    u: Any = None
    feq: Any = None
    collided: Any = None
    post: Any = None
    force: Any = None

    def replace(self, **changes: Any) -> StepState:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Footprint:
    """Cells a boundary condition touches, as flat lattice indices.

    ``face``: cells it writes that must stay together in face order (an inlet or outlet face);
    ``cells``: other cells it writes, or reads and writes; ``ghosts``: cells it only reads;
    ``rest``: those of ``cells`` it holds at the rest state and that receive only rest populations from it
    (:func:`resting_cells`: an obstacle's interior), which a bulk-kernel engine may leave to its kernel in a chunk and
    set to rest at the chunk's end (lbm.engines.plan.plan_block).
    """

    face: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cells: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ghosts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rest: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def resting_cells(solid: np.ndarray, emits: np.ndarray, lattice: Lattice) -> np.ndarray:
    """Flat indices of the solid cells x of a wall rule that sets its solid cells' post-collision populations to the
    rest state except where ``emits`` ``(Q, *grid)`` flags them: x emits nothing, and each cell x - c_i it receives
    population i from is solid and does not emit it.

    Under such a rule nothing but rest populations ever reaches x, and what x holds reaches only cells of the same kind
    or solid cells whose post-collision populations the rule sets whatever they received.
    """
    solid = np.asarray(solid, bool)
    emits = np.asarray(emits, bool)
    axes = tuple(range(lattice.d))
    ok = solid & ~emits.any(axis=0)
    for i in range(lattice.q):  # the sender x - c_i, moved onto x
        shift = tuple(int(c) for c in lattice.c[i])
        ok &= np.roll(solid & ~emits[i], shift, axis=axes)
    return np.flatnonzero(ok.reshape(-1)).astype(np.int64)


class CellBlock(Protocol):
    """Gathered cells as an engine lays them out: populations ``(Q, n, 1[, 1])``, cell k at position k."""

    lattice: Lattice
    shape: tuple[int, ...]
    cells: np.ndarray

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of lattice cells ``flat`` (all must be in the block)."""
        ...

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell lattice array ``(..., *grid)`` restricted to the block: ``(..., n, 1[, 1])``."""
        ...


class FormUnavailable(RuntimeError):
    """A boundary condition has no form for what an engine asks (the reason is the message)."""


@dataclass(frozen=True)
class BulkRule:
    """What a bulk kernel (native) needs to apply a boundary condition itself, row by row after its bulk pass.

    ``wall``: (solid mask, half-way links or None for full-way, wall term or None) of a bounce-back wall;
    ``inflow``: a velocity inlet on the face x = 0 (``velocity(t)`` and ``kind`` as lbm.boundaries.inlet.Inlet);
    ``outflow``: a zero-gradient outflow on x = nx - 1; ``links``: a momentum exchange over the links
    (``link_dir``, ``link_src``, ``link_dst``) read from the kernel's post-step populations.
    """

    wall: tuple[np.ndarray, np.ndarray | None, np.ndarray | None] | None = None
    inflow: bool = False
    outflow: bool = False
    links: bool = False


class MeshLayout(Protocol):
    """A grid split into shards over a device mesh (lbm.engines.sharded.layout.Layout), as the conditions use it."""

    grid_shape: tuple[int, ...]
    shape: tuple[int, ...]
    shard: tuple[int, ...]
    ext: tuple[int, ...]
    sharded_axes: tuple[str, ...]
    mesh_axes: tuple[str, ...]

    def grid(self, a: Any, lead: int = 1) -> Any:
        """A per-cell array ``(*lead, *grid)`` sharded like the grid."""
        ...

    def extended(self, a: Any, lead: int = 1) -> Any:
        """A per-cell array laid out as extended shards (periodic ghost layers), one shard per device."""
        ...

    def on_face(self, bc: Any, dtype: Any) -> Any:
        """A face condition with its arrays placed along the face's grid axes."""
        ...

    def owns_planes(self, bc: Any, lattice: Lattice) -> int:
        """The side (0 or -1) of a face condition whose cells lie in the first or last shard along x."""
        ...

    def shards(self) -> list[tuple[int, ...]]:
        """Mesh coordinates of every shard, in device order."""
        ...

    def own_extended(self, a: Any, coords: tuple[int, ...], lead: int = 1, axes: slice = slice(None)) -> np.ndarray:
        """Shard ``coords``'s extended shard of a per-cell array ``(*lead, *grid[axes])``."""
        ...

    def to_extended(self, flat: np.ndarray, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Grid cells ``flat`` as cells of shard ``coords``'s extended shard, and whether each lies in it."""
        ...

    def links(self, bc: Any, lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """An obstacle's links split by the shard of their fluid cell."""
        ...

    def stacked(self, per_shard: list[Any]) -> Any:
        """Per-shard pytrees of one form stacked along a leading device axis, sharded over the mesh."""
        ...

    def per_device(self, a: np.ndarray) -> Any:
        """A host array ``(shards * k,)`` placed one slice of k per device."""
        ...


class BoundaryCondition:
    """Base of the boundary conditions: the stage it acts in, its dense rule, its cells, its forms for the engines."""

    stage: ClassVar[str]
    box_form: ClassVar[bool] = False
    """Its dense rule reads and writes no cell outside its footprint, and pays for the whole grid: the xla engine runs
    it on the box of those cells (lbm.boundaries.box)."""
    after_halo: ClassVar[bool] = False
    """Mesh forms: whether the rule runs on the extended shard, after the halo."""
    ghost_reads: tuple[str, ...] = ()
    """Mesh forms: StepState arrays the rule reads in the ghost layers (the halo exchanges their planes)."""

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The stage's state after this boundary condition (dense arrays ``(Q, *grid)``)."""
        raise FormUnavailable(f"{type(self).__name__} has no dense rule")

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """The cells this boundary condition writes and reads; FormUnavailable if it does not say (no block form)."""
        raise FormUnavailable(f"{type(self).__name__} has no footprint (the bulk-kernel engines need its block form)")

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same rule on the cells of ``block`` (which holds this condition's footprint); FormUnavailable if none."""
        raise FormUnavailable(f"{type(self).__name__} has no block form (the bulk-kernel engines need one)")

    def label(self) -> str:
        """The condition's name in messages: its class, and its ``kind`` where it has one."""
        kind = self.__dict__.get("kind")
        return f"{type(self).__name__}, kind {kind}" if isinstance(kind, str) else type(self).__name__

    def bulk_rule(self) -> BulkRule | None:
        """What a bulk kernel needs to apply this condition itself; None: it runs on the boundary-cell block."""
        return None

    def folded(self, lattice: Lattice) -> BoundaryCondition | None:
        """The same step applied while streaming (stage ``stream``) where nothing reads it before; None: no such form."""
        return None

    # --- what a differentiable run (lbm.diff) asks ------------------------------------------------------------
    affine: ClassVar[bool] = False
    """Whether the rule is affine in the populations it reads (its pullback then the same at every state)."""

    def with_adjoint(self, platform: str | None = None) -> BoundaryCondition:
        """The condition in a form whose rules carry hand-written adjoints, for a program compiled for ``platform``
        (cpu, cuda, tpu; None: jax's backend); itself where jax differentiates its rule."""
        return self

    def with_velocity_scaled(self, ratio: Any) -> BoundaryCondition:
        """The condition with every velocity it prescribes (an inflow, a wall's motion) times ``ratio`` (a traced
        scalar: a differentiable run's u_lattice over the run's); itself where it prescribes none."""
        return self

    def moved_to(self, intersect: Any, shape: tuple[int, ...], lattice: Lattice) -> BoundaryCondition:
        """A curved wall with its links (and the mask) kept, cut where ``intersect`` (jax.numpy, traced; as
        lbm.boundaries.interpolated.Intersect) puts the wall; itself where it has no curved wall."""
        return self

    def nodes_on_the_wall(self, tolerance: float) -> np.ndarray | None:
        """For a curved wall: per link whose wall point lies within ``tolerance`` (link lengths) of a node, that node
        (flat index); None where the condition has no curved wall (nothing of it moves with a shape)."""
        return None

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The mesh form on every shard of ``mesh`` (inside shard_map), its arrays placed; FormUnavailable if none."""
        raise FormUnavailable(f"the sharded engine has no mesh form of {type(self).__name__}")

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The condition as shard ``coords`` sees it on its extended shard (host arrays); FormUnavailable if none."""
        raise FormUnavailable(f"no per-shard plan for {type(self).__name__}")

    def link_count(self) -> int | None:
        """How many links a link condition (forces, interpolated walls) holds; None for the others."""
        return None

    def padded(self, length: int, spare: int) -> BoundaryCondition:
        """A link condition's block form padded to ``length`` links that change nothing (on the padding cell at
        block position ``spare``); the others unchanged."""
        return self


def face_cells(shape: tuple[int, ...], x: int) -> np.ndarray:
    """Flat indices of the cells of the face normal to axis 0 at ``x`` (negative counts from the end), in face order."""
    return np.arange(int(np.prod(shape))).reshape(shape)[x].reshape(-1).astype(np.int64)


def neighbour(flat: np.ndarray, shape: tuple[int, ...], offset: np.ndarray) -> np.ndarray:
    """Flat indices of cells ``flat`` moved by integer ``offset`` (periodic on every axis)."""
    coords = np.unravel_index(flat, shape)
    moved = tuple((c + int(o)) % n for c, o, n in zip(coords, offset, shape, strict=True))
    return np.ravel_multi_index(moved, shape)


def contiguous(positions: np.ndarray) -> tuple[int, int]:
    """(start, stop) of block positions that form one ascending run; ValueError otherwise."""
    positions = np.asarray(positions)
    start = int(positions[0]) if positions.size else 0
    if not np.array_equal(positions, np.arange(start, start + positions.size)):
        raise ValueError("face cells must lie contiguously, in face order, in the block")
    return start, start + int(positions.size)


def flat_block(a: Any) -> Any:
    """A block array ``(k, n, 1[, 1])`` as ``(k, n)``."""
    return a.reshape(a.shape[0], -1)


def directions(a: Any, which: Any) -> Any:
    """The populations ``which`` (static direction numbers) of ``a`` ``(Q, ...)``, stacked in that order.

    Static slices, never a gather with an index array: XLA:TPU (jax 0.10.2, v5e) computed the inlet's
    ``f[unknown] = feq[unknown] + f[opp] - feq[opp]`` wrongly when jitted (up to 1.4e-2 of the largest |f| at the
    inlet face after 500 steps of the default cylinder; right op by op and on a CPU), and right from static slices
    (``scripts/backends_agree.py``, docs/performance.md "Fields on the chip").
    """
    return jax.numpy.stack([a[int(i)] for i in np.asarray(which).reshape(-1)])


def with_directions(a: Any, which: Any, values: Any) -> Any:
    """``a`` ``(Q, ...)`` with its populations ``which`` (static direction numbers) replaced by ``values``
    ``(len(which), ...)``: a stack of static slices (see :func:`directions`), not a scatter."""
    place = {int(i): k for k, i in enumerate(np.asarray(which).reshape(-1))}
    return jax.numpy.stack([values[place[i]] if i in place else a[i] for i in range(a.shape[0])])
