"""Energy and dissipation spectra of taylor_green_3d runs from their fields.npz (docs/validation_3d.md).

    python scripts/tgv_spectrum.py OUT_PREFIX RUN [RUN ...]

For each run directory, the final velocity field's shell-summed spectra E(k) and 2 nu Omega(k) (the case's own
``shell_spectra``, in the reference's units: k in 1 / L, dissipation in V0^3 / L); a RUN that names a run's
spectrum.csv takes the spectra the run wrote at the reference's dissipation peak instead. Writes OUT_PREFIX.csv (one row per
run and shell: N, t, k, energy, dissipation, the cumulative dissipation over the reference's -dK/dt at t) and
OUT_PREFIX.png (E(k), and the cumulative dissipation), and prints per run the enstrophy-based dissipation against
the reference's and the run's -dK/dt at that time, split into wavenumber bands.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import jax.numpy as jnp
import matplotlib
import matplotlib.ticker
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lbm.cases.taylor_green_3d import REFERENCE, read_table, shell_spectra, spectrum_table  # noqa: E402
from lbm.reference import read_reference_csv  # noqa: E402

REYNOLDS = 1600.0
"""Re of the reference (nu = 1 / Re in its units)."""
BANDS = (0, 8, 16, 32, 48, 64, 96)
"""Edges of the wavenumber bands (1 / L) whose dissipation the summary prints."""


def run_spectrum(run: Path) -> dict[str, np.ndarray]:
    """The spectrum table of a run directory's final velocity (or of its spectrum.csv, when ``run`` names that file),
    with its N and -dK/dt at that time."""
    if run.name == "spectrum.csv":
        run, (n, *_) = run.parent, json.loads((run.parent / "metrics.json").read_text())["grid"]
        table = read_table(run / "spectrum.csv")
    else:
        metrics = json.loads((run / "metrics.json").read_text())
        u = np.load(run / "fields.npz")["u"]
        n = u.shape[1]
        table = spectrum_table(int(metrics["steps"]), np.asarray(shell_spectra(jnp.asarray(u))), metrics["u_lattice"],
                               n / (2 * math.pi), metrics["nu"])
    series = read_table(run / "dissipation.csv")
    t, eps = series["t"], series["dissipation"]
    return table | {"n": np.full(len(table["k"]), n), "run_dissipation": np.full(len(table["k"]), eps[np.argmin(
        np.abs(t - table["t"][0]))])}


def _bands4(tab: dict[str, np.ndarray]) -> np.ndarray:
    """Dissipation over the reference's in bands of 4 shells from k = 2 (the vortex's symmetries leave every other
    shell nearly empty)."""
    return np.add.reduceat(tab["dissipation"][2:], np.arange(0, len(tab["k"]) - 2, 4)) / tab["reference"][0]


def model_tail(k_eta: float, l_over_eta: float) -> float:
    """Share of the dissipation beyond k eta in Pope's model spectrum (Turbulent Flows, 2000, eq. 6.246; C = 1.5,
    beta = 5.2, c_eta = 0.4, c_L = 6.78, p0 = 2) with integral scale L = ``l_over_eta`` Kolmogorov lengths."""
    k = np.geomspace(1e-4, 20.0, 20001)  # k eta
    spectrum = (1.5 * k ** (-5 / 3) * (k * l_over_eta / np.sqrt((k * l_over_eta) ** 2 + 6.78)) ** (5 / 3 + 2.0)
                * np.exp(-5.2 * ((k**4 + 0.4**4) ** 0.25 - 0.4)))
    density = 2 * k * k * spectrum
    cumulative = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(k))])
    return float(1.0 - np.interp(k_eta, k, cumulative) / cumulative[-1])


def trend(tables: list[dict[str, np.ndarray]], target: float = 0.05) -> None:
    """Print where each grid's dissipation spectrum leaves the next finer one's, the N at which a power law through
    the numerical shares 1 - 2 nu Omega / (-dK/dt) reaches ``target``, and the finest grid's tail estimate."""
    tables = sorted(tables, key=lambda tab: int(tab["n"][0]))
    agree = np.nan
    for coarse, fine in zip(tables, tables[1:], strict=False):
        c, f = _bands4(coarse), _bands4(fine)
        below = np.flatnonzero(c < 0.9 * f[: len(c)])
        agree = 2 + 4 * below[0] if len(below) else np.nan
        print(f"{int(coarse['n'][0])}^3's dissipation spectrum first falls below 90% of {int(fine['n'][0])}^3's in "
              f"the shells from k = {agree:g} (N / {int(coarse['n'][0]) / agree:.1f})")
    n = np.array([tab["n"][0] for tab in tables], dtype=np.float64)
    share = np.array([1.0 - tab["dissipation"].sum() / tab["run_dissipation"][0] for tab in tables])
    print("numerical share 1 - 2 nu Omega / (-dK/dt): " + ", ".join(f"{a:.0f}^3 {b:.1%}" for a, b in zip(n, share,
                                                                                                      strict=True)))
    for first in range(max(0, len(n) - 3), len(n) - 1):
        p = -np.polyfit(np.log(n[first:]), np.log(share[first:]), 1)[0]
        reach = n[-1] * (share[-1] / target) ** (1.0 / p)
        print(f"  share ~ N^-{p:.2f} through {', '.join(f'{a:.0f}' for a in n[first:])}: {target:.0%} at N = {reach:.0f}")
    if np.isfinite(agree):
        # the finest grid's spectrum, trusted below where the next coarser one leaves it, continued as a geometric
        # series from its band there that holds the rest of the reference's dissipation
        bands, a = _bands4(tables[-1]), int(agree - 2) // 4
        rest = 1.0 - bands[:a].sum()
        ratio = 1.0 - bands[a] / rest
        tails = ", ".join(f"{rest * ratio ** ((cut - agree) / 4):.1%} beyond k = {cut:.0f}" for cut in n[n / 2 > agree] / 2)
        print(f"tail estimate from {n[-1]:.0f}^3 (k < {agree:g} trusted, geometric beyond with ratio {ratio:.3f} per 4 "
              f"shells) in the reference's dissipation: {tails}; "
              f"{target:.0%} beyond k = {agree + 4 * math.log(target / rest) / math.log(ratio):.0f}")
    eta = (1.0 / REYNOLDS**3 / tables[-1]["reference"][0]) ** 0.25  # Kolmogorov length in L at the reference's eps
    shares = "; ".join(f"beyond k = {cut:.0f} (k eta = {cut * eta:.2f}) "
                       + ", ".join(f"{model_tail(cut * eta, r):.1%}" for r in (30, 60, 120)) for cut in n / 2)
    reach = float(np.interp(-target, [-model_tail(x * eta, 60) for x in range(1, 200)], np.arange(1, 200)))
    print(f"Pope's model spectrum, eta = {eta:.4f} L, dissipation for L / eta = 30, 60, 120: {shares}; "
          f"{target:.0%} beyond k = {reach:.0f} (L / eta = 60)")


def main(prefix: Path, runs: list[Path]) -> None:
    """Write the CSV and plot of every run's spectra and print the band summary."""
    ref = read_reference_csv(REFERENCE)
    ref_t = np.array([float(r["t"]) for r in ref])
    ref_eps = np.array([float(r["dissipation"]) for r in ref])
    tables = [run_spectrum(r) for r in runs]
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    rows = []
    print(f"{'N':>4} {'t':>6} {'2nuOmega/eps_ref':>16} {'-dK/dt/eps_ref':>14}  dissipation / eps_ref per band of k "
          + " ".join(f"[{a},{b})" for a, b in zip(BANDS, BANDS[1:], strict=False)))
    for tab in tables:
        n, t = int(tab["n"][0]), float(tab["t"][0])
        eps_ref = float(np.interp(t, ref_t, ref_eps))
        tab["reference"] = np.full(len(tab["k"]), eps_ref)
        k, d = tab["k"], tab["dissipation"]
        cumulative = np.cumsum(d) / eps_ref
        rows += [(n, t, kk, e, dd, c) for kk, e, dd, c in zip(k, tab["energy"], d, cumulative, strict=True)]
        bands = [d[(k >= a) & (k < b)].sum() / eps_ref for a, b in zip(BANDS, BANDS[1:], strict=False)]
        print(f"{n:4d} {t:6.3f} {d.sum() / eps_ref:16.4f} {tab['run_dissipation'][0] / eps_ref:14.4f}  "
              + " ".join(f"{b:.4f}" for b in bands))
        shown = (k >= 2) & (k <= n // 2)  # the vortex's symmetries leave shell 1 empty
        line = ax[0].loglog(k[shown], tab["energy"][shown], label=f"{n}^3, t = {t:.2f}")[0]
        ax[1].semilogx(k[k >= 1], cumulative[k >= 1], color=line.get_color(), label=f"{n}^3: sum of 2 nu Omega(k)")
        ax[1].axhline(tab["run_dissipation"][0] / eps_ref, color=line.get_color(), ls=":", label=f"{n}^3: -dK/dt")
    kk = np.array([4.0, 40.0])
    ax[0].loglog(kk, 0.1 * kk ** (-5 / 3), "k:", label="k^-5/3")
    ax[0].set(xlabel="k (1 / L)", ylabel="E(k) (V0^2 L)", title="energy spectrum (shells up to N/2)")
    ax[1].axhline(1.0, color="k", lw=1)
    ax[1].set(xlabel="k (1 / L)", ylabel="dissipation up to k / reference -dK/dt", ylim=(0, 1.6),
              title="cumulative enstrophy-based dissipation")
    for a in ax:
        a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        a.grid(True, which="both", alpha=0.3)
        a.legend(loc="lower left" if a is ax[0] else "upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(prefix.with_suffix(".png"), dpi=110)
    with prefix.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["n", "t", "k", "energy", "dissipation", "cumulative_over_reference"])
        w.writerows([[r[0], f"{r[1]:.4f}", int(r[2]), *(f"{v:.6e}" for v in r[3:])] for r in rows])
    trend(tables)
    print(f"wrote {prefix.with_suffix('.csv')} and {prefix.with_suffix('.png')}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
