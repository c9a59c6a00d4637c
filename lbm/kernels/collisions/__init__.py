"""Stage ``collide``: BGK, TRT, MRT, regularized, recursive regularized, KBC and cumulant relaxation, with Guo's forcing term.

Every operator takes populations ``f`` and their equilibrium ``feq`` (shape ``(Q, *grid)``),
the velocity ``u`` (shape ``(D, *grid)``, half-force shifted when a body force acts) and
returns the post-collision populations. Populations and equilibria are deviations from the rest
state, f_i - w_i (lbm.kernels.equilibrium): BGK, TRT, MRT and the regularized kinds are affine in f
and f_eq with weights that keep the rest state (w_i = w_opp(i), zero moments of w beyond the density),
so they act on the deviations unchanged; where an operator needs ρ it is 1 + Σ f_eq, and KBC's
entropic weights divide by the absolute f_eq; the cumulant operator (lbm.kernels.collisions.cumulant) works on the
deviations themselves. Lattice constants and rates are static Python/numpy
values; the moment bases are built once per lattice from its velocity set (lbm.kernels.collisions.moments).

A kind is one module here: a :class:`~lbm.kernels.collisions.operator.CollisionOperator` subclass (its parameters,
lattices, jnp rule and native body) registered in :data:`COLLISION_KINDS`, the one list of kinds that the config,
the cases and every engine read (docs/contributing.md, "A collision kind"). Importing this package imports every
module in it, so the registry is complete.

- :func:`collide` is the BGK/TRT entry point (the rates ``omega_plus``, ``omega_minus`` of a Setup).
- :class:`Collision` is a frozen spec (kind + rates) for every kind; ``spec(f, feq, u, lattice, force)``
  is the post-collision state. ``Collision.bgk_trt(omega_plus, omega_minus)`` gives the spec of a rate pair.

Every operator is written once for two forms of the populations: a ``(Q, *grid)`` array (what the xla
and instrumented engines run: this is the reference) and :class:`Directions`, a tuple of Q per-direction
arrays (the body of the Pallas kernels, lbm.engines.pallas.cell, which cannot hold a ``(Q, ...)`` tensor:
Triton needs power-of-two shapes). lbm.kernels.directions gives each operation the form of its operand;
on Directions a matrix product over Q is its sum of single populations, equal to the dot to rounding.
tests/engines/pallas/test_pallas_collisions.py pins every kind on the pallas engine to the xla engine.
"""

import importlib
import pkgutil

from lbm.kernels.collisions.bgk import bgk
from lbm.kernels.collisions.kbc import kbc, kbc_matrices
from lbm.kernels.collisions.moments import (
    MOMENT_CLASSES,
    Rate,
    guo_source,
    hermite2,
    hermite3,
    moment_basis,
    raw_moment_basis,
    smagorinsky_omega,
    stress_neq,
)
from lbm.kernels.collisions.mrt import mrt
from lbm.kernels.collisions.operator import COLLISION_KINDS, Collision, CollisionOperator, collision_operator
from lbm.kernels.collisions.regularized import regularized
from lbm.kernels.collisions.trt import collide, trt, trt_omega_minus

for _module in pkgutil.iter_modules(__path__):  # every kind registers itself: a new kind is a new module
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "COLLISION_KINDS", "MOMENT_CLASSES", "Collision", "CollisionOperator", "Rate", "bgk", "collide", "collision_operator",
    "guo_source", "hermite2", "hermite3", "kbc", "kbc_matrices", "moment_basis", "mrt", "raw_moment_basis",
    "regularized", "smagorinsky_omega", "stress_neq", "trt", "trt_omega_minus",
]
