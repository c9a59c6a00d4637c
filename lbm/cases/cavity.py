"""Lid-driven cavity: walls on every side (half-way bounce-back), the lid at y = ny-1 moving in +x.

The grid includes one layer of wall cells on each side, so the cavity holds
L = nx - 2 fluid cells across; walls sit half-way between the last fluid and the
first wall cell. Reynolds number = U L / nu with U = flow.u_lattice (lid speed).
Centre-line profiles u(y) at x = 1/2 and v(x) at y = 1/2 (in 3D on the mid-plane z = 1/2) go to
``profiles.csv`` and are compared with a published reference where one exists: in 2D with Ghia et
al. (1982) at the Reynolds numbers they tabulate, in a 3D cube at Re 1000 with Albensoeder &
Kuhlmann (2005), Tables 5 and 6 (``reference/albensoeder_kuhlmann2005_cube_re1000_centrelines.csv``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from lbm.boundaries import MovingWall
from lbm.cases.base import Case, Convergence, Setup, Snapshot, make_setup
from lbm.cases.traced import FLOW_KEYS, Traced, traced_rates, traced_setup
from lbm.config import RunConfig
from lbm.config.defaults import picked_record
from lbm.errors import ConfigError
from lbm.reference import read_reference_csv

GHIA_REYNOLDS = (100, 400, 1000, 3200, 5000, 7500, 10000)


def ghia_reference(reynolds: float) -> dict[str, np.ndarray] | None:
    """Ghia et al. (1982) centre-line data at ``reynolds``, misprinted points removed; None if not tabulated."""
    re_int = int(round(reynolds))
    if re_int not in GHIA_REYNOLDS or abs(reynolds - re_int) > 1e-6 * re_int:
        return None
    excluded = {
        (r["table"], int(r["Re"]), float(r["coordinate"]))
        for r in read_reference_csv("ghia1982_suspect_points.csv") if r["action"] == "exclude"
    }
    u_rows = [r for r in read_reference_csv("ghia1982_table1_u_vertical_centreline.csv")
              if ("I_u", re_int, float(r["y"])) not in excluded]
    v_rows = [r for r in read_reference_csv("ghia1982_table2_v_horizontal_centreline.csv")
              if ("II_v", re_int, float(r["x"])) not in excluded]
    return {
        "y": np.array([float(r["y_exact"]) for r in u_rows]),
        "u": np.array([float(r[f"u_Re{re_int}"]) for r in u_rows]),
        "x": np.array([float(r["x_exact"]) for r in v_rows]),
        "v": np.array([float(r[f"v_Re{re_int}"]) for r in v_rows]),
    }


AK_REYNOLDS = 1000
"""The Reynolds number of Albensoeder & Kuhlmann's (2005) tabulated centre lines of the cube."""
AK_FILE = "albensoeder_kuhlmann2005_cube_re1000_centrelines.csv"


def albensoeder_reference(reynolds: float) -> dict[str, np.ndarray] | None:
    """Albensoeder & Kuhlmann (2005) centre lines of the cube, lbm orientation (lid at y = 1 along +x); None if not Re 1000."""
    if abs(reynolds - AK_REYNOLDS) > 1e-6 * AK_REYNOLDS:
        return None
    rows = read_reference_csv(AK_FILE)
    u_rows = [r for r in rows if r["profile"] == "T5_u_at_x=0.5"]
    v_rows = [r for r in rows if r["profile"] == "T6_v_at_y=0.5"]
    return {
        "y": np.array([float(r["position"]) for r in u_rows]),
        "u": np.array([float(r["velocity_over_lid"]) for r in u_rows]),
        "x": np.array([float(r["position"]) for r in v_rows]),
        "v": np.array([float(r["velocity_over_lid"]) for r in v_rows]),
    }


def centreline(values: np.ndarray, axis_len: int) -> np.ndarray:
    """Values on the mid-line of a cavity with walls at cell 0 and axis_len-1 (mean of the two middle columns if even)."""
    n = axis_len - 2  # fluid cells
    mid = 1 + (n - 1) / 2
    lo, hi = int(np.floor(mid)), int(np.ceil(mid))
    return 0.5 * (values[lo] + values[hi])


class Cavity(Case):
    """Lid-driven square (or rectangular) cavity."""

    name = "cavity"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {2: 272, 3: 552}

    def __init__(self, run: RunConfig) -> None:
        super().__init__(run)
        self.previous: tuple[int, np.ndarray] | None = None
        """(step, velocity) of the sample before the latest one."""
        self.latest: tuple[int, np.ndarray] | None = None
        """(step, velocity) of the latest sample."""

    def check(self) -> None:
        """At least 3 fluid cells along every axis."""
        check_geometry(self.run.grid)

    def auto_steps(self) -> int:
        """At most 100 lid passages L/U; with steps=auto the run stops earlier once steady (see converged)."""
        return int(math.ceil(100 * (self.run.grid[0] - 2) / self.run.flow.u_lattice))

    def steady_change(self) -> float | None:
        """Largest velocity change between the last two samples, over U, per 1000 steps."""
        if self.previous is None or self.latest is None:
            return None
        (s0, u0), (s1, u1) = self.previous, self.latest
        return float(np.abs(u1 - u0).max() / self.run.flow.u_lattice * 1000 / (s1 - s0))

    @property
    def steady_tolerance(self) -> float:
        """case.steady_tolerance: the largest velocity change over U per 1000 steps of a steady flow."""
        return float(self.params.steady_tolerance)

    def converged(self, step: int) -> bool:
        """Steady: after 10 lid passages, the velocity changes less than case.steady_tolerance per 1000 steps."""
        change = self.steady_change()
        return (change is not None and step >= 10 * (self.run.grid[0] - 2) / self.run.flow.u_lattice
                and change < self.steady_tolerance)

    def convergence(self, setup: Setup, steps: int) -> Convergence:
        """Steady when the last two samples differ by less than case.steady_tolerance (over U, per 1000 steps)."""
        change = self.steady_change()
        hint = ("steps=auto reached its cap of 100 lid passages: run longer with steps=N or loosen "
                "case.steady_tolerance" if self.run.steps_auto else "run more steps, or steps=auto")
        return Convergence(change is not None and change < self.steady_tolerance, "steady_change_per_1000_steps",
                           change, self.steady_tolerance, hint)

    def setup(self) -> Setup:
        """Wall ring, the lid's velocity on the top wall's cells above the fluid (not its edges), fluid at rest."""
        shape = self.run.grid
        check_geometry(shape)
        d = len(shape)
        length = float(shape[0] - 2)
        rel = self.relaxation(length)
        solid = np.zeros(shape, bool)
        for a in range(d):
            idx = [slice(None)] * d
            idx[a] = 0
            solid[tuple(idx)] = True
            idx[a] = -1
            solid[tuple(idx)] = True
        wall_u = np.zeros((d,) + shape)
        wall_u[(0, *lid_cells(d))] = self.run.flow.u_lattice
        derived = self.base_derived(length, rel)
        derived["flow_through_steps"] = length / self.run.flow.u_lattice
        walls = MovingWall.with_velocity(solid, wall_u, self.lattice, self.dtype)
        return make_setup(self, solid=solid, rho0=np.ones(shape), u0=np.zeros((d,) + shape), rel=rel,
                          boundaries=(walls,), derived=derived, wall_velocity=wall_u)

    def differentiable_keys(self) -> tuple[str, ...]:
        """flow.reynolds and flow.u_lattice (the lid speed; at fixed Re it also sets nu)."""
        return FLOW_KEYS

    def traced(self, setup: Setup, v: Mapping[str, Any], base: Mapping[str, float]) -> Traced:
        """The rates of the traced Re and lid speed, and the lid's wall term (linear in its speed)."""
        omegas = traced_rates(self, float(self.run.grid[0] - 2), v)
        ratio = v["flow.u_lattice"] / base["flow.u_lattice"]
        bcs = tuple(bc.with_velocity_scaled(ratio) for bc in setup.boundaries)
        wall_u = jnp.asarray(setup.wall_velocity, setup.dtype) * ratio  # fields.npz's u in the lid's solid cells
        return Traced(traced_setup(self, setup, omegas), bcs, setup.initial_populations(), {"wall_velocity": wall_u})

    def observe(self, snapshot: Snapshot) -> None:
        """Keep the last two velocity snapshots to report how steady the flow is."""
        self.previous = self.latest
        self.latest = (snapshot.step, snapshot.fields["u"])

    def state(self) -> dict[str, np.ndarray]:
        """The last two velocity snapshots (for the steadiness measure)."""
        out = {}
        for name in ("previous", "latest"):
            snap = self.previous if name == "previous" else self.latest
            if snap is not None:
                out[f"case/{name}_step"] = np.int64(snap[0])
                out[f"case/{name}_u"] = snap[1]
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore the velocity snapshots."""
        def sample(name: str) -> tuple[int, np.ndarray] | None:
            key = f"case/{name}_u"
            return (int(state[f"case/{name}_step"]), state[key]) if key in state else None

        self.previous, self.latest = sample("previous"), sample("latest")

    def profiles(self, fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Centre-line profiles normalised by the lid speed, wall values included (2D, or the z mid-plane in 3D)."""
        u = fields["u"]
        if u.shape[0] == 3:
            u = centreline(np.moveaxis(u[:2], 3, 0), u.shape[3])  # the mid-plane z = 1/2
        nx, ny = u.shape[1], u.shape[2]
        lid = self.run.flow.u_lattice
        y = np.concatenate([[0.0], (np.arange(1, ny - 1) - 0.5) / (ny - 2), [1.0]])
        x = np.concatenate([[0.0], (np.arange(1, nx - 1) - 0.5) / (nx - 2), [1.0]])
        u_c = centreline(u[0], nx)[1:-1] / lid
        v_c = centreline(np.swapaxes(u[1], 0, 1), ny)[1:-1] / lid
        return {"y": y, "u": np.concatenate([[0.0], u_c, [1.0]]), "x": x, "v": np.concatenate([[0.0], v_c, [0.0]])}

    @property
    def is_cube(self) -> bool:
        """A 3D cavity with as many cells along each axis."""
        return self.lattice.d == 3 and len(set(self.run.grid)) == 1

    def reference(self, setup: Setup) -> dict[str, np.ndarray] | None:
        """Ghia et al.'s 2D data, or Albensoeder & Kuhlmann's for a cube at Re 1000; None where neither applies."""
        if self.lattice.d == 2:
            return ghia_reference(setup.reynolds)
        return albensoeder_reference(setup.reynolds) if self.is_cube else None

    def summary_keys(self) -> tuple[str, ...]:
        """The largest centre-line deviations from the reference (Ghia et al. in 2D, Albensoeder & Kuhlmann in 3D)."""
        key = "ghia" if self.lattice.d == 2 else "albensoeder"
        return (f"{key}_u_max_abs_error", f"{key}_v_max_abs_error")

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Steadiness, the deviation from Ghia et al. where they tabulate this Reynolds number, the defaults picked."""
        out: dict[str, Any] = {"defaults_picked": picked_record(self.run.picked)}
        change = self.steady_change()
        if change is not None:
            out["steady_change_per_1000_steps"] = change
        prof = self.profiles(fields)
        ref = self.reference(setup)
        key = "ghia" if self.lattice.d == 2 else "albensoeder"
        out[f"{key}_reynolds"] = None if ref is None else int(round(setup.reynolds))
        if self.lattice.d == 3:
            out.update(u_min=float(prof["u"].min()), v_min=float(prof["v"].min()), v_max=float(prof["v"].max()))
        if ref is not None:
            u_i = np.interp(ref["y"], prof["y"], prof["u"])
            v_i = np.interp(ref["x"], prof["x"], prof["v"])
            out[f"{key}_u_max_abs_error"] = float(np.abs(u_i - ref["u"]).max())
            out[f"{key}_v_max_abs_error"] = float(np.abs(v_i - ref["v"]).max())
            out[f"{key}_u_rms_error"] = float(np.sqrt(np.mean((u_i - ref["u"]) ** 2)))
            out[f"{key}_v_rms_error"] = float(np.sqrt(np.mean((v_i - ref["v"]) ** 2)))
        return out

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """profiles.csv with both centre lines, and their plot against Ghia et al."""
        prof = self.profiles(fields)
        with (run_dir / "profiles.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["profile", "position", "velocity_over_lid"])
            for yy, uu in zip(prof["y"], prof["u"], strict=False):
                w.writerow(["u_at_x=0.5", f"{yy:.8f}", f"{uu:.8e}"])
            for xx, vv in zip(prof["x"], prof["v"], strict=False):
                w.writerow(["v_at_y=0.5", f"{xx:.8f}", f"{vv:.8e}"])
        written = ["profiles.csv"]
        if self.run.output.plots and self.lattice.d == 3:
            written += self.plot_3d(run_dir, prof, self.reference(setup), setup.reynolds)
        elif self.run.output.plots:
            from lbm.io.plots import cavity_profiles_plot

            written.append(cavity_profiles_plot(run_dir, prof, self.reference(setup), setup.reynolds))
        return written

    def plot_3d(self, run_dir: Path, prof: dict[str, np.ndarray], ref: dict[str, np.ndarray] | None,
                reynolds: float) -> list[str]:
        """The two centre lines of the mid-plane z = 1/2, with Albensoeder & Kuhlmann's points where they apply."""
        from lbm.io.plots import line_plot

        label = "Albensoeder & Kuhlmann 2005"
        u_lines = [(prof["u"], prof["y"], "lbm", "-")] + ([(ref["u"], ref["y"], label, "o")] if ref is not None else [])
        v_lines = [(prof["x"], prof["v"], "lbm", "-")] + ([(ref["x"], ref["v"], label, "o")] if ref is not None else [])
        title = f"Cubic cavity, Re = {reynolds:g}, mid-plane z = 1/2"
        return [line_plot(run_dir / "plots" / "profile_u.png", u_lines, xlabel="u / U_lid at x = 1/2",
                          ylabel="y / L", title=title, run_dir=run_dir),
                line_plot(run_dir / "plots" / "profile_v.png", v_lines, xlabel="x / L",
                          ylabel="v / U_lid at y = 1/2", title=title, run_dir=run_dir)]


def lid_cells(d: int) -> tuple[slice | int, ...]:
    """Index of the lid: the cells of the top wall (y = ny - 1) above fluid cells, its edge cells left out.

    The edge cells belong to the resting side walls as well. Moving them too puts the lid's velocity on the
    diagonal links that cross the lid's edge lines, where the side walls are at rest; the cavity then converges at
    first order only, and the cube at Re 1000 on 64^3 is twice as far from Albensoeder & Kuhlmann
    (docs/validation_3d.md, "The lid's edges").
    """
    return (slice(1, -1), -1, *(slice(1, -1),) * (d - 2))


def check_geometry(shape: tuple[int, ...]) -> None:
    """A cavity needs at least 3 fluid cells across each axis."""
    for key, n in zip(("grid.nx", "grid.ny", "grid.nz"), shape, strict=False):
        if n < 5:
            raise ConfigError(key, n, "an integer >= 5 for the cavity (2 wall cells plus >= 3 fluid cells)")
