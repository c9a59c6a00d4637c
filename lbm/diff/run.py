"""The differentiable run: parameter values -> the run's final state and observables, as a jax function.

:func:`differentiable_run` steps the populations with lbm.engines.timestep.timestep (the stage
functions every engine runs, each under its ``jax.named_scope``) from the Setup that
lbm.diff.parameters rebuilds for the given values, in the nested checkpointed scans of
lbm.diff.checkpointing, and returns plain jax arrays: ``f`` (Q, *grid) after the last step, ``rho``
(grid) and ``u`` (D, *grid) as that step's fields (lbm.engines.timestep.moments, what ``fields.npz``
holds), and where the case has an obstacle ``force_mean`` (D,), the momentum-exchange force averaged
over the last ``window`` steps, with ``drag`` and ``lift`` (cd and cl, the cylinder's normalisation).
It is differentiable by ``jax.grad``/``jax.vjp``/``jax.jvp`` in every value, and jit-able.

It runs the boundary conditions in their dense form (half-way walls are not folded into streaming as
the xla engine does: the same step, tested there), and no optimisation barrier between steps.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from lbm.diff.adjoint import CORE, with_adjoints
from lbm.diff.checkpointing import repeat, segment_lengths
from lbm.diff.parameters import Parameterisation
from lbm.engines.timestep import moments, step_index, timestep
from lbm.errors import LbmError


def check_window(window: int | None, steps: int) -> int:
    """The averaging window of the force observables (default: every step); LbmError outside [1, steps]."""
    if window is None:
        return steps
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= steps:
        raise LbmError(f"window={window!r}: the steps the force is averaged over, an integer in [1, steps={steps}]")
    return window


def differentiable_run(param: Parameterisation, values: dict[str, Any], steps: int, checkpoint: str = "sqrt",
                       every: int | None = None, window: int | None = None, levels: int = 3) -> dict[str, jnp.ndarray]:
    """Final ``f``, ``rho``, ``u`` (and ``force_mean``, ``drag``, ``lift`` with an obstacle) after ``steps`` steps.

    ``values``: config key -> value (a jax scalar to differentiate by; keys left out keep the run's
    value). ``checkpoint``/``every``/``levels``: the policy of lbm.diff.checkpointing.
    """
    window = check_window(window, steps)
    lengths = segment_lengths(checkpoint, steps, every, levels)
    traced = param.build(values)
    setup, bcs = traced.setup, with_adjoints(traced.boundaries)
    start = steps - window
    forces = any(bc.stage == "forces" for bc in bcs)
    d = setup.lattice.d

    def step(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        f, t, acc = carry
        f, out = timestep(f, t, bcs, setup, core=CORE)
        if "force" in out:
            acc = acc + jnp.where(t >= start, out["force"], jnp.zeros_like(out["force"]))
        return f, t + 1, acc

    zero = jnp.zeros(d, traced.f0.dtype)
    f, t, acc = repeat(step, (traced.f0, step_index(0), zero), steps, lengths)
    rho, u = moments(f, t, bcs, setup)
    out = {"f": f, "rho": rho, "u": u}
    if forces:
        mean = acc / window
        norm = traced.scales["force_norm"]
        out.update(force_mean=mean, drag=mean[0] / norm, lift=mean[1] / norm)
    return out
