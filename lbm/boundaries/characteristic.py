"""Boundary condition ``CharacteristicOutlet`` (stage ``outflow``): a non-reflecting outlet on the face x = nx - 1.

A pressure outlet (lbm.boundaries.pressure) fixes the density on the outlet nodes, and so reflects
every acoustic wave that reaches it (reflection coefficient -1); a velocity condition reflects it
with +1. Between the Zou–He velocity inlet and a pressure outlet the channel's quarter-wave mode
(period 4 L / c_s) rings for tens of thousands of steps, and the drag carries it. This condition
lets the outgoing wave leave, in the spirit of the characteristic conditions of Thompson (1987)
and Poinsot & Lele (1992) applied to lattice Boltzmann (Izquierdo & Fueyo 2008, Phys. Rev. E
78:046707), but with the two pieces of information that a lattice node really has:

- the outgoing information is in the known populations (those arriving from inside, c_x >= 0):
  mass and normal momentum give ``rho (1 + u_x) = K`` with ``K = Σ_{c_x = 0} f + 2 Σ_{c_x > 0} f``
  exactly as in Zou & He's pressure condition;
- the incoming Riemann invariant of linear acoustics, ``w = u_x - c_s rho``, is carried by waves
  entering from outside. With nothing outside, no wave may enter: ``w`` at the outlet is taken
  from the upstream column, ``w(N) = w(N - 1)`` (zero normal gradient), which a purely outgoing
  plane wave (``u_x' = c_s rho'``, ``w' = 0``) satisfies exactly. A steady outflow may carry a
  known mean density gradient (a developed channel flow: ``gradient`` = the density drop per
  cell), which the rule adds back: ``w(N) = u_x(N-1) - c_s (rho(N-1) - gradient)``.
- a weak pull towards the outlet density ``rho`` keeps the mean pressure level from drifting
  (Poinsot & Lele's partially reflecting form), implicit in the outlet's own density:
  ``u_x(N) - c_s rho(N) = u_x(N-1) - c_s (rho(N-1) - gradient) + relax c_s (rho(N) - rho)``.
  In a steady state the outlet density is then exactly ``rho`` when ``gradient`` is the flow's;
  a wrong ``gradient`` shifts the pressure level by its error over ``relax``. ``relax`` = 0 is the
  perfectly non-reflecting rule (its pressure level is free); ``for_length(L)`` sets it to
  ``0.28 c_s / L`` per step (Rudy & Strikwerda's optimal sigma for a domain of length L),
  which holds the level without reflecting the domain's acoustic modes. (Extrapolating ``w`` or
  ``rho`` linearly from two columns instead of adding a known gradient was tried: with the pull
  it diverges, and the linear density extrapolation alone reflects a pulse almost whole.)

With ``a = c_s (1 + relax)`` and ``W`` the right-hand side without the ``rho(N)`` term, the two
relations give ``a rho² + (1 + W) rho - K = 0`` (solved in the cancellation-free form),
then ``u_x = K / rho - 1``; the tangential velocity is taken from the upstream column, and the
unknown populations (c_x < 0) are rebuilt from (rho, u) by non-equilibrium bounce-back, without
Zou & He's transverse correction (``kind="nebb"``, the default: the tangential momentum stays
free) or with it (``kind="zou_he"``: the upstream tangential velocity is imposed), the same code
as the pressure outlet. ``nebb`` is the default because imposing the tangential velocity made the
default cylinder (BGK, tau 0.516, periodic in y) diverge within 400 steps, when the start-up
pressure wave reached the outlet; with ``nebb`` it runs. The rule reads the outlet column and the
column before it, both after streaming.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    CellBlock,
    Footprint,
    StepState,
    contiguous,
    directions,
    face_cells,
    flat_block,
    pytree_dataclass,
    static,
)
from lbm.boundaries.forms import FaceCondition
from lbm.boundaries.inlet import face_unknowns, known_sum, put_face, take_face
from lbm.boundaries.pressure import PRESSURE_KINDS, mirror_x
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.lattice import CS2, Lattice

CS = math.sqrt(CS2)
"""Lattice speed of sound."""
SIGMA = 0.28
"""Rudy & Strikwerda's (1980) optimal relaxation of a partially reflecting outlet, in units of c_s / L."""


def characteristic_face(face: jnp.ndarray, upstream: jnp.ndarray, rho_out: Any, relax: Any, gradient: Any,
                        lattice: Lattice, kind: str = "nebb") -> jnp.ndarray:
    """Outlet face populations ``(Q, *face)`` with the entering ones rebuilt so that no acoustic wave is reflected.

    ``upstream``: the populations of the column before the outlet (same shape). Populations are deviations
    f - w (lbm.kernels.equilibrium), and the quadratic a ρ² + b ρ - K = 0 (K = 1 + k, k the known populations' sum)
    is solved for the deviation δ = ρ - 1, a δ² + (2a + b) δ + (a + b - K) = 0, whose constant term is a sum of
    small terms: no term near 1 cancels (solved for ρ itself, float32 rounded δ at ρ's epsilon, 1.2e-7, where
    the face's deviations are ~1e-3, and the TPU's rounding of that form moved the DFG 2D-1 fields by 2.5e-4
    of u from a CPU's in 1000 steps; docs/performance.md "Fields on the chip").
    """
    drho1, u1 = macroscopic(upstream, lattice)
    m = mirror_x(lattice)
    k = known_sum(directions(face, m), lattice)  # seen from outside, the outlet is an x = 0 face
    rho_out = jnp.asarray(rho_out, face.dtype)
    a = CS * (1.0 + relax)
    b = 1.0 + u1[0] - CS * (1.0 + drho1 - gradient) - relax * CS * rho_out
    c0 = u1[0] - CS * (drho1 - gradient) - relax * CS * (rho_out - 1.0) - k  # a + b - K
    half_b = a + 0.5 * b
    drho = -c0 / (half_b + jnp.sqrt(half_b * half_b - a * c0))  # the root near 0 of a δ² + 2 half_b δ + c0
    un = (k - drho) / (1.0 + drho)  # K / ρ - 1
    u_mirrored = jnp.concatenate([-un[None], u1[1:]], axis=0)  # the outlet seen from outside: c_x negated
    mirrored = directions(face, m)
    return directions(face_unknowns(mirrored, drho, u_mirrored, equilibrium(drho, u_mirrored, lattice), lattice, kind), m)


def characteristic_outlet(f: jnp.ndarray, rho_out: Any, relax: Any, lattice: Lattice, kind: str = "nebb",
                          gradient: Any = 0.0) -> jnp.ndarray:
    """Populations ``(Q, *grid)`` with the non-reflecting outlet rule applied to the last column."""
    return f.at[:, -1].set(characteristic_face(f[:, -1], f[:, -2], rho_out, relax, gradient, lattice, kind))


@pytree_dataclass
class CharacteristicOutlet(FaceCondition):
    """Non-reflecting outlet at x = nx - 1, weakly held at density ``rho`` (see the module doc)."""

    rho: Any = 1.0
    relax: Any = 0.0
    gradient: Any = 0.0
    kind: str = static("nebb")
    stage = "outflow"

    @classmethod
    def for_length(cls, length: float, rho: Any = 1.0, gradient: Any = 0.0) -> CharacteristicOutlet:
        """The outlet of a domain ``length`` cells long, pulled to ``rho`` at SIGMA c_s / length per step."""
        return cls(rho=rho, relax=SIGMA * CS / length, gradient=gradient)

    def __post_init__(self) -> None:
        if self.kind not in PRESSURE_KINDS:
            raise ValueError(f"characteristic outlet kind must be one of {', '.join(PRESSURE_KINDS)}, not {self.kind!r}")

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Populations with the outlet's entering populations rebuilt (no reflected wave)."""
        return s.replace(f=characteristic_outlet(s.f, self.rho, self.relax, lattice, self.kind, self.gradient))

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the last column, reads the one before it."""
        return Footprint(face=face_cells(shape, -1), ghosts=face_cells(shape, -2))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same rule on the gathered outlet cells and their upstream neighbours (gathered by position)."""
        return CharacteristicOutletOnBlock(rho=self.rho, relax=self.relax, gradient=self.gradient, kind=self.kind,
                                           upstream=block.index_of(face_cells(block.shape, -2)).astype(np.int32),
                                           face=tuple(block.shape[1:]),
                                           cells=contiguous(block.index_of(face_cells(block.shape, -1))))


@pytree_dataclass
class CharacteristicOutletOnBlock(CharacteristicOutlet):
    """:class:`CharacteristicOutlet` on gathered cells: ``cells`` the face's range, ``upstream`` its neighbours."""

    upstream: Any = None
    face: tuple[int, ...] = static(())
    cells: tuple[int, int] = static((0, 0))

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The dense rule on the face cells, laid out as a one-cell-thick face."""
        face = take_face(s.f, self.cells, self.face)[:, 0]
        upstream = flat_block(s.f)[:, self.upstream].reshape(face.shape)
        out = characteristic_face(face, upstream, self.rho, self.relax, self.gradient, lattice, self.kind)
        return s.replace(f=put_face(s.f, self.cells, out[:, None]))
