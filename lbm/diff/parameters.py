"""How a case's continuous config keys enter its Setup, written in jax so that a run can be differentiated by them.

A case builds its Setup once, in numpy, from its config (lbm.cases). For a differentiable run the
discrete structure of that Setup stays (masks, link lists, which stages run) and the case rebuilds the
continuous quantities from traced parameter values (:meth:`lbm.cases.base.Case.traced`, from the pieces of
lbm.cases.traced): the relaxation rates (from ``flow.reynolds``, or ``flow.tau``, and ``flow.u_lattice``
through the case's reference length), the lid's wall term, the inflow, the initial state, the body force, and
the wall fractions of a curved wall (lbm.boundaries.interpolated.InterpolatedBounceBack.moved_to). The timestep
is still lbm.engines.timestep's composition of the stage functions; the collision gets its rates through
``Setup.collision`` (lbm.cases.traced.Relaxation) and a traced body force shifts the velocity in the
``macroscopic`` stage (lbm.cases.traced.HalfForce), since the kernels take their rates and force as static values.

Each case says which keys it takes (:meth:`~lbm.cases.base.Case.differentiable_keys`; ``flow.tau`` replaces
``flow.reynolds`` where the run sets it); a case without a differentiable form says so (LbmError). Today:
- cavity: ``flow.reynolds``, ``flow.u_lattice`` (the lid speed; at fixed Re it also sets nu);
- taylor_green: ``flow.reynolds``, ``flow.u_lattice`` (the initial amplitude: the initial state);
- poiseuille: ``flow.reynolds``, ``flow.u_lattice`` (both through the body force F = 8 nu u / H²);
- cylinder: ``flow.reynolds``, ``flow.u_lattice`` (the inflow), ``case.radius`` (``case.shape=circle``) or
  ``case.axes.a``, ``case.axes.b`` (``case.shape=ellipse``: the semi-axes along x and y), ``case.center.x``,
  ``case.center.y`` (the geometry keys need ``case.bounce_back=interpolated``: a binary mask has no
  shape gradient). Its Reynolds number uses the radius (the ellipse's b), so that also sets nu.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.boundaries.interpolated import ON_THE_WALL
from lbm.cases.base import Case, Setup
from lbm.cases.cylinder import CENTER_KEYS, SHAPE_KEYS
from lbm.cases.traced import Traced
from lbm.config import LbmWarning
from lbm.errors import LbmError

PAIRS = {"case.center": CENTER_KEYS, "case.axes": SHAPE_KEYS["ellipse"][:2]}
"""Config lists [x, y] whose items are keys of their own."""


@dataclasses.dataclass(frozen=True)
class Parameterisation:
    """A case made differentiable: its keys, their values in the run, and the traced Setup for other values."""

    case: Case
    setup: Setup
    base: dict[str, float]
    """Every key this case takes -> its value in the run's config."""
    build: Callable[[dict[str, Any]], Traced]
    """Parameter values (traced; keys not given keep their base value) -> lbm.cases.traced.Traced."""

    def overrides(self, values: dict[str, float]) -> list[str]:
        """Config overrides that set ``values`` (what ``lbm.run`` takes to run them)."""
        out = [f"{k}={v!r}" for k, v in values.items() if k.count(".") < 2]
        for pair in PAIRS:
            if any(k.startswith(f"{pair}.") for k in values):
                x, y = (values.get(k, self.base[k]) for k in PAIRS[pair])
                out.append(f"{pair}=[{x!r},{y!r}]")
        return out


def case_keys(case: Case) -> tuple[str, ...]:
    """The continuous keys of ``case`` (flow.tau for flow.reynolds where the run prescribes tau); LbmError (one line)
    where the case has no differentiable form."""
    keys = case.differentiable_keys()
    return tuple("flow.tau" if k == "flow.reynolds" and case.run.flow.tau is not None else k for k in keys)


def base_values(case: Case) -> dict[str, float]:
    """Each key's value in the run's config."""
    run = case.run
    out = {"flow.u_lattice": float(run.flow.u_lattice)}
    flow = run.flow
    out["flow.tau" if flow.tau is not None else "flow.reynolds"] = float(flow.tau if flow.tau is not None else flow.reynolds)
    out.update(case.differentiable_values())
    return out


def warn_nodes_on_the_wall(setup: Setup, key: str) -> None:
    """An LbmWarning where a node lies on the curved wall (the objective jumps there; the derivative is one-sided)."""
    # the solid mask changes with any step of the shape; the derivative is that of the unchanged mask
    near = np.concatenate([n for bc in setup.boundaries if (n := bc.nodes_on_the_wall(ON_THE_WALL)) is not None])
    if near.size:
        where = tuple(int(x) for x in np.unravel_index(int(near[0]), setup.shape))
        warnings.warn(f"{key}: {near.size} wall links have a node on the wall (e.g. {where}, within {ON_THE_WALL:g} "
                      "of a link's length): a change of the shape moves it across, the objective jumps there, and the "
                      "derivative is that of the unchanged mask (one-sided); move the shape off the nodes by a "
                      "fraction of a cell",
                      LbmWarning, stacklevel=5)


def parameterise(case: Case, setup: Setup, wrt: tuple[str, ...]) -> Parameterisation:
    """The differentiable form of a prepared case; LbmError (one line) for a key or setting it cannot differentiate."""
    keys = case_keys(case)
    if getattr(case.run.collision_params, "smagorinsky", None):
        raise LbmError(f"collision.smagorinsky={case.run.collision_params.smagorinsky}: the Smagorinsky rate has no "
                       "finite derivative where the stress vanishes (sqrt|Pi_neq| at a uniform or resting state); "
                       "set collision.smagorinsky=null")
    for key in wrt:
        if key not in keys:
            hint = " (flow.tau is set: differentiate by flow.tau)" if key == "flow.reynolds" else ""
            raise LbmError(f"cannot differentiate case={case.name} by {key!r}{hint}: choose from {', '.join(keys)}")
    shape_keys = sorted(set(wrt) & set(case.shape_keys()))
    if shape_keys and all(bc.nodes_on_the_wall(ON_THE_WALL) is None for bc in setup.boundaries):
        raise LbmError(f"{shape_keys[0]}: a wall on a binary mask has no shape gradient; "
                       "set case.bounce_back=interpolated (the wall fraction then moves with the shape)")
    if shape_keys:
        warn_nodes_on_the_wall(setup, shape_keys[0])
    base = base_values(case)

    def build(values: dict[str, Any]) -> Traced:
        v = {k: jnp.asarray(values.get(k, base[k]), setup.dtype) for k in base}
        return case.traced(setup, v, base)

    return Parameterisation(case=case, setup=setup, base=base, build=build)
