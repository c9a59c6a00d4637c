"""The boundary-cell plan of a bulk-kernel engine: which cells leave the bulk kernel's answer, and where they live.

A bulk kernel (native here, Pallas to come) updates every cell as if it were periodic bulk
fluid. The cells where a boundary condition acts, and the cells it reads, form a *block*:
their pre-collision populations are gathered from the slots the kernel reads, the case's own
stage functions run on the gathered ``(Q, n)`` arrays (each boundary condition's
``on_block`` form), and the results are stored into the slots the kernel wrote for those
cells, replacing its bulk answer. Every cell owns fixed read and write slots in each
streaming scheme, so this reproduces the dense timestep (up to rounding) at a cost that
scales with the number of boundary cells.

Block order: the face cells of each boundary condition that needs a face (inlet, outlet),
in face order; then the other written cells, sorted; then the ghosts (cells only read).
Slot maps are flat indices into the population array viewed as ``(Q * N,)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lbm.boundaries.base import BoundaryCondition, neighbour
from lbm.engines.base import EngineUnavailable
from lbm.lattice import Lattice

SCHEMES = ("push", "aa_even", "aa_odd")
"""Streaming schemes whose slot maps a block provides: two-buffer push, and the in-place AA pair."""


def slot_maps(lattice: Lattice, shape: tuple[int, ...], cells: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(read, write) flat slot indices, each ``(Q, n)``, of the pre- and post-collision populations of ``cells``.

    push:    pre f_i(x) at i*N + x;              post f*_i(x) goes to i*N + (x + c_i)  (other buffer)
    aa_even: pre at i*N + x;                     post at opp(i)*N + x                 (in place)
    aa_odd:  pre at opp(i)*N + (x - c_i);        post at i*N + (x + c_i)              (in place)
    """
    n_cells = int(np.prod(shape))
    q = lattice.q
    cells = np.asarray(cells, dtype=np.int64)
    read = np.empty((q, cells.size), np.int64)
    write = np.empty((q, cells.size), np.int64)
    for i in range(q):
        c = lattice.c[i]
        fwd = neighbour(cells, shape, c)
        if scheme == "push":
            read[i] = i * n_cells + cells
            write[i] = i * n_cells + fwd
        elif scheme == "aa_even":
            read[i] = i * n_cells + cells
            write[i] = int(lattice.opposite[i]) * n_cells + cells
        elif scheme == "aa_odd":
            read[i] = int(lattice.opposite[i]) * n_cells + neighbour(cells, shape, -c)
            write[i] = i * n_cells + fwd
        else:
            raise ValueError(f"unknown scheme {scheme!r}: choose one of {', '.join(SCHEMES)}")
    dtype = np.int32 if q * n_cells < 2**31 else np.int64
    return read.astype(dtype), write.astype(dtype)


@dataclass(frozen=True)
class Block:
    """Gathered cells in block order: ``size`` written cells first, then the ghosts (read only)."""

    lattice: Lattice
    shape: tuple[int, ...]
    cells: np.ndarray
    size: int

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of lattice cells ``flat`` (all must be in the block)."""
        flat = np.asarray(flat, np.int64)
        order = np.argsort(self.cells, kind="stable")
        pos = np.clip(np.searchsorted(self.cells, flat, sorter=order), 0, self.cells.size - 1)
        found = order[pos]
        if not np.array_equal(self.cells[found], flat):
            raise ValueError("cell not in block")
        return found.astype(np.int32)

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell lattice array ``(..., *grid)`` restricted to the block: ``(..., n, 1[, 1])``."""
        values = np.asarray(values)
        lead = values.shape[: values.ndim - len(self.shape)]
        flat = values.reshape(lead + (-1,))[..., self.cells]
        return flat.reshape(lead + (self.cells.size,) + (1,) * (len(self.shape) - 1))

    def slots(self, scheme: str) -> dict[str, np.ndarray]:
        """int32 slots to gather before the kernel runs (every block cell) and to write after (written cells)."""
        read, _ = slot_maps(self.lattice, self.shape, self.cells, scheme)
        _, write = slot_maps(self.lattice, self.shape, self.cells[: self.size], scheme)
        return {"gather": read.astype(np.int32), "write": write.astype(np.int32)}


def plan_block(lattice: Lattice, shape: tuple[int, ...], boundaries: tuple[BoundaryCondition, ...]) -> Block | None:
    """The block of a setup's boundary conditions (None when there are none); EngineUnavailable if unsupported."""
    faces: list[np.ndarray] = []
    others: list[np.ndarray] = []
    ghosts: list[np.ndarray] = []
    for bc in boundaries:
        fp = bc.footprint(shape, lattice)
        faces.append(fp.face)
        others.append(fp.cells)
        ghosts.append(fp.ghosts)
    face = np.concatenate(faces) if faces else np.zeros(0, np.int64)
    if face.size != np.unique(face).size:
        raise EngineUnavailable("inlet and outflow faces overlap (grid too small along x)")
    rest = np.unique(np.concatenate(others)) if others else np.zeros(0, np.int64)
    rest = np.setdiff1d(rest, face)  # a wall cell on an inlet or outlet face is gathered once, in the face
    written = np.concatenate([face, rest]).astype(np.int64)
    if written.size == 0:
        return None
    ghost = np.setdiff1d(np.unique(np.concatenate(ghosts)) if ghosts else np.zeros(0, np.int64), written)
    return Block(lattice=lattice, shape=shape, cells=np.concatenate([written, ghost]).astype(np.int64),
                 size=int(written.size))


def plan_arrays(block: Block | None, boundaries: tuple[BoundaryCondition, ...]) -> dict[str, Any]:
    """What the jitted step reads: gather and write slots per scheme, and the boundary conditions on the block."""
    if block is None:
        return {}
    return {"slots": {s: block.slots(s) for s in SCHEMES},
            "boundaries": tuple(bc.on_block(block) for bc in boundaries)}
