"""The DFG benchmark "laminar flow around a cylinder" (Schäfer & Turek 1996), 2D cases 2D-1, 2D-2, 2D-3, and 3D-1Z.

Set-up (reference/schafer_turek_1996_setup.csv): channel 2.2 m x 0.41 m, cylinder D = 0.1 m centred
at (0.2, 0.2) (0.15 above the lower wall, 0.16 below the upper one), nu = 1e-3 m²/s, rho = 1; parabolic
inflow u = 4 U_m y (H - y) / H², U_mean = 2 U_m / 3: 0.2 m/s (2D-1, Re 20), 1.0 (2D-2, Re 100), and
U_m(t) = 1.5 sin(pi t / 8 s) on t in [0, 8] s (2D-3). Re = U_mean D / nu.

Lattice: ``case.cells_per_diameter`` = N cells across D (dx = D / N); ``flow.u_lattice`` is U_mean
in lattice units (the peak U_mean for 2D-3), or, with ``flow.tau`` set, U_mean follows from Re and
tau (diffusive scaling). Grid: nx = 22 N + 1 columns (the inlet nodes at x = 0, the outlet nodes at
x = 2.2), ny = round(4.1 N) + 2 rows (one wall row each side; half-way walls at y = 0 and 0.41, so
fluid row j lies at y = (j - 1/2) dx). Conditions: Zou–He velocity inlet (lbm.boundaries.inlet), the
outlet of ``case.outlet`` (a Zou–He / NEBB pressure outlet at density 1, lbm.boundaries.pressure, or the
characteristic one), half-way bounce-back walls, the wall rule of ``case.wall`` on the exact circle (linear
BFL, lbm.boundaries.interpolated, or the parabolic one), forces by momentum exchange. The defaults
(schafer_turek.yaml) are each variant's validated settings: TRT, tau 0.53, and ``case.validated``'s N,
outlet and wall; :meth:`SchaferTurek.log_expectation` logs what lbm measured with them at the run's N.
2D-1 and 2D-2 start from the developed Poiseuille flow (velocity and pressure) around the cylinder;
2D-3 starts at rest, as the inflow does.

Metrics, with the published normalisation (rho = 1): cd = 2 F_x / (U_mean² D), cl = 2 F_y / (U_mean² D),
Δp = p(0.15, 0.2) - p(0.25, 0.2) (p = c_s² rho, scaled by (U_mean / u_lattice)²; the points on the
cylinder surface are extrapolated from the fluid nodes on the line y = 0.2), St = D f / U_mean (f from the
lift), La = x_r - 0.25 (x_r: where u_x on y = 0.2 turns positive behind the cylinder).
2D-1: ``cd``, ``cl``, ``dp``, ``la``; 2D-2: ``cd_max``, ``cl_max``, ``strouhal``; 2D-3: ``cd_max``, ``cl_max``, ``dp_t8``.

3D-1Z (steady, Re 20, 3D lattices): :class:`SchaferTurek3D` at the end of this module (its own doc).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any, ClassVar

import numpy as np

from lbm.boundaries import (
    CharacteristicOutlet,
    Forces,
    HalfwayBounceBack,
    Inlet,
    InterpolatedBounceBack,
    ParabolicBounceBack,
    PressureOutlet,
)
from lbm.boundaries.inlet import INLET_KINDS
from lbm.boundaries.pressure import PRESSURE_KINDS
from lbm.cases.base import Convergence, Published, Setup, distance_to_interval, make_setup, without_differentiable_form
from lbm.cases.cylinder import Cylinder
from lbm.cases.signals import dominant_frequency
from lbm.config import RunConfig
from lbm.config.schema import option_file
from lbm.errors import ConfigError, LbmError
from lbm.kernels.collisions import COLLISION_KINDS
from lbm.lattice import CS2, Lattice
from lbm.reference import dfg_intervals

log = logging.getLogger("lbm")

LENGTH, HEIGHT, DIAMETER, CENTER, NU = 2.2, 0.41, 0.1, (0.2, 0.2), 1e-3
"""Channel length and height, cylinder diameter and centre (m), kinematic viscosity (m²/s)."""
VARIANTS = {"2D-1": 0.2, "2D-2": 1.0, "2D-3": 1.0, "3D-1Z": 0.2}
"""Variant -> U_mean (m/s) of the normalisation (2D-3: its peak)."""
END_TIME_S = 8.0
"""2D-3 runs t in [0, 8] s; its inflow peaks at 4 s."""
OUTLET_KINDS = (*PRESSURE_KINDS, "characteristic")
"""case.outlet: a Zou–He / NEBB pressure outlet at density 1, or the non-reflecting one (lbm.boundaries.characteristic)."""
AUTO_TIME_S = {"2D-1": 30.0, "2D-2": 7.5, "2D-3": END_TIME_S, "3D-1Z": 30.0}
"""steps=auto: physical time simulated (2D-1 and 3D-1Z stop earlier once steady, see ``converged``; 2D-2's lift is
saturated after 7.5 s: docs/dfg.md, "2D-2 resolution")."""
STEADY = ("2D-1", "3D-1Z")
"""The steady variants: run until the drag settles, reported as cd, cl, dp, la."""
WALL_KINDS = ("bfl", "parabolic")
"""case.wall, the cylinder's wall rule: linear BFL (lbm.boundaries.interpolated) or the parabolic-exact CLI
(lbm.boundaries.parabolic: exact for steady parabolic flow at any TRT Lambda; steady variants only)."""




@functools.cache
def validated_settings() -> tuple[str, float, float | None, str]:
    """The collision, relaxation time, magic parameter (None where the kind has none) and inlet of every variant's
    validated settings: the defaults that schafer_turek.yaml (its collision, flow.tau, case.inlet) and the
    collision's schema (magic) set."""
    own = option_file("case", "schafer_turek")
    collision = next(d[COLLISION_DEFAULT] for d in own["defaults"] if isinstance(d, dict) and COLLISION_DEFAULT in d)
    magic = getattr(COLLISION_KINDS[collision].Rates(), "magic", None)
    return collision, own["flow"]["tau"], magic, own["case"]["inlet"]


COLLISION_DEFAULT = "override /collision"
"""The entry of a case's YAML defaults list that sets its collision."""


MEASURED = {
    ("2D-1", 30, "float32"): {"cd": 5.5833, "cl": 0.01086, "dp": 0.11725},
    ("2D-1", 30, "float64"): {"cd": 5.5857, "cl": 0.01049, "dp": 0.11726},
    ("2D-1", 40, "float64"): {"cd": 5.5822, "cl": 0.01056, "dp": 0.11734},
    ("2D-2", 70, "float32"): {"cd_max": 3.2349, "cl_max": 0.9895, "strouhal": 0.3018},
    ("3D-1Z", 10, "float32"): {"cd": 6.2300, "cl": 0.009551, "dp": 0.16460},
}
"""(variant, N, precision) -> what lbm measured with the variant's validated settings, in the storage of today's
engines (deviations f - w; docs/physics.md). Float32 values measured before that storage (2026-12-04) are left out:
its rounding moved 2D-1's cl at N = 30 from 0.01026 to 0.01086 (python -m lbm run case=schafer_turek, steady after
91400 steps), so a log that showed them expected numbers the run could not give. 2D-1 N = 30 float32: that run;
float64 (rounding far below the digits shown): docs/dfg.md, "the wall location under TRT", the parabolic wall;
2D-2 N = 70: docs/dfg.md, "For python -m lbm validate" (7.5 s of flow); 3D-1Z N = 10: python -m lbm run
case=schafer_turek case.variant=3D-1Z lattice=d3q19 grid.nz=4 (steady after 10100 steps; 6.230, 0.00957, 0.16495
after 11000 steps in docs/validation_3d.md, before the f - w storage)."""


def line_value(values: np.ndarray, x: float, side: int) -> float:
    """``values`` (a row along x) extrapolated quadratically to ``x`` from the 3 nodes before (side -1) or after (+1) it."""
    start = math.floor(x) if side < 0 else math.ceil(x)
    nodes = np.array([start + side * k for k in range(3)])
    return float(np.polyval(np.polyfit(nodes - x, values[nodes], 2), 0.0))


def reynolds_and_velocity(run: RunConfig, variant: str, n: int, peak: float) -> tuple[float, float]:
    """The variant's Reynolds number and U_mean in lattice units (from flow.tau when given); ConfigError if the inflow
    peak (``peak`` U_mean) reaches Mach 0.5."""
    reynolds = round(VARIANTS[variant] * DIAMETER / NU, 9)
    tau, given = run.flow.tau, run.flow.u_lattice
    if tau is None:
        if given is None:
            raise ConfigError("flow.u_lattice", None, "a number > 0 (U_mean in lattice units) with flow.tau=null")
        u = given
    else:
        u = reynolds * CS2 * (tau - 0.5) / n
        if given is not None and not math.isclose(given, u, rel_tol=1e-9):
            raise LbmError(f"flow.u_lattice={given:g} and flow.tau={tau:g} over-determine the flow: at Re {reynolds:g} "
                           f"and case.cells_per_diameter={n} this tau gives U_mean {u:.6g}; add flow.tau=null to set "
                           "U_mean with flow.u_lattice, or leave flow.u_lattice out to keep tau")
    if not u * peak / math.sqrt(CS2) < 0.5:
        raise ConfigError("flow.tau", run.flow.tau, f"a relaxation time giving an inflow Mach number < 0.5 at Re {reynolds:g}")
    return reynolds, u


def resolve(run: RunConfig) -> RunConfig:
    """``run`` with the grid of case.cells_per_diameter, the variant's Reynolds number and U_mean (checks them)."""
    params = run.case_params
    variant = params.variant
    if variant not in VARIANTS:
        raise ConfigError("case.variant", variant, f"one of {', '.join(VARIANTS)}")
    if run.dim != 2:
        raise ConfigError("lattice", run.lattice, "d2q9 (the 2D variants; case.variant=3D-1Z runs on d3q19)")
    n = params.cells_per_diameter
    if isinstance(n, bool) or not isinstance(n, int) or not 4 <= n <= 400:
        raise ConfigError("case.cells_per_diameter", n, "an integer in [4, 400] (cells across the cylinder)")
    reynolds, u = reynolds_and_velocity(run, variant, n, peak=1.5)
    grid = (22 * n + 1, round(HEIGHT / DIAMETER * n) + 2)
    return dataclasses.replace(run, grid=grid, flow=dataclasses.replace(run.flow, reynolds=reynolds, u_lattice=u))


@without_differentiable_form  # the cylinder's moves its circle; the DFG channel's has no such form
class SchaferTurek(Cylinder):
    """The DFG cylinder benchmark in 2D: drag, lift, pressure difference, recirculation length, Strouhal number."""

    name = "schafer_turek"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {2: 72, 3: 96}
    dims = (2,)

    def __new__(cls, run: RunConfig) -> SchaferTurek:
        """The 3D variant is its own class (:class:`SchaferTurek3D`)."""
        if cls is SchaferTurek and run.case_params.variant in VARIANTS_3D:
            cls = SchaferTurek3D
        return super().__new__(cls)

    def __init__(self, run: RunConfig) -> None:
        super().__init__(run)
        self.variant = self.run.case_params.variant
        self.cells = int(self.run.case_params.cells_per_diameter)

    resolver = staticmethod(resolve)
    """The function deriving the variant's grid, Reynolds number and U_mean from a run configuration."""

    @property
    def run(self) -> RunConfig:
        """The run configuration, with the grid, Reynolds number and U_mean this case derives (see the module doc)."""
        return self._run

    @run.setter
    def run(self, run: RunConfig) -> None:
        # a setter, so that a run replaced later (steps=auto) keeps the derived grid
        self._run = self.resolver(run)

    @property
    def dx(self) -> float:
        """Cell size (m)."""
        return DIAMETER / self.cells

    @property
    def dt(self) -> float:
        """Time step (s): dx u_lattice / U_mean."""
        return self.dx * self.run.flow.u_lattice / VARIANTS[self.variant]

    @property
    def diameter(self) -> float:
        """Cylinder diameter in cells."""
        return float(self.cells)

    def geometry(self) -> tuple[float, float, float]:
        """Centre (node coordinates) and radius of the cylinder, in cells."""
        return CENTER[0] / self.dx, CENTER[1] / self.dx + 0.5, self.cells / 2

    def options(self) -> tuple[str, str]:
        """Inlet and outlet kinds (and checks case.wall)."""
        if self.choice("wall", WALL_KINDS) == "parabolic" and self.variant not in STEADY:
            raise ConfigError("case.wall", "parabolic", f"bfl for {self.variant} (the parabolic wall's correction is "
                              "derived for steady flow; docs/dfg.md measures it wrong in 2D-2)")
        inlet_kind = self.choice("inlet", INLET_KINDS)
        outlet_kind = self.choice("outlet", OUTLET_KINDS)
        if outlet_kind == "characteristic" and self.variant == "2D-3":
            raise ConfigError("case.outlet", outlet_kind, "zou_he or nebb for 2D-3 (the characteristic outlet needs the "
                              "channel's steady pressure gradient; 2D-3's inflow changes in time)")
        if outlet_kind == "characteristic" and self.variant == "3D-1Z":
            raise ConfigError("case.outlet", outlet_kind, "zou_he or nebb for 3D-1Z (the characteristic outlet is "
                              "written for the 2D channel's pressure gradient)")
        return inlet_kind, outlet_kind

    def auto_steps(self) -> int:
        """The physical time of AUTO_TIME_S in steps (2D-3: exactly t = 8 s)."""
        return int(round(AUTO_TIME_S[self.variant] / self.dt))

    @property
    def acoustic_period(self) -> int:
        """Steps of the channel's slowest acoustic mode: a quarter wave between the inlet and the outlet, 4 L / c_s."""
        return int(round(4 * (self.run.grid[0] - 1) / math.sqrt(CS2)))

    def drag_change(self) -> float | None:
        """The relative change of the mean drag over the last acoustic period against the period before (None: the
        run holds fewer than two periods).

        Means over whole periods of the acoustic mode reflected between inlet and outlet, which
        the drag carries long after the flow is steady.
        """
        cd = self.coefficients()[:, -2]
        span = self.acoustic_period
        if len(cd) < 2 * span:
            return None
        last, before = cd[-span:].mean(), cd[-2 * span:-span].mean()
        return float(abs(last - before) / abs(last))

    def converged(self, step: int) -> bool:
        """Steady variants, after 10 s: the drag's :meth:`drag_change` is below case.steady_tolerance."""
        if self.variant not in STEADY or step * self.dt < 10.0:
            return False
        change = self.drag_change()
        return change is not None and change < float(self.params.steady_tolerance)

    def convergence(self, setup: Setup, steps: int) -> Convergence | None:
        """Steady variants (2D-1, 3D-1Z): steady when :meth:`drag_change` is below case.steady_tolerance; None for the
        unsteady ones (2D-2, 2D-3)."""
        if self.variant not in STEADY:
            return None
        hint = (f"run more steps (two acoustic periods of {self.acoustic_period} steps at least), or steps=auto"
                if not self.run.steps_auto else "steps=auto reached its cap: run longer with steps=N or loosen "
                "case.steady_tolerance")
        change = self.drag_change()
        tolerance = float(self.params.steady_tolerance)
        return Convergence(change is not None and change < tolerance, "drag_change_over_acoustic_period", change,
                           tolerance, hint)

    def published(self) -> Published | None:
        """The variant's published intervals (Schäfer & Turek 1996; none for 2D-3)."""
        intervals = dfg_intervals().get(self.variant)
        return None if intervals is None else Published(intervals, "Schäfer & Turek 1996")

    def profile(self, u_max: float) -> np.ndarray:
        """The parabola 4 U_m y (H - y) / H² on the rows (0 on the wall rows)."""
        ny = self.run.grid[1]
        height = ny - 2
        y = np.arange(ny) - 0.5
        return np.where((y > 0) & (y < height), 4 * u_max * y * (height - y) / height**2, 0.0)

    def setup(self) -> Setup:
        """Walls, cylinder, inflow and outlet; the developed Poiseuille flow (2D-1, 2D-2) or rest (2D-3)."""
        shape = self.run.grid
        nx, ny = shape
        rel = self.relaxation(float(self.cells))
        inlet_kind, outlet_kind = self.options()
        u_max = 1.5 * self.run.flow.u_lattice
        cx, cy, r = self.geometry()
        cylinder = self.wall(InterpolatedBounceBack.circle((cx, cy), r, shape, self.lattice), rel)
        walls = np.zeros(shape, bool)
        walls[:, 0] = walls[:, -1] = True
        inflow = np.zeros((2, ny))
        inflow[0] = self.profile(u_max)
        u0 = np.zeros((2,) + shape)
        rho0 = np.ones(shape)
        if self.variant == "2D-3":
            inlet = Inlet(u=inflow.astype(self.dtype), kind=inlet_kind, profile="sine",
                          ramp_steps=0.5 * END_TIME_S / self.dt)
        else:
            inlet = Inlet(u=inflow.astype(self.dtype), kind=inlet_kind)
            u0[0] = inflow[0][None, :]
            gradient = 8 * rel["nu"] * u_max / (ny - 2) ** 2  # -dp/dx of the Poiseuille flow
            rho0 = rho0 + (gradient * (nx - 1 - np.arange(nx)) / CS2)[:, None]
        solid = walls | np.asarray(cylinder.solid)
        u0[:, solid] = 0.0
        derived = self.base_derived(float(self.cells), rel)
        derived.update(variant=self.variant, cells_per_diameter=self.cells, dx_m=self.dx, dt_s=self.dt,
                       u_max_lattice=u_max, center=[cx, cy], radius=r, end_time_s=self.run.steps * self.dt,
                       wall=self.params.wall)
        if outlet_kind == "characteristic":  # the developed channel's density gradient (2D-3: of the peak inflow)
            outlet = CharacteristicOutlet.for_length(nx - 1, gradient=8 * rel["nu"] * u_max / (ny - 2) ** 2 / CS2)
        else:
            outlet = PressureOutlet(rho=1.0, kind=outlet_kind)
        boundaries = (outlet, inlet, HalfwayBounceBack.around(walls, self.lattice),
                      cylinder, Forces.on(np.asarray(cylinder.solid), self.lattice))
        self.log_expectation()
        return make_setup(self, solid=solid, rho0=rho0, u0=u0, rel=rel, boundaries=boundaries, derived=derived)

    def differences_from_validated(self) -> list[str]:
        """The settings of this run that differ from the variant's validated ones (the defaults), as ``key=value``."""
        run, params = self.run, self.params
        validated = dict(params.validated.get(self.variant, {}))
        collision, tau, magic, inlet = validated_settings()
        out = [f"collision={run.collision}"] if run.collision != collision else []
        if run.collision == collision and magic is not None and run.collision_params.magic != magic:
            out.append(f"collision.magic={run.collision_params.magic:g}")
        if run.flow.tau != tau:
            out.append(f"flow.tau={run.flow.tau}" if run.flow.tau is not None else f"flow.u_lattice={run.flow.u_lattice:g}")
        out += [f"case.{k}={params[k]}" for k in ("outlet", "wall") if k in validated and params[k] != validated[k]]
        if params.inlet != inlet:
            out.append(f"case.inlet={params.inlet}")
        if not run.steps_auto:
            out.append(f"steps={run.steps}")
        return out

    def log_expectation(self) -> None:
        """One log line: how far from the published intervals lbm measured this variant at this resolution."""
        published = dfg_intervals().get(self.variant)
        head = f"DFG {self.variant}, N = {self.cells}"
        if published is None:
            log.info("%s: lbm ships no published intervals for this variant, nothing to compare with", head)
            return
        differ = self.differences_from_validated()
        if differ:
            log.info("%s: the settings differ from the validated ones (%s): lbm has no measurement of its own to "
                     "expect (docs/dfg.md); the result is held against the published intervals at the end", head,
                     " ".join(differ))
            return
        measured = MEASURED.get((self.variant, self.cells, self.run.precision))
        if measured is None:
            known = sorted(n for v, n, p in MEASURED if v == self.variant and p == self.run.precision)
            where = (f"measured at N = {', '.join(map(str, known))}: docs/dfg.md" if known else
                     "none measured since the engines store f - w, whose float32 rounding moved the older figures")
            log.info("%s, %s: not measured at this resolution with the validated settings (%s); the result is held "
                     "against the published intervals at the end", head, self.run.precision, where)
            return
        parts = [f"{q} {measured[q]:.5g} ({distance_to_interval(measured[q], published[q])} [{lo:g}, {hi:g}])"
                 for q, (lo, hi) in published.items()]
        double = MEASURED.get((self.variant, self.cells, "float64")) if self.run.precision == "float32" else None
        hint = "" if double is None else "; precision=float64 measured " + ", ".join(
            f"{q} {double[q]:.5g} ({distance_to_interval(double[q], published[q])})" for q in published)
        log.info("%s, %s, validated settings: expect %s (measured, docs/dfg.md)%s", head, self.run.precision,
                 ", ".join(parts), hint)

    def wall(self, bfl: InterpolatedBounceBack, rel: dict[str, Any]) -> InterpolatedBounceBack:
        """The cylinder's wall rule of case.wall on the links of ``bfl`` (linear BFL: ``bfl`` itself)."""
        if self.choice("wall", WALL_KINDS) == "parabolic":
            return ParabolicBounceBack.like(bfl, rel["omega_minus"])
        return bfl

    def pressure_difference(self, rho: np.ndarray) -> float:
        """Δp = p(0.15, 0.2) - p(0.25, 0.2) in physical units (rho = 1)."""
        cx, cy, r = self.geometry()
        row = 0.5 * (rho[:, int(math.floor(cy))] + rho[:, int(math.ceil(cy))])
        drho = line_value(row, cx - r, -1) - line_value(row, cx + r, +1)
        return CS2 * drho * (VARIANTS[self.variant] / self.run.flow.u_lattice) ** 2

    def recirculation_length(self, ux: np.ndarray) -> float:
        """La = x_r - 0.25 (m): where u_x on y = 0.2 turns positive behind the cylinder (0 without a wake)."""
        cx, cy, r = self.geometry()
        row = 0.5 * (ux[:, int(math.floor(cy))] + ux[:, int(math.ceil(cy))])
        rear = cx + r
        i = int(math.ceil(rear))
        if i - rear < 0.5 and i + 1 < len(row) and row[i] >= 0 > row[i + 1]:
            i += 1  # a node less than half a cell behind the wall: its u_x is ~0, of either sign
        if i < len(row) and row[i] >= 0:
            return 0.0
        while i + 1 < len(row) and row[i + 1] < 0:
            i += 1
        x_r = i + row[i] / (row[i] - row[i + 1])  # linear zero crossing between i and i + 1
        return float((x_r - rear) * self.dx)

    def summary_keys(self) -> tuple[str, ...]:
        """The variant's published quantities (cd_mean beside them where the variant has a mean drag)."""
        if self.variant in STEADY:
            return ("cd_mean", "cd", "cl", "dp", "la")
        if self.variant == "2D-2":
            return ("cd_mean", "cl_amplitude", "strouhal", "cd_max", "cl_max")
        return ("cd_max", "cl_max", "dp_t8")

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """The variant's published quantities (see the module doc), plus where they were taken."""
        rows = self.coefficients()
        if len(rows) == 0:
            return {}
        cd, cl = rows[:, -2], rows[:, -1]
        out: dict[str, Any] = {"variant": self.variant, "cells_per_diameter": self.cells,
                               "time_s": len(rows) * self.dt, "dt_s": self.dt}
        if self.variant in STEADY:
            start = max(0, len(rows) - 2 * self.acoustic_period)  # two periods of the acoustic mode
            out.update(cd=float(cd[start:].mean()), cl=float(cl[start:].mean()),
                       dp=self.pressure_difference(fields["rho"]), la=self.recirculation_length(fields["u"][0]),
                       cd_spread_in_window=float(cd[start:].max() - cd[start:].min()))
            out.update(cd_mean=out["cd"], average_window_steps=[start + 1, len(rows)])
        elif self.variant == "2D-2":
            start = len(rows) // 2  # the second half: the periodic regime
            freq, periods = dominant_frequency(cl[start:])
            half = start + (len(rows) - start) // 2
            out.update(cd_max=float(cd[start:].max()), cl_max=float(cl[start:].max()),
                       strouhal=freq * self.diameter / self.run.flow.u_lattice if periods >= 2 else None,
                       periods_in_window=periods, cl_max_first_half_of_window=float(cl[start:half].max()),
                       cd_mean=float(cd[start:].mean()), cl_amplitude=float(0.5 * (cl[start:].max() - cl[start:].min())),
                       average_window_steps=[start + 1, len(rows)])
        else:
            out.update(cd_max=float(cd.max()), cl_max=float(cl.max()), dp_t8=self.pressure_difference(fields["rho"]),
                       t_cd_max_s=float((np.argmax(cd) + 1) * self.dt), t_cl_max_s=float((np.argmax(cl) + 1) * self.dt))
            if abs(len(rows) * self.dt - END_TIME_S) > self.dt:
                out["dp_t8_note"] = f"the run ended at t = {len(rows) * self.dt:.3f} s, not 8 s (use steps=auto)"
        return out


# --- 3D-1Z ---------------------------------------------------------------------------------------

LENGTH_3D, CENTER_3D = 2.5, (0.5, 0.2)
"""3D channel length (m; the cross-section is HEIGHT x HEIGHT) and the cylinder axis (x, y) (m)."""
VARIANTS_3D = ("3D-1Z",)
"""The variants run by :class:`SchaferTurek3D`."""


def resolve_3d(run: RunConfig) -> RunConfig:
    """``run`` with the 3D-1Z grid of case.cells_per_diameter, Reynolds number 20 and U_mean (checks them)."""
    params = run.case_params
    variant = params.variant
    if run.dim != 3:
        raise ConfigError("lattice", run.lattice, f"d3q19 or d3q27 for case.variant={variant} (the 2D variants run on d2q9)")
    n = params.cells_per_diameter
    if isinstance(n, bool) or not isinstance(n, int) or not 4 <= n <= 100:
        raise ConfigError("case.cells_per_diameter", n, "an integer in [4, 100] (cells across the cylinder)")
    reynolds, u = reynolds_and_velocity(run, variant, n, peak=2.25)
    side = round(HEIGHT / DIAMETER * n) + 2
    return dataclasses.replace(run, grid=(round(LENGTH_3D / DIAMETER) * n + 1, side, side),
                               flow=dataclasses.replace(run.flow, reynolds=reynolds, u_lattice=u))


def links_from(wall: InterpolatedBounceBack, fluid: np.ndarray, lattice: Lattice) -> InterpolatedBounceBack:
    """``wall`` keeping only its links that start in ``fluid``; a q < 1/2 link whose second cell is not fluid goes half-way."""
    from lbm.boundaries.interpolated import bfl_weights

    flat = fluid.reshape(-1)
    keep = flat[np.asarray(wall.link_fluid)]
    link_dir, link_fluid, q = np.asarray(wall.link_dir)[keep], np.asarray(wall.link_fluid)[keep], np.asarray(wall.q)[keep]
    points = np.stack(np.unravel_index(link_fluid, fluid.shape), axis=1)
    far = np.ravel_multi_index(tuple(np.mod(points - lattice.c[link_dir], fluid.shape).T), fluid.shape)
    far_ok = flat[far]
    return InterpolatedBounceBack(solid=wall.solid, link_dir=link_dir, link_solid=np.asarray(wall.link_solid)[keep],
                                  link_fluid=link_fluid, link_far=np.where(far_ok, far, link_fluid).astype(np.int32),
                                  weights=bfl_weights(q, far_ok), q=q)


class SchaferTurek3D(SchaferTurek):
    """DFG 3D-1Z (Schäfer & Turek 1996): steady flow (Re 20) around a circular cylinder spanning a square duct.

    Set-up (reference/schafer_turek_1996_setup.csv, 3D rows): channel 2.5 m x 0.41 m x 0.41 m, the
    cylinder D = 0.1 m with its axis along z through (x, y) = (0.5, 0.2), inflow
    u = 16 U_m y z (H - y)(H - z) / H⁴ with U_m = 0.45 m/s (U_mean = 4 U_m / 9 = 0.2 m/s), nu = 1e-3.
    Lattice: N = ``case.cells_per_diameter`` (default 10), grid (25 N + 1) x (round(4.1 N) + 2)²; walls
    half-way on y and z, the cylinder by linear BFL on the exact circle (its cells in the wall planes
    z = 0, nz - 1 stay walls), the same inlet and outlet conditions as 2D. It starts from the inflow
    profile everywhere with the pressure gradient of the duct flow of the same axis speed.
    Metrics as 2D-1 (``cd``, ``cl``, ``dp``, ``la``) with the 3D normalisation c = 2 F / (rho U_mean² D H);
    Δp = p(0.45, 0.2, 0.205) - p(0.55, 0.2, 0.205) and La on the line (y, z) = (0.2, 0.205).
    """

    dims = (3,)
    resolver = staticmethod(resolve_3d)

    @property
    def depth(self) -> float:
        """The cylinder's span H in cells (between the half-way walls at z = 0 and 0.41)."""
        return float(self.run.grid[2] - 2)

    def geometry(self) -> tuple[float, float, float]:
        """Axis (x, y node coordinates) and radius of the cylinder, in cells."""
        return CENTER_3D[0] / self.dx, CENTER_3D[1] / self.dx + 0.5, self.cells / 2

    def inflow(self, u_max: float) -> np.ndarray:
        """u_x on the inlet face (ny, nz): 16 U_m y z (H - y)(H - z) / H⁴, 0 on the wall cells."""
        ny, nz = self.run.grid[1:]
        height = ny - 2
        y = np.arange(ny) - 0.5
        z = np.arange(nz) - 0.5
        fy = np.where((y > 0) & (y < height), y * (height - y), 0.0)
        fz = np.where((z > 0) & (z < height), z * (height - z), 0.0)
        return 16 * u_max * np.outer(fy, fz) / height**4

    def setup(self) -> Setup:
        """Duct walls, cylinder, inflow and outlet; the inflow profile everywhere with the duct's pressure gradient."""
        from lbm.boundaries.interpolated import circle_intersect
        from lbm.cases.duct import duct_series
        from lbm.kernels.forces import boundary_links

        shape = self.run.grid
        nx, ny, nz = shape
        rel = self.relaxation(float(self.cells))
        inlet_kind, outlet_kind = self.options()
        u_max = 2.25 * self.run.flow.u_lattice
        cx, cy, r = self.geometry()
        walls = np.zeros(shape, bool)
        walls[:, 0] = walls[:, -1] = True
        walls[:, :, 0] = walls[:, :, -1] = True
        x, y = np.meshgrid(np.arange(nx, dtype=np.float64), np.arange(ny, dtype=np.float64), indexing="ij")
        disc = np.broadcast_to(((x - cx) ** 2 + (y - cy) ** 2 < r**2)[:, :, None], shape) & ~walls
        fluid = ~(walls | disc)
        circle = circle_intersect((cx, cy), r)

        def intersect(points: np.ndarray, links: np.ndarray) -> np.ndarray:
            # links from wall cells into the cylinder may not cut the circle: links_from drops them
            return np.where(fluid[tuple(points.astype(np.int64).T)], circle(points, links), 0.5)

        cylinder = self.wall(links_from(InterpolatedBounceBack.from_shape(disc, intersect, self.lattice), fluid,
                                        self.lattice), rel)
        inflow = np.zeros((3, ny, nz))
        inflow[0] = self.inflow(u_max)
        height = float(ny - 2)
        axis = float(duct_series(np.array(height / 2), np.array(height / 2), height, height, 1.0, 1.0))
        gradient = rel["nu"] * u_max / axis  # -dp/dx of the duct flow with the inflow's axis speed
        u0 = np.broadcast_to(inflow[:, None], (3,) + shape).copy()
        rho0 = np.broadcast_to((1.0 + gradient * (nx - 1 - np.arange(nx)) / CS2)[:, None, None], shape).copy()
        solid = walls | disc
        u0[:, solid] = 0.0
        derived = self.base_derived(float(self.cells), rel)
        derived.update(variant=self.variant, cells_per_diameter=self.cells, dx_m=self.dx, dt_s=self.dt,
                       u_max_lattice=u_max, center=[cx, cy], radius=r, span_cells=self.depth,
                       end_time_s=self.run.steps * self.dt, wall=self.params.wall)
        boundaries = (PressureOutlet(rho=1.0, kind=outlet_kind),
                      Inlet(u=inflow.astype(self.dtype), kind=inlet_kind),
                      HalfwayBounceBack.around(walls, self.lattice), cylinder,
                      Forces(*boundary_links(disc, fluid, self.lattice)))
        self.log_expectation()
        return make_setup(self, solid=solid, rho0=rho0, u0=u0, rel=rel, boundaries=boundaries, derived=derived)

    def mid_plane(self, values: np.ndarray) -> np.ndarray:
        """``values`` (…, nx, ny, nz) on the plane z = 0.205 m (the mean of the two middle planes if nz is even)."""
        nz = values.shape[-1]
        return 0.5 * (values[..., (nz - 1) // 2] + values[..., nz // 2])

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """cd, cl (3D normalisation), Δp and La on the mid-plane, as 2D-1 reports them."""
        plane = {"rho": self.mid_plane(fields["rho"]), "u": self.mid_plane(fields["u"][:2])}
        out = super().metrics(setup, plane, steps)
        if out:
            out["span_cells"] = self.depth
        return out
