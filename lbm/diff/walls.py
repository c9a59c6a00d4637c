"""Hand-written adjoints of half-way and moving walls, applied while streaming as the xla engine does.

Half-way walls (lbm.boundaries.HalfwayBounceBack, MovingWall) are applied while streaming where nothing reads the
bounced populations before (lbm.engines.timestep.fold_walls): :class:`Pulled` runs the xla engine's rule
(:func:`pulled`), whose transpose is cell-local (bounce-back is its own transpose: the cotangent of a population
that came out of a solid cell goes back to the slot it was reflected from), and adds a moving wall's wall term on
its links (affine: its cotangent is the cotangent on the links). :class:`Halfway` is the dense rule
(:func:`halfway`) where the walls cannot be folded. :func:`with_adjoints` puts a run's conditions in these forms.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, StepState, pytree_dataclass, static
from lbm.boundaries.bounce_back import bounce_back_halfway, bounce_back_halfway_pulled, pull_bits, written_out_on_cpu
from lbm.boundaries.bounce_back import pulled as moved_to_fluid
from lbm.boundaries.moving_wall import MovingWall
from lbm.engines.timestep import fold_walls
from lbm.kernels.platforms import cell_form
from lbm.kernels.streaming import streamed
from lbm.lattice import Lattice


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def halfway(post: jnp.ndarray, solid: jnp.ndarray, links: jnp.ndarray, wall_term: Any, lattice: Lattice) -> jnp.ndarray:
    """lbm.boundaries.bounce_back.bounce_back_halfway (``wall_term`` None: resting walls) with its transpose as adjoint.

    The rule's linear part is a reflection: its transpose sends the cotangent of the slot j of a solid
    cell s back to the slot opp(j) of the fluid cell s + c_j it came from (a roll by +c_j), and passes the
    fluid cells' own cotangents through.
    """
    return bounce_back_halfway(post, solid, links, lattice, wall_term)


def _halfway_fwd(post: jnp.ndarray, solid: jnp.ndarray, links: jnp.ndarray, wall_term: Any, lattice: Lattice
                 ) -> tuple[jnp.ndarray, Any]:
    return halfway(post, solid, links, wall_term, lattice), (solid, links, wall_term)


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


halfway.defvjp(_halfway_fwd, _halfway_bwd)


@pytree_dataclass
class Halfway(MovingWall):
    """A half-way wall, resting (``wall_term`` None) or moving, whose rules carry their adjoints: :func:`halfway`, and
    :class:`Pulled` applied while streaming (``gathered``: its wall term gathered into the stream kernel)."""

    gathered: bool = static(False)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Solid cells take the reflected populations of their fluid neighbours (and the wall term)."""
        return s.replace(post=halfway(s.post, self.solid, self.links, self.wall_term, lattice))

    def streaming_form(self, solid: np.ndarray, lattice: Lattice) -> Pulled:
        """These walls applied while streaming (:class:`Pulled`; lbm.engines.timestep.fold_walls asks
        :meth:`~lbm.boundaries.bounce_back.HalfwayBounceBack.folded`), the wall term on the links."""
        if self.wall_term is None:
            return Pulled(bits=pull_bits(solid, lattice))
        # the wall term on the links only, moved to the fluid cell each points into (a stream): the adjoint then sums
        # the cotangents of the links alone over the steps, not those of a dense (Q, *grid) one
        directions, cells = np.nonzero(moved_to_fluid(np.asarray(self.links, bool), lattice).reshape(lattice.q, -1))
        wall_term = streamed(self.wall_term, lattice).reshape(lattice.q, -1)[directions, cells]
        at = np.stack([directions, cells]).astype(np.int32)
        if not self.gathered:
            return Pulled(bits=pull_bits(solid, lattice), wall_term=wall_term, wall_term_at=at)
        carried = tuple(int(i) for i in np.unique(directions))
        index = np.full((len(carried), solid.size), directions.size, np.int16 if directions.size < 2 ** 15 else np.int32)
        index[np.searchsorted(carried, directions), cells] = np.arange(directions.size)
        return Pulled(bits=pull_bits(solid, lattice), wall_term=wall_term, wall_term_at=at,
                      index=index.reshape(-1, *solid.shape), carried=carried)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def pulled(streamed: jnp.ndarray, post: jnp.ndarray, bits: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """lbm.boundaries.bounce_back.bounce_back_halfway_pulled of resting walls, as the xla engine runs it (post written
    out once on a CPU), with its transpose as adjoint: cell-local, each slot's cotangent goes to the slot it was
    taken from."""
    return bounce_back_halfway_pulled(streamed, written_out_on_cpu(post), bits, lattice)


def _pulled_fwd(streamed: jnp.ndarray, post: jnp.ndarray, bits: jnp.ndarray, lattice: Lattice
                ) -> tuple[jnp.ndarray, Any]:
    return pulled(streamed, post, bits, lattice), bits


def _pulled_bwd(lattice: Lattice, bits: Any, ct: jnp.ndarray) -> tuple[Any, ...]:
    q = lattice.q
    zero = jnp.zeros((), ct.dtype)
    fluid = (bits >> q) & 1 == 0
    from_solid = [(bits >> i) & 1 == 1 for i in range(q)]
    streamed_bar = jnp.stack([jnp.where(from_solid[i], zero, ct[i]) for i in range(q)])
    reflected = [jnp.where(from_solid[i] & fluid, ct[i], zero) for i in range(q)]
    post_bar = jnp.stack([reflected[int(lattice.opposite[j])] for j in range(q)])
    return streamed_bar, post_bar, None


pulled.defvjp(_pulled_fwd, _pulled_bwd)


@pytree_dataclass
class Pulled(BoundaryCondition):
    """:class:`Halfway` applied while streaming (stage ``stream``): lbm.boundaries.bounce_back.PulledHalfway's rule
    (:func:`pulled`), and a moving wall's ``wall_term`` added on its links, (direction, flat cell) ``wall_term_at``
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
        f = pulled(s.f, s.post, self.bits, lattice)
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


def with_adjoints(boundaries: tuple[BoundaryCondition, ...], lattice: Lattice, platform: str | None = None
                  ) -> tuple[BoundaryCondition, ...]:
    """``boundaries`` with the conditions that have a hand-written adjoint here in that form (the others as they are:
    jax differentiates their rule), half-way walls applied while streaming where the xla engine does so; a moving
    wall's wall term gathered into the stream kernel on a GPU or TPU (``platform``, default jax's backend), scattered
    onto its links after it on a CPU (in place there)."""
    out = []
    for bc in boundaries:
        wall = bc.halfway_wall
        if wall is not None:
            bc = Halfway(*wall, gathered=cell_form(platform) != "cpu")
        out.append(bc)
    return fold_walls(tuple(out), lattice)


def affine_stream(boundaries: tuple[BoundaryCondition, ...]) -> bool:
    """Whether the stream stage with ``boundaries`` is affine in the collided populations (the pull, and walls applied
    while streaming as :class:`Pulled`): its pullback is then the same at every point (lbm.diff.checkpointing.Split)."""
    return all(bc.affine for bc in boundaries if bc.stage == "stream")
