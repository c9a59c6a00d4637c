"""Boundary work on boundary cells only: a block of cells gathered out of the lattice and written back.

A whole-lattice kernel (lbm.kernels.native) updates every cell as if it were bulk fluid.
The cells where a boundary condition acts (and the cells a boundary condition reads)
form a *block*: their pre-collision populations are gathered before the kernel runs,
the case's own stage functions are applied to the gathered ``(Q, n)`` arrays, and the
results are scattered into the slots the kernel wrote for those cells, replacing its
bulk answer. Because every cell owns a fixed set of read slots and write slots in each
streaming scheme, this reproduces the reference step exactly (up to rounding), and the
cost scales with the number of boundary cells, not with the lattice.

Shapes: a block of n cells holds populations ``(Q, n)``; slot maps are flat indices into
the population array viewed as ``(Q * N,)``, N = number of lattice cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice

SCHEMES = ("push", "aa_even", "aa_odd")
"""Streaming schemes of lbm.kernels.native whose slot maps a block provides."""


def neighbour(flat: np.ndarray, shape: tuple[int, ...], offset: np.ndarray) -> np.ndarray:
    """Flat indices of cells ``flat`` moved by integer ``offset`` (periodic on every axis)."""
    coords = np.unravel_index(flat, shape)
    moved = tuple((c + int(o)) % n for c, o, n in zip(coords, offset, shape, strict=True))
    return np.ravel_multi_index(moved, shape)


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


@dataclass
class Block:
    """Cells handled outside the bulk kernel, in block order, with their slot maps and gathered masks.

    ``cells``: flat indices of the written cells; ``ghosts``: flat indices of cells only read
    (e.g. the column upstream of an outflow face); ``segments`` names contiguous ranges of
    ``cells`` (``inlet``, ``outflow``) laid out in face order so that the face-wise stage
    functions apply to them unchanged.
    """

    lattice: Lattice
    shape: tuple[int, ...]
    cells: np.ndarray
    ghosts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    segments: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of written cells."""
        return int(self.cells.size)

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of lattice cells ``flat`` (all must be in the block)."""
        order = np.argsort(self.cells)
        pos = np.searchsorted(self.cells, flat, sorter=order)
        pos = np.clip(pos, 0, self.size - 1)
        found = order[pos]
        if not np.array_equal(self.cells[found], flat):
            raise ValueError("cell not in block")
        return found.astype(np.int32)

    def maps(self, scheme: str) -> dict[str, np.ndarray]:
        """Slot maps of the written cells (``read``, ``write``) and of the ghosts (``ghost_read``) for ``scheme``."""
        read, write = slot_maps(self.lattice, self.shape, self.cells, scheme)
        out = {"read": read, "write": write}
        if self.ghosts.size:
            out["ghost_read"] = slot_maps(self.lattice, self.shape, self.ghosts, scheme)[0]
        return out


def gather(f: jnp.ndarray, read: jnp.ndarray) -> jnp.ndarray:
    """Populations at the slots ``read`` (Q, n) of the lattice array ``f``."""
    return f.reshape(-1)[read]


def scatter(f: jnp.ndarray, write: jnp.ndarray, values: jnp.ndarray) -> jnp.ndarray:
    """``f`` with ``values`` (Q, n) stored at the slots ``write`` (distinct slots)."""
    flat = f.reshape(-1).at[write].set(values.astype(f.dtype), unique_indices=True, mode="promise_in_bounds")
    return flat.reshape(f.shape)


def bounce_back_halfway_sparse(
    f_post: jnp.ndarray,
    solid: jnp.ndarray,
    links: jnp.ndarray,
    neighbours: jnp.ndarray,
    lattice: Lattice,
    wall_term: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Half-way bounce-back on a block (same rule as lbm.kernels.boundaries.bounce_back_halfway).

    ``f_post`` (Q, n); ``neighbours[j, s]`` is the block position of cell s + c_j (used
    where ``links[j, s]``): solid cell s takes f*_opp(j)(s + c_j) [+ wall_term_j(s)];
    other solid cells are reset to rest equilibrium.
    """
    opp = jnp.asarray(lattice.opposite)[:, None]
    reflected = f_post[opp, neighbours]
    if wall_term is not None:
        reflected = reflected + wall_term
    rest = jnp.asarray(lattice.w, f_post.dtype)[:, None]
    return jnp.where(links, reflected, jnp.where(solid, rest, f_post))
