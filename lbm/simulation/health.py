"""The health of a run's populations: the device reduction after each chunk, the first bad cell and what a divergence
says (its likely cause and the fix to try)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.boundaries.inlet import INLET_KINDS
from lbm.cases import Setup
from lbm.errors import DivergenceError
from lbm.kernels.macroscopic import macroscopic
from lbm.lattice import Lattice

RHO_BOUNDS = (0.0, 5.0)
"""Densities outside this open interval count as diverged."""


@functools.partial(jax.jit, static_argnums=2)
def _reductions(f: jnp.ndarray, fluid: jnp.ndarray, lattice: Lattice, outside: jnp.ndarray | None = None
                ) -> tuple[jnp.ndarray, ...]:
    """(healthy, fluid cells, their summed density deviation, fluid kinetic energy), reduced on the device; the
    ``outside`` cells (a layout's pads) in none of them."""
    drho, u = macroscopic(f, lattice)
    rho = 1.0 + drho
    usq = jnp.sum(u * u, axis=0)
    ok = jnp.isfinite(rho) & (rho > RHO_BOUNDS[0]) & (rho < RHO_BOUNDS[1]) & (usq < 1.0)
    healthy = jnp.all(ok if outside is None else ok | outside)
    cells = jnp.sum(fluid, dtype=jnp.int32)
    excess = jnp.sum(jnp.where(fluid, drho, 0.0))
    energy = jnp.sum(jnp.where(fluid, 0.5 * rho * usq, 0.0))
    return healthy, cells, excess, energy


def chunk_stats(f: jnp.ndarray, fluid: jnp.ndarray, lattice: Lattice, outside: jnp.ndarray | None = None
                ) -> tuple[bool, float, float]:
    """(healthy, fluid mass, fluid kinetic energy) of populations ``f`` (deviations f - w) in one device reduction;
    ``outside`` masks the state's cells that are no grid cell (Engine.outside_cells), left out of the health too.

    The mass is the number of fluid cells plus the sum of their density deviations, added in float64 on the
    host: a float32 sum of the densities themselves would round away the drift it measures.
    """
    healthy, cells, excess, energy = (np.asarray(v).item() for v in _reductions(f, fluid, lattice, outside))
    return bool(healthy), float(cells) + float(excess), float(energy)


def first_bad_cell(f: np.ndarray, lattice: Lattice) -> tuple[int, ...]:
    """Index of the first cell with a non-finite or out-of-bounds density or velocity."""
    drho, u = (np.asarray(a) for a in macroscopic(jnp.asarray(f), lattice))
    rho = 1.0 + drho
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(rho) | (rho <= RHO_BOUNDS[0]) | (rho >= RHO_BOUNDS[1]) | ~((u * u).sum(0) < 1.0)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()


def likely_cause(setup: Setup, cell: tuple[int, ...] = ()) -> str:
    """The most probable reason a run diverged, with the fix to try; names the boundary conditions on ``cell``.

    Fixes are offered only where they change something: collision=trt only for BGK, another inlet kind than the
    run's own."""
    tau, mach = setup.tau, setup.derived["mach"]
    bgk = setup.collision is None and setup.omega_minus == setup.omega_plus
    if tau < 0.52:
        cause = (f"tau={tau:.4f} is too close to 0.5 for this resolution: raise the grid resolution, lower "
                 f"flow.reynolds{', or use collision=trt' if bgk else ''}")
    elif mach > 0.2:
        cause = f"Mach {mach:.2f} is too high: lower flow.u_lattice (<= 0.1)"
    else:
        cause = (f"the resolution is probably too low for Re={setup.reynolds:g} (tau={tau:.4f}, Mach={mach:.3f}): "
                 "raise the grid resolution or lower flow.reynolds")
    flat = int(np.ravel_multi_index(cell, setup.shape)) if len(cell) == len(setup.shape) else -1
    names, fixes = [], ["collision=trt"] if bgk else []
    for bc in setup.boundaries:
        fp = bc.footprint(setup.shape, setup.lattice)
        if flat in fp.face or flat in fp.cells:
            names.append(f"{bc.stage} ({bc.label()})")
            kind = bc.__dict__.get("kind")
            if bc.stage == "inlet" and kind in INLET_KINDS:
                fixes.append("another inlet kind (" + " or ".join(f"case.inlet={k}" for k in INLET_KINDS
                                                                  if k != kind) + ")")
    if not names:
        return cause
    tried = f": try {' or '.join(fixes)}" if fixes else ""
    return f"the cell lies on the boundary condition {' and '.join(names)}, the likely cause{tried}; or {cause}"



def diverged(f: jnp.ndarray, step: int, setup: Setup) -> DivergenceError:
    """The error of a run whose populations left the healthy range by ``step``, naming the first bad cell."""
    loc = first_bad_cell(parallel.to_host(f), setup.lattice)
    return DivergenceError(f"simulation diverged by step {step} (first bad cell {loc}): {likely_cause(setup, loc)}")

