"""How a case's continuous config keys enter its Setup, written in jax so that a run can be differentiated by them.

A case builds its Setup once, in numpy, from its config (lbm.cases). For a differentiable run the
discrete structure of that Setup stays (masks, link lists, which stages run) and the continuous
quantities are rebuilt here from traced parameter values: the relaxation rates (from
``flow.reynolds``, or ``flow.tau``, and ``flow.u_lattice`` through the case's reference length),
the lid's momentum term, the inflow, the initial state, the body force, and the wall fractions of
a curved wall (lbm.diff.geometry). The timestep is still lbm.engines.timestep's composition of the
stage functions; the collision gets its rates through ``Setup.collision`` (:class:`Relaxation`)
and a traced body force shifts the velocity in the ``macroscopic`` stage (:class:`HalfForce`),
since the kernels take their rates and force as static values.

Keys per case (:data:`KEYS`; ``flow.tau`` replaces ``flow.reynolds`` where the run sets it):
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

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, StepState, pytree_dataclass
from lbm.boundaries.interpolated import ON_THE_WALL
from lbm.cases.base import Case, Setup
from lbm.cases.cylinder import ellipse_intersect
from lbm.config import LbmWarning
from lbm.errors import LbmError
from lbm.kernels.collisions import Collision, bgk, guo_source, trt
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import CS2, Lattice

FLOW_KEYS = ("flow.reynolds", "flow.u_lattice")
CENTER_KEYS = ("case.center.x", "case.center.y")
SHAPE_KEYS = {"circle": ("case.radius", *CENTER_KEYS), "ellipse": ("case.axes.a", "case.axes.b", *CENTER_KEYS)}
"""The geometry keys of the cylinder case's ``case.shape``."""
GEOMETRY_KEYS = ("case.radius", "case.axes.a", "case.axes.b", *CENTER_KEYS)
PAIRS = {"case.center": CENTER_KEYS, "case.axes": SHAPE_KEYS["ellipse"][:2]}
"""Config lists [x, y] whose items are keys of their own."""
KEYS: dict[str, tuple[str, ...]] = {
    "cavity": FLOW_KEYS, "taylor_green": FLOW_KEYS, "poiseuille": FLOW_KEYS, "cylinder": FLOW_KEYS + GEOMETRY_KEYS,
}
"""The continuous config keys a differentiable run of each case takes (``flow.tau`` for ``flow.reynolds`` where set;
the cylinder's geometry keys those of its shape, :data:`SHAPE_KEYS`)."""


@dataclasses.dataclass(frozen=True)
class TracedCollision(Collision):
    """A :class:`~lbm.kernels.collisions.Collision` whose rates are traced values: the kernels are pure jax.numpy in
    their rates; the checks of the rates ran on the run's own values (the Setup's Collision)."""

    def __post_init__(self) -> None:
        """No checks: a traced rate has no value to compare."""


@jax.tree_util.register_pytree_node_class
class Relaxation:
    """The collision with traced rates and an optional traced body force (Guo), used as ``Setup.collision``.

    BGK and TRT call lbm.kernels.collisions.bgk / trt and add Guo's term (linear in the force); the other
    kinds call their kernel through a :class:`TracedCollision` (``spec``), and a traced force enters as the
    kernel's affine dependence on it: K(F) = K(0) + sum_a F_a (K(e_a) - K(0)) (every kind without the
    Smagorinsky model is affine in the force, whose value the kernels take as a static array;
    tests/diff/test_gradient_tools.py checks it).
    """

    def __init__(self, omega_plus: Any, omega_minus: Any, two_rates: bool, force: Any = None,
                 spec: Collision | None = None) -> None:
        self.omega_plus, self.omega_minus, self.two_rates, self.force = omega_plus, omega_minus, two_rates, force
        self.spec = spec

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Leaves: the rates and the force (a pytree, so that a separately compiled stage can take them)."""
        spec = self.spec
        rates = (None, None) if spec is None else (spec.omega, spec.omega_minus)
        static = None if spec is None else (spec.kind, spec.bulk, spec.ghost, spec.smagorinsky)
        return (self.omega_plus, self.omega_minus, self.force, *rates), (self.two_rates, static)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], leaves: tuple[Any, ...]) -> Relaxation:
        """The inverse of :meth:`tree_flatten`."""
        two_rates, static = aux
        omega_plus, omega_minus, force, omega, omega_odd = leaves
        spec = None if static is None else TracedCollision(static[0], omega, omega_odd, *static[1:])
        return cls(omega_plus, omega_minus, two_rates, force, spec)

    def __call__(self, f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, force: Any = None
                 ) -> jnp.ndarray:
        """Post-collision populations, with Guo's term for the traced force."""
        if self.spec is not None and self.force is None:
            return self.spec(f, feq, u, lattice, None)
        if self.spec is not None:  # the kernel at a zero force (not None: the regularized kinds then keep a1)
            zero = self.spec(f, feq, u, lattice, np.zeros(lattice.d))
            return zero + sum(self.force[a] * (self.spec(f, feq, u, lattice, np.eye(lattice.d)[a]) - zero)
                              for a in range(lattice.d))
        if self.two_rates:
            out = trt(f, feq, lattice, self.omega_plus, self.omega_minus)
        else:
            out = bgk(f, feq, self.omega_plus)
        if self.force is not None:
            out = out + self.source(u, lattice).astype(out.dtype)
        return out

    def source(self, u: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
        """Guo's source term of the traced force (linear in it: one term per axis, the unit forces static)."""
        terms = [self.force[a] * guo_source(u, np.eye(lattice.d)[a], lattice, self.omega_plus, self.omega_minus)
                 for a in range(lattice.d)]
        return sum(terms[1:], terms[0])


@pytree_dataclass
class HalfForce(BoundaryCondition):
    """The half-force velocity shift u += F / (2 rho) of a traced body force ``force`` (D,), in stage ``macroscopic``."""

    force: Any
    stage = "macroscopic"

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The state with the force-shifted velocity."""
        shift = jnp.stack([0.5 * self.force[a] / (1.0 + s.drho) for a in range(lattice.d)])
        return s.replace(u=s.u + shift.astype(s.u.dtype))


@dataclasses.dataclass(frozen=True)
class Traced:
    """A Setup rebuilt from traced parameter values: what a differentiable run steps."""

    setup: Setup
    boundaries: tuple[BoundaryCondition, ...]
    f0: jnp.ndarray
    scales: dict[str, Any]
    """Quantities the objectives need (``force_norm``: the force giving cd = 1, where the case has one;
    ``wall_velocity``: the moving walls' velocity, which fields.npz holds in their solid cells)."""


@dataclasses.dataclass(frozen=True)
class Parameterisation:
    """A case made differentiable: its keys, their values in the run, and the traced Setup for other values."""

    case: Case
    setup: Setup
    base: dict[str, float]
    """Every key this case takes -> its value in the run's config."""
    build: Callable[[dict[str, Any]], Traced]
    """Parameter values (traced; keys not given keep their base value) -> :class:`Traced`."""

    def overrides(self, values: dict[str, float]) -> list[str]:
        """Config overrides that set ``values`` (what ``lbm.run`` takes to run them)."""
        out = [f"{k}={v!r}" for k, v in values.items() if k.count(".") < 2]
        for pair in PAIRS:
            if any(k.startswith(f"{pair}.") for k in values):
                x, y = (values.get(k, self.base[k]) for k in PAIRS[pair])
                out.append(f"{pair}=[{x!r},{y!r}]")
        return out


def relaxation(case: Case, length: Any, v: dict[str, Any]) -> tuple[Any, Any]:
    """(omega+, omega-) from the traced values, as lbm.config.viscosity and Case.relaxation derive them."""
    run = case.run
    if run.flow.tau is not None:
        tau = v["flow.tau"]
    else:
        tau = v["flow.u_lattice"] * length / v["flow.reynolds"] / CS2 + 0.5
    omega_plus = 1.0 / tau
    rates = run.collision_params
    if run.collision == "mrt" and rates.odd is not None:
        omega_minus = rates.odd
    elif run.collision in ("trt", "mrt"):
        omega_minus = 1.0 / (0.5 + rates.magic / (tau - 0.5))
    else:
        omega_minus = omega_plus
    return omega_plus, omega_minus


def traced_setup(case: Case, setup: Setup, omegas: tuple[Any, Any], force: Any = None) -> Setup:
    """``setup`` with the traced rates (and body force) in its collision: the stages read them from there."""
    spec = setup.collision
    if spec is not None:  # kinds beyond bgk and trt: the Setup's spec with the traced rates
        spec = TracedCollision(**{**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)},
                                  "omega": omegas[0], "omega_minus": omegas[1] if spec.kind == "mrt" else None})
    relax = Relaxation(*omegas, case.run.collision == "trt", force, spec)
    return dataclasses.replace(setup, collision=relax, force=None)


def _cavity(case: Case, setup: Setup, v: dict[str, Any], base: dict[str, float]) -> Traced:
    omegas = relaxation(case, float(case.run.grid[0] - 2), v)
    ratio = v["flow.u_lattice"] / base["flow.u_lattice"]  # the lid's momentum term is linear in its speed
    bcs = tuple(bc.with_velocity_scaled(ratio) for bc in setup.boundaries)
    wall_u = jnp.asarray(setup.wall_velocity, setup.dtype) * ratio  # fields.npz's u in the lid's solid cells
    return Traced(traced_setup(case, setup, omegas), bcs, setup.initial_populations(), {"wall_velocity": wall_u})


def _taylor_green(case: Case, setup: Setup, v: dict[str, Any], base: dict[str, float]) -> Traced:
    omegas = relaxation(case, float(case.run.grid[0]), v)
    ratio = v["flow.u_lattice"] / base["flow.u_lattice"]  # u0 ~ U, rho0 - 1 ~ U^2 (the vortex's pressure)
    u0 = jnp.asarray(setup.u0, setup.dtype) * ratio
    drho0 = jnp.asarray(np.asarray(setup.rho0, np.float64) - 1.0, setup.dtype) * ratio**2
    return Traced(traced_setup(case, setup, omegas), setup.boundaries, equilibrium(drho0, u0, setup.lattice), {})


def _poiseuille(case: Case, setup: Setup, v: dict[str, Any], base: dict[str, float]) -> Traced:
    height = case.height  # type: ignore[attr-defined]
    omegas = relaxation(case, height, v)
    nu = CS2 * (1.0 / omegas[0] - 0.5)
    force = jnp.stack([8.0 * nu * v["flow.u_lattice"] / height**2] + [0.0 * nu] * (setup.lattice.d - 1))
    return Traced(traced_setup(case, setup, omegas, force), (HalfForce(force=force), *setup.boundaries),
                  setup.initial_populations(), {})


def _cylinder(case: Case, setup: Setup, v: dict[str, Any], base: dict[str, float]) -> Traced:
    axes = (v["case.axes.a"], v["case.axes.b"]) if "case.axes.a" in v else (v["case.radius"], v["case.radius"])
    radius = axes[1]  # the Reynolds length and half the frontal height: the semi-axis across the flow
    omegas = relaxation(case, radius, v)
    ratio = v["flow.u_lattice"] / base["flow.u_lattice"]  # inflow and initial flow are linear in u_lattice
    center = (v["case.center.x"], v["case.center.y"])
    wall = ellipse_intersect(center, axes, jnp)
    bcs = tuple(bc.with_velocity_scaled(ratio).moved_to(wall, setup.shape, setup.lattice) for bc in setup.boundaries)
    u0 = jnp.asarray(setup.u0, setup.dtype) * ratio
    f0 = equilibrium(jnp.asarray(np.asarray(setup.rho0, np.float64) - 1.0, setup.dtype), u0, setup.lattice)
    depth = float(setup.shape[2]) if len(setup.shape) == 3 else 1.0
    norm = 0.5 * v["flow.u_lattice"] ** 2 * 2 * radius * depth
    return Traced(traced_setup(case, setup, omegas), bcs, f0, {"force_norm": norm})


BUILDERS = {"cavity": _cavity, "taylor_green": _taylor_green, "poiseuille": _poiseuille, "cylinder": _cylinder}


def case_keys(case: Case) -> tuple[str, ...]:
    """The continuous keys of ``case`` (flow.tau for flow.reynolds where the run prescribes tau)."""
    keys = KEYS[case.name]
    if case.name == "cylinder":
        keys = FLOW_KEYS + SHAPE_KEYS[case.params.shape]
    return tuple("flow.tau" if k == "flow.reynolds" and case.run.flow.tau is not None else k for k in keys)


def base_values(case: Case) -> dict[str, float]:
    """Each key's value in the run's config."""
    run = case.run
    out = {"flow.u_lattice": float(run.flow.u_lattice)}
    flow = run.flow
    out["flow.tau" if flow.tau is not None else "flow.reynolds"] = float(flow.tau if flow.tau is not None else flow.reynolds)
    if case.name == "cylinder":
        cx, cy, a, b = case.shape_geometry()  # type: ignore[attr-defined]
        size = {"case.axes.a": a, "case.axes.b": b} if case.params.shape == "ellipse" else {"case.radius": b}
        out.update({**size, "case.center.x": cx, "case.center.y": cy})
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
    if case.name not in BUILDERS:
        raise LbmError(f"case={case.name} has no differentiable form: use one of {', '.join(BUILDERS)}")
    if getattr(case.run.collision_params, "smagorinsky", None):
        raise LbmError(f"collision.smagorinsky={case.run.collision_params.smagorinsky}: the Smagorinsky rate has no "
                       "finite derivative where the stress vanishes (sqrt|Pi_neq| at a uniform or resting state); "
                       "set collision.smagorinsky=null")
    keys = case_keys(case)
    for key in wrt:
        if key not in keys:
            hint = " (flow.tau is set: differentiate by flow.tau)" if key == "flow.reynolds" else ""
            raise LbmError(f"cannot differentiate case={case.name} by {key!r}{hint}: choose from {', '.join(keys)}")
    if set(wrt) & set(GEOMETRY_KEYS) and all(bc.nodes_on_the_wall(ON_THE_WALL) is None for bc in setup.boundaries):
        raise LbmError(f"{sorted(set(wrt) & set(GEOMETRY_KEYS))[0]}: a wall on a binary mask has no shape gradient; "
                       "set case.bounce_back=interpolated (the wall fraction then moves with the shape)")
    if set(wrt) & set(GEOMETRY_KEYS):
        warn_nodes_on_the_wall(setup, sorted(set(wrt) & set(GEOMETRY_KEYS))[0])
    base = base_values(case)
    builder = BUILDERS[case.name]

    def build(values: dict[str, Any]) -> Traced:
        v = {k: jnp.asarray(values.get(k, base[k]), setup.dtype) for k in base}
        return builder(case, setup, v, base)

    return Parameterisation(case=case, setup=setup, base=base, build=build)
