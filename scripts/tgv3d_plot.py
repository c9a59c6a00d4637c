"""Plot the dissipation of several taylor_green_3d runs against the spectral reference (docs/validation_3d.md).

    python scripts/tgv3d_plot.py OUT.png RUN_DIR [RUN_DIR ...]

Each run directory's dissipation.csv gives -dK/dt (solid) and 2 nu enstrophy (dashed), labelled with the
grid, lattice and collision of its metrics.json.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lbm.cases.cavity import read_reference_csv  # noqa: E402
from lbm.cases.taylor_green_3d import REFERENCE  # noqa: E402


def main(out: Path, runs: list[Path]) -> None:
    """Write the plot of every run's two dissipation curves and the reference's to ``out``."""
    ref = read_reference_csv(REFERENCE)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for a, key, title in ((ax[0], "dissipation", "-dK/dt"), (ax[1], "enstrophy_dissipation", "2 nu enstrophy")):
        a.plot([float(r["t"]) for r in ref], [float(r["dissipation"]) for r in ref], "k-", lw=2,
               label="spectral DNS 512^3")
        for run in runs:
            m = json.loads((run / "metrics.json").read_text())
            rows = list(csv.DictReader((run / "dissipation.csv").open()))
            label = f"{m['grid'][0]}^3 {m['lattice']} {m['collision']}" + (
                f" ({m['status']})" if m["status"] != "completed" else
                f" (to t = {m['t_final']:.0f})" if m.get("t_final", 20.0) < 19.9 else "")
            a.plot([float(r["t"]) for r in rows], [float(r[key]) for r in rows], label=label)
        a.set_xlim(0, 20)
        a.set_ylim(0, 0.016)
        a.set_xlabel("t (L / V0)")
        a.set_title(f"Taylor-Green vortex Re 1600: {title}")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    ax[0].set_ylabel("dissipation rate (V0^3 / L)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
