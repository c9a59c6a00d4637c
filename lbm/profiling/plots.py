"""Pictures of a breakdown: shares and medians per stage, and a timeline of a few timesteps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lbm.hlo import STAGE_COLORS
from lbm.profiling.breakdown import STATISTIC, STEP, Breakdown

GROUP_COLORS = ["#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00", "#a65628", "#f781bf", "#17becf", "#bcbd22",
                "#7f7f7f"]
"""Saturated colours for sets of fused stages (single stages use the pastel STAGE_COLORS)."""


def unit_colors(units: list[str]) -> dict[str, str]:
    """A colour per row name: its stage's colour, grey for unscoped kernels, a distinct saturated one per fused set."""
    out: dict[str, str] = {}
    groups = sorted({u for u in units if "+" in u})
    for u in units:
        if "+" in u:
            out[u] = GROUP_COLORS[groups.index(u) % len(GROUP_COLORS)]
        else:
            out[u] = STAGE_COLORS.get(u, "#cccccc")
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def breakdown_png(bd: Breakdown, path: Path, title: str = "") -> Path:
    """Stacked bars of each row's share of the stages' mean time per step (one bar per clock), and the means."""
    plt = _pyplot()
    tables = [(clock, t, t.timed()) for clock, t in bd.tables.items() if t.timed()]
    names = list(dict.fromkeys(r["stage"] for _, _, rows in tables for r in rows))
    colors = unit_colors(names)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.1, 1]})
    for i, (_, _, rows) in enumerate(tables):
        left = 0.0
        for r in rows:
            v = r.get("share") or 0.0
            if v <= 0:
                continue
            ax1.barh(i, v * 100, left=left, color=colors[r["stage"]], edgecolor="black", linewidth=0.5,
                     hatch="//" if "+" in r["stage"] else None, label=r["stage"])
            if v > 0.06:
                ax1.text(left + v * 50, i, r["stage"].replace("+", "+\n") + f"\n{v * 100:.0f}%", ha="center",
                         va="center", fontsize=7)
            left += v * 100
    ax1.set_yticks(range(len(tables)), [f"{clock}\n({STATISTIC})" for clock, _, _ in tables])
    ax1.set_xlim(0, 100)
    ax1.set_xlabel(f"share of the sum of the stages' {STATISTIC} per step (%)")
    ax1.set_title("where a timestep goes")
    handles, labels = ax1.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax1.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
    y = list(range(len(names)))
    h = 0.8 / max(1, len(tables))
    palette = {"device": "#fb8072", "host": "#80b1d3"}
    for i, (clock, _, rows) in enumerate(tables):
        means = {r["stage"]: r.get("mean_ms") or 0.0 for r in rows}
        ax2.barh([v - 0.4 + h * (i + 0.5) for v in y], [means.get(n, 0.0) for n in names], height=h,
                 color=palette.get(clock, "#cccccc"), label=f"{clock} ({STATISTIC})")
    ax2.set_yticks(y, names, fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel("mean per step (ms)")
    ax2.set_title("mean time per stage per step")
    ax2.legend(fontsize=7, loc="lower right")
    fig.suptitle(title or f"lbm profile ({bd.mode} mode)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def device_lane(event: dict[str, Any]) -> str:
    """The timeline track of a device event: its device plane, or the host thread XLA:CPU ran it on."""
    process, thread = str(event.get("process_name") or ""), str(event.get("thread_name") or "")
    if process.startswith("/device"):
        return f"device: {process}" + (f" / {thread}" if thread and thread != "python" else "")
    return f"XLA:CPU kernels (host thread {thread or 'unnamed'})"


def timeline_png(bd: Breakdown, path: Path, n_steps: int = 3, title: str = "") -> Path | None:
    """A timeline of ``n_steps`` steady timesteps: host spans and the device kernels they launched."""
    steady = bd.timeline.get("steady") or []
    if not steady:
        return None
    plt = _pyplot()
    mid = max(0, len(steady) // 2 - n_steps // 2)
    steps = steady[mid: mid + n_steps]
    t0, t1 = steps[0].ts, steps[-1].end
    matched = bd.timeline.get("matched", {})
    unit_of = bd.timeline.get("unit_of", {})
    lanes: dict[str, list[tuple[int, int, str]]] = {"host: timestep": [(s.ts, s.dur, STEP) for s in steps]}
    stage_spans = [s for s in bd.timeline.get("stage_spans", []) if t0 <= s.ts <= t1]
    if stage_spans:
        lanes["host: stage spans"] = [(s.ts, s.dur, s.name) for s in stage_spans]
    dispatches = stage_spans if stage_spans else steps
    for d in dispatches:
        ex = matched.get(d.id)
        if ex is None:
            continue
        for e in ex.events:
            unit = d.name if d.name != STEP else unit_of.get(str(e["hlo_op"]), "(unscoped)")
            lane = device_lane(e)
            lanes.setdefault(lane, []).append((int(e["ts"]), int(e["dur"]), unit))
    fig, ax = plt.subplots(figsize=(15, 0.6 * len(lanes) + 1.8))
    colors = unit_colors(sorted({u for items in lanes.values() for _, _, u in items}))
    seen: dict[str, Any] = {}
    for i, items in enumerate(lanes.values()):
        by_unit: dict[str, list[tuple[float, float]]] = {}
        for ts, dur, unit in items:  # one collection per lane and unit: a TPU chunk holds thousands of ops
            by_unit.setdefault(unit, []).append(((ts - t0) / 1e6, max(dur, 1) / 1e6))
        for unit, bars in by_unit.items():
            bar = ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colors[unit], edgecolors="black", linewidth=0.3,
                                 hatch="//" if "+" in unit else None)
            seen.setdefault(unit, bar)
    ax.set_yticks(range(len(lanes)), list(lanes), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time since the first shown timestep started (ms, trace clock)")
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(title or f"{len(steps)} steady timesteps ({bd.mode} mode): host annotations and device kernels")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
