"""Boundary condition ``Inlet`` (stage ``inlet``): prescribed velocity on the face x = 0."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import (
    BoundaryCondition,
    BulkRule,
    CellBlock,
    Footprint,
    MeshLayout,
    StepState,
    contiguous,
    directions,
    face_cells,
    flat_block,
    pytree_dataclass,
    static,
    with_directions,
)
from lbm.boundaries.forms import FaceCondition
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import Lattice

INLET_KINDS = ("zou_he", "nebb", "equilibrium")
"""How the unknown populations of the inlet face are built (see :func:`inlet`)."""


def known_sum(f0: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """rho (1 - u_x) - 1 at an x = 0 face from the deviations f - w of its known populations: the tangential ones
    plus twice the leaving ones (their weights add up to 1)."""
    tangential = np.flatnonzero(lattice.c[:, 0] == 0)
    leaving = np.flatnonzero(lattice.c[:, 0] < 0)
    return jnp.sum(directions(f0, tangential), axis=0) + 2.0 * jnp.sum(directions(f0, leaving), axis=0)


def inlet_density(f0: jnp.ndarray, ux: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Density deviation ρ - 1 at the x = 0 face implied by the known populations and a prescribed u_x (Zou-He):
    ρ = (1 + known_sum) / (1 - u_x)."""
    return (known_sum(f0, lattice) + ux) / (1.0 - ux)


def face_unknowns(f0: jnp.ndarray, drho0: jnp.ndarray, u_face: jnp.ndarray, feq0: jnp.ndarray, lattice: Lattice,
                  kind: str = "zou_he") -> jnp.ndarray:
    """Face populations ``(Q, *face)`` of x = 0 with the unknowns (c_x > 0) rebuilt for density 1 + ``drho0`` and
    velocity ``u_face``.

    ``feq0`` is the equilibrium of (drho0, u_face). ``nebb``: f_i = feq_i + f_opp(i) - feq_opp(i)
    (imposes rho and u_x); ``zou_he``: the same plus Zou & He's transverse correction (Hecht &
    Harting's form in 3D), so every velocity component is imposed; ``equilibrium``: f = feq.
    """
    if kind == "equilibrium":
        return feq0
    c = lattice.c
    unknown = np.flatnonzero(c[:, 0] > 0)
    opp = lattice.opposite[unknown]
    f0 = with_directions(f0, unknown, directions(feq0, unknown) + directions(f0, opp) - directions(feq0, opp))
    if kind == "zou_he":
        for t in range(1, lattice.d):
            moving = [i for i in unknown if c[i, t] != 0]
            carriers = np.flatnonzero(c[:, t] != 0)
            mom = sum(float(c[j, t]) * f0[j] for j in carriers)
            excess = mom - (1.0 + drho0) * u_face[t]
            share = jnp.asarray(c[moving, t] / len(moving), f0.dtype).reshape((-1,) + (1,) * (lattice.d - 1))
            f0 = with_directions(f0, moving, directions(f0, moving) - excess * share)
    return f0


def inlet(
    f: jnp.ndarray,
    drho: jnp.ndarray,
    u: jnp.ndarray,
    feq: jnp.ndarray,
    u_in: jnp.ndarray,
    lattice: Lattice,
    kind: str = "zou_he",
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Prescribed velocity ``u_in`` (shape ``(D, *face)``) on the x = 0 face; returns updated f, drho, u, feq.

    ``nebb``: density from the known populations, unknown populations (c_x > 0) by
    non-equilibrium bounce-back f_i = feq_i + f_opp(i) - feq_opp(i) (the scheme of
    Palabos' lbmFlowAroundCylinder.py, which calls it Zou/He); imposes u_x exactly.
    ``zou_he``: the same plus Zou & He's transverse correction (Hecht & Harting's
    form for 3D), so every velocity component is imposed exactly.
    ``equilibrium``: all populations at the face set to the equilibrium.
    """
    drho0 = inlet_density(f[:, 0], u_in[0], lattice)
    feq0 = equilibrium(drho0, u_in, lattice)
    drho = drho.at[0].set(drho0)
    u = u.at[:, 0].set(u_in)
    feq = feq.at[:, 0].set(feq0)
    return f.at[:, 0].set(face_unknowns(f[:, 0], drho0, u_in, feq0, lattice, kind)), drho, u, feq


TIME_PROFILES = ("constant", "ramp", "sine")
"""How an inlet's velocity changes with the step index t (see :func:`time_factor`)."""


def time_factor(t: jnp.ndarray, profile: str, steps: float, dtype: Any) -> jnp.ndarray | float:
    """The factor on the inflow at step ``t``: 1 (constant), sin(pi/2 min(t/T, 1)) (ramp), sin(pi t / (2T)) (sine).

    T = ``steps``: the steps to full speed. ``sine`` is the DFG 2D-3 inflow U(t) = U sin(pi t / 8 s)
    with T = 4 s in steps (it returns to zero at t = 2T).
    """
    if profile == "constant" or t is None:
        return 1.0
    phase = jnp.asarray(t, dtype) / jnp.asarray(steps, dtype)
    if profile == "ramp":
        phase = jnp.minimum(phase, 1.0)
    return jnp.sin(0.5 * jnp.pi * phase)


def take_face(a: jnp.ndarray, cells: tuple[int, int], face: tuple[int, ...]) -> jnp.ndarray:
    """Block positions ``cells`` (a face in face order) of block array ``a`` as a one-cell-thick face ``(k, 1, *face)``."""
    lo, hi = cells
    return flat_block(a)[:, lo:hi].reshape((a.shape[0], 1, *face))


def put_face(a: jnp.ndarray, cells: tuple[int, int], v: jnp.ndarray) -> jnp.ndarray:
    """Block array ``a`` with the face ``v`` (as :func:`take_face` gives it) stored back at positions ``cells``."""
    lo, hi = cells
    return flat_block(a).at[:, lo:hi].set(v.reshape(a.shape[0], -1)).reshape(a.shape)


@pytree_dataclass
class Inlet(FaceCondition):
    """Velocity ``u`` (shape ``(D, *face)``) imposed on the face x = 0 by the scheme ``kind`` (INLET_KINDS).

    ``profile`` (TIME_PROFILES) and ``ramp_steps`` make it change in time: at step t the face
    gets ``u * time_factor(t, profile, ramp_steps)`` (e.g. ``sine`` with ramp_steps = 4 s in steps
    for the DFG 2D-3 inflow U_m sin(pi t / 8 s)).
    """

    u: Any
    kind: str = static("zou_he")
    profile: str = static("constant")
    ramp_steps: float = static(0.0)
    stage = "inlet"

    def __post_init__(self) -> None:
        if self.profile not in TIME_PROFILES:
            raise ValueError(f"inlet profile must be one of {', '.join(TIME_PROFILES)}, not {self.profile!r}")
        if self.profile != "constant" and not self.ramp_steps > 0:
            raise ValueError(f"inlet profile {self.profile!r} needs ramp_steps > 0")

    def velocity(self, t: Any) -> Any:
        """The inflow ``(D, *face)`` at step ``t``."""
        return self.u * time_factor(t, self.profile, self.ramp_steps, jnp.result_type(self.u))

    def with_velocity_scaled(self, ratio: Any) -> Inlet:
        """The inflow ``ratio`` times as fast."""
        return dataclasses.replace(self, u=self.u * ratio)

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """Face populations, density, velocity and equilibrium with the inflow imposed."""
        f, drho, u, feq = inlet(s.f, s.drho, s.u, s.feq, self.velocity(s.t), lattice, self.kind)
        return s.replace(f=f, drho=drho, u=u, feq=feq)

    def footprint(self, shape: tuple[int, ...], lattice: Lattice) -> Footprint:
        """Writes the face x = 0."""
        return Footprint(face=face_cells(shape, 0))

    def on_block(self, block: CellBlock) -> BoundaryCondition:
        """The same inflow on the gathered face cells."""
        return InletOnBlock(u=self.u, kind=self.kind, profile=self.profile, ramp_steps=self.ramp_steps,
                            cells=contiguous(block.index_of(face_cells(block.shape, 0))))

    def bulk_rule(self) -> BulkRule:
        """A velocity inlet the kernel applies on its first rows."""
        return BulkRule(inflow=True)

    def on_extended(self, mesh: MeshLayout, lattice: Lattice, coords: tuple[int, ...]) -> BoundaryCondition:
        """The inflow on the shard's own face cells (:class:`~lbm.boundaries.forms.FacePlane`)."""
        u = mesh.own_extended(np.asarray(self.u), coords, lead=1, axes=slice(1, None))
        return dataclasses.replace(self, u=u).face_plane(mesh, lattice)


@pytree_dataclass
class InletOnBlock(Inlet):
    """:class:`Inlet` on gathered cells: ``cells`` is the block range of the face, in face order."""

    cells: tuple[int, int] = static((0, 0))

    def apply(self, s: StepState, lattice: Lattice) -> StepState:
        """The dense rule on the face cells, laid out as a one-cell-thick face."""
        face, cells = self.u.shape[1:], self.cells
        drho = s.drho[None]
        f, r, u, feq = inlet(take_face(s.f, cells, face), take_face(drho, cells, face)[0], take_face(s.u, cells, face),
                             take_face(s.feq, cells, face), self.velocity(s.t), lattice, self.kind)
        return s.replace(f=put_face(s.f, cells, f), drho=put_face(drho, cells, r[None])[0], u=put_face(s.u, cells, u),
                         feq=put_face(s.feq, cells, feq))
