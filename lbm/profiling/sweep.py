"""Across a Hydra multirun sweep: one table, ``sweep.csv`` and plots (MLUPS, compile time, stage shares vs grid)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from lbm.errors import LbmError
from lbm.stages import STAGES

SWEEP_COLUMNS = ["job", "case", "mode", "lattice", "precision", "grid", "cells", "steps", "status", "mlups",
                 "profiled_steps", "compile_time_s", "wall_time_s", "step_host_mean_ms", "step_device_mean_ms",
                 "share_clock", "share_of", "stages_sum_mean_ms", "unattributed_mean_ms"]
"""Columns of sweep.csv before the shares (``share_<row>``: a row's share of the stages' mean per step in the job's
headline clock, ``share_clock``; ``stages_sum_mean_ms``: the sum of those rows' means, and ``unattributed_mean_ms``
the step's mean on that clock minus it). ``mlups`` is the job's unprofiled throughput (metrics.json leaves its
profiled steps out)."""


def job_dirs(path: Path) -> list[Path]:
    """The job directories of a multirun directory (subdirectories holding metrics.json), in job order."""
    if not path.is_dir() or (path / "metrics.json").is_file():
        return []
    jobs = [d for d in path.iterdir() if d.is_dir() and (d / "metrics.json").is_file()]
    return sorted(jobs, key=lambda d: (0, int(d.name)) if d.name.isdigit() else (1, d.name))


def sweep_rows(jobs: list[Path]) -> list[dict[str, Any]]:
    """One row per job from its metrics.json (and the profile summary in it, when the job was profiled)."""
    rows = []
    for d in jobs:
        try:
            m = json.loads((d / "metrics.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise LbmError(f"{d / 'metrics.json'}: unreadable ({exc})") from None
        grid = m.get("grid") or []
        row: dict[str, Any] = {"job": d.name, "case": m.get("case"), "mode": m.get("mode"), "lattice": m.get("lattice"),
                               "precision": m.get("precision"), "grid": "x".join(map(str, grid)),
                               "cells": m.get("cells") or (math.prod(grid) if grid else None), "steps": m.get("steps"),
                               "status": m.get("status"), "mlups": m.get("mlups"),
                               "profiled_steps": (m.get("profiled_steps") or {}).get("steps"),
                               "compile_time_s": m.get("compile_time_s"), "wall_time_s": m.get("wall_time_s")}
        prof = m.get("profile") or {}
        step = prof.get("timestep_mean_ms") or {}
        row["step_host_mean_ms"] = step.get("host")
        row["step_device_mean_ms"] = step.get("device")
        shares = {name: info.get("share") for name, info in (prof.get("stages") or {}).items()}
        row.update({f"share_{name}": v for name, v in shares.items() if v is not None})
        row["share_clock"] = prof.get("clock") if shares else None
        row["share_of"] = prof.get("statistic") if shares else None
        means = [info["mean_ms"] for info in (prof.get("stages") or {}).values() if info.get("mean_ms") is not None]
        head = step.get(prof.get("clock"))
        row["stages_sum_mean_ms"] = sum(means) if means else None
        row["unattributed_mean_ms"] = head - sum(means) if means and head is not None else None
        rows.append(row)
    return rows


def _share_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The ``share_<row>`` keys of the rows, stages in timestep order, then fused sets."""
    keys = {k for r in rows for k in r if k.startswith("share_") and k not in ("share_clock", "share_of")}
    return sorted(keys, key=lambda k: (STAGES.index(k[6:]) if k[6:] in STAGES else 99, k))


def write_sweep(rows: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path | None]:
    """sweep.csv and sweep.png in ``out_dir``."""
    share_cols = _share_columns(rows)
    cols = SWEEP_COLUMNS + share_cols
    csv_path = out_dir / "sweep.csv"
    with csv_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    return csv_path, _plot(rows, share_cols, out_dir / "sweep.png")


def _plot(rows: list[dict[str, Any]], share_cols: list[str], path: Path) -> Path | None:
    pts = [r for r in rows if r.get("cells")]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lbm.hlo import STAGE_COLORS

    pts.sort(key=lambda r: r["cells"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in pts:
        groups.setdefault(f"{r.get('case')} {r.get('mode')} {r.get('precision')}", []).append(r)
    for label, g in groups.items():
        axes[0].plot([r["cells"] for r in g], [r.get("mlups") or math.nan for r in g], "o-", label=label)
        axes[1].plot([r["cells"] for r in g], [r.get("compile_time_s") or math.nan for r in g], "s-", label=label)
    axes[0].set(xscale="log", xlabel="cells", ylabel="MLUPS (host wall clock, profiled steps left out)",
                title="throughput (unprofiled)")
    axes[1].set(xscale="log", xlabel="cells", ylabel="compile time (s, host wall clock)", title="compilation")
    for ax in axes[:2]:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    if share_cols:
        bottom = [0.0] * len(pts)
        for col in share_cols:
            vals = [r.get(col) or 0.0 for r in pts]
            name = col[6:]
            color = STAGE_COLORS.get(name, "#ffd92f" if "+" in name else "#cccccc")
            axes[2].bar(range(len(pts)), [v * 100 for v in vals], bottom=bottom, color=color, edgecolor="black",
                        linewidth=0.4, label=name)
            bottom = [b + v * 100 for b, v in zip(bottom, vals, strict=True)]
        axes[2].set_xticks(range(len(pts)), [f"{r['grid']}\n{r.get('mode')}" for r in pts], fontsize=7)
        clock = "/".join(sorted({r.get("share_clock") or "" for r in pts} - {""}))
        axes[2].set(ylabel=f"share of the stages' mean per step (%, {clock} clock)", title="stage shares vs grid size",
                    ylim=(0, 100))
        axes[2].legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
    else:
        axes[2].text(0.5, 0.5, "no profiled jobs\n(run with profile.enabled=true)", ha="center", va="center")
        axes[2].set_axis_off()
    fig.suptitle(f"sweep of {len(rows)} jobs: {', '.join(groups)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sweep_table(rows: list[dict[str, Any]], title: str) -> Any:
    """A rich Table of the sweep: unprofiled MLUPS, compile time, the step's mean per clock, the stage shares."""
    from rich.table import Table

    share_cols = _share_columns(rows)
    t = Table(title=title, title_justify="left")
    for col in ["job", "case", "mode", "grid", "cells", "steps", "MLUPS (unprofiled)", "compile s",
                "step mean ms (host)", "step mean ms (device)", "sum of stages ms", "unattributed ms",
                *[f"{c[6:]} share" for c in share_cols]]:
        t.add_column(col, justify="left" if col in ("job", "case", "mode", "grid") else "right", overflow="fold")

    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    for r in rows:
        t.add_row(str(r["job"]), str(r.get("case")), str(r.get("mode")), str(r.get("grid")), f(r.get("cells"), "d"),
                  f(r.get("steps"), "d"), f(r.get("mlups"), ".2f"), f(r.get("compile_time_s"), ".2f"),
                  f(r.get("step_host_mean_ms"), ".3f"), f(r.get("step_device_mean_ms"), ".3f"),
                  f(r.get("stages_sum_mean_ms"), ".3f"), f(r.get("unattributed_mean_ms"), ".3f"),
                  *[f(None if r.get(c) is None else 100 * r[c], ".1f") for c in share_cols])
    clocks = "/".join(sorted({str(r["share_clock"]) for r in rows if r.get("share_clock")})) or "—"
    t.caption = ("MLUPS: host wall clock over the stepping loop (metrics.json), the profiled steps left out; compile: "
                 f"host wall clock; step means and shares: the profile window, shares of the stages' mean per step on "
                 f"the {clocks} clock (each job's shares add up to 100%); sum of stages and unattributed (the step "
                 f"minus that sum): the same clock")
    t.caption_justify = "left"
    return t
