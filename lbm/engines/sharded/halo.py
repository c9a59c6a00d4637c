"""The halo: what blocks of a device mesh exchange each step (``ppermute`` inside ``shard_map``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from lbm import parallel
from lbm.boundaries.base import BoundaryCondition
from lbm.boundaries.forms import FACE_FIELDS
from lbm.engines.sharded.layout import Layout
from lbm.lattice import Lattice


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
    fields = {r for bc in forms for r in bc.ghost_reads}
    components = sum(lattice.d if FACE_FIELDS[r] else 1 for r in fields)
    ext, total = list(layout.block), 0
    for axis, m in enumerate(layout.shape):
        if m > 1:
            total += 2 * components * math.prod(ext[:axis] + ext[axis + 1:])
            ext[axis] += 2
    return total * itemsize
