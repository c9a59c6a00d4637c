"""Flow past a cylinder: the classic Palabos example ``lbmFlowAroundCylinder.py`` (2015 UNIGE version).

Defaults reproduce it: nx=420, ny=180, radius r = ny//9, centre (nx//4, ny//2),
Re = u r / nu = 150 (based on the RADIUS, as in the original), u = 0.04, periodic
in y, velocity inlet at x=0 (non-equilibrium bounce-back as in the original, with the 1e-4
sinusoidal perturbation),
zero-gradient outlet, full-way bounce-back on the cylinder. On 3D lattices the
cylinder spans z (periodic). Drag and lift come from momentum exchange every step:
cd = 2 Fx / (rho u^2 D), cl = 2 Fy / (rho u^2 D), D = 2r (per cell of depth in 3D).

``case.shape=ellipse`` puts an ellipse of semi-axes ``case.axes`` = [a, b] (along x and y) in its
place: b plays the radius's part (the Reynolds length; D = 2b, the frontal height), and
``case.bounce_back=interpolated`` cuts the links at the exact ellipse (:func:`ellipse_intersect`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from lbm.boundaries import INLET_KINDS, CharacteristicOutlet, Forces, FullwayBounceBack, HalfwayBounceBack, Inlet, Outflow
from lbm.boundaries.bounce_back import BOUNCE_BACK_KINDS
from lbm.boundaries.interpolated import InterpolatedBounceBack, Intersect, array_of, ball_intersect, vector_of
from lbm.cases.base import Case, Setup, Snapshot, coordinates, make_setup
from lbm.cases.signals import Window, cycles_phrase, mean_with_error, nonstationary_reason, stationary_window
from lbm.cases.traced import FLOW_KEYS, Traced, traced_rates, traced_setup
from lbm.config import RunConfig
from lbm.errors import ConfigError
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import CS2

OUTLETS = ("zero_gradient", "characteristic")
SHAPES = ("circle", "ellipse")
"""case.shape: a circle of case.radius, or an ellipse of semi-axes case.axes = [a, b] along x and y."""
CENTER_KEYS = ("case.center.x", "case.center.y")
SHAPE_KEYS = {"circle": ("case.radius", *CENTER_KEYS), "ellipse": ("case.axes.a", "case.axes.b", *CENTER_KEYS)}
"""The continuous keys of each case.shape (a differentiable run's geometry keys)."""


def ellipse_intersect(center: Any, axes: Any, xp: Any = np) -> Intersect:
    """Ray–ellipse intersection in the (x, y) plane (a cylinder along z in 3D): the entering root (``xp`` jax.numpy:
    a traced centre and semi-axes, as a differentiable run moves the wall).

    The ellipse of semi-axes (a, b) is the unit circle in coordinates scaled by (1/a, 1/b), where the
    fraction of a link along which the wall lies is the same.
    """
    scale = 1.0 / vector_of(axes, xp)
    unit = ball_intersect(vector_of(center, xp) * scale, 1.0, xp)

    def intersect(points: np.ndarray, links: np.ndarray) -> Any:
        return unit(array_of(points, xp)[:, :2] * scale, array_of(links, xp)[:, :2] * scale)

    return intersect

"""case.outlet: the zero-gradient outflow (as Palabos), or the non-reflecting one (lbm.boundaries.characteristic)."""


class Cylinder(Case):
    """Vortex shedding behind a cylinder, drag and lift by momentum exchange."""

    name = "cylinder"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {2: 72, 3: 72}

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
        """Centre (cx, cy) and radius r in lattice units, validated against the domain.

        For ``case.shape=ellipse`` r is the semi-axis across the flow (b of ``case.axes``): the ellipse's
        Reynolds length and half its frontal height, as the radius is a circle's.
        """
        cx, cy, _, b = self.shape_geometry()
        return cx, cy, b

    def semi_axes(self) -> tuple[float, float]:
        """The obstacle's semi-axes (a along x, b along y) in cells: (r, r) for a circle."""
        return self.shape_geometry()[2:]

    def shape_geometry(self) -> tuple[float, float, float, float]:
        """Centre (cx, cy) and semi-axes (a, b) in lattice units, validated against the domain."""
        nx, ny = self.run.grid[0], self.run.grid[1]
        shape = self.choice("shape", SHAPES)
        if shape == "ellipse":
            key, value = "case.axes", self.params.axes
            if value is None or self.params.radius is not None:
                raise ConfigError("case.axes", value, "[a, b], the semi-axes along x and y in cells, for case.shape="
                                  "ellipse (with case.radius=null)")
            a, b = (float(v) for v in value)
        else:
            key, value = "case.radius", self.params.radius
            if self.params.axes is not None:
                raise ConfigError("case.axes", self.params.axes, "null for case.shape=circle (set case.shape=ellipse)")
            r = ny // 9 if value is None else value
            if not r >= 1:  # the default ny // 9 on a small grid (a given radius is checked by CylinderParams)
                raise ConfigError("case.radius", value, "a number >= 1 (cells), or null for ny//9")
            a = b = float(r)
        a_max, b_max = (nx - 4) / 2, (ny - 3) / 2
        if a > a_max or b > b_max:
            room = f"[1, {min(a_max, b_max):g}]" if shape == "circle" else f"a <= {a_max:g}, b <= {b_max:g}"
            raise ConfigError(key, value if value is not None else a, f"{room} cells for a {nx}x{ny} grid")
        center = self.params.center
        cx, cy = (nx // 4, ny // 2) if center is None else center
        if not (cx - a >= 1 and cx + a <= nx - 3 and cy - b >= 1 and cy + b <= ny - 2):
            size = f"radius {a:g}" if shape == "circle" else f"semi-axes {a:g}, {b:g}"
            raise ConfigError(
                "case.center", [cx, cy],
                f"a centre that keeps the {shape} of {size} inside the domain: "
                f"{a + 1:g} <= cx <= {nx - 3 - a:g} and {b + 1:g} <= cy <= {ny - 2 - b:g}",
                f"or change {key} / the grid",
            )
        return float(cx), float(cy), a, b

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
        cx, cy, a, b = self.shape_geometry()
        coords = coordinates(self.run.grid)
        mask = ((coords[0] - cx) / a) ** 2 + ((coords[1] - cy) / b) ** 2 < 1.0
        if self.params.shape == "ellipse":
            return mask, b, {"axes": [a, b], "center": [cx, cy], "diameter": 2 * b}
        return mask, b, {"radius": b, "center": [cx, cy], "diameter": 2 * b}

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
        u[0] = self.run.flow.u_lattice * (1.0 + amp * np.sin(y / ly * 2 * math.pi))
        inlet_kind, bb = self.options()
        derived = self.base_derived(length, rel)
        derived.update(geometry, reynolds_diameter=rel["reynolds"] * self.diameter / length,
                       shedding_period_estimate_steps=self.diameter / (0.2 * self.run.flow.u_lattice))
        walls = self.walls(obstacle, bb)
        boundaries = (self.outlet(), Inlet(u=u[:, 0].astype(self.dtype), kind=inlet_kind), walls,
                      Forces.on(obstacle, self.lattice))
        return make_setup(self, solid=obstacle, rho0=np.ones(shape), u0=u, rel=rel, boundaries=boundaries,
                          derived=derived)

    def curved_wall(self, obstacle: np.ndarray) -> InterpolatedBounceBack:
        """case.bounce_back=interpolated: linear BFL on the exact circle or ellipse (the obstacle mask's own)."""
        cx, cy, a, b = self.shape_geometry()
        return InterpolatedBounceBack.from_shape(obstacle, ellipse_intersect((cx, cy), (a, b)), self.lattice)

    def differentiable_keys(self) -> tuple[str, ...]:
        """flow.reynolds, flow.u_lattice (the inflow) and the geometry keys of case.shape (:meth:`shape_keys`)."""
        return FLOW_KEYS + self.shape_keys()

    def shape_keys(self) -> tuple[str, ...]:
        """case.radius (a circle) or case.axes.a, case.axes.b (an ellipse), and case.center.x, case.center.y."""
        return SHAPE_KEYS[self.params.shape]

    def differentiable_values(self) -> dict[str, float]:
        """The geometry keys' values: the semi-axes (or the radius) and the centre."""
        cx, cy, a, b = self.shape_geometry()
        size = {"case.axes.a": a, "case.axes.b": b} if self.params.shape == "ellipse" else {"case.radius": b}
        return {**size, "case.center.x": cx, "case.center.y": cy}

    def differentiable_objectives(self) -> tuple[str, ...]:
        """The mean drag and lift coefficients (cd, cl as forces.csv gives them)."""
        return ("drag", "lift")

    def traced(self, setup: Setup, v: Mapping[str, Any], base: Mapping[str, float]) -> Traced:
        """The rates of the traced Re (radius: the semi-axis across the flow), the inflow and initial flow (linear in
        u_lattice), a curved wall moved to the traced ellipse, and the force that gives cd = 1."""
        axes = (v["case.axes.a"], v["case.axes.b"]) if "case.axes.a" in v else (v["case.radius"], v["case.radius"])
        radius = axes[1]  # the Reynolds length and half the frontal height: the semi-axis across the flow
        omegas = traced_rates(self, radius, v)
        ratio = v["flow.u_lattice"] / base["flow.u_lattice"]
        wall = ellipse_intersect((v["case.center.x"], v["case.center.y"]), axes, jnp)
        bcs = tuple(bc.with_velocity_scaled(ratio).moved_to(wall, setup.shape, setup.lattice) for bc in setup.boundaries)
        u0 = jnp.asarray(setup.u0, setup.dtype) * ratio
        f0 = equilibrium(jnp.asarray(np.asarray(setup.rho0, np.float64) - 1.0, setup.dtype), u0, setup.lattice)
        norm = 0.5 * v["flow.u_lattice"] ** 2 * 2 * radius * self.depth
        return Traced(traced_setup(self, setup, omegas), bcs, f0, {"force_norm": norm})

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
        norm = 0.5 * self.run.flow.u_lattice**2 * self.reference_area
        steps = np.arange(1, len(forces) + 1, dtype=np.float64)[:, None]
        return np.hstack([steps, forces, forces[:, :1] / norm, forces[:, 1:2] / norm])

    monitor_label = "force coefficients"

    def monitor_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The drag and lift coefficients against the step (none before the first step)."""
        rows = self.coefficients()
        return {"cd": (rows[:, 0], rows[:, -2]), "cl": (rows[:, 0], rows[:, -1])} if len(rows) else {}

    def summary_keys(self) -> tuple[str, ...]:
        """Mean drag, lift amplitude and Strouhal number over the stationary window."""
        return ("cd_mean", "cl_amplitude", "strouhal")

    def statistics_time_scale(self) -> tuple[int, str]:
        """The shortest batch of a stationary window, in steps, and what it is: the longer of the convective time
        D/U and the acoustic round trip 2 nx / c_s (the start-up's pressure waves cross the channel and back)."""
        u = self.run.flow.u_lattice
        convective, acoustic = self.diameter / u, 2 * self.run.grid[0] / math.sqrt(CS2)
        if convective >= acoustic:
            return int(math.ceil(convective)), "the convective time D/U"
        return int(math.ceil(acoustic)), "the acoustic round trip 2 nx / c_s"

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Drag, lift and Strouhal number over the statistically stationary window, with their standard errors.

        The window (lbm.cases.signals.stationary_window) starts where MSER ends the transient, batches
        being shedding cycles of the lift, each batch at least :meth:`statistics_time_scale` long (so a
        window spans at least four of it); ``case.average_from`` (a fraction of the run) overrides
        the start. Without a stationary window the statistics are None and ``stationary_note`` says why.
        """
        rows = self.coefficients()
        if len(rows) == 0:
            return {}
        cd, cl = rows[:, -2], rows[:, -1]
        # shedding cycles are near D / (St U) steps, St ~ 0.2; a lift oscillation three times faster than that
        # estimate (the start-up's acoustic ringing) is not shedding and cuts no batches
        min_cycle = int(setup.derived.get("shedding_period_estimate_steps", 0) / 3)
        min_batch, scale = self.statistics_time_scale()
        rules = {"min_cycle": min_cycle, "min_batch": min_batch}
        forced = self.average_from
        if forced is None:
            window = stationary_window(cd, reference=cl, **rules)
        else:
            start = int(forced * len(rows))
            window = stationary_window(cd[start:], reference=cl[start:], **rules)
            window = window and Window(window.start + start, window.stop + start, window.edges + start,
                                       window.periodic)
        out: dict[str, Any] = {"cd_mean": None, "cd_mean_error": None, "cl_mean": None, "cl_amplitude": None,
                               "cl_amplitude_error": None, "strouhal": None, "strouhal_error": None,
                               "stationary_window_steps": None, "stationary_cycles": 0,
                               "stationary_batch_min_steps": min_batch, "stationary_batch_min_is": scale}
        if window is None:
            out["stationary_note"] = (
                f"no statistically stationary window in {len(rows)} steps "
                f"({nonstationary_reason(cd, cl, **rules, scale=scale)}; "
                f"{cycles_phrase(cl, 'lift')}): run more steps")
            return out
        out["stationary_window_steps"] = [int(rows[window.start, 0]), int(rows[window.stop - 1, 0])]
        out["cd_mean"], out["cd_mean_error"] = mean_with_error(window.batch_means(cd))
        out["cl_mean"], _ = mean_with_error(window.batch_means(cl))
        out["cd_amplitude"], _ = mean_with_error(window.batch_amplitudes(cd))
        if window.periodic:
            out["stationary_cycles"] = window.batches
            out["cl_amplitude"], out["cl_amplitude_error"] = mean_with_error(window.batch_amplitudes(cl))
            period, period_error = mean_with_error(np.diff(window.edges).astype(np.float64))
            out["strouhal"] = self.diameter / (period * self.run.flow.u_lattice)
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
