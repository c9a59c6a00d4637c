"""Body-force-driven channel flow between two walls at y (half-way bounce-back), periodic in x (and z).

The grid includes one wall cell on each side, so the channel holds ny - 2 fluid nodes; walls
sit half-way, at y = 0.5 and y = ny - 1.5, and H = ny - 2. With ``case.wall_fraction`` = q in
(0, 1] the walls cut the wall links at the fraction q from the last fluid node instead, at
y = 1 - q and y = ny - 2 + q (H = ny - 3 + 2q), by interpolated bounce-back
(lbm.boundaries.interpolated; q = 1/2 is the half-way position). ``flow.u_lattice`` is the
centre-line speed and the Reynolds number is u_max H / nu; the body force is
F = 8 nu u_max / H^2 (Guo forcing). Analytic profile: u(y) = F/(2 nu) y' (H - y'), y' the distance
of a node from the lower wall.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from lbm.boundaries import HalfwayBounceBack, InterpolatedBounceBack
from lbm.cases.base import Case, Convergence, Setup, make_setup
from lbm.cases.traced import FLOW_KEYS, HalfForce, Traced, traced_rates, traced_setup
from lbm.errors import ConfigError
from lbm.lattice import CS2

STEADY_TRANSIENT = 1e-6
"""The start-up transient left, over the centre-line speed, below which the channel counts as steady."""


class Poiseuille(Case):
    """Plane Poiseuille flow with its analytic parabola."""

    name = "poiseuille"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {2: 128, 3: 96}

    def check(self) -> None:
        """At least 3 fluid cells across the channel."""
        if self.run.grid[1] < 5:
            raise ConfigError("grid.ny", self.run.grid[1], "an integer >= 5 for poiseuille (2 wall cells plus >= 3 fluid cells)")

    @property
    def wall_fraction(self) -> float | None:
        """case.wall_fraction: where the walls cut the wall links (None: half-way bounce-back)."""
        q = self.params.wall_fraction
        return None if q is None else float(q)

    def walls(self, solid: np.ndarray) -> HalfwayBounceBack | InterpolatedBounceBack:
        """Half-way bounce-back, or interpolated bounce-back on the planes y = 1 - q and ny - 2 + q."""
        q = self.wall_fraction
        if q is None:
            return HalfwayBounceBack.around(solid, self.lattice)
        lo, hi = 1.0 - q, solid.shape[1] - 2 + q

        def planes(points: np.ndarray, links: np.ndarray) -> np.ndarray:
            c = links[:, 1].astype(np.float64)
            return (np.where(c < 0, lo, hi) - points[:, 1]) / np.where(c != 0, c, 1.0)

        return InterpolatedBounceBack.from_shape(solid, planes, self.lattice)

    def auto_steps(self) -> int:
        """1.5 diffusion times H^2/nu: the slowest mode has decayed to exp(-1.5 pi^2) ~ 4e-7."""
        height = self.run.grid[1] - 2
        nu = self.relaxation(float(height))["nu"]
        return int(math.ceil(1.5 * height**2 / nu))

    def setup(self) -> Setup:
        """Walls at y = 0 and y = ny-1, fluid at rest, constant body force along x."""
        shape = self.run.grid
        d = len(shape)
        height = self.height
        rel = self.relaxation(height)
        solid = np.zeros(shape, bool)
        solid[:, 0] = True
        solid[:, -1] = True
        force = np.zeros(d)
        force[0] = self.body_force(height, rel["nu"])
        derived = self.base_derived(height, rel)
        derived["body_force"] = float(force[0])
        derived["diffusion_time_steps"] = height**2 / rel["nu"]
        return make_setup(self, solid=solid, rho0=np.ones(shape), u0=np.zeros((d,) + shape), rel=rel,
                          boundaries=(self.walls(solid),), force=force, derived=derived)

    def convergence(self, setup: Setup, steps: int) -> Convergence:
        """Steady when the slowest start-up mode, (32/pi^3) u_max exp(-pi^2 nu t / H^2), is below STEADY_TRANSIENT."""
        remaining = 32.0 / math.pi**3 * math.exp(-math.pi**2 * setup.nu * steps / self.height**2)
        return Convergence(remaining < STEADY_TRANSIENT, "transient_over_umax", remaining, STEADY_TRANSIENT,
                           "run more steps, or steps=auto (1.5 diffusion times H^2/nu)")

    def differentiable_keys(self) -> tuple[str, ...]:
        """flow.reynolds and flow.u_lattice (both through the body force F = 8 nu u / H²)."""
        return FLOW_KEYS

    def traced(self, setup: Setup, v: Mapping[str, Any], base: Mapping[str, float]) -> Traced:
        """The rates of the traced Re and speed, and the body force that drives that speed (:meth:`body_force`)."""
        height = self.height
        omegas = traced_rates(self, height, v)
        nu = CS2 * (1.0 / omegas[0] - 0.5)
        force = jnp.stack([8.0 * nu * v["flow.u_lattice"] / height**2] + [0.0 * nu] * (setup.lattice.d - 1))
        return Traced(traced_setup(self, setup, omegas, force), (HalfForce(force=force), *setup.boundaries),
                      setup.initial_populations(), {})

    def body_force(self, height: float, nu: float) -> float:
        """The force along x that drives a centre-line speed of u_lattice between walls ``height`` apart."""
        return 8.0 * nu * self.run.flow.u_lattice / height**2

    @property
    def height(self) -> float:
        """Channel width H in cells (between the walls)."""
        q = self.wall_fraction
        return float(self.run.grid[1] - 2) if q is None else self.run.grid[1] - 3 + 2 * q

    def parabola(self, setup: Setup, y: np.ndarray) -> np.ndarray:
        """The analytic profile F/(2 nu) y (H - y) at distances ``y`` from the lower wall."""
        return setup.force_array[0] / (2.0 * setup.nu) * y * (self.height - y)  # type: ignore[index]

    def analytic(self, setup: Setup) -> tuple[np.ndarray, np.ndarray]:
        """Fluid-node positions y' (distance from the lower wall) and the analytic parabola there."""
        q = self.wall_fraction
        y = np.arange(1, self.run.grid[1] - 1) - (0.5 if q is None else 1.0 - q)
        return y, self.parabola(setup, y)

    def profile(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """Simulated u_x across the channel, averaged over x (and z)."""
        ux = fields["u"][0]
        axes = tuple(a for a in range(ux.ndim) if a != 1)
        return ux.mean(axis=axes)[1:-1]

    def summary_keys(self) -> tuple[str, ...]:
        """The profile's relative L2 error against the analytic parabola."""
        return ("profile_l2_rel_error",)

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Errors of the profile against the analytic parabola, and against the exact half-way bounce-back solution."""
        y, exact = self.analytic(setup)
        sim = self.profile(fields)
        u_max = float(exact.max())
        lam = (1.0 / setup.omega_plus - 0.5) * (1.0 / setup.omega_minus - 0.5)
        scale = setup.force_array[0] / (2.0 * setup.nu)  # type: ignore[index]
        lbm_exact = scale * (y * (self.height - y) + (16.0 * lam - 3.0) / 12.0)
        return {
            "u_max_analytic": u_max,
            "u_max_simulated": float(sim.max()),
            "profile_l2_rel_error": float(np.linalg.norm(sim - exact) / np.linalg.norm(exact)),
            "profile_max_error_over_umax": float(np.abs(sim - exact).max() / u_max),
            "halfway_exact_max_error_over_umax": (float(np.abs(sim - lbm_exact).max() / u_max)
                                                  if self.wall_fraction is None else None),
            "cross_velocity_max_over_umax": float(np.abs(fields["u"][1][:, 1:-1]).max() / u_max),
        }

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """profiles.csv (y, simulated, analytic) and the profile plot."""
        y, exact = self.analytic(setup)
        sim = self.profile(fields)
        with (run_dir / "profiles.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["y", "u_simulated", "u_analytic"])
            for row in zip(y, sim, exact, strict=False):
                w.writerow([f"{row[0]:.4f}", f"{row[1]:.9e}", f"{row[2]:.9e}"])
        written = ["profiles.csv"]
        if self.run.output.plots:
            from lbm.io.plots import line_plot

            yy = np.linspace(0, self.height, 200)
            written.append(line_plot(
                run_dir / "plots" / "profile.png",
                [(self.parabola(setup, yy), yy, "analytic parabola", "-"),
                 (sim, y, "simulation", "o")],
                xlabel="u_x (lattice units)", ylabel="y (cells from the lower wall)",
                title=f"Poiseuille profile, H={int(self.height)}, Re={setup.reynolds:g}", run_dir=run_dir,
            ))
        return written
