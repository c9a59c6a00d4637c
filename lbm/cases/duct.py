"""Body-force-driven flow through a rectangular duct: walls on y and z (half-way bounce-back), periodic in x.

3D lattices only. The grid includes one wall cell on each side, so the duct holds H = ny - 2 by
W = nz - 2 fluid cells; walls sit half-way, at y' = 0, H and z' = 0, W (y' = j - 1/2, z' = k - 1/2).
``flow.u_lattice`` is the speed on the duct axis and the Reynolds number is u_max H / nu. The body
force (Guo forcing) F = nu u_max / S(H, W) follows from the series below (S = the axis speed per unit F/nu).

Reference: the Fourier series of the Poisson problem nu (u_yy + u_zz) = -F with u = 0 on the walls
(separation of variables; tests/cases/test_cases_3d.py checks it against a finite-difference solution):

    u(y, z) = 4 F H² / (nu pi³) Σ_{n odd} n⁻³ sin(n pi y / H) [1 - cosh(n pi (z - W/2) / H) / cosh(n pi W / (2H))]

The first part of each term is the plane Poiseuille parabola F / (2 nu) y (H - y) in sine series;
the cosh part makes it vanish on z = 0 and z = W. Summed to ``SERIES_TERMS`` odd terms the series
is exact to about 1e-7 of u_max (the tail falls as 1/n³ and the cosh factor).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lbm.boundaries import HalfwayBounceBack
from lbm.cases.base import Case, Convergence, Setup, make_setup
from lbm.cases.poiseuille import STEADY_TRANSIENT
from lbm.errors import ConfigError

SERIES_TERMS = 2000
"""Odd terms summed (n = 1, 3, ..., 3999): the truncation error is below 1e-7 u_max."""


def duct_series(y: np.ndarray, z: np.ndarray, height: float, width: float, accel: float, nu: float,
                terms: int = SERIES_TERMS) -> np.ndarray:
    """Analytic axial velocity at ``(y, z)`` in a height x width duct driven by the acceleration ``accel``."""
    y = np.asarray(y, np.float64)[..., None]
    zc = np.abs(np.asarray(z, np.float64)[..., None] - 0.5 * width)
    n = 2.0 * np.arange(terms) + 1.0
    k = n * math.pi / height
    # cosh(k zc) / cosh(k W/2), written with exponentials of non-positive arguments (no overflow)
    ratio = np.exp(k * (zc - 0.5 * width)) * (1.0 + np.exp(-2.0 * k * zc)) / (1.0 + np.exp(-k * width))
    terms_ = np.sin(k * y) * (1.0 - ratio) / n**3
    return 4.0 * accel * height**2 / (nu * math.pi**3) * terms_.sum(axis=-1)


class Duct(Case):
    """Laminar flow in a rectangular duct with its Fourier-series solution."""

    name = "duct"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {3: 96}
    dims = (3,)

    def check(self) -> None:
        """A 3D lattice and at least 3 fluid cells across the duct in y and z."""
        if self.lattice.d != 3:
            raise ConfigError("lattice", self.run.lattice, "d3q19 or d3q27 (the duct has walls on y and z)")
        for key, n in (("grid.ny", self.run.grid[1]), ("grid.nz", self.run.grid[2])):
            if n < 5:
                raise ConfigError(key, n, "an integer >= 5 for the duct (2 wall cells plus >= 3 fluid cells)")

    @property
    def section(self) -> tuple[float, float]:
        """Duct height H (along y) and width W (along z) in cells, between the half-way walls."""
        return float(self.run.grid[1] - 2), float(self.run.grid[2] - 2)

    def axis_factor(self) -> float:
        """S(H, W): the axis speed of the series for F / nu = 1."""
        height, width = self.section
        return float(duct_series(np.array(0.5 * height), np.array(0.5 * width), height, width, 1.0, 1.0))

    def auto_steps(self) -> int:
        """1.5 diffusion times max(H, W)²/nu: the slowest mode has decayed below exp(-1.5 pi²) ~ 4e-7."""
        self.check()
        height = self.section[0]
        nu = self.relaxation(height)["nu"]
        return int(math.ceil(1.5 * max(self.section) ** 2 / nu))

    def convergence(self, setup: Setup, steps: int) -> Convergence:
        """Steady when the slowest start-up mode (1, 1) of the series, over u_max, is below STEADY_TRANSIENT."""
        height, width = self.section
        rate = math.pi**2 * (1.0 / height**2 + 1.0 / width**2)
        remaining = 16.0 / (math.pi**2 * rate * self.axis_factor()) * math.exp(-rate * setup.nu * steps)
        return Convergence(remaining < STEADY_TRANSIENT, "transient_over_umax", remaining, STEADY_TRANSIENT,
                           "run more steps, or steps=auto (1.5 diffusion times max(H, W)^2/nu)")

    def setup(self) -> Setup:
        """Walls on y and z, fluid at rest, the body force along x that drives u_lattice on the axis."""
        self.check()
        shape = self.run.grid
        height, width = self.section
        rel = self.relaxation(height)
        solid = np.zeros(shape, bool)
        solid[:, 0] = solid[:, -1] = True
        solid[:, :, 0] = solid[:, :, -1] = True
        force = np.array([rel["nu"] * self.run.flow.u_lattice / self.axis_factor(), 0.0, 0.0])
        derived = self.base_derived(height, rel)
        derived.update(body_force=float(force[0]), duct_height=height, duct_width=width,
                       diffusion_time_steps=max(height, width) ** 2 / rel["nu"], series_terms=SERIES_TERMS)
        return make_setup(self, solid=solid, rho0=np.ones(shape), u0=np.zeros((3,) + shape), rel=rel,
                          boundaries=(HalfwayBounceBack.around(solid, self.lattice),), force=force, derived=derived)

    def analytic(self, setup: Setup) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fluid-node positions y', z' (from the walls) and the series solution on them, shape (H, W)."""
        height, width = self.section
        y = np.arange(1, int(height) + 1) - 0.5
        z = np.arange(1, int(width) + 1) - 0.5
        yy, zz = np.meshgrid(y, z, indexing="ij")
        return y, z, duct_series(yy, zz, height, width, setup.force_array[0], setup.nu)  # type: ignore[index]

    def section_profile(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """Simulated u_x on the fluid cross-section, averaged over x, shape (H, W)."""
        return fields["u"][0].mean(axis=0)[1:-1, 1:-1]

    def summary_keys(self) -> tuple[str, ...]:
        """The cross-section's largest error against the series solution, over its peak velocity."""
        return ("duct_max_error_over_umax",)

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Errors of the cross-section against the series solution, and the flow rate."""
        _, _, exact = self.analytic(setup)
        sim = self.section_profile(fields)
        u_max = float(exact.max())
        cross = np.abs(fields["u"][1:, :, 1:-1, 1:-1]).max()
        return {
            "u_max_series": u_max,
            "u_max_simulated": float(sim.max()),
            "duct_max_error_over_umax": float(np.abs(sim - exact).max() / u_max),
            "duct_l2_rel_error": float(np.linalg.norm(sim - exact) / np.linalg.norm(exact)),
            "flow_rate_rel_error": float(sim.sum() / exact.sum() - 1.0),
            "cross_velocity_max_over_umax": float(cross / u_max),
        }

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """profiles.csv (the mid-plane lines z = W/2 and y = H/2: simulated and series) and their plot."""
        y, z, exact = self.analytic(setup)
        sim = self.section_profile(fields)

        def mid(a: np.ndarray, axis: int) -> np.ndarray:
            n = a.shape[axis]
            return 0.5 * (np.take(a, (n - 1) // 2, axis=axis) + np.take(a, n // 2, axis=axis))

        lines = {"u_along_y_at_z=W/2": (y, mid(sim, 1), mid(exact, 1)),
                 "u_along_z_at_y=H/2": (z, mid(sim, 0), mid(exact, 0))}
        with (run_dir / "profiles.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["profile", "position", "u_simulated", "u_series"])
            for name, (pos, s, e) in lines.items():
                for row in zip(pos, s, e, strict=True):
                    w.writerow([name, f"{row[0]:.4f}", f"{row[1]:.9e}", f"{row[2]:.9e}"])
        written = ["profiles.csv"]
        if self.run.output.plots:
            from lbm.io.plots import line_plot

            height, width = self.section
            yy = np.linspace(0, height, 200)
            series = duct_series(yy, np.full_like(yy, 0.5 * width), height, width, setup.force_array[0], setup.nu)  # type: ignore[index]
            written.append(line_plot(
                run_dir / "plots" / "profile.png",
                [(series, yy, "Fourier series (z = W/2)", "-"), (lines["u_along_y_at_z=W/2"][1], y, "simulation", "o")],
                xlabel="u_x (lattice units)", ylabel="y (cells from the wall)",
                title=f"Duct profile, {int(height)}x{int(width)}, Re={setup.reynolds:g}", run_dir=run_dir,
            ))
        return written
