"""Per-period force statistics of Schäfer–Turek 2D-2 runs (docs/dfg.md, "Session 6: the 2D-2 lift").

Usage: python scripts/dfg_lift.py stats RUN_DIR [RUN_DIR ...] [--periods K]
       python scripts/dfg_lift.py run [--length L] [--u-mean U] OVERRIDES...

``stats`` reads each run's forces.csv (step, fx, fy, cd, cl, one row per step) and prints, over the last K lift
periods of the second half of the run (upward crossings of the smoothed cl delimit them): the range of the
per-period maxima of cl (cl_max_lo, cl_max_hi), the maximum of a least-squares fit of a mean and seven harmonics
of the mean period to cl (cl_fit_max: a cl_max without the noise), the mean of the per-period minima, half the
peak-to-peak (cl_amp), the fundamental's amplitude (cl_h1), the mean lift, the std of cl minus the fit
(cl_noise), the same std per period for the first and the last period of the second half (noise_first,
noise_last: fit to that period alone), the range of the per-period maxima of cd, the maximum of the same fit to
cd, the mean drag and the Strouhal number from the mean period.

``run`` is ``python -m lbm run OVERRIDES`` with two set-up changes lbm has no key for (hypothesis tests
only): ``--length L`` makes the channel L m long (the outlet L - 0.25 m behind the cylinder; 2.2 is the
benchmark), ``--u-mean U`` sets 2D-2's U_mean to U m/s, so Re = 100 U (the normalisation follows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def periods(cl: np.ndarray, count: int) -> list[tuple[int, int]]:
    """The last ``count`` lift periods as (start, end) row ranges, between upward crossings of cl's mean.

    The crossings are found on cl smoothed over 1/20 of the period of the spectrum's peak, so that acoustic noise
    (strong at low Mach numbers) does not add crossings.
    """
    half = cl[len(cl) // 2:] - cl[len(cl) // 2:].mean()
    spectrum = np.abs(np.fft.rfft(half))
    spectrum[0] = 0.0
    guess = len(half) / max(int(np.argmax(spectrum)), 1)
    width = max(int(guess / 20), 1)
    smooth = np.convolve(half, np.ones(width) / width, mode="same")
    up = np.flatnonzero((smooth[:-1] < 0) & (smooth[1:] >= 0)) + 1
    up = up[(up > width) & (up < len(half) - width)] + len(cl) // 2
    if len(up) < 2:
        raise ValueError("fewer than one whole lift period in the second half of the run")
    bounds = list(zip(up[:-1], up[1:], strict=True))
    return bounds[-count:]


HARMONICS = 7
"""Harmonics of the lift period in the fits (3 to 9 give the same cl_max to four digits; cd's maximum moves by up to 7e-4)."""


def harmonic_fit(signal: np.ndarray, span: tuple[int, int], period: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Least-squares fit of a mean and HARMONICS harmonics of ``period`` to ``signal`` over ``span``.

    Returns the coefficients (mean, then cos/sin per harmonic), the residual (signal minus fit) and the fit's maximum.
    """
    lo, hi = span
    phase = 2 * np.pi * np.arange(hi - lo) / period
    orders = range(1, HARMONICS + 1)
    basis = np.stack([np.ones(hi - lo)] + [f(k * phase) for k in orders for f in (np.cos, np.sin)], axis=1)
    coef = np.linalg.lstsq(basis, signal[lo:hi], rcond=None)[0]
    fine = 2 * np.pi * np.linspace(0.0, 1.0, 4001)
    curve = coef[0] + sum(coef[2 * k - 1] * np.cos(k * fine) + coef[2 * k] * np.sin(k * fine) for k in orders)
    return coef, signal[lo:hi] - basis @ coef, float(curve.max())


def statistics(run_dir: Path, count: int) -> dict[str, float]:
    """Per-period maxima, harmonic fits and means of cd and cl over the last ``count`` lift periods of a run."""
    data = np.loadtxt(run_dir / "forces.csv", delimiter=",", skiprows=1)
    cd, cl = data[:, -2], data[:, -1]
    every = periods(cl, len(cl))
    spans = every[-count:]
    cl_max = np.array([cl[a:b].max() for a, b in spans])
    cl_min = np.array([cl[a:b].min() for a, b in spans])
    cd_max = np.array([cd[a:b].max() for a, b in spans])
    lo, hi = spans[0][0], spans[-1][1]
    period = (hi - lo) / len(spans)
    coef, residual, cl_fit_max = harmonic_fit(cl, (lo, hi), period)
    _, _, cd_fit_max = harmonic_fit(cd, (lo, hi), period)
    noise = [float(harmonic_fit(cl, (a, b), b - a)[1].std()) for a, b in every]
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else {}
    derived = metrics.get("derived", {})
    cells, u = derived.get("cells_per_diameter"), derived.get("u_lattice")
    return {"cl_max_lo": cl_max.min(), "cl_max_hi": cl_max.max(), "cl_fit_max": cl_fit_max,
            "cl_min_mean": cl_min.mean(), "cl_amp": 0.5 * float((cl_max - cl_min).mean()),
            "cl_h1": float(np.hypot(coef[1], coef[2])), "cl_mean": cl[lo:hi].mean(), "cl_noise": float(residual.std()),
            "noise_first": noise[0], "noise_last": noise[-1], "cd_max_lo": cd_max.min(), "cd_max_hi": cd_max.max(),
            "cd_fit_max": cd_fit_max, "cd_mean": cd[lo:hi].mean(),
            "st": (cells / u / period) if cells and u else float("nan")}


def run(length: float, u_mean: float, overrides: list[str]) -> int:
    """``python -m lbm run overrides`` with the channel ``length`` (m) and 2D-2's ``u_mean`` (m/s)."""
    import dataclasses

    from lbm.cases import schafer_turek as st
    from lbm.cli import main as cli

    st.VARIANTS["2D-2"] = u_mean

    def resolve(config: Any) -> Any:
        resolved = st.resolve(config)
        n = resolved.case_params.get("cells_per_diameter", 20)
        return dataclasses.replace(resolved, grid=(round(length / st.DIAMETER * n) + 1, resolved.grid[1]))

    st.SchaferTurek.resolver = staticmethod(resolve)
    return cli(["run", *overrides])


def main() -> None:
    """``stats``: one line per run directory; ``run``: one run with the changed set-up."""
    if sys.argv[1:2] == ["run"]:
        parser = argparse.ArgumentParser(description="one 2D-2 run with a changed set-up")
        parser.add_argument("--length", type=float, default=2.2)
        parser.add_argument("--u-mean", type=float, default=1.0)
        args, overrides = parser.parse_known_args(sys.argv[2:])
        sys.exit(run(args.length, args.u_mean, overrides))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["stats"])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--periods", type=int, default=5)
    args = parser.parse_args()
    columns = ("cl_max_lo", "cl_max_hi", "cl_fit_max", "cl_min_mean", "cl_amp", "cl_h1", "cl_mean", "cl_noise",
               "noise_first", "noise_last", "cd_max_lo", "cd_max_hi", "cd_fit_max", "cd_mean", "st")
    print("run | " + " | ".join(columns))
    for run_dir in args.runs:
        s = statistics(run_dir, args.periods)
        print(f"{run_dir.name} | " + " | ".join(f"{s[c]:.5f}" if "noise" in c else f"{s[c]:.4f}" for c in columns))

if __name__ == "__main__":
    main()
