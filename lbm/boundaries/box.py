"""The box form of an obstacle's conditions on a TPU: the rule on the static box of the grid that holds its cells.

A curved wall (:class:`~lbm.boundaries.interpolated.InterpolatedBounceBack`) and the momentum exchange
(:class:`~lbm.boundaries.forces.Forces`) gather and scatter populations by flat cell index, so their dense rules view
the whole population array as ``(Q, cells)``. On a TPU that view is a copy of every population in each direction (the
(8, 128) tiles of ``(Q, nx, ny)`` are not those of ``(Q, nx * ny)``): the default cylinder's program keeps it in VMEM
at 420x180, but at 3360x1440 it planned 14.2x the populations and ran at 297 MLUPS on a v5e. A full-way wall's
``where`` over every cell makes XLA:TPU write the collided and the bounced populations whole. :class:`InBox` runs the
same rule on the box of cells it touches (its footprint), cut out by static slices and written back by a
dynamic-update-slice at a constant offset: the same arithmetic on the same values, so the results are bitwise those
of the dense rule (tests/boundaries/test_boundaries_box.py). Only on the platforms of :data:`BOX_PLATFORMS`: for an
H100 the box form of the full-way wall raised the default cylinder's traffic ratio from 1.98 to 2.07 (deviceless
inspect), and a CPU gains nothing from it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from lbm.boundaries.base import BoundaryCondition, Footprint, StepState, pytree_dataclass, static
from lbm.lattice import Lattice

GRID_FIELDS = {"f": 1, "drho": 0, "u": 1, "feq": 1, "collided": 1, "post": 1}
"""StepState arrays laid out per cell, with the array axis of grid x (their leading axes come before it)."""
BOX_PLATFORMS = ("tpu",)
"""The platforms whose programs take the box forms (``jax.lax.platform_dependent``: the dense rule elsewhere)."""
BOX_FRACTION = 0.5
"""Largest share of the grid's cells a box may hold for the box form to be used (above it the dense rule is kept)."""


@dataclasses.dataclass(frozen=True)
class BoxBlock:
    """A box of the grid (first cell ``lo``, ``shape`` cells per axis) as a cell block: a cell at its C-order
    position in the box (:class:`~lbm.boundaries.base.CellBlock`, whose rules then see the box as their grid)."""

    lattice: Lattice
    grid: tuple[int, ...]
    lo: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def cells(self) -> np.ndarray:
        """The flat lattice indices of the box's cells, in box order."""
        axes = np.meshgrid(*[np.arange(a, a + n) for a, n in zip(self.lo, self.shape, strict=True)], indexing="ij")
        return np.ravel_multi_index(tuple(a.reshape(-1) for a in axes), self.grid)

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Box positions of lattice cells ``flat`` (all must be in the box)."""
        coords = np.unravel_index(np.asarray(flat, np.int64), self.grid)
        local = tuple(c - a for c, a in zip(coords, self.lo, strict=True))
        if any(np.any((c < 0) | (c >= n)) for c, n in zip(local, self.shape, strict=True)):
            raise ValueError("a cell outside the box")
        return np.ravel_multi_index(local, self.shape).astype(np.int32)

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell lattice array ``(..., *grid)`` restricted to the box: ``(..., *shape)``."""
        return np.asarray(values)[(..., *self.slices())]

    def slices(self) -> tuple[slice, ...]:
        """The box as slices of the grid axes."""
        return tuple(slice(a, a + n) for a, n in zip(self.lo, self.shape, strict=True))


def footprint_box(footprint: Footprint, grid: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The smallest box (first cell, cells per axis) holding every cell of ``footprint``; None when it has none."""
    cells = np.concatenate([footprint.face, footprint.cells, footprint.ghosts]).astype(np.int64)
    if cells.size == 0:
        return None
    coords = np.unravel_index(cells, grid)
    lo = tuple(int(c.min()) for c in coords)
    return lo, tuple(int(c.max()) + 1 - a for c, a in zip(coords, lo, strict=True))


@pytree_dataclass
class InBox(BoundaryCondition):
    """``inner`` (in box positions, :class:`BoxBlock`) applied to the box ``lo`` + ``shape`` of the grid alone, on the
    platforms of :data:`BOX_PLATFORMS`; ``dense`` (the condition on the grid) elsewhere."""

    inner: Any
    dense: Any
    lo: tuple[int, ...] = static(())
    shape: tuple[int, ...] = static(())

    @property
    def stage(self) -> str:  # type: ignore[override]
        """The inner condition's stage."""
        return self.inner.stage

    def label(self) -> str:
        """The inner condition's label."""
        return self.inner.label()

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The box form on the platforms of :data:`BOX_PLATFORMS`, the dense rule on the others (chosen when lowered)."""
        boxed = {p: lambda st: self.in_box(st, lattice) for p in BOX_PLATFORMS}
        return jax.lax.platform_dependent(s, **boxed, default=lambda st: self.dense.apply(st, lattice))

    def in_box(self, s: StepState, lattice: Lattice) -> StepState:
        """The inner rule on the box's cells of every per-cell array, its changes written back into the grid."""
        def cut(a: Any, ax: int) -> Any:
            start = [0] * a.ndim
            limit = list(a.shape)
            for k, (lo, n) in enumerate(zip(self.lo, self.shape, strict=True)):
                start[ax + k], limit[ax + k] = lo, lo + n
            return jax.lax.slice(a, start, limit)

        present = {name: ax for name, ax in GRID_FIELDS.items() if getattr(s, name) is not None}
        sub = s.replace(**{name: cut(getattr(s, name), ax) for name, ax in present.items()})
        new = self.inner.apply(sub, lattice)
        changes: dict[str, Any] = {}
        for name in (f.name for f in dataclasses.fields(StepState)):
            old, upd = getattr(sub, name), getattr(new, name)
            if upd is old:
                continue
            if name in present:
                ax = present[name]
                at = (0,) * ax + self.lo + (0,) * (upd.ndim - ax - len(self.lo))
                changes[name] = jax.lax.dynamic_update_slice(getattr(s, name), upd.astype(old.dtype), at)
            else:
                changes[name] = upd
        return s.replace(**changes)

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Every cell of the box (it reads and writes no other)."""
        return Footprint(cells=BoxBlock(lattice, shape, self.lo, self.shape).cells.astype(np.int64))


def in_boxes(boundaries: tuple[Any, ...], grid: tuple[int, ...], lattice: Lattice) -> tuple[Any, ...]:
    """``boundaries`` with each condition that has a box form (``box_form``) and whose cells fill at most
    :data:`BOX_FRACTION` of the grid in its box form (:class:`InBox`); every other one as it is."""
    out = []
    for bc in boundaries:
        box = footprint_box(bc.footprint(grid, lattice), grid) if bc.box_form else None
        if box is None or math.prod(box[1]) > BOX_FRACTION * math.prod(grid):
            out.append(bc)
            continue
        block = BoxBlock(lattice, grid, *box)
        out.append(InBox(inner=bc.on_block(block), dense=bc, lo=block.lo, shape=block.shape))
    return tuple(out)
