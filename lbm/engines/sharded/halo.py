"""The halo: what the shards of a device mesh exchange (``ppermute`` inside ``shard_map``), in one place.

:func:`extend` gives a shard a ghost layer on every shared face: the populations that enter through it
(the dense mesh forms' ``halo`` stage) or whole planes of a field (drho, u for a parabolic wall);
:func:`return_wrapped` sends back the populations a shard's periodic push step wrapped around a shared face
(the per-shard plan); :func:`ghost_owners` and :func:`send_to` say which shard owns a ghost cell and where a
shard's cells go. Mesh axes of size 1 need no ghost layer (the shard's own periodic wrap is the grid's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition
from lbm.boundaries.forms import FACE_FIELDS
from lbm.lattice import Lattice
from lbm.parallel import AXES


def entering(lattice_c: np.ndarray, axis: int, sign: int) -> np.ndarray:
    """Population indices with c_axis of ``sign``: those crossing a face normal to ``axis`` in that direction."""
    return np.flatnonzero(np.sign(lattice_c[:, axis]) == sign)


def extend(a: jnp.ndarray, shape: Sequence[int], lead: int = 1, lattice_c: np.ndarray | None = None) -> jnp.ndarray:
    """A shard array ``(*lead, *b)`` with ghost layers on its sharded faces holding the neighbours' planes (ppermute):
    every component, as :func:`lbm.parallel.extended` lays them out on the host; with ``lattice_c`` (populations,
    ``lead`` 1) only the populations that enter through each face, the others zero.

    Axes are exchanged one after another, each including the ghosts of the axes before, so the
    diagonal populations reach the corner ghosts.
    """
    e = a
    for axis, m in enumerate(shape):
        if m == 1:
            continue
        ax = lead + axis
        high = jax.lax.slice_in_dim(e, e.shape[ax] - 1, e.shape[ax], axis=ax)
        low = jax.lax.slice_in_dim(e, 0, 1, axis=ax)
        if lattice_c is None:
            from_below = jax.lax.ppermute(high, AXES[axis], [(i, (i + 1) % m) for i in range(m)])
            from_above = jax.lax.ppermute(low, AXES[axis], [(i, (i - 1) % m) for i in range(m)])
            e = jnp.concatenate([from_below, e, from_above], axis=ax)
            continue
        up, down = entering(lattice_c, axis, 1), entering(lattice_c, axis, -1)
        from_below = jax.lax.ppermute(high[up], AXES[axis], [(i, (i + 1) % m) for i in range(m)])
        from_above = jax.lax.ppermute(low[down], AXES[axis], [(i, (i - 1) % m) for i in range(m)])
        ghost = jnp.zeros_like(jax.lax.slice_in_dim(e, 0, 1, axis=ax))
        e = jnp.concatenate([ghost.at[up].set(from_below), e, ghost.at[down].set(from_above)], axis=ax)
    return e


def ghost_owners(cells: np.ndarray, shard: Sequence[int], shape: Sequence[int]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For cells of an extended shard (coordinates ``(D, n)``, ghost layers of width 1 on the sharded axes):
    whether each lies in a ghost layer, the offset ``(D, n)`` of the neighbouring shard that owns it (-1, 0, 1 per
    axis), and its flat index in that shard (own cells: their own)."""
    cells = np.asarray(cells, np.int64)
    offset = np.zeros_like(cells)
    local = cells.copy()
    for a, (b, m) in enumerate(zip(shard, shape, strict=True)):
        if m == 1:
            continue
        offset[a] = np.where(cells[a] == 0, -1, np.where(cells[a] == b + 1, 1, 0))
        local[a] = np.where(cells[a] == 0, b - 1, np.where(cells[a] == b + 1, 0, cells[a] - 1))
    return np.any(offset != 0, axis=0), offset, np.ravel_multi_index(tuple(local), tuple(shard))


def send_to(offset: Sequence[int], shape: Sequence[int]) -> list[tuple[int, int]]:
    """``ppermute`` pairs over all mesh axes (linear shard indices) from each shard to the shard at ``-offset``
    from it (periodic): what each shard sends to the neighbour that reads its cells at ``offset``."""
    pairs = []
    for b in range(math.prod(shape)):
        coords = np.unravel_index(b, tuple(shape))
        to = tuple((c - o) % m for c, o, m in zip(coords, offset, shape, strict=True))
        pairs.append((b, int(np.ravel_multi_index(to, tuple(shape)))))
    return pairs


def return_wrapped(f: jnp.ndarray, lattice_c: np.ndarray, shape: Sequence[int]) -> jnp.ndarray:
    """A shard ``(Q, *b)`` after a push step that was periodic on the shard, with the populations that wrapped
    around a shared face sent to the neighbour they entered (ppermute) and the neighbour's taking their place.

    A population leaving through the high face (c_a > 0) wrapped onto the shard's own low face: it belongs on
    the low face of the next shard, which sends its own wrapped ones the same way; likewise through the low
    face. The same populations cross each face as in :func:`extend` (3 of 9 for D2Q9, 5 of 19 for
    D3Q19). Axes one after another, so a diagonal population reaches the shard across a corner.
    """
    for axis, m in enumerate(shape):
        if m == 1:
            continue
        ax = 1 + axis
        for sign, at, step in ((1, 0, 1), (-1, f.shape[ax] - 1, -1)):
            moving = entering(lattice_c, axis, sign)
            face = jax.lax.slice_in_dim(f, at, at + 1, axis=ax)
            arrived = jax.lax.ppermute(face[moving], AXES[axis], [(i, (i + step) % m) for i in range(m)])
            # the face slab whole, updated in place (a scatter into f itself would copy f)
            f = jax.lax.dynamic_update_slice_in_dim(f, face.at[moving].set(arrived), at, axis=ax)
    return f


def crop(e: jnp.ndarray, shape: Sequence[int], lead: int = 1) -> jnp.ndarray:
    """The interior of an extended shard (ghost layers removed)."""
    for axis, m in enumerate(shape):
        if m > 1:
            ax = lead + axis
            e = jax.lax.slice_in_dim(e, 1, e.shape[ax] - 1, axis=ax)
    return e


def halo_bytes(lattice_c: np.ndarray, grid: Sequence[int], shape: Sequence[int], itemsize: int,
               corners: bool = True) -> int:
    """Bytes every shard sends per step, summed over all shards (the populations crossing each shared face).

    ``corners``: the faces of each axis include the ghost cells of the axes before (:func:`extend`);
    without, the shard's own faces only (:func:`return_wrapped`).
    """
    total, ext = 0, [n // m for n, m in zip(grid, shape, strict=True)]
    for axis, m in enumerate(shape):
        if m == 1:
            continue
        face = math.prod(ext[:axis] + ext[axis + 1:])
        total += 2 * m * math.prod(s for a, s in enumerate(shape) if a != axis) * face * \
            entering(lattice_c, axis, 1).size * itemsize
        ext[axis] += 2 if corners else 0
    return total


def plane_bytes(forms: tuple[BoundaryCondition, ...], shard: Sequence[int], shape: Sequence[int], lattice: Lattice,
                itemsize: int) -> int:
    """Bytes per device and step that the halo's plane exchanges (:func:`extend` of the fields the mesh forms
    read in the ghost layers) send for ``forms`` on shards ``shard`` of a mesh ``shape``."""
    fields = {r for bc in forms for r in bc.ghost_reads}
    components = sum(lattice.d if FACE_FIELDS[r] else 1 for r in fields)
    ext, total = list(shard), 0
    for axis, m in enumerate(shape):
        if m > 1:
            total += 2 * components * math.prod(ext[:axis] + ext[axis + 1:])
            ext[axis] += 2
    return total * itemsize
