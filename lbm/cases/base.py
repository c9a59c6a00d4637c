"""What every case provides: a Setup (geometry, boundary plan, initial state, derived
parameters) and its own monitors, metrics and output files."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.config import RunConfig, viscosity
from lbm.errors import ConfigError
from lbm.kernels.collision import trt_omega_minus
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import CS2, Lattice, get_lattice


@dataclass
class Setup:
    """A case made concrete: masks, plan arrays, initial populations and derived parameters.

    ``stages`` lists the active stage names in timestep order; ``arrays`` holds the
    plan arrays the stages read (passed to jitted code as arguments, not constants).
    """

    lattice: Lattice
    shape: tuple[int, ...]
    dtype: Any
    solid: np.ndarray
    rho0: np.ndarray
    u0: np.ndarray
    stages: tuple[str, ...]
    tau: float
    nu: float
    reynolds: float
    omega_plus: float
    omega_minus: float
    force: np.ndarray | None = None
    inlet_kind: str = "zou_he"
    bounce_back_kind: str = "halfway"
    arrays: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)
    compiled: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Jitted helpers built once per setup (e.g. the output moments), so repeated calls do not retrace."""

    @property
    def fluid(self) -> np.ndarray:
        """Boolean mask of fluid cells."""
        return ~self.solid

    def initial_populations(self) -> jnp.ndarray:
        """Equilibrium populations of the initial density and velocity, in the run's dtype."""
        rho = jnp.asarray(self.rho0, self.dtype)
        u = jnp.asarray(self.u0, self.dtype)
        return equilibrium(rho, u, self.lattice)


class Case:
    """Base class of a flow case; subclasses build the Setup and interpret the results."""

    name = "case"
    dims: tuple[int, ...] = (2, 3)

    def __init__(self, run: RunConfig) -> None:
        self.run = run
        self.lattice = get_lattice(run.lattice)
        self.params = dict(run.case_params)
        self.dtype = jnp.dtype(run.precision)

    # --- building --------------------------------------------------------------------
    def check(self) -> None:
        """Validate the case's own parameters without building arrays (raises ConfigError)."""

    def auto_steps(self) -> int:
        """Steps for ``steps=auto``: long enough for the case's physics (steady state, one decay time)."""
        raise ConfigError("steps", "auto", f"an integer >= 1 (case {self.name} has no automatic length)")

    def setup(self) -> Setup:
        """Geometry, boundary plan, initial state and derived parameters."""
        raise NotImplementedError

    def relaxation(self, length: float) -> dict[str, float]:
        """nu, tau, Reynolds number and relaxation rates for a reference length in cells."""
        nu, tau, reynolds = viscosity(self.run, length)
        omega_plus = 1.0 / tau
        omega_minus = trt_omega_minus(omega_plus, self.run.trt_magic) if self.run.collision == "trt" else omega_plus
        return dict(nu=nu, tau=tau, reynolds=reynolds, omega_plus=omega_plus, omega_minus=omega_minus)

    def base_derived(self, length: float, rel: dict[str, float]) -> dict[str, Any]:
        """Derived quantities every case reports (lattice units)."""
        return {
            "tau": rel["tau"],
            "nu": rel["nu"],
            "u_lattice": self.run.u_lattice,
            "mach": self.run.u_lattice / math.sqrt(CS2),
            "reynolds": rel["reynolds"],
            "reference_length": length,
            "omega": rel["omega_plus"],
        }

    # --- running ---------------------------------------------------------------------
    def observe(self, step: int, f: jnp.ndarray, aux: dict[str, np.ndarray]) -> None:
        """Record what the case monitors after a chunk ending at ``step`` (aux: per-step outputs)."""

    def converged(self, step: int) -> bool:
        """True when a steps=auto run may stop early (steady state reached); never by default."""
        return False

    def state(self) -> dict[str, np.ndarray]:
        """What the case has accumulated (time series), as arrays for a checkpoint."""
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state` returned (after :meth:`setup`)."""

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """The case's own quantities for metrics.json."""
        return {}

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """Write case-specific files (CSV, plots); return their paths relative to ``run_dir``."""
        return []


# --- geometry helpers shared by cases --------------------------------------------------

def coordinates(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Integer node coordinates, one array per axis, each of ``shape``."""
    return list(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"))


def halfway_links(solid: np.ndarray, lattice: Lattice) -> np.ndarray:
    """Flags ``(Q, *grid)``: solid cell s whose neighbour s + c_j is fluid (periodic wrap)."""
    fluid = ~solid
    axes = tuple(range(lattice.d))
    return np.stack([
        solid & np.roll(fluid, tuple(-int(s) for s in lattice.c[j]), axis=axes) for j in range(lattice.q)
    ])


def moving_wall_term(links: np.ndarray, wall_velocity: np.ndarray, lattice: Lattice, rho_wall: float = 1.0) -> np.ndarray:
    """2 w_j rho_w (c_j . u_w) / cs^2 on the half-way links of walls moving with ``wall_velocity`` (D, *grid)."""
    cu = np.einsum("qd,d...->q...", lattice.c.astype(np.float64), wall_velocity)
    w = lattice.w.reshape((-1,) + (1,) * lattice.d)
    return np.where(links, 2.0 * w * rho_wall * cu / CS2, 0.0)
