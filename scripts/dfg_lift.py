"""Per-period force statistics of Schäfer–Turek 2D-2 runs (docs/dfg.md, "Session 6: the 2D-2 lift").

Usage: python scripts/dfg_lift.py stats RUN_DIR [RUN_DIR ...] [--periods K]
       python scripts/dfg_lift.py run [--length L] [--u-mean U] OVERRIDES...

``stats`` reads each run's forces.csv (step, fx, fy, cd, cl, one row per step) and prints, over the last K lift
periods (upward zero crossings of cl minus its mean delimit them): the range of the per-period maxima of
cl and cd, the mean of cl's per-period minima, cd and cl means over those periods, the lift amplitude
(half the peak-to-peak, averaged over the periods), the amplitude of its fundamental (a least-squares fit of
three harmonics of the mean period over those periods: insensitive to acoustic noise at other frequencies), the
maximum of that fit (a cl_max without the noise)
and the Strouhal number from the mean period.

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


def statistics(run_dir: Path, count: int) -> dict[str, float]:
    """Per-period maxima and means of cd and cl over the last ``count`` lift periods of ``run_dir``/forces.csv."""
    data = np.loadtxt(run_dir / "forces.csv", delimiter=",", skiprows=1)
    cd, cl = data[:, -2], data[:, -1]
    spans = periods(cl, count)
    cl_max = np.array([cl[a:b].max() for a, b in spans])
    cl_min = np.array([cl[a:b].min() for a, b in spans])
    cd_max = np.array([cd[a:b].max() for a, b in spans])
    lo, hi = spans[0][0], spans[-1][1]
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else {}
    derived = metrics.get("derived", {})
    cells = derived.get("cells_per_diameter")
    u = derived.get("u_lattice") or metrics.get("config", {}).get("flow", {}).get("u_lattice")
    period = (hi - lo) / len(spans)
    phase = 2 * np.pi * np.arange(hi - lo) / period
    basis = np.stack([np.ones(hi - lo)] + [f(k * phase) for k in (1, 2, 3) for f in (np.cos, np.sin)], axis=1)
    coef = np.linalg.lstsq(basis, cl[lo:hi], rcond=None)[0]
    fine = 2 * np.pi * np.linspace(0.0, 1.0, 2001)
    fit = coef[0] + sum(coef[2 * k - 1] * np.cos(k * fine) + coef[2 * k] * np.sin(k * fine) for k in (1, 2, 3))
    return {"periods": len(spans), "cl_max_lo": cl_max.min(), "cl_max_hi": cl_max.max(), "cl_min_mean": cl_min.mean(),
            "cl_amp": 0.5 * float((cl_max - cl_min).mean()),
            "cl_h1": float(np.hypot(coef[1], coef[2])), "cl_fit_max": float(fit.max()), "cl_mean": cl[lo:hi].mean(),
            "cd_max_lo": cd_max.min(), "cd_max_hi": cd_max.max(), "cd_mean": cd[lo:hi].mean(),
            "st": (cells / u / period) if cells and u else float("nan"), "raw_cl_max": cl[len(cl) // 2:].max()}


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
    print("run | cl_max per period | cl_max of fit | cl_min mean | cl amp | cl h1 | cl mean | cd_max per period | cd_mean | St"
          " | raw cl_max")
    for run_dir in args.runs:
        s = statistics(run_dir, args.periods)
        print(f"{run_dir.name} | {s['cl_max_lo']:.4f}-{s['cl_max_hi']:.4f} | {s['cl_fit_max']:.4f} | "
              f"{s['cl_min_mean']:.4f} | {s['cl_amp']:.4f} | "
              f"{s['cl_h1']:.4f} | "
              f"{s['cl_mean']:.4f} | {s['cd_max_lo']:.4f}-{s['cd_max_hi']:.4f} | {s['cd_mean']:.4f} | {s['st']:.4f} | "
              f"{s['raw_cl_max']:.4f}")


if __name__ == "__main__":
    main()
