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


def short_name(name: str, width: int = 30) -> str:
    """A row name for a tick label: a fused set's stages wrapped at its '+' into lines of about ``width`` characters."""
    lines = [""]
    for part in name.split("+"):
        if lines[-1] and len(lines[-1]) + len(part) + 1 > width:
            lines.append("")
        lines[-1] += ("+" if lines[-1] else "") + part
    return "+\n".join(lines)


def label_fitting(ax: Any, x: float, y: float, width: float, text: str) -> Any | None:
    """Text centred at (x, y) if it fits inside a bar segment ``width`` data units wide (at 7 points, else 6), else
    nothing: the legend names a segment too narrow for its label."""
    renderer = ax.figure.canvas.get_renderer()
    left, right = ax.transData.transform([(x - width / 2, y), (x + width / 2, y)])[:, 0]
    for size in (7, 6):
        label = ax.text(x, y, text, ha="center", va="center", fontsize=size,  # legible over a fused set's hatch
                        bbox={"facecolor": "white", "alpha": 0.75, "linewidth": 0, "pad": 1.0})
        if label.get_window_extent(renderer).width <= 0.92 * (right - left):
            return label
        label.remove()
    return None


def _shares(ax: Any, tables: list[tuple[str, Any, list[dict[str, Any]]]],
            colors: dict[str, str]) -> list[tuple[float, float, float, str]]:
    """The left panel: per clock, a stacked bar of each row's share; returns the labels (x, y, width, text) to place
    once the layout is final."""
    inside = []
    ax.set_xlim(0, 100)
    ax.set_ylim(-0.6, len(tables) - 0.4)
    for i, (_, _, rows) in enumerate(tables):
        left = 0.0
        for r in rows:
            v = r.get("share") or 0.0
            if v <= 0:
                continue
            ax.barh(i, v * 100, left=left, color=colors[r["stage"]], edgecolor="black", linewidth=0.5,
                    hatch="//" if "+" in r["stage"] else None, label=r["stage"])
            inside.append((left + v * 50, i, v * 100, short_name(r["stage"], 14) + f"\n{v * 100:.0f}%"))
            left += v * 100
    ax.set_yticks(range(len(tables)), [f"{clock}\n({STATISTIC})" for clock, _, _ in tables])
    ax.set_xlabel(f"share of the sum of the stages' {STATISTIC} per step (%)")
    ax.set_title("where a timestep goes")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax.legend(uniq.values(), [short_name(n, 40) for n in uniq], fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.18), ncol=3)
    return inside


def _means(ax: Any, tables: list[tuple[str, Any, list[dict[str, Any]]]], names: list[str]) -> None:
    """The right panel: each row's mean per step on each clock, its value and share written beside its bar."""
    y = list(range(len(names)))
    h = 0.8 / max(1, len(tables))
    palette = {"device": "#fb8072", "host": "#80b1d3"}
    top = max((r.get("mean_ms") or 0.0 for _, _, rows in tables for r in rows), default=0.0) or 1.0
    for i, (clock, _, rows) in enumerate(tables):
        by_name = {r["stage"]: r for r in rows}
        ys = [v - 0.4 + h * (i + 0.5) for v in y]
        means = [by_name.get(n, {}).get("mean_ms") or 0.0 for n in names]
        ax.barh(ys, means, height=h, color=palette.get(clock, "#cccccc"), label=f"{clock} ({STATISTIC})")
        for yy, n, m in zip(ys, names, means, strict=True):
            share = by_name.get(n, {}).get("share")
            if m > 0:
                ax.text(m + 0.01 * top, yy, f"{m:.3g} ms" + (f" ({share * 100:.1f}%)" if share else ""),
                        va="center", fontsize=6.5)
    ax.set_xlim(0, 1.3 * top)
    ax.set_yticks(y, [short_name(n) for n in names], fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel("mean per step (ms)")
    ax.set_title("mean time per stage per step")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)


def breakdown_figure(bd: Breakdown, title: str = "") -> Any:
    """Stacked bars of each row's share of the stages' mean time per step (one bar per clock), and the means."""
    plt = _pyplot()
    tables = [(clock, t, t.timed()) for clock, t in bd.tables.items() if t.timed()]
    names = list(dict.fromkeys(r["stage"] for _, _, rows in tables for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.1, 1]})
    labels = _shares(ax1, tables, unit_colors(names))
    _means(ax2, tables, names)
    fig.suptitle(title or f"lbm profile ({bd.mode} mode)", fontsize=11)
    fig.tight_layout()
    for label in labels:  # inside the bars: measured against the final layout
        label_fitting(ax1, *label)
    return fig


def breakdown_png(bd: Breakdown, path: Path, title: str = "") -> Path:
    """breakdown.png: the shares of the stages' mean time per step (one bar per clock), and the means."""
    plt = _pyplot()
    fig = breakdown_figure(bd, title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def device_lane(event: dict[str, Any]) -> str:
    """The timeline track of a device event: its device plane, or the host thread XLA:CPU ran it on."""
    process, thread = str(event.get("process_name") or ""), str(event.get("thread_name") or "")
    if process.startswith("/device"):
        return f"device: {process}" + (f" / {thread}" if thread and thread != "python" else "")
    return f"XLA:CPU kernels (host thread {thread or 'unnamed'})"


def shown_steps(spans: list[Any]) -> tuple[str, str]:
    """What the timeline's host spans are, for its title ("1 steady chunk of 20 timesteps") and its host lane."""
    steps = sum(s.steps for s in spans)
    if all(s.steps == 1 for s in spans):
        return f"{len(spans)} steady timestep{'s' if len(spans) != 1 else ''}", "timestep"
    if len(spans) == 1:
        return f"1 steady chunk of {steps} timesteps", f"chunk ({steps} timesteps)"
    return f"{len(spans)} steady chunks of {steps} timesteps in all", f"chunks ({steps} timesteps)"


def timeline_png(bd: Breakdown, path: Path, n_steps: int = 3, title: str = "") -> Path | None:
    """A timeline of ``n_steps`` steady host spans (timesteps, or a fused run's chunks of many) and the device
    kernels they launched; the title (after ``title``) says which and how many timesteps they hold."""
    steady = bd.timeline.get("steady") or []
    if not steady:
        return None
    plt = _pyplot()
    mid = max(0, len(steady) // 2 - n_steps // 2)
    steps = steady[mid: mid + n_steps]
    t0, t1 = steps[0].ts, steps[-1].end
    matched = bd.timeline.get("matched", {})
    unit_of = bd.timeline.get("unit_of", {})
    what, span = shown_steps(steps)
    lanes: dict[str, list[tuple[int, int, str]]] = {f"host: {span}": [(s.ts, s.dur, STEP) for s in steps]}
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
    ax.set_xlabel(f"time since the first shown {span.split(' ')[0].rstrip('s')} started (ms, trace clock)")
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(f"{title}: {what}" if title else f"{what} ({bd.mode} mode): host annotations and device kernels")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
