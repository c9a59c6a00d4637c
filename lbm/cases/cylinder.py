"""Flow past a cylinder: the classic Palabos example ``lbmFlowAroundCylinder.py`` (2015 UNIGE version).

Defaults reproduce it: nx=420, ny=180, radius r = ny//9, centre (nx//4, ny//2),
Re = u r / nu = 150 (based on the RADIUS, as in the original), u = 0.04, periodic
in y, velocity inlet at x=0 (non-equilibrium bounce-back as in the original, with the 1e-4
sinusoidal perturbation),
zero-gradient outlet, full-way bounce-back on the cylinder. On 3D lattices the
cylinder spans z (periodic). Drag and lift come from momentum exchange every step:
cd = 2 Fx / (rho u^2 D), cl = 2 Fy / (rho u^2 D), D = 2r (per cell of depth in 3D).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from lbm.boundaries import INLET_KINDS, CharacteristicOutlet, Forces, FullwayBounceBack, HalfwayBounceBack, Inlet, Outflow
from lbm.boundaries.bounce_back import BOUNCE_BACK_KINDS
from lbm.boundaries.interpolated import InterpolatedBounceBack, circle_intersect
from lbm.cases.base import Case, Setup, Snapshot, coordinates, make_setup
from lbm.cases.signals import Window, dominant_frequency, mean_with_error, nonstationary_reason, stationary_window
from lbm.config import RunConfig
from lbm.errors import ConfigError

OUTLETS = ("zero_gradient", "characteristic")
"""case.outlet: the zero-gradient outflow (as Palabos), or the non-reflecting one (lbm.boundaries.characteristic)."""


class Cylinder(Case):
    """Vortex shedding behind a cylinder, drag and lift by momentum exchange."""

    name = "cylinder"

    def __init__(self, run: RunConfig) -> None:
        super().__init__(run)
        self.force_rows: list[np.ndarray] = []
        """Per-chunk force histories, (steps, D) each."""

    @property
    def diameter(self) -> float:
        """Cylinder diameter in cells."""
        return 2 * self.geometry()[2]

    @property
    def average_from(self) -> float | None:
        """Fraction of the run where force statistics must start at the earliest (None: found automatically)."""
        value = self.params.average_from
        return None if value is None else float(value)

    @property
    def depth(self) -> float:
        """Cells along z (1 in 2D): forces are per unit depth."""
        return float(self.run.grid[2]) if len(self.run.grid) == 3 else 1.0

    def geometry(self) -> tuple[float, float, float]:
        """Centre (cx, cy) and radius r in lattice units, validated against the domain."""
        nx, ny = self.run.grid[0], self.run.grid[1]
        radius = self.params.radius
        r = ny // 9 if radius is None else radius
        if not r >= 1:  # the default ny // 9 on a small grid (a given radius is checked by CylinderParams)
            raise ConfigError("case.radius", radius, "a number >= 1 (cells), or null for ny//9")
        r_max = min((ny - 3) / 2, (nx - 4) / 2)
        if r > r_max:
            raise ConfigError("case.radius", radius if radius is not None else r,
                              f"a number in [1, {r_max:g}] cells for a {nx}x{ny} grid")
        center = self.params.center
        cx, cy = (nx // 4, ny // 2) if center is None else center
        if not (cx - r >= 1 and cx + r <= nx - 3 and cy - r >= 1 and cy + r <= ny - 2):
            raise ConfigError(
                "case.center", [cx, cy],
                f"a centre that keeps the cylinder of radius {r:g} inside the domain: "
                f"{r + 1:g} <= cx <= {nx - 3 - r:g} and {r + 1:g} <= cy <= {ny - 2 - r:g}",
                "or change case.radius / the grid",
            )
        return float(cx), float(cy), float(r)

    def options(self) -> tuple[str, str]:
        """Inlet kind and bounce-back kind (and checks the outlet kind)."""
        inlet_kind = self.choice("inlet", INLET_KINDS)
        bb = self.bounce_back_kind()
        self.outlet_kind()
        return inlet_kind, bb

    def outlet_kind(self) -> str:
        """``case.outlet``: zero_gradient or characteristic."""
        return self.choice("outlet", OUTLETS)

    def bounce_back_kind(self) -> str:
        """``case.bounce_back``: the obstacle's wall rule (interpolated: linear BFL on the exact circle)."""
        return self.choice("bounce_back", (*BOUNCE_BACK_KINDS, "interpolated"))

    def walls(self, obstacle: np.ndarray, kind: str) -> Any:
        """The obstacle's walls by the bounce-back rule ``kind``."""
        if kind == "interpolated":
            return self.curved_wall(obstacle)
        return FullwayBounceBack(solid=obstacle) if kind == "fullway" else HalfwayBounceBack.around(obstacle, self.lattice)

    @property
    def reference_area(self) -> float:
        """The area forces are normalised by, in cells: diameter x depth (the depth is 1 in 2D)."""
        return self.diameter * self.depth

    def check(self) -> None:
        """Geometry inside the domain and valid options."""
        self.geometry()
        self.options()

    def obstacle(self) -> tuple[np.ndarray, float, dict[str, Any]]:
        """The obstacle mask (grid shape), the length its Reynolds number uses, and its derived geometry."""
        cx, cy, r = self.geometry()
        coords = coordinates(self.run.grid)
        mask = (coords[0] - cx) ** 2 + (coords[1] - cy) ** 2 < r**2
        return mask, r, {"radius": r, "center": [cx, cy], "diameter": 2 * r}

    def setup(self) -> Setup:
        """Obstacle mask, inflow profile, walls and force links, uniform initial flow."""
        shape = self.run.grid
        d = len(shape)
        obstacle, length, geometry = self.obstacle()
        rel = self.relaxation(length)
        y = coordinates(shape)[1]
        ly = shape[1] - 1
        amp = float(self.params.perturbation)
        u = np.zeros((d,) + shape)
        u[0] = self.run.u_lattice * (1.0 + amp * np.sin(y / ly * 2 * math.pi))
        inlet_kind, bb = self.options()
        derived = self.base_derived(length, rel)
        derived.update(geometry, reynolds_diameter=rel["reynolds"] * self.diameter / length,
                       shedding_period_estimate_steps=self.diameter / (0.2 * self.run.u_lattice))
        walls = self.walls(obstacle, bb)
        boundaries = (self.outlet(), Inlet(u=u[:, 0].astype(self.dtype), kind=inlet_kind), walls,
                      Forces.on(obstacle, self.lattice))
        return make_setup(self, solid=obstacle, rho0=np.ones(shape), u0=u, rel=rel, boundaries=boundaries,
                          derived=derived)

    def curved_wall(self, obstacle: np.ndarray) -> InterpolatedBounceBack:
        """case.bounce_back=interpolated: linear BFL on the exact circle (the obstacle mask's own circle)."""
        cx, cy, r = self.geometry()
        return InterpolatedBounceBack.from_shape(obstacle, circle_intersect((cx, cy), r), self.lattice)

    def outlet(self) -> Outflow | CharacteristicOutlet:
        """The outlet of case.outlet; the characteristic one held at density 1 (uniform inflow: no mean gradient)."""
        if self.outlet_kind() == "characteristic":
            return CharacteristicOutlet.for_length(self.run.grid[0] - 1)
        return Outflow()

    def observe(self, snapshot: Snapshot) -> None:
        """Collect the per-step force vectors of the chunk."""
        self.force_rows.append(np.asarray(snapshot.aux["force"], dtype=np.float64))

    def state(self) -> dict[str, np.ndarray]:
        """The force history, one row per step."""
        forces = np.concatenate(self.force_rows) if self.force_rows else np.zeros((0, self.lattice.d))
        return {"case/forces": forces}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore the force history."""
        self.force_rows = [np.asarray(state["case/forces"], dtype=np.float64)]

    def coefficients(self) -> np.ndarray:
        """Per-step [step, F..., cd, cl] rows."""
        forces = np.concatenate(self.force_rows) if self.force_rows else np.zeros((0, self.lattice.d))
        norm = 0.5 * self.run.u_lattice**2 * self.reference_area
        steps = np.arange(1, len(forces) + 1, dtype=np.float64)[:, None]
        return np.hstack([steps, forces, forces[:, :1] / norm, forces[:, 1:2] / norm])

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Drag, lift and Strouhal number over the statistically stationary window, with their standard errors.

        The window (lbm.cases.signals.stationary_window) starts where MSER ends the transient, batches
        being shedding cycles of the lift; ``case.average_from`` (a fraction of the run) overrides
        the start. Without a stationary window the statistics are None and ``stationary_note`` says why.
        """
        rows = self.coefficients()
        if len(rows) == 0:
            return {}
        cd, cl = rows[:, -2], rows[:, -1]
        # shedding cycles are near D / (St U) steps, St ~ 0.2; a lift oscillation three times faster than that
        # estimate (the start-up's acoustic ringing) is not shedding and cuts no batches
        min_cycle = int(setup.derived.get("shedding_period_estimate_steps", 0) / 3)
        forced = self.average_from
        if forced is None:
            window = stationary_window(cd, reference=cl, min_cycle=min_cycle)
        else:
            start = int(forced * len(rows))
            window = stationary_window(cd[start:], reference=cl[start:], min_cycle=min_cycle)
            window = window and Window(window.start + start, window.stop + start, window.edges + start,
                                       window.periodic)
        out: dict[str, Any] = {"cd_mean": None, "cd_mean_error": None, "cl_mean": None, "cl_amplitude": None,
                               "cl_amplitude_error": None, "strouhal": None, "strouhal_error": None,
                               "stationary_window_steps": None, "stationary_cycles": 0}
        if window is None:
            freq, periods = dominant_frequency(cl[len(cl) // 2:])
            out["stationary_note"] = (
                f"no statistically stationary window in {len(rows)} steps ({nonstationary_reason(cd, cl, min_cycle=min_cycle)}; "
                f"{periods:.1f} lift periods in the second half): run more steps")
            return out
        out["stationary_window_steps"] = [int(rows[window.start, 0]), int(rows[window.stop - 1, 0])]
        out["cd_mean"], out["cd_mean_error"] = mean_with_error(window.batch_means(cd))
        out["cl_mean"], _ = mean_with_error(window.batch_means(cl))
        out["cd_amplitude"], _ = mean_with_error(window.batch_amplitudes(cd))
        if window.periodic:
            out["stationary_cycles"] = window.batches
            out["cl_amplitude"], out["cl_amplitude_error"] = mean_with_error(window.batch_amplitudes(cl))
            period, period_error = mean_with_error(np.diff(window.edges).astype(np.float64))
            out["strouhal"] = self.diameter / (period * self.run.u_lattice)
            out["strouhal_error"] = out["strouhal"] * period_error / period
        else:
            out["cl_amplitude"], out["cl_amplitude_error"] = mean_with_error(window.batch_amplitudes(cl))
            out["strouhal_note"] = "the lift does not oscillate in the window: no shedding frequency"
        return out

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """forces.csv (step, fx, fy[, fz], cd, cl) and the drag/lift plot."""
        rows = self.coefficients()
        names = ["fx", "fy", "fz"][: self.lattice.d]
        with (run_dir / "forces.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["step", *names, "cd", "cl"])
            for row in rows:
                w.writerow([int(row[0]), *(f"{v:.9e}" for v in row[1:])])
        written = ["forces.csv"]
        if self.run.output.plots and len(rows):
            from lbm.io.plots import forces_plot

            written.append(forces_plot(run_dir, rows[:, 0], rows[:, -2], rows[:, -1], metrics))
        return written
