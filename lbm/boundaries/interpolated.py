"""Boundary condition ``InterpolatedBounceBack`` (stage ``bounce_back``): curved resting walls, Bouzidi–Firdaouss–Lallemand.

A wall link joins a fluid cell x_f to a solid cell x_s = x_f + c_i; the wall cuts it at the
fraction q in (0, 1] of the link from x_f (q = 1/2 is half-way bounce-back). After streaming,
x_f must receive the population f_ī (ī = opposite of i) that the wall sends back. Linear BFL
(Bouzidi, Firdaouss & Lallemand 2001, Phys. Fluids 13:3452), from post-collision populations f*:

    q < 1/2:   f_ī(x_f) = 2q f*_i(x_f) + (1 - 2q) f*_i(x_f - c_i)
    q >= 1/2:  f_ī(x_f) = f*_i(x_f) / (2q) + (2q - 1)/(2q) f*_ī(x_f)

It is written, like half-way bounce-back, into the post-collision slot ī of the solid cell x_s,
from which streaming carries it to x_f; the other populations of solid cells are reset to rest. Each
rule's three weights sum to 1 and w_i = w_ī, so it holds as it stands for the deviations f - w the
engines keep (a solid cell at rest holds zeros).
Where x_f - c_i is not fluid (a gap one cell wide) a q < 1/2 link falls back to half-way
bounce-back. The rule reads cells up to two links from the wall (x_f and x_f - c_i).

Forces: :class:`lbm.boundaries.forces.Forces` over the same links gives the momentum exchange
F = Σ c_i (f*_i(x_f) + f_ī(x_f, t+1)) with the interpolated population f_ī, since it reads the
slot this condition writes. For a resting wall this is also the Galilean-invariant form of
Wen et al. (2014, J. Comput. Phys. 266:161), Σ [(c_i - u_w) f*_i - (c_ī - u_w) f_ī], at u_w = 0.

Arrays: ``solid`` (``*grid``, the obstacle), and per link ``link_dir`` (i), ``link_solid``
(x_s), ``link_fluid`` (x_f), ``link_far`` (x_f - c_i), ``weights`` (3, links): the coefficients of
f*_i(x_f), f*_i(x_f - c_i), f*_ī(x_f), and ``q``. Indices are flat lattice indices (dense rule) or
block positions (block form); both run the same code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    CellBlock,
    Footprint,
    FormUnavailable,
    MeshLayout,
    StepState,
    pytree_dataclass,
    resting_cells,
)
from lbm.boundaries.forms import OnExtended, pad_links
from lbm.kernels.forces import boundary_links
from lbm.lattice import Lattice

Intersect = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(points (n, D), link vectors (n, D)) -> q: where the wall cuts each link, as a fraction of it."""

ON_THE_WALL = 1e-6
"""A node closer to a curved wall than this (in link lengths, q or 1 - q) counts as on it."""


def array_of(a: Any, xp: Any = np) -> Any:
    """``a`` as an array of ``xp`` (numpy: float64; jax.numpy: traced values keep their dtype)."""
    return np.asarray(a, np.float64) if xp is np else xp.asarray(a)


def vector_of(values: Any, xp: Any = np) -> Any:
    """The numbers ``values`` (or, with ``xp`` jax.numpy, traced scalars) as one vector."""
    return np.asarray(values, np.float64) if xp is np else xp.stack([xp.asarray(v) for v in values])


def bfl_weights(q: Any, far_is_fluid: np.ndarray, xp: Any = np) -> Any:
    """Linear BFL coefficients (3, n) of f*_i(x_f), f*_i(x_f - c_i), f*_ī(x_f) for wall fractions ``q`` (``xp``
    jax.numpy: traced fractions, smooth in q on each side of q = 1/2 and continuous across it)."""
    q = array_of(q, xp)
    low = (q < 0.5) & far_is_fluid
    high = q >= 0.5
    half = xp.maximum(q, 0.5)
    return xp.stack([xp.where(low, 2 * q, xp.where(high, 1 / (2 * half), 1.0)), xp.where(low, 1 - 2 * q, 0.0),
                     xp.where(high, (2 * q - 1) / (2 * half), 0.0)])


def ball_intersect(center: Any, radius: Any, xp: Any = np) -> Intersect:
    """Ray–ball intersection over the first ``len(center)`` axes (a disc, a cylinder along z, a sphere): the entering root
    (``xp`` jax.numpy: a traced centre and radius)."""
    c0 = vector_of(center, xp)
    # a traced root keeps a finite derivative where a link only touches the ball (the square root's at 0 is not)
    floor = 0.0 if xp is np else 1e-300

    def intersect(points: np.ndarray, links: np.ndarray) -> Any:
        p = array_of(points, xp)[:, : c0.size] - c0
        c = array_of(links, xp)[:, : c0.size]
        a = xp.sum(c * c, axis=1)
        b = 2 * xp.sum(p * c, axis=1)
        k = xp.sum(p * p, axis=1) - radius**2
        disc = xp.sqrt(xp.maximum(b * b - 4 * a * k, floor))
        return (-b - disc) / (2 * xp.where(a > 0, a, 1.0))

    return intersect


def circle_intersect(center: tuple[float, ...], radius: float) -> Intersect:
    """Ray–circle intersection in the (x, y) plane (a cylinder along z in 3D): the entering root."""
    return ball_intersect(tuple(center[:2]), radius)


def interpolated_bounce_back(post: jnp.ndarray, solid: jnp.ndarray, link_dir: jnp.ndarray, link_solid: jnp.ndarray,
                             link_fluid: jnp.ndarray, link_far: jnp.ndarray, weights: jnp.ndarray,
                             lattice: Lattice) -> jnp.ndarray:
    """Post-collision populations with solid cells at rest and the BFL populations in the wall links' solid slots."""
    q = post.shape[0]
    flat = post.reshape(q, -1)
    opp = jnp.asarray(lattice.opposite)[link_dir]
    w = weights.astype(post.dtype)
    values = w[0] * flat[link_dir, link_fluid] + w[1] * flat[link_dir, link_far] + w[2] * flat[opp, link_fluid]
    out = jnp.where(solid.reshape(1, -1), jnp.zeros((), post.dtype), flat).at[opp, link_solid].set(values)
    return out.reshape(post.shape)


@pytree_dataclass
class InterpolatedBounceBack(BoundaryCondition):
    """Linear Bouzidi–Firdaouss–Lallemand bounce-back on the curved surface of ``solid`` (see the module doc)."""

    solid: Any
    link_dir: Any
    link_solid: Any
    link_fluid: Any
    link_far: Any
    weights: Any
    q: Any
    stage = "bounce_back"
    box_form = True
    reads: ClassVar[tuple[tuple[str, ...], tuple[str, ...]]] = ((), ())
    """StepState arrays besides ``post`` the rule reads: at a link's fluid cell only, and also at its far cell."""

    @classmethod
    def from_shape(cls, solid: np.ndarray, intersect: Intersect, lattice: Lattice) -> InterpolatedBounceBack:
        """Links of the obstacle ``solid`` (cells whose node lies inside the shape) and their wall fractions."""
        solid = np.asarray(solid, bool)
        shape = solid.shape
        link_dir, link_fluid, link_solid = (a.astype(np.int64) for a in boundary_links(solid, ~solid, lattice))
        points = np.stack(np.unravel_index(link_fluid, shape), axis=1).astype(np.float64)
        c = lattice.c[link_dir]
        q = np.asarray(intersect(points, c), np.float64)
        if q.size and not (np.all(q >= -1e-12) and np.all(q <= 1 + 1e-12)):
            raise ValueError("the wall does not cut every link between a fluid and a solid cell (mask and shape disagree)")
        q = np.clip(q, 0.0, 1.0)
        far = np.ravel_multi_index(tuple(np.mod(points.astype(np.int64) - c, shape).T), shape)
        far_is_fluid = ~solid.reshape(-1)[far]
        far = np.where(far_is_fluid, far, link_fluid)
        return cls(solid=solid, link_dir=link_dir.astype(np.int32), link_solid=link_solid.astype(np.int32),
                   link_fluid=link_fluid.astype(np.int32), link_far=far.astype(np.int32),
                   weights=bfl_weights(q, far_is_fluid), q=q)

    @classmethod
    def circle(cls, center: tuple[float, ...], radius: float, shape: tuple[int, ...],
               lattice: Lattice) -> InterpolatedBounceBack:
        """A disc (a cylinder along z in 3D) of ``radius`` cells about ``center`` (node coordinates x, y)."""
        coords = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
        solid = (coords[0] - center[0]) ** 2 + (coords[1] - center[1]) ** 2 < radius**2
        return cls.from_shape(solid, circle_intersect(center, radius), lattice)

    def link_points(self, shape: tuple[int, ...], lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per link: the fluid node's coordinates (n, D), the link vector c_i (n, D), and whether x_f - c_i is fluid (n,)."""
        link_fluid = np.asarray(self.link_fluid, np.int64)
        points = np.stack(np.unravel_index(link_fluid, shape), axis=1).astype(np.float64)
        links = lattice.c[np.asarray(self.link_dir, np.int64)].astype(np.float64)
        return points, links, np.asarray(self.link_far, np.int64) != link_fluid

    def moved_to(self, intersect: Intersect, shape: tuple[int, ...], lattice: Lattice) -> BoundaryCondition:
        """The same links (the mask unchanged) with q and its weights where ``intersect`` (jax.numpy, traced) cuts them.

        q lies in [0, 1] (a node on the wall can come out a rounding outside), with the derivative of the unclipped q
        where the clip moved it by a rounding (:data:`ON_THE_WALL`): at a node on the wall that is the one-sided
        derivative in the direction that keeps the mask (a clip's would be half); a q clipped further (a shape far from
        the mask's) keeps the clip's.
        """
        points, links, far_is_fluid = self.link_points(shape, lattice)
        raw = intersect(points, links)
        clipped = jnp.clip(raw, 0.0, 1.0)
        q = jnp.where(jnp.abs(raw - clipped) <= ON_THE_WALL, raw + jax.lax.stop_gradient(clipped - raw), clipped)
        return dataclasses.replace(self, weights=bfl_weights(q, far_is_fluid, jnp), q=q)

    def nodes_on_the_wall(self, tolerance: float) -> np.ndarray:
        """Per link whose wall point lies within ``tolerance`` of a node (in link lengths): that node (flat index)."""
        q = np.asarray(self.q, np.float64)
        near = np.flatnonzero((q < tolerance) | (q > 1 - tolerance))
        return np.where(q[near] < 0.5, np.asarray(self.link_fluid)[near], np.asarray(self.link_solid)[near]).astype(
            np.int64)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells at rest, the wall links' populations interpolated (BFL)."""
        return s.replace(post=interpolated_bounce_back(s.post, self.solid, self.link_dir, self.link_solid,
                                                       self.link_fluid, self.link_far, self.weights, lattice))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the solid cells, reads the fluid cells of the links and the cells one link further out."""
        mask = np.asarray(self.solid, bool)
        solid = np.flatnonzero(mask.reshape(-1))
        read = np.concatenate([np.asarray(self.link_fluid, np.int64), np.asarray(self.link_far, np.int64)])
        emits = np.zeros((lattice.q, mask.size), bool)  # the links' populations, set at their solid cells
        emits[lattice.opposite[np.asarray(self.link_dir, np.int64)], np.asarray(self.link_solid, np.int64)] = True
        return Footprint(cells=np.union1d(solid, read).astype(np.int64),
                         rest=resting_cells(mask, emits.reshape(lattice.q, *mask.shape), lattice))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same links with block positions (the rule is index-based, so the class is the same)."""
        def pos(a: Any) -> np.ndarray:
            return block.index_of(np.asarray(a, np.int64))

        return dataclasses.replace(self, solid=block.gathered(np.asarray(self.solid, bool)),
                                   link_solid=pos(self.link_solid), link_fluid=pos(self.link_fluid),
                                   link_far=pos(self.link_far))

    def on_links(self, mine: np.ndarray, ends: list[np.ndarray], solid: np.ndarray) -> InterpolatedBounceBack:
        """The links selected by ``mine`` with their (solid, fluid, far) cells ``ends`` and the mask ``solid``."""
        return dataclasses.replace(self, solid=solid, link_dir=np.asarray(self.link_dir)[mine], link_solid=ends[0],
                                   link_fluid=ends[1], link_far=ends[2], weights=np.asarray(self.weights)[:, mine],
                                   q=np.asarray(self.q)[mine])

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The wall on every extended shard: the links whose fluid cell the shard owns, their cells as extended-shard
        positions, padded to one length (on ghost cell 0, never streamed into the shard) and stacked one shard per
        device; what else the rule reads (:attr:`reads`) zero-padded, or exchanged by the halo at the far cell."""
        if not mesh.sharded_axes:
            raise FormUnavailable("an interpolated wall's mesh form needs a sharded axis (its padding ghost cell)")
        fluid = np.asarray(self.link_fluid, np.int64)
        owner = np.stack(np.unravel_index(fluid, mesh.grid_shape)) // np.asarray(mesh.shard)[:, None]
        per_shard = []
        for coords in mesh.shards():
            mine = np.all(owner == np.asarray(coords)[:, None], axis=0)
            ends = [mesh.to_extended(np.asarray(a, np.int64)[mine], coords)
                    for a in (self.link_solid, self.link_fluid, self.link_far)]
            if not all(ok.all() for _, ok in ends):
                raise FormUnavailable(f"{type(self).__name__}: a link reaching past a shard's ghost layer")
            solid = mesh.own_extended(np.asarray(self.solid, bool), coords, lead=0)
            per_shard.append(self.on_links(mine, [e for e, _ in ends], solid))
        length = max(1, max(form.link_count() for form in per_shard))
        stacked = mesh.stacked([form.padded(length, 0) for form in per_shard])
        own, far = self.reads
        return OnExtended(inner=stacked, own_reads=own, ghost_reads=far,
                          ghosts=tuple(1 if m > 1 else 0 for m in mesh.shape), per_shard=True)

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The links whose cells all lie in shard ``coords``'s extended shard."""
        ends = [mesh.to_extended(np.asarray(a, np.int64), coords) for a in (self.link_solid, self.link_fluid,
                                                                             self.link_far)]
        mine = ends[0][1] & ends[1][1] & ends[2][1]
        solid = mesh.own_extended(np.asarray(self.solid, bool), coords, lead=0)
        return self.on_links(mine, [e[mine] for e, _ in ends], solid)

    def link_count(self) -> int:
        """The number of links."""
        return int(np.asarray(self.link_dir).size)

    def padded(self, length: int, spare: int) -> BoundaryCondition:
        """Padded with direction 0 (the rest population) on the padding cell, weights zero."""
        return dataclasses.replace(self, link_dir=pad_links(self.link_dir, length),
                                   link_solid=pad_links(self.link_solid, length, spare),
                                   link_fluid=pad_links(self.link_fluid, length, spare),
                                   link_far=pad_links(self.link_far, length, spare),
                                   weights=pad_links(self.weights, length), q=pad_links(self.q, length))
