"""Stages ``outflow``, ``inlet`` and ``bounce_back``: boundary conditions.

Inlet and outflow act on the faces normal to axis 0 (x): the inlet on ``x = 0``,
the outflow on ``x = nx - 1``. Bounce-back acts on cells flagged solid.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import Lattice


def outflow(f: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Zero-gradient outlet: unknown populations (c_x < 0) at the last column copy the column before."""
    unknown = np.flatnonzero(lattice.c[:, 0] < 0)
    return f.at[unknown, -1].set(f[unknown, -2])


def inlet_density(f0: jnp.ndarray, ux: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Density at the x = 0 face implied by the known populations and a prescribed u_x (Zou-He)."""
    tangential = np.flatnonzero(lattice.c[:, 0] == 0)
    leaving = np.flatnonzero(lattice.c[:, 0] < 0)
    return (jnp.sum(f0[tangential], axis=0) + 2.0 * jnp.sum(f0[leaving], axis=0)) / (1.0 - ux)


INLET_KINDS = ("zou_he", "nebb", "equilibrium")


def inlet(
    f: jnp.ndarray,
    rho: jnp.ndarray,
    u: jnp.ndarray,
    feq: jnp.ndarray,
    u_in: jnp.ndarray,
    lattice: Lattice,
    kind: str = "zou_he",
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Prescribed velocity ``u_in`` (shape ``(D, *face)``) on the x = 0 face; returns updated f, rho, u, feq.

    ``nebb``: density from the known populations, unknown populations (c_x > 0) by
    non-equilibrium bounce-back f_i = feq_i + f_opp(i) - feq_opp(i) (the scheme of
    Palabos' lbmFlowAroundCylinder.py, which calls it Zou/He); imposes u_x exactly.
    ``zou_he``: the same plus Zou & He's transverse correction (Hecht & Harting's
    form for 3D), so every velocity component is imposed exactly.
    ``equilibrium``: all populations at the face set to the equilibrium.
    """
    rho0 = inlet_density(f[:, 0], u_in[0], lattice)
    feq0 = equilibrium(rho0, u_in, lattice)
    rho = rho.at[0].set(rho0)
    u = u.at[:, 0].set(u_in)
    feq = feq.at[:, 0].set(feq0)
    if kind == "equilibrium":
        return f.at[:, 0].set(feq0), rho, u, feq
    c = lattice.c
    unknown = np.flatnonzero(c[:, 0] > 0)
    opp = lattice.opposite[unknown]
    f0 = f[:, 0].at[unknown].set(feq0[unknown] + f[opp, 0] - feq0[opp])
    if kind == "zou_he":
        for t in range(1, lattice.d):
            moving = [i for i in unknown if c[i, t] != 0]
            carriers = np.flatnonzero(c[:, t] != 0)
            mom = sum(float(c[j, t]) * f0[j] for j in carriers)
            excess = mom - rho0 * u_in[t]
            share = jnp.asarray(c[moving, t] / len(moving), f0.dtype).reshape((-1,) + (1,) * (lattice.d - 1))
            f0 = f0.at[np.array(moving)].add(-excess * share)
    return f.at[:, 0].set(f0), rho, u, feq


def bounce_back_fullway(f_post: jnp.ndarray, f_pre: jnp.ndarray, solid: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Full-way bounce-back: solid cells take their own pre-collision populations reversed."""
    return jnp.where(solid, f_pre[lattice.opposite], f_post)


def bounce_back_halfway(
    f_post: jnp.ndarray,
    solid: jnp.ndarray,
    links: jnp.ndarray,
    lattice: Lattice,
    wall_term: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Half-way bounce-back: solid cells hold the reflected post-collision populations of their fluid neighbours.

    ``links[j]`` flags solid cells s whose neighbour s + c_j is fluid; streaming then
    carries f_j(s) = f*_opp(j)(s + c_j) [+ wall_term_j(s)] into that neighbour, which
    places the wall half-way along the link. ``wall_term`` = 2 w_j rho_w (c_j . u_w) / cs^2
    for moving walls. Other solid cells are reset to rest equilibrium.
    """
    axes = tuple(range(lattice.d))
    reflected = []
    for j in range(lattice.q):
        shift = tuple(-int(s) for s in lattice.c[j])
        src = f_post[lattice.opposite[j]]
        reflected.append(jnp.roll(src, shift, axis=axes) if any(shift) else src)
    reflected = jnp.stack(reflected)
    if wall_term is not None:
        reflected = reflected + wall_term
    rest = jnp.asarray(lattice.w, f_post.dtype).reshape((-1,) + (1,) * lattice.d)
    return jnp.where(links, reflected, jnp.where(solid, rest, f_post))
