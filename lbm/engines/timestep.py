"""One timestep, composed once from the core stages and a case's boundary conditions.

Every engine and every consumer runs the stages through :func:`run_stage`: the xla engine
composes all of them in one jit, the instrumented engine jits each stage alone, the native
engine runs them (without ``stream``) on the gathered boundary cells, and :func:`moments`
runs the ones before ``collide`` to give the fields a step sees. Stage names and order are
lbm.stages.STAGES; a stage with no core work and no boundary condition is skipped.
The xla engine runs half-way walls while streaming where that gives the same step (:func:`fold_walls`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from lbm.boundaries.base import BoundaryCondition, StepState
from lbm.cases.base import Setup
from lbm.kernels.collisions import collide
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import Lattice
from lbm.stages import CORE_STAGES, STAGES

Boundaries = tuple[BoundaryCondition, ...]


Core = Mapping[str, Callable[[StepState, Setup], StepState]]
"""The work of the core stages by name."""


def core_stages(moments_of: Callable[[jnp.ndarray, Setup], tuple[jnp.ndarray, jnp.ndarray]],
                equilibrium_of: Callable[[jnp.ndarray, jnp.ndarray, Lattice], jnp.ndarray],
                collision_of: Callable[[StepState, Setup], jnp.ndarray],
                stream_of: Callable[[jnp.ndarray, Lattice], jnp.ndarray]) -> Core:
    """The core stages (lbm.stages.CORE_STAGES) from the functions that compute them: the density deviation and
    velocity of ``f``, the equilibrium, the collided populations, the streamed ones (the kernels' here;
    lbm.diff.adjoint's, with hand-written adjoints, for a differentiable run)."""
    def macroscopic_stage(s: StepState, setup: Setup) -> StepState:
        drho, u = moments_of(s.f, setup)
        return s.replace(drho=drho, u=u)

    def equilibrium_stage(s: StepState, setup: Setup) -> StepState:
        return s.replace(feq=equilibrium_of(s.drho, s.u, setup.lattice))

    def collide_stage(s: StepState, setup: Setup) -> StepState:
        out = collision_of(s, setup)
        return s.replace(collided=out, post=out)

    def stream_stage(s: StepState, setup: Setup) -> StepState:
        return s.replace(f=stream_of(s.post, setup.lattice))

    return dict(zip(CORE_STAGES, (macroscopic_stage, equilibrium_stage, collide_stage, stream_stage), strict=True))


def _collision(s: StepState, setup: Setup) -> jnp.ndarray:
    if setup.collision is not None:
        return setup.collision(s.f, s.feq, s.u, setup.lattice, setup.force_array)
    return collide(s.f, s.feq, s.u, setup.lattice, setup.omega_plus, setup.omega_minus, setup.force_array)


CORE: Core = core_stages(lambda f, setup: macroscopic(f, setup.lattice, setup.force_array), equilibrium, _collision,
                         stream)
"""The work of the stages every timestep runs on every cell, whatever the case (lbm.stages.CORE_STAGES)."""


def active_stages(setup: Setup) -> tuple[str, ...]:
    """The stages a setup's timestep runs, in timestep order."""
    used = set(CORE_STAGES) | {bc.stage for bc in setup.boundaries}
    return tuple(s for s in STAGES if s in used)


def run_stage(name: str, s: StepState, boundaries: Boundaries, setup: Setup, core: Core = CORE) -> StepState:
    """Stage ``name``: its core work (if any, from ``core``), then each boundary condition acting in it, in order."""
    work = core.get(name)
    if work is not None:
        s = work(s, setup)
    for bc in boundaries:
        if bc.stage == name:
            s = bc.apply(s, setup.lattice)
    return s


def run_stages(names: Sequence[str], s: StepState, boundaries: Boundaries, setup: Setup,
               scoped: bool = True, core: Core = CORE) -> StepState:
    """The stages ``names`` in order, each under ``jax.named_scope(stage)`` when ``scoped``."""
    for name in names:
        if scoped:
            with jax.named_scope(name):
                s = run_stage(name, s, boundaries, setup, core)
        else:
            s = run_stage(name, s, boundaries, setup, core)
    return s


def outputs(s: StepState) -> dict[str, jnp.ndarray]:
    """The per-step outputs of a finished step (``force`` where a Forces condition ran)."""
    return {} if s.force is None else {"force": s.force}


def timestep(f: jnp.ndarray, t: jnp.ndarray, boundaries: Boundaries, setup: Setup,
             names: Sequence[str] | None = None, core: Core = CORE) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Step ``t`` on dense populations ``(Q, *grid)``: new populations and per-step outputs (``core``: the core
    stages' work, lbm.diff.adjoint's for a differentiable run)."""
    s = run_stages(active_stages(setup) if names is None else names, StepState(f=f, t=t), boundaries, setup,
                   core=core)
    return s.f, outputs(s)


def moment_stages(setup: Setup) -> tuple[str, ...]:
    """The stages before ``collide``: what fixes the density and velocity a step sees."""
    names = active_stages(setup)
    return names[: names.index("collide")]


def moments(f: jnp.ndarray, t: jnp.ndarray, boundaries: Boundaries, setup: Setup) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Density ρ and velocity as step ``t`` sees them (outflow and inlet applied, force-shifted u)."""
    s = run_stages(moment_stages(setup), StepState(f=f, t=t), boundaries, setup, scoped=False)
    return 1.0 + s.drho, s.u


def fold_walls(boundaries: Boundaries, lattice: Lattice) -> Boundaries:
    """``boundaries`` with a wall applied while streaming (its :meth:`~BoundaryCondition.folded` form, e.g. a half-way
    wall's :class:`~lbm.boundaries.bounce_back.PulledHalfway`) where that gives the same step.

    It does when the wall is the only condition of ``bounce_back`` and none acts between it and
    ``stream``: nothing then reads the populations it writes into solid cells before they stream.
    Otherwise ``boundaries`` unchanged.
    """
    walls = [bc for bc in boundaries if bc.stage == "bounce_back"]
    between = STAGES[STAGES.index("bounce_back") + 1:]
    if len(walls) != 1 or any(bc.stage in between for bc in boundaries):
        return boundaries
    form = walls[0].folded(lattice)
    if form is None:
        return boundaries
    return tuple(form if bc is walls[0] else bc for bc in boundaries)


def step_index(t: int) -> jnp.ndarray:
    """A step index as the int32 scalar the stages receive."""
    return jnp.asarray(t, jnp.int32)


def as_arrays(boundaries: Boundaries) -> Any:
    """The boundary conditions with their arrays on the device (what jitted code receives)."""
    return jax.tree_util.tree_map(jnp.asarray, boundaries)
