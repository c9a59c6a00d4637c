"""Boundary conditions ``FullwayBounceBack`` and ``HalfwayBounceBack`` (stage ``bounce_back``): resting walls.

Their forms: the dense rules, a half-way wall's on gathered cells (:class:`HalfwayOnBlock`) and applied while streaming
(:class:`PulledHalfway`, the xla engine's), and a half-way wall's forms for a differentiable run
(:meth:`HalfwayBounceBack.with_adjoint`; moving walls' too, lbm.boundaries.moving_wall): the same rules with their
transposes as hand-written adjoints (:class:`HalfwayWithAdjoint`, and :class:`PulledWithAdjoint` applied while
streaming). Bounce-back is its own transpose: the cotangent of a population that came out of a solid cell goes back to
the slot it was reflected from, cell-locally; a moving wall's wall term is affine (its cotangent is the cotangent on
its links).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    BulkRule,
    CellBlock,
    Footprint,
    MeshLayout,
    StepState,
    flat_block,
    neighbour,
    pytree_dataclass,
    resting_cells,
    static,
)
from lbm.boundaries.forms import OnExtended
from lbm.kernels.platforms import cell_form
from lbm.kernels.streaming import streamed
from lbm.lattice import Lattice

BOUNCE_BACK_KINDS = ("fullway", "halfway")


def written_out_on_cpu(a: jnp.ndarray) -> jnp.ndarray:
    """``a`` unchanged, but written to memory when compiled for a CPU (an optimisation barrier); a no-op elsewhere.

    XLA:CPU splits a step into a few kernels per population and recomputes a fused producer in each of
    them; a GPU or TPU fuses collision, walls and stream into one kernel, where writing ``a`` out would
    add 2 Q x 4 B per cell.
    """
    return jax.lax.platform_dependent(a, cpu=jax.lax.optimization_barrier, default=lambda x: x)


def bounce_back_fullway(f_post: jnp.ndarray, f_pre: jnp.ndarray, solid: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Full-way bounce-back: solid cells take their own pre-collision populations reversed."""
    return jnp.where(solid, f_pre[lattice.opposite], f_post)


def bounce_back_halfway(
    f_post: jnp.ndarray,
    solid: jnp.ndarray,
    links: jnp.ndarray,
    lattice: Lattice,
    wall_term: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Half-way bounce-back: solid cells hold the reflected post-collision populations of their fluid neighbours.

    ``links[j]`` flags solid cells s whose neighbour s + c_j is fluid; streaming then
    carries f_j(s) = f*_opp(j)(s + c_j) [+ wall_term_j(s)] into that neighbour, which
    places the wall half-way along the link. ``wall_term``: the wall term of moving walls,
    2 w_j rho_w (c_j . u_w) / cs^2 (lbm.boundaries.moving_wall). Other solid cells are reset to the rest state
    (deviations 0).
    """
    axes = tuple(range(lattice.d))
    reflected = []
    for j in range(lattice.q):
        shift = tuple(-int(s) for s in lattice.c[j])
        src = f_post[lattice.opposite[j]]
        reflected.append(jnp.roll(src, shift, axis=axes) if any(shift) else src)
    reflected = jnp.stack(reflected)
    if wall_term is not None:
        reflected = reflected + wall_term
    return jnp.where(links, reflected, jnp.where(solid, jnp.zeros((), f_post.dtype), f_post))


def bounce_back_halfway_gathered(
    f_post: jnp.ndarray,
    solid: jnp.ndarray,
    links: jnp.ndarray,
    neighbours: jnp.ndarray,
    lattice: Lattice,
    wall_term: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """:func:`bounce_back_halfway` on gathered cells ``(Q, n)``: ``neighbours[j, s]`` is the position of s + c_j."""
    opp = jnp.asarray(lattice.opposite)[:, None]
    reflected = f_post[opp, neighbours]
    if wall_term is not None:
        reflected = reflected + wall_term
    return jnp.where(links, reflected, jnp.where(solid, jnp.zeros((), f_post.dtype), f_post))


def bounce_back_halfway_pulled(
    f_streamed: jnp.ndarray,
    f_post: jnp.ndarray,
    bits: jnp.ndarray,
    lattice: Lattice,
    wall_term_bits: jnp.ndarray | None = None,
    wall_term: jnp.ndarray | None = None,
    carried: tuple[int, ...] = (),
) -> jnp.ndarray:
    """:func:`bounce_back_halfway` followed by :func:`~lbm.kernels.streaming.stream`, from ``stream(f_post)``.

    ``bits`` (unsigned ``(*grid)``, from :func:`pull_bits`): bit i says the cell x - c_i is solid, bit Q that x is.
    Where x - c_i is solid, the population streamed into x came from a solid cell, and the dense rule
    gives it f*_opp(i)(x) [+ wall term] on a fluid x, the rest state (0) on a solid x; elsewhere it is ``f_streamed``
    unchanged. The wall term, where given, is either dense (``wall_term`` ``(Q, *grid)``, already pulled to x)
    or a table ``wall_term`` ``(Q,)`` on the directions ``carried`` (the others carry none): the k-th of them on
    the links whose bit Q + 1 + k is set in ``bits``, or bit k in ``wall_term_bits`` where it is given.
    """
    q = lattice.q
    solid = (bits >> q) & 1 == 1
    word, first = (bits, q + 1) if wall_term_bits is None else (wall_term_bits, 0)
    out = []
    for i in range(q):
        reflected = f_post[lattice.opposite[i]]
        if wall_term is not None and wall_term.ndim == 1 and i in carried:
            hit = (word >> (first + carried.index(i))) & 1 == 1
            reflected = reflected + jnp.where(hit, wall_term[i], jnp.zeros((), wall_term.dtype))
        elif wall_term is not None and wall_term.ndim > 1:
            reflected = reflected + wall_term[i]
        rest = jnp.zeros((), f_post.dtype)
        out.append(jnp.where((bits >> i) & 1 == 1, jnp.where(solid, rest, reflected), f_streamed[i]))
    return jnp.stack(out)


def pack_bits(flags: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Boolean arrays ``(*shape)`` as the bits 0, 1, ... of one word per cell, in the narrowest unsigned dtype."""
    if len(flags) > 32:
        raise ValueError(f"{len(flags)} bits do not fit in a uint32")
    dtype = np.uint8 if len(flags) <= 8 else np.uint16 if len(flags) <= 16 else np.uint32
    word = np.zeros(shape, dtype)
    for k, flag in enumerate(flags):
        word |= np.asarray(flag, bool).astype(dtype) << dtype(k)
    return word


def pull_bits(solid: np.ndarray, lattice: Lattice, carried: list[np.ndarray] | None = None) -> np.ndarray:
    """Bits per cell ``(*grid)``, in the narrowest unsigned dtype that holds them: bit i where the cell x - c_i is
    solid (periodic wrap), bit Q where x is solid, then bits Q + 1 + k for the flags ``carried`` (if given)."""
    from_solid = pulled(np.broadcast_to(np.asarray(solid, bool), (lattice.q, *np.shape(solid))), lattice)
    return pack_bits([*from_solid, np.asarray(solid, bool), *(carried or [])], np.shape(solid))


def pulled(values: np.ndarray, lattice: Lattice) -> np.ndarray:
    """A per-link array ``(Q, *grid)`` of solid cells s moved to the cell s + c_i the link points into."""
    axes = tuple(range(lattice.d))
    return np.stack([np.roll(values[i], tuple(int(s) for s in lattice.c[i]), axis=axes) for i in range(lattice.q)])


def halfway_links(solid: np.ndarray, lattice: Lattice) -> np.ndarray:
    """Flags ``(Q, *grid)``: solid cell s whose neighbour s + c_j is fluid (periodic wrap)."""
    fluid = ~solid
    axes = tuple(range(lattice.d))
    return np.stack([
        solid & np.roll(fluid, tuple(-int(s) for s in lattice.c[j]), axis=axes) for j in range(lattice.q)
    ])


def foldable_solid(solid: Any, links: Any, lattice: Lattice) -> np.ndarray | None:
    """``solid`` as a boolean array where ``links`` are exactly its half-way links (a wall streaming can fold); None
    otherwise."""
    solid = np.asarray(solid, bool)
    return solid if np.array_equal(np.asarray(links, bool), halfway_links(solid, lattice)) else None


@pytree_dataclass
class FullwayBounceBack(BoundaryCondition):
    """Full-way bounce-back on the cells of ``solid``: the wall lies on the solid nodes."""

    solid: Any
    stage = "bounce_back"
    box_form = True

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells reverse their pre-collision populations."""
        # written out once on a CPU: the gather f_pre[opposite] then fuses into it, instead of being written out
        # whole and read again by every population's streaming kernel (the D3Q19 cylinder: 1.8x -> 1.3x of the box)
        return s.replace(post=written_out_on_cpu(bounce_back_fullway(s.post, s.f, self.solid, lattice)))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the solid cells."""
        return Footprint(cells=np.flatnonzero(np.asarray(self.solid, bool).reshape(-1)))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same rule with the mask gathered (the rule is local)."""
        return FullwayBounceBack(solid=block.gathered(np.asarray(self.solid, bool)))

    def bulk_rule(self) -> BulkRule:
        """A full-way wall: its solid cells."""
        return BulkRule(wall=(np.asarray(self.solid, bool), None, None))

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The same rule with the mask sharded like the grid (the rule is local)."""
        return dataclasses.replace(self, solid=mesh.grid(np.asarray(self.solid, bool), lead=0))

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The same rule with the mask on the extended shard."""
        return dataclasses.replace(self, solid=mesh.own_extended(np.asarray(self.solid, bool), coords, lead=0))


@pytree_dataclass
class HalfwayBounceBack(BoundaryCondition):
    """Half-way bounce-back: the wall lies half-way between the solid cells of ``solid`` and their fluid neighbours.

    ``links`` (``(Q, *grid)``, from :func:`halfway_links`) flags the solid cells whose neighbour along c_j is fluid.
    """

    solid: Any
    links: Any
    stage = "bounce_back"

    @classmethod
    def around(cls, solid: np.ndarray, lattice: Lattice) -> HalfwayBounceBack:
        """Half-way walls on the surface of the mask ``solid``."""
        return cls(solid=solid, links=halfway_links(solid, lattice))

    wall_term = None
    """The wall term per link, ``(Q, *grid)``: the momentum a moving wall adds (lbm.boundaries.moving_wall); None here:
    resting walls. A class attribute, not a field: :class:`~lbm.boundaries.moving_wall.MovingWall` makes it one."""

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells take the reflected populations of their fluid neighbours."""
        return s.replace(post=bounce_back_halfway(s.post, self.solid, self.links, lattice, self.wall_term))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the solid cells, reads the fluid cells across their links; holds the interior at rest."""
        solid = np.flatnonzero(np.asarray(self.solid, bool).reshape(-1))
        links = np.asarray(self.links, bool).reshape(lattice.q, -1)
        across = [neighbour(np.flatnonzero(links[j]), shape, lattice.c[j]) for j in range(lattice.q)]
        return Footprint(cells=np.union1d(solid, np.concatenate(across)).astype(np.int64),
                         rest=resting_cells(np.asarray(self.solid, bool), np.asarray(self.links, bool), lattice))

    def bulk_rule(self) -> BulkRule:
        """A half-way wall: its solid cells, links and wall term."""
        wall_term = None if self.wall_term is None else np.asarray(self.wall_term)
        return BulkRule(wall=(np.asarray(self.solid, bool), np.asarray(self.links, bool), wall_term))

    def laid_out(self, place: Callable[[np.ndarray, int], Any]) -> HalfwayBounceBack:
        """The same walls with each per-cell array ``a`` (``lead`` leading axes) replaced by ``place(a, lead)``."""
        return dataclasses.replace(self, solid=place(np.asarray(self.solid, bool), 0),
                                   links=place(np.asarray(self.links, bool), 1))

    def on_mesh(self, mesh: MeshLayout, lattice: Lattice, dtype: Any) -> BoundaryCondition:
        """The dense rule on the extended shard after the halo (it reads the fluid cells across a face)."""
        return OnExtended(inner=self.laid_out(lambda a, lead: mesh.extended(a, lead=lead)))

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The walls on the extended shard, minus the links that would leave it."""
        form = self.laid_out(lambda a, lead: mesh.own_extended(a, coords, lead=lead))
        links = np.array(form.links)
        for j, c in enumerate(lattice.c):
            for axis, m in enumerate(mesh.shape):
                if m > 1 and c[axis]:  # a link from the outermost ghost layer leaves the extended shard
                    edge = -1 if c[axis] > 0 else 0
                    links[(j,) + (slice(None),) * axis + (edge,)] = False
        return dataclasses.replace(form, links=links)

    def folded(self, lattice: Lattice) -> BoundaryCondition | None:
        """The same walls applied while streaming (:meth:`streaming_form`); None if ``links`` are not those of ``solid``."""
        solid = foldable_solid(self.solid, self.links, lattice)
        return None if solid is None else self.streaming_form(solid, lattice)

    def streaming_form(self, solid: np.ndarray, lattice: Lattice) -> BoundaryCondition:
        """These walls applied while streaming (:class:`PulledHalfway`), ``solid`` their mask (whose half-way links they
        are): the wall term as a table per direction where each direction carries one value, else dense."""
        if self.wall_term is None:
            return PulledHalfway(bits=pull_bits(solid, lattice))
        wall_term = pulled(np.asarray(self.wall_term), lattice)
        table = np.zeros(lattice.q, wall_term.dtype)
        for i in range(lattice.q):
            values = np.unique(wall_term[i][wall_term[i] != 0])
            if values.size > 1:  # several wall velocities along this direction: the dense wall term
                return PulledHalfway(bits=pull_bits(solid, lattice), wall_term=wall_term)
            table[i] = values[0] if values.size else 0
        carried = tuple(int(i) for i in np.flatnonzero(table))
        flags = [wall_term[i] != 0 for i in carried]
        if lattice.q + 1 + len(carried) <= 32:  # the links with a wall term in the same word
            return PulledHalfway(bits=pull_bits(solid, lattice, flags), wall_term=table, carried=carried)
        return PulledHalfway(bits=pull_bits(solid, lattice), wall_term_bits=pack_bits(flags, solid.shape),
                             wall_term=table, carried=carried)

    def with_adjoint(self, platform: str | None = None) -> HalfwayWithAdjoint:
        """The same walls with their rules' hand-written adjoints (:class:`HalfwayWithAdjoint`), the wall term gathered
        into the stream kernel on a GPU or TPU (``platform``, default jax's backend), scattered onto its links after it
        on a CPU (in place there)."""
        return HalfwayWithAdjoint(solid=self.solid, links=self.links, wall_term=self.wall_term,
                                  gathered=cell_form(platform) != "cpu")

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The rule on gathered cells, with the block position of each link's fluid neighbour."""
        lat = block.lattice
        links = np.asarray(self.links, bool).reshape(lat.q, -1)[:, block.cells]
        positions = np.tile(np.arange(block.cells.size, dtype=np.int32), (lat.q, 1))
        for j in range(lat.q):
            flagged = np.flatnonzero(links[j])
            if flagged.size:
                positions[j, flagged] = block.index_of(neighbour(block.cells[flagged], block.shape, lat.c[j]))
        wall_term = None if self.wall_term is None else np.asarray(self.wall_term).reshape(lat.q, -1)[:, block.cells]
        solid = np.asarray(self.solid, bool).reshape(-1)[block.cells]
        return HalfwayOnBlock(solid=solid, links=links, neighbours=positions, wall_term=wall_term)


@pytree_dataclass
class HalfwayOnBlock(BoundaryCondition):
    """:class:`HalfwayBounceBack` (or a moving wall) on gathered cells ``(Q, n)``."""

    solid: Any
    links: Any
    neighbours: Any
    wall_term: Any = None
    stage = "bounce_back"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells take the reflected populations of their gathered fluid neighbours."""
        post = bounce_back_halfway_gathered(flat_block(s.post), self.solid, self.links, self.neighbours, lattice,
                                            self.wall_term)
        return s.replace(post=post.reshape(s.post.shape))


@pytree_dataclass
class PulledHalfway(BoundaryCondition):
    """Half-way walls applied while streaming (stage ``stream``, after the pull): the xla engine's form of
    :class:`HalfwayBounceBack` and moving walls where nothing reads the bounced populations before streaming.

    The populations it leaves equal ``stream(bounce_back_halfway(post))`` on every cell (fluid and solid),
    without the dense rule's second shift of the reflected populations (:func:`bounce_back_halfway_pulled`).
    ``bits`` from :func:`pull_bits`; ``wall_term_bits``, ``wall_term`` and ``carried`` the wall term (None: resting
    walls), as :func:`bounce_back_halfway_pulled` takes them.
    """

    bits: Any
    wall_term_bits: Any = None
    wall_term: Any = None
    carried: tuple[int, ...] = static(())
    stage = "stream"
    affine = True

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The streamed populations with the links that came out of solid cells replaced."""
        # the post-collision populations written out once on a CPU: XLA:CPU otherwise recomputes the collision
        # of f*_opp(i) in each of the Q per-population kernels (up to 0.25x of the box, docs/performance.md)
        return s.replace(f=bounce_back_halfway_pulled(s.f, written_out_on_cpu(s.post), self.bits, lattice,
                                                      self.wall_term_bits, self.wall_term, self.carried))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def halfway_with_adjoint(post: jnp.ndarray, solid: jnp.ndarray, links: jnp.ndarray, wall_term: Any, lattice: Lattice
                         ) -> jnp.ndarray:
    """:func:`bounce_back_halfway` (``wall_term`` None: resting walls) with its transpose as adjoint.

    The rule's linear part is a reflection: its transpose sends the cotangent of the slot j of a solid
    cell s back to the slot opp(j) of the fluid cell s + c_j it came from (a roll by +c_j), and passes the
    fluid cells' own cotangents through.
    """
    return bounce_back_halfway(post, solid, links, lattice, wall_term)


def _halfway_fwd(post: jnp.ndarray, solid: jnp.ndarray, links: jnp.ndarray, wall_term: Any, lattice: Lattice
                 ) -> tuple[jnp.ndarray, Any]:
    return halfway_with_adjoint(post, solid, links, wall_term, lattice), (solid, links, wall_term)


def _halfway_bwd(lattice: Lattice, res: Any, ct: jnp.ndarray) -> tuple[Any, ...]:
    solid, links, wall_term = res
    axes = tuple(range(lattice.d))
    zero = jnp.zeros((), ct.dtype)
    out = []
    for i in range(lattice.q):
        j = int(lattice.opposite[i])
        back = jnp.where(links[j], ct[j], zero)
        shift = tuple(int(x) for x in lattice.c[j])
        out.append(jnp.where(solid, zero, ct[i]) + (jnp.roll(back, shift, axis=axes) if any(shift) else back))
    wall_bar = None if wall_term is None else jnp.where(links, ct, zero).astype(wall_term.dtype)
    return jnp.stack(out), None, None, wall_bar


halfway_with_adjoint.defvjp(_halfway_fwd, _halfway_bwd)


@pytree_dataclass
class HalfwayWithAdjoint(HalfwayBounceBack):
    """A half-way wall, resting (``wall_term`` None) or moving, whose rules carry their adjoints
    (:meth:`HalfwayBounceBack.with_adjoint`): :func:`halfway_with_adjoint`, and :class:`PulledWithAdjoint` applied while
    streaming (``gathered``: its wall term gathered into the stream kernel)."""

    wall_term: Any = None
    gathered: bool = static(False)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells take the reflected populations of their fluid neighbours (and the wall term)."""
        return s.replace(post=halfway_with_adjoint(s.post, self.solid, self.links, self.wall_term, lattice))

    def streaming_form(self, solid: np.ndarray, lattice: Lattice) -> PulledWithAdjoint:
        """These walls applied while streaming (:class:`PulledWithAdjoint`; lbm.engines.timestep.fold_walls asks
        :meth:`HalfwayBounceBack.folded`), the wall term on the links."""
        if self.wall_term is None:
            return PulledWithAdjoint(bits=pull_bits(solid, lattice))
        # the wall term on the links only, moved to the fluid cell each points into (a stream): the adjoint then sums
        # the cotangents of the links alone over the steps, not those of a dense (Q, *grid) one
        directions, cells = np.nonzero(pulled(np.asarray(self.links, bool), lattice).reshape(lattice.q, -1))
        wall_term = streamed(self.wall_term, lattice).reshape(lattice.q, -1)[directions, cells]
        at = np.stack([directions, cells]).astype(np.int32)
        if not self.gathered:
            return PulledWithAdjoint(bits=pull_bits(solid, lattice), wall_term=wall_term, wall_term_at=at)
        carried = tuple(int(i) for i in np.unique(directions))
        index = np.full((len(carried), solid.size), directions.size, np.int16 if directions.size < 2 ** 15 else np.int32)
        index[np.searchsorted(carried, directions), cells] = np.arange(directions.size)
        return PulledWithAdjoint(bits=pull_bits(solid, lattice), wall_term=wall_term, wall_term_at=at,
                      index=index.reshape(-1, *solid.shape), carried=carried)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def pulled_with_adjoint(streamed: jnp.ndarray, post: jnp.ndarray, bits: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """:func:`bounce_back_halfway_pulled` of resting walls, as the xla engine runs it (post written
    out once on a CPU), with its transpose as adjoint: cell-local, each slot's cotangent goes to the slot it was
    taken from."""
    return bounce_back_halfway_pulled(streamed, written_out_on_cpu(post), bits, lattice)


def _pulled_fwd(streamed: jnp.ndarray, post: jnp.ndarray, bits: jnp.ndarray, lattice: Lattice
                ) -> tuple[jnp.ndarray, Any]:
    return pulled_with_adjoint(streamed, post, bits, lattice), bits


def _pulled_bwd(lattice: Lattice, bits: Any, ct: jnp.ndarray) -> tuple[Any, ...]:
    q = lattice.q
    zero = jnp.zeros((), ct.dtype)
    fluid = (bits >> q) & 1 == 0
    from_solid = [(bits >> i) & 1 == 1 for i in range(q)]
    streamed_bar = jnp.stack([jnp.where(from_solid[i], zero, ct[i]) for i in range(q)])
    reflected = [jnp.where(from_solid[i] & fluid, ct[i], zero) for i in range(q)]
    post_bar = jnp.stack([reflected[int(lattice.opposite[j])] for j in range(q)])
    return streamed_bar, post_bar, None


pulled_with_adjoint.defvjp(_pulled_fwd, _pulled_bwd)


@pytree_dataclass
class PulledWithAdjoint(BoundaryCondition):
    """:class:`HalfwayWithAdjoint` applied while streaming (stage ``stream``): :class:`PulledHalfway`'s rule
    (:func:`pulled_with_adjoint`), and a moving wall's ``wall_term`` added on its links, (direction, flat cell) ``wall_term_at``
    (2, n)."""

    bits: Any
    wall_term: Any = None
    wall_term_at: Any = None
    index: Any = None
    carried: tuple[int, ...] = static(())
    stage = "stream"
    affine = True

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The streamed populations with the links that came out of solid cells replaced."""
        f = pulled_with_adjoint(s.f, s.post, self.bits, lattice)
        if self.wall_term is None:
            return s.replace(f=f)
        if self.index is not None:
            return s.replace(f=on_links(f, self.wall_term.astype(f.dtype), self.index, self.wall_term_at, self.carried))
        moved = f.reshape(lattice.q, -1).at[self.wall_term_at[0], self.wall_term_at[1]].add(self.wall_term.astype(f.dtype))
        return s.replace(f=moved.reshape(f.shape))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def on_links(f: jnp.ndarray, wall_term: jnp.ndarray, index: jnp.ndarray, at: jnp.ndarray, carried: tuple[int, ...]
             ) -> jnp.ndarray:
    """``f`` plus the per-link ``wall_term`` (n,), gathered into the planes of the directions ``carried`` through ``index``
    (one plane per carried direction: each cell's link number, n where it has none): an elementwise add a GPU fuses
    into the stream kernel (a scatter of the links is a kernel of its own after it, so a loop that stores the result
    copies it). Its adjoint takes the cotangents at the links ``at`` ((direction, flat cell), (2, n))."""
    table = jnp.concatenate([wall_term, jnp.zeros((1,), wall_term.dtype)])
    planes = {i: jnp.take(table, index[k], mode="clip") for k, i in enumerate(carried)}
    return jnp.stack([f[i] + planes[i] if i in planes else f[i] for i in range(f.shape[0])])


def _on_links_fwd(f: jnp.ndarray, wall_term: jnp.ndarray, index: jnp.ndarray, at: jnp.ndarray, carried: tuple[int, ...]
                  ) -> tuple[jnp.ndarray, Any]:
    return on_links(f, wall_term, index, at, carried), at


def _on_links_bwd(carried: tuple[int, ...], at: Any, ct: jnp.ndarray) -> tuple[Any, ...]:
    return ct, ct.reshape(ct.shape[0], -1)[at[0], at[1]], None, None


on_links.defvjp(_on_links_fwd, _on_links_bwd)
