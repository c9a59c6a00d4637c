"""``python -m lbm study convergence case=NAME grids=[N1,N2,...] [overrides]``: the observed order of accuracy.

Each grid N runs the case under diffusive scaling (u_lattice proportional to 1/N at a fixed
Reynolds number, so tau and the lattice viscosity stay fixed and a step is 1/N^2 of the
physical time), measures its error against the analytic or reference solution, and fits the
order p of error ~ N^-p by least squares in log-log. Writes ``convergence.json`` (the errors per
grid, ``order`` and the fit), ``convergence.png`` (log-log, with a slope-2 guide) and one run
directory per grid.

Recipes (what N is, and which error):
``taylor_green``   N = nx = ny; relative L2 error of the velocity field after one decay time
``poiseuille``     N = fluid nodes across the channel (grid.ny = N + 2); relative L2 error of the steady profile
                   (half-way walls; with ``case.wall_fraction=q`` interpolated Bouzidi walls off the nodes)
``schafer_turek``  N = cells per diameter (variant 2D-1); |cd - 5.57953| / 5.57953 (the reference drag of
                   the DFG benchmark's most accurate published solutions)
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lbm.errors import LbmError

CD_2D1 = 5.57953
"""Drag coefficient of the DFG 2D-1 benchmark (Schäfer & Turek 1996 interval [5.57, 5.59]; refined value 5.57953)."""


@dataclass(frozen=True)
class Recipe:
    """How a case is refined: the overrides of resolution N, and the error read from its metrics."""

    overrides: Any
    error: Any
    label: str


def _cd_error(m: dict[str, Any]) -> float:
    return abs(float(m["cd"]) - CD_2D1) / CD_2D1


RECIPES = {
    "taylor_green": Recipe(lambda n: [f"grid.nx={n}", f"grid.ny={n}"],
                           lambda m: float(m["velocity_l2_rel_error"]), "velocity L2 error after one decay time"),
    "poiseuille": Recipe(lambda n: [f"grid.ny={n + 2}"],
                         lambda m: float(m["profile_l2_rel_error"]), "steady profile L2 error"),
    "schafer_turek": Recipe(lambda n: ["case.variant=2D-1", f"case.cells_per_diameter={n}"], _cd_error,
                            "|cd - 5.57953| / 5.57953 (DFG 2D-1)"),
}


def fit_order(grids: list[int], errors: list[float]) -> tuple[float, float]:
    """(order p, log-constant c) of the least-squares fit log e = c - p log N."""
    slope, intercept = np.polyfit(np.log(np.asarray(grids, float)), np.log(np.asarray(errors, float)), 1)
    return float(-slope), float(intercept)


def parse(args: list[str]) -> tuple[list[int], str | None, list[str]]:
    """(grids, --out directory, run overrides) from the command line; ``grids=[16,32,64]`` is required."""
    from lbm.config.command_line import split_hydra_args, take_option

    grids: list[int] | None = None
    out, args = take_option(args, "--out")
    split_hydra_args(args, "study convergence", ("--out",))  # a mistyped option: one line naming it
    rest: list[str] = []
    for a in args:
        if a.startswith("grids="):
            text = a.split("=", 1)[1].strip("[]() ")
            try:
                grids = sorted({int(v) for v in text.split(",") if v.strip()})
            except ValueError:
                raise LbmError(f"{a}: expected grids=[N1,N2,...] with integers") from None
        else:
            rest.append(a)
    if not grids or len(grids) < 2 or min(grids) < 4:
        raise LbmError("give at least two resolutions, each >= 4: grids=[16,32,64]")
    return grids, out, rest


def run_study(case: str, grids: list[int], overrides: list[str], out: Path) -> dict[str, Any]:
    """Run every resolution under diffusive scaling and fit the order; returns the convergence record."""
    from lbm.config import load
    from lbm.simulation import simulate

    recipe = RECIPES[case]
    base = load([f"case={case}", *overrides])
    u0 = base.flow.u_lattice
    rows = []
    for n in grids:
        scaled = [] if u0 is None else [f"flow.u_lattice={u0 * grids[0] / n!r}"]  # None: the case scales u by tau
        ov = [f"case={case}", *overrides, *recipe.overrides(n), *scaled, "output.plots=false"]
        run_dir = out / f"N{n}"
        metrics = simulate(load(ov), run_dir)
        rows.append({"n": n, "error": recipe.error(metrics), "u_lattice": metrics["u_lattice"], "tau": metrics["tau"],
                     "steps": metrics["steps"], "run_dir": str(run_dir)})
        print(f"convergence {case}: N={n} error={rows[-1]['error']:.4e} (steps {metrics['steps']})")
    order, c = fit_order([r["n"] for r in rows], [r["error"] for r in rows])
    local = [math.log(a["error"] / b["error"]) / math.log(b["n"] / a["n"]) for a, b in zip(rows[:-1], rows[1:], strict=False)
             if a["error"] > 0 and b["error"] > 0]
    return {"study": "convergence", "case": case, "error": recipe.label, "scaling": "diffusive (u ~ 1/N, tau fixed)",
            "grids": rows, "order": order, "local_orders": local, "fit_log_constant": c, "overrides": overrides}


def plot(record: dict[str, Any], path: Path) -> None:
    """Log-log errors against N with the fitted line and a slope-2 guide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.array([r["n"] for r in record["grids"]], float)
    e = np.array([r["error"] for r in record["grids"]], float)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.loglog(n, e, "o-", label=f"{record['case']}: observed order {record['order']:.2f}")
    ax.loglog(n, e[0] * (n / n[0]) ** -2.0, "k--", lw=0.8, label="slope 2")
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter, NullLocator

    ax.xaxis.set_major_locator(FixedLocator(n))  # the grid sizes, not powers of ten
    ax.xaxis.set_major_formatter(FixedFormatter([f"{int(v)}" for v in n]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("resolution N")
    ax.set_ylabel(record["error"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


OPTIONS = f"""
Options:
  case=NAME          the recipe: {', '.join(RECIPES)} (required)
  grids=[N1,N2,...]  two or more resolutions N, each >= 4 (required)
  --out DIR          where the study is written (default outputs/studies/convergence/<date>/<time>)
  key=value          any run override, applied at every resolution (e.g. precision=float64 collision=trt)
"""


def main(args: list[str]) -> int:
    """Entry point of ``python -m lbm study convergence``."""
    if any(a in ("-h", "--help") for a in args):
        print(__doc__ + OPTIONS, end="")
        return 0
    grids, out_arg, overrides = parse(args)
    case = next((o.split("=", 1)[1] for o in overrides if o.startswith("case=")), None)
    if case not in RECIPES:
        raise LbmError(f"case={case}: the convergence study knows {', '.join(RECIPES)} (name one with case=...)")
    overrides = [o for o in overrides if not o.startswith("case=")]
    out = Path(out_arg) if out_arg else Path("outputs/studies/convergence") / datetime.datetime.now().strftime(
        "%Y-%m-%d/%H-%M-%S")
    if (out / "convergence.json").exists():
        raise LbmError(f"{out} already holds a study (convergence.json); choose another --out")
    record = run_study(case, grids, overrides, out)
    (out / "convergence.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(record, out / "convergence.png")
    print(f"observed order {record['order']:.3f} (local: {', '.join(f'{v:.2f}' for v in record['local_orders'])}); "
          f"wrote {out / 'convergence.json'} and convergence.png")
    return 0
