"""A run's conditions in the forms that carry hand-written adjoints, and whether its stream stage is affine.

Half-way walls (lbm.boundaries.HalfwayBounceBack, MovingWall) take the form lbm.boundaries.bounce_back.Halfway
(their rules with their adjoints), applied while streaming (bounce_back.Pulled) where nothing reads the bounced
populations before (lbm.engines.timestep.fold_walls). :func:`with_adjoints` puts a run's conditions in these forms.
"""

from __future__ import annotations

from lbm.boundaries.base import BoundaryCondition
from lbm.boundaries.bounce_back import Halfway
from lbm.engines.timestep import fold_walls
from lbm.kernels.platforms import cell_form
from lbm.lattice import Lattice


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
