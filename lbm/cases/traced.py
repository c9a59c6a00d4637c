"""What a case's differentiable form is built of: its Setup with traced continuous values (lbm.diff runs it).

A case builds its Setup once, in numpy, from its config. For a differentiable run (lbm.diff) the
discrete structure of that Setup stays (masks, link lists, which stages run) and a case that has a
differentiable form (:meth:`lbm.cases.base.Case.traced`) rebuilds the continuous quantities from traced
parameter values with these pieces: the relaxation rates (:func:`traced_rates`, from ``flow.reynolds``, or
``flow.tau``, and ``flow.u_lattice`` through the case's reference length), the collision that takes them
(:class:`Relaxation` as ``Setup.collision``, :func:`traced_setup`), a traced body force's velocity shift
(:class:`HalfForce`, in the ``macroscopic`` stage), and what the boundary conditions say of their own inputs
(lbm.boundaries.base.BoundaryCondition.with_velocity_scaled, .moved_to). The kernels take their rates and
force as static values; these carry them as traced ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, StepState, pytree_dataclass
from lbm.kernels.collisions import COLLISION_KINDS, Collision, bgk, guo_source, trt
from lbm.lattice import CS2, Lattice

FLOW_KEYS = ("flow.reynolds", "flow.u_lattice")
"""The continuous keys of the flow section every differentiable case takes (flow.tau for flow.reynolds where set)."""


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

    setup: Any
    """The case's Setup with the traced rates (and force) in its collision (:func:`traced_setup`)."""
    boundaries: tuple[BoundaryCondition, ...]
    f0: jnp.ndarray
    scales: dict[str, Any]
    """Quantities the objectives need (``force_norm``: the force giving cd = 1, where the case has one;
    ``wall_velocity``: the moving walls' velocity, which fields.npz holds in their solid cells)."""


def traced_rates(case: Any, length: Any, v: dict[str, Any]) -> tuple[Any, Any]:
    """(omega+, omega-) from the traced values, as lbm.config.viscosity and Case.relaxation derive them."""
    run = case.run
    if run.flow.tau is not None:
        tau = v["flow.tau"]
    else:
        tau = v["flow.u_lattice"] * length / v["flow.reynolds"] / CS2 + 0.5
    omega_plus = 1.0 / tau
    return omega_plus, COLLISION_KINDS[run.collision].traced_omega_minus(omega_plus, tau, run.collision_params)


def traced_setup(case: Any, setup: Any, omegas: tuple[Any, Any], force: Any = None) -> Any:
    """``setup`` (a Setup) with the traced rates (and body force) in its collision: the stages read them from there."""
    spec = setup.collision
    if spec is not None:  # kinds beyond bgk and trt: the Setup's spec with the traced rates
        spec = TracedCollision(**{**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)},
                                  "omega": omegas[0], "omega_minus": omegas[1] if spec.operator.traced_odd else None})
    relax = Relaxation(*omegas, COLLISION_KINDS[case.run.collision].two_rates, force, spec)
    return dataclasses.replace(setup, collision=relax, force=None)
