"""Plot the dissipation of several taylor_green_3d runs against the spectral reference (docs/validation_3d.md).

    python scripts/tgv3d_plot.py OUT.png RUN_DIR [RUN_DIR ...]

Each run directory's dissipation.csv gives -dK/dt (solid) and 2 nu enstrophy (dashed), labelled with the
grid, lattice and collision of its metrics.json. It also prints, per run, the rms deviation of -dK/dt from the
reference over the samples in each window of t (``WINDOWS``), over the reference's peak, as the metrics' rms over
[0, 20] is taken.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lbm.cases.taylor_green_3d import REFERENCE, read_table  # noqa: E402
from lbm.reference import read_reference_csv  # noqa: E402

WINDOWS = ((0, 20), (0, 10), (10, 20), (0, 6), (6, 8), (8, 10), (10, 13), (13, 16), (16, 20))
"""Windows of t (L / V0) for the rms deviations; each holds the samples a <= t < b (t <= 20 in the last)."""


def print_windows(runs: list[Path], ref: list[dict[str, str]]) -> None:
    """Print the rms deviation of each run's -dK/dt from the reference per window, in % of the reference's peak."""
    ref_t = np.array([float(r["t"]) for r in ref])
    ref_eps = np.array([float(r["dissipation"]) for r in ref])
    top = ref_eps.max()
    print("rms of -dK/dt - reference, % of the peak: run " + " ".join(f"[{a},{b})" for a, b in WINDOWS))
    for run in runs:
        series = read_table(run / "dissipation.csv")
        t = series["t"]
        dev = series["dissipation"] - np.interp(t, ref_t, ref_eps)
        cells = []
        for a, b in WINDOWS:
            inside = (t >= a) & ((t < b) | ((b == 20) & (t <= 20 + 1e-9)))
            cells.append(f"{100 * np.sqrt(np.mean(dev[inside] ** 2)) / top:.2f}" if inside.any() else "-")
        print(f"{run} " + " ".join(cells))


def main(out: Path, runs: list[Path]) -> None:
    """Write the plot of every run's two dissipation curves and the reference's to ``out``."""
    ref = read_reference_csv(REFERENCE)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for a, key, title in ((ax[0], "dissipation", "-dK/dt"), (ax[1], "enstrophy_dissipation", "2 nu enstrophy")):
        a.plot([float(r["t"]) for r in ref], [float(r["dissipation"]) for r in ref], "k-", lw=2,
               label="spectral DNS 512^3")
        for run in runs:
            m = json.loads((run / "metrics.json").read_text())
            series = read_table(run / "dissipation.csv")
            label = f"{m['grid'][0]}^3 {m['lattice']} {m['collision']}" + (
                f" ({m['status']})" if m["status"] != "completed" else
                f" (to t = {m['t_final']:.0f})" if m.get("t_final", 20.0) < 19.9 else "")
            a.plot(series["t"], series[key], label=label)
        a.set_xlim(0, 20)
        a.set_ylim(0, 0.016)
        a.set_xlabel("t (L / V0)")
        a.set_title(f"Taylor-Green vortex Re 1600: {title}")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    ax[0].set_ylabel("dissipation rate (V0^3 / L)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print_windows(runs, ref)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
