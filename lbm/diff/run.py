"""The differentiable run: parameter values -> the run's final state and observables, as a jax function.

:func:`differentiable_run` steps the populations with lbm.engines.timestep.timestep (the stage
functions every engine runs, each under its ``jax.named_scope``) from the Setup that
lbm.diff.parameters rebuilds for the given values, under a checkpointing policy of
lbm.diff.checkpointing, and returns plain jax arrays: ``f`` (Q, *grid) after the last step, ``rho``
(grid) and ``u`` (D, *grid) as that step's fields (lbm.engines.timestep.moments: what ``fields.npz``
holds in fluid cells; ``wall_velocity``, where the case has moving walls, is what it holds in solid
cells), and where the case has an obstacle ``force_mean`` (D,), the momentum-exchange force averaged
over the last ``window`` steps, with ``drag`` and ``lift`` (cd and cl, the cylinder's normalisation).
It is differentiable by ``jax.grad``/``jax.vjp`` in every value, and jit-able: the core stages and the
half-way walls run with hand-written adjoints (lbm.diff.adjoint, and the walls' own from lbm.boundaries.bounce_back,
applied while streaming as the xla engine does). ``forward_mode=True`` runs the kernels' own stages instead, for
``jax.jvp`` (a ``jax.custom_vjp`` function has no forward mode).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lbm.boundaries.base import BoundaryCondition, StepState
from lbm.diff.adjoint import core_for, with_adjoints
from lbm.diff.checkpointing import SNAPSHOTS, Split, Step, run_steps, segment_length
from lbm.diff.parameters import Parameterisation
from lbm.engines.timestep import CORE as KERNELS
from lbm.engines.timestep import active_stages, moments, run_stages, step_index
from lbm.errors import LbmError
from lbm.kernels.platforms import cell_form


def check_window(window: int | None, steps: int) -> int:
    """The averaging window of the force observables (default: every step); LbmError outside [1, steps]."""
    if window is None:
        return steps
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= steps:
        raise LbmError(f"window={window!r}: the steps the force is averaged over, an integer in [1, steps={steps}]")
    return window


def affine_stream(boundaries: tuple[BoundaryCondition, ...]) -> bool:
    """Whether the stream stage with ``boundaries`` is affine in the collided populations (the pull, and walls applied
    while streaming as lbm.boundaries.bounce_back.PulledWithAdjoint): its pullback is then the same at every point
    (lbm.diff.checkpointing.Split)."""
    return all(bc.affine for bc in boundaries if bc.stage == "stream")


def step_function(traced: Any, start: int, forward_mode: bool = False, platform: str | None = None
                  ) -> tuple[Step, Any, Any]:
    """One step of the differentiable run of the traced case ``traced`` (lbm.diff.parameters), its initial carry and its
    parameters: ``step(carry, params) -> carry`` on the carry (populations, step index, the force summed from step
    ``start`` on); a :class:`~lbm.diff.checkpointing.Split` of the stages before ``stream`` and ``stream``, with the
    hand-written adjoints (their forms for ``platform``, default jax's backend), or (``forward_mode``) the kernels'
    own stages."""
    setup = traced.setup
    bcs = traced.boundaries if forward_mode else with_adjoints(traced.boundaries, setup.lattice, platform)
    core = KERNELS if forward_mode else core_for(setup, bcs, platform)
    names = active_stages(setup)

    def local(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:  # every stage before stream: the collided state
        f, t, acc = carry
        s = run_stages(names[:-1], StepState(f=f, t=t), bcs, setup, core=core)
        if s.force is not None:
            acc = acc + jnp.where(t >= start, s.force, jnp.zeros_like(s.force))
        return s.post, t, acc

    def transport(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:  # the stream stage
        post, t, acc = carry
        return run_stages(names[-1:], StepState(f=post, t=t, post=post), bcs, setup, core=core).f, t + 1, acc

    carry = (traced.f0, step_index(0), jnp.zeros(setup.lattice.d, traced.f0.dtype))
    if forward_mode:
        return (lambda c, _: transport(local(c))), carry, None
    # the traced values each part closes over (rates, wall terms, wall fractions) become its explicit parameters:
    # the backward pass sums their cotangents over the steps
    closed_local, p_local = jax.closure_convert(local, carry)
    closed_transport, p_transport = jax.closure_convert(transport, carry)
    step = Split(lambda c, p: closed_local(c, *p), lambda c, p: closed_transport(c, *p))
    return (step if affine_stream(bcs) else step.whole()), carry, (p_local, p_transport)


def differentiable_run(param: Parameterisation, values: dict[str, Any], steps: int, checkpoint: str = "sqrt",
                       every: int | None = None, window: int | None = None, snapshots: int = SNAPSHOTS,
                       forward_mode: bool = False, platform: str | None = None) -> dict[str, jnp.ndarray]:
    """Final ``f``, ``rho``, ``u`` (and ``force_mean``, ``drag``, ``lift`` with an obstacle) after ``steps`` steps.

    ``values``: config key -> value (a jax scalar to differentiate by; keys left out keep the run's
    value). ``checkpoint``/``every``/``snapshots``: the policy of lbm.diff.checkpointing. ``forward_mode``:
    the kernels' stages in a plain ``lax.scan``, for ``jax.jvp`` (the hand-written adjoints are reverse mode
    only; reverse mode through this form keeps every step's values and is slow). ``platform``: the one the program
    is compiled for (cpu, cuda, tpu; default jax's backend), which picks the adjoints' forms.
    """
    window = check_window(window, steps)
    traced = param.build(values)
    forces = any(bc.stage == "forces" for bc in traced.boundaries)
    step, carry, params = step_function(traced, steps - window, forward_mode, platform)
    if forward_mode:
        segment_length(checkpoint, steps, every, snapshots)  # the same arguments checked
        f, t, acc = jax.lax.scan(lambda c, _: (step(c, None), None), carry, None, length=steps)[0]
    else:
        # XLA:CPU loops hand their buffers back without a copy at one step per iteration, a GPU's at two (as the xla
        # engine's chunk): each loop body compiled once on a CPU (the first call's cost), twice on a GPU
        paired = cell_form(platform) != "cpu"
        f, t, acc = run_steps(step, carry, params, steps, checkpoint, every, snapshots, paired)
    rho, u = moments(f, t, traced.boundaries, traced.setup)
    out = {"f": f, "rho": rho, "u": u}
    if "wall_velocity" in traced.scales:
        out["wall_velocity"] = traced.scales["wall_velocity"]
    if forces:
        mean = acc / window
        norm = traced.scales["force_norm"]
        out.update(force_mean=mean, drag=mean[0] / norm, lift=mean[1] / norm)
    return out
