"""Decaying Taylor-Green vortex in a periodic box (2D; uniform along z on 3D lattices).

u = -U sqrt(ky/kx) cos(kx x) sin(ky y) e^{-t/td}, v = U sqrt(kx/ky) sin(kx x) cos(ky y) e^{-t/td},
td = 1 / (nu (kx^2 + ky^2)), kx = 2 pi / nx, ky = 2 pi / ny; U = flow.u_lattice;
Reynolds number = U nx / nu. The amplitude of the velocity mode is tracked every
chunk and compared with the analytic decay.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from lbm.cases.base import Case, Setup, Snapshot, coordinates, make_setup
from lbm.cases.traced import FLOW_KEYS, Traced, traced_rates, traced_setup
from lbm.config import RunConfig
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import CS2


class TaylorGreen(Case):
    """Periodic decaying vortex with an analytic solution."""

    name = "taylor_green"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {2: 136}
    output_bytes_per_cell: ClassVar[dict[int, int]] = {2: 96}

    def auto_steps(self) -> int:
        """One decay time 1 / (nu (kx^2 + ky^2)) of the velocity amplitude."""
        nx, ny = self.run.grid[0], self.run.grid[1]
        nu = self.relaxation(float(nx))["nu"]
        return int(math.ceil(1.0 / (nu * ((2 * math.pi / nx) ** 2 + (2 * math.pi / ny) ** 2))))

    def __init__(self, run: RunConfig) -> None:
        super().__init__(run)
        self.samples: list[tuple[int, float]] = [(0, run.flow.u_lattice)]
        """(step, amplitude of the initial velocity mode) after each chunk; the mode starts at u_lattice."""

    @property
    def wavenumbers(self) -> tuple[float, float]:
        """kx = 2 pi / nx and ky = 2 pi / ny."""
        return 2 * math.pi / self.run.grid[0], 2 * math.pi / self.run.grid[1]

    @cached_property
    def mode(self) -> np.ndarray:
        """The initial velocity field ``(D, *grid)``, whose amplitude decays."""
        shape = self.run.grid
        kx, ky = self.wavenumbers
        coords = coordinates(shape)
        x, y = coords[0].astype(np.float64), coords[1].astype(np.float64)
        u0 = self.run.flow.u_lattice
        u = np.zeros((len(shape),) + shape)
        u[0] = -u0 * math.sqrt(ky / kx) * np.cos(kx * x) * np.sin(ky * y)
        u[1] = u0 * math.sqrt(kx / ky) * np.sin(kx * x) * np.cos(ky * y)
        return u

    def setup(self) -> Setup:
        """Periodic box initialised with the analytic velocity and pressure fields."""
        shape = self.run.grid
        rel = self.relaxation(float(shape[0]))
        kx, ky = self.wavenumbers
        coords = coordinates(shape)
        x, y = coords[0].astype(np.float64), coords[1].astype(np.float64)
        u0 = self.run.flow.u_lattice
        p = -u0**2 / 4 * ((ky / kx) * np.cos(2 * kx * x) + (kx / ky) * np.cos(2 * ky * y))
        derived = self.base_derived(float(shape[0]), rel)
        derived["decay_time_steps"] = 1.0 / (rel["nu"] * (kx**2 + ky**2))
        return make_setup(self, solid=np.zeros(shape, bool), rho0=1.0 + p / CS2, u0=self.mode, rel=rel,
                          derived=derived)

    def differentiable_keys(self) -> tuple[str, ...]:
        """flow.reynolds and flow.u_lattice (the initial amplitude: the initial state)."""
        return FLOW_KEYS

    def traced(self, setup: Setup, v: Mapping[str, Any], base: Mapping[str, float]) -> Traced:
        """The rates of the traced Re and amplitude U, and the initial state: u0 ~ U, rho0 - 1 ~ U^2 (its pressure)."""
        omegas = traced_rates(self, float(self.run.grid[0]), v)
        ratio = v["flow.u_lattice"] / base["flow.u_lattice"]
        u0 = jnp.asarray(setup.u0, setup.dtype) * ratio
        drho0 = jnp.asarray(np.asarray(setup.rho0, np.float64) - 1.0, setup.dtype) * ratio**2
        return Traced(traced_setup(self, setup, omegas), setup.boundaries, equilibrium(drho0, u0, setup.lattice), {})

    def amplitude(self, u: np.ndarray) -> float:
        """Amplitude of the velocity field ``u`` along the initial mode."""
        return float(np.sum(u * self.mode) / np.sum(self.mode * self.mode)) * self.run.flow.u_lattice

    def observe(self, snapshot: Snapshot) -> None:
        """Project the velocity on the initial mode to get the current amplitude."""
        self.samples.append((snapshot.step, self.amplitude(snapshot.fields["u"])))

    def state(self) -> dict[str, np.ndarray]:
        """The sampled amplitudes (step, amplitude)."""
        return {"case/samples": np.array(self.samples, dtype=np.float64)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore the sampled amplitudes."""
        self.samples = [(int(s), float(a)) for s, a in state["case/samples"]]

    def analytic_amplitude(self, setup: Setup, step: float) -> float:
        """U exp(-nu (kx^2 + ky^2) t)."""
        kx, ky = self.wavenumbers
        return self.run.flow.u_lattice * math.exp(-setup.nu * (kx**2 + ky**2) * step)

    def summary_keys(self) -> tuple[str, ...]:
        """The largest relative error of the decaying amplitude against the analytic exponential."""
        return ("decay_rel_error_max",)

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """Decay of the mode amplitude against the analytic exponential."""
        t = np.array([s for s, _ in self.samples], dtype=np.float64)
        a = np.array([v for _, v in self.samples])
        exact = np.array([self.analytic_amplitude(setup, s) for s in t])
        rel = np.abs(a / exact - 1.0)
        out: dict[str, Any] = {
            "amplitude_final": float(a[-1]),
            "amplitude_analytic_final": float(exact[-1]),
            "decay_rel_error_final": float(rel[-1]),
            "decay_rel_error_max": float(rel.max()),
        }
        if len(t) >= 3 and np.all(a > 0):
            slope = np.polyfit(t[1:], np.log(a[1:]), 1)[0]
            kx, ky = self.wavenumbers
            nu_measured = -slope / (kx**2 + ky**2)
            out["nu_measured"] = float(nu_measured)
            out["nu_rel_error"] = float(nu_measured / setup.nu - 1.0)
        # pointwise error of the final velocity field against the analytic one
        u_exact = self.mode * (exact[-1] / self.run.flow.u_lattice)
        out["velocity_l2_rel_error"] = float(np.linalg.norm(fields["u"] - u_exact) / np.linalg.norm(u_exact))
        return out

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """decay.csv (step, amplitude, analytic) and its plot."""
        path = run_dir / "decay.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["step", "amplitude", "amplitude_analytic"])
            for s, a in self.samples:
                w.writerow([s, f"{a:.9e}", f"{self.analytic_amplitude(setup, s):.9e}"])
        written = ["decay.csv"]
        if self.run.output.plots:
            from lbm.io.plots import line_plot

            t = [s for s, _ in self.samples]
            tt = np.linspace(0, max(t), 200)
            written.append(line_plot(
                run_dir / "plots" / "decay.png",
                [(tt, [self.analytic_amplitude(setup, s) for s in tt], "analytic U exp(-nu k^2 t)", "-"),
                 (t, [a for _, a in self.samples], "simulation", "o")],
                xlabel="step", ylabel="velocity amplitude (lattice units)", title="Taylor-Green decay",
                logy=True, run_dir=run_dir,
            ))
        return written
