"""What every boundary condition is: a frozen pytree dataclass acting in one stage of the timestep.

A boundary condition (BC) owns its dense stage function (:meth:`BoundaryCondition.apply`, on
arrays shaped ``(Q, *grid)``), says which cells it touches (:meth:`footprint`), and gives the
same rule restricted to a block of gathered cells (:meth:`on_block`), so that an engine whose
bulk kernel treats every cell as fluid (native, Pallas) runs it on those cells only. Arrays
(masks, velocities, link lists) are pytree leaves and reach jitted code as arguments; options
are static fields (``field(metadata={"static": True})``). Adding a boundary condition is one
module in this package.

:class:`StepState` carries what the stages of one timestep produce (lbm.stages order):
``f`` (populations before collision), ``rho``, ``u``, ``feq``, ``collided`` (after collision),
``post`` (after bounce-back: what streams), ``force`` (momentum exchange on obstacles) and ``t``,
the index of the step being computed (an int32 scalar; 0 for the first step of a run), for
boundary conditions that change in time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import jax
import numpy as np

from lbm.lattice import Lattice


def pytree_dataclass[T](cls: type[T]) -> type[T]:
    """A frozen dataclass registered as a pytree: array fields are leaves, ``static`` fields are metadata."""
    frozen = dataclass(frozen=True)(cls)
    return jax.tree_util.register_dataclass(frozen)


def static(default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that is static under jit (hashable metadata, not an array)."""
    return field(default=default, metadata={"static": True})


@pytree_dataclass
class StepState:
    """The arrays one timestep produces, stage by stage; unset ones are None."""

    f: Any
    t: Any = None
    rho: Any = None
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
    ``cells``: other cells it writes, or reads and writes; ``ghosts``: cells it only reads.
    """

    face: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cells: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ghosts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


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


class BoundaryCondition:
    """Base of the boundary conditions: the stage it acts in, its dense rule, its cells, its block form."""

    stage: ClassVar[str]

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The stage's state after this boundary condition (dense arrays ``(Q, *grid)``)."""
        raise NotImplementedError

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """The cells this boundary condition writes and reads."""
        raise NotImplementedError

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same rule on the cells of ``block`` (which holds this condition's footprint)."""
        raise NotImplementedError


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
