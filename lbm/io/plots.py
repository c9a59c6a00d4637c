"""PNG plots a person wants to look at: fields with obstacles drawn, profiles, histories."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lbm.io.fields import vorticity


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, run_dir: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return str(path.relative_to(run_dir))


def _plane(fields: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """2D velocity (2, nx, ny), vorticity (the z mid-plane of its magnitude in 3D) and solid mask."""
    u, solid = fields["u"], np.asarray(fields["solid"], dtype=bool)
    vort = fields["vorticity"] if "vorticity" in fields else vorticity(u, solid)
    if u.shape[0] == 3:
        k = u.shape[3] // 2
        return u[:2, :, :, k], vort[:, :, k], solid[:, :, k], f" (z = {k} plane)"
    return u, vort, solid, ""


VORTICITY_LABELS = {2: "vorticity dv/dx - du/dy (1/step)", 3: "vorticity magnitude |curl u| (1/step)"}


def figure_size(nx: int, ny: int, longest: float = 8.0) -> tuple[float, float, float]:
    """(width, height) in inches of a field plot of nx x ny cells, and the aspect of a cell on it.

    The image's longer side is ``longest`` inches; a side ratio beyond 10 (or below 1/2) is drawn at 10 (or 1/2), the
    cells stretched (aspect != 1), so that a long channel stays legible and a few-cell strip is not a sliver; room is
    added for the colour bar and labels.
    """
    ratio = nx / ny
    shown = min(10.0, max(0.5, ratio))
    w, h = (longest, longest / shown) if shown >= 1 else (longest * shown, longest)
    return w + 2.6, h + 1.4, ratio / shown


def draw_solid(ax: Any, solid: np.ndarray) -> None:
    """Solid cells in grey as whole cells (edges at half-integers), outlined where they meet fluid."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import ListedColormap

    if not solid.any():
        return
    nx, ny = solid.shape
    ax.imshow(np.ma.masked_where(~solid, solid).T.astype(float), origin="lower", interpolation="nearest",
              cmap=ListedColormap(["0.55"]), extent=(-0.5, nx - 0.5, -0.5, ny - 0.5), aspect=ax.get_aspect())
    ix, iy = np.nonzero(solid[1:] != solid[:-1])  # faces between x-neighbours
    jx, jy = np.nonzero(solid[:, 1:] != solid[:, :-1])
    segments = [[(i + 0.5, j - 0.5), (i + 0.5, j + 0.5)] for i, j in zip(ix, iy, strict=True)]
    segments += [[(i - 0.5, j + 0.5), (i + 0.5, j + 0.5)] for i, j in zip(jx, jy, strict=True)]
    if segments:
        ax.add_collection(LineCollection(segments, colors="k", linewidths=0.6))


def symmetric_limit(data: np.ma.MaskedArray) -> float:
    """The 99.5th percentile of |data| over unmasked cells (1 when there are none or all are zero)."""
    lim = float(np.percentile(np.abs(data.compressed()), 99.5)) if data.count() else 0.0
    return lim if lim > 0 else 1.0


def colorbar(fig: Any, ax: Any, img: Any, label: str, width: float, **kw: Any) -> Any:
    """A colour bar beside ``ax``, exactly as tall as its image however long the channel; ``width``: in axes widths."""
    cax = ax.inset_axes((1.0 + 0.6 * width, 0.0, width, 1.0))
    return fig.colorbar(img, cax=cax, label=label, **kw)


def field_figures(fields: dict[str, np.ndarray], title: str) -> list[tuple[str, Any]]:
    """(name, figure) of the velocity magnitude and the vorticity, with colour bars and solid cells in grey."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    u, vort, solid, where = _plane(fields)
    speed = np.sqrt(u[0] ** 2 + u[1] ** 2)
    nx, ny = speed.shape
    w, h, aspect = figure_size(nx, ny)
    signed = fields["u"].shape[0] == 2
    out = []
    for name, data, cmap, label, sym in (
        ("velocity_magnitude", speed, "viridis", "|u| (lattice units)", False),
        ("vorticity", vort, "RdBu_r" if signed else "magma", VORTICITY_LABELS[fields["u"].shape[0]], signed),
    ):
        data = np.ma.masked_where(solid, data)
        fig, ax = plt.subplots(figsize=(w, h))
        kw: dict[str, Any] = {}
        if sym:
            lim = symmetric_limit(data)
            kw = {"vmin": -lim, "vmax": lim}
        img = ax.imshow(data.T, origin="lower", cmap=cmap, interpolation="nearest", aspect=aspect,
                        extent=(-0.5, nx - 0.5, -0.5, ny - 0.5), **kw)
        draw_solid(ax, solid)
        ax.set_xlabel("x (cells)")
        ax.set_ylabel("y (cells)")
        for axis in (ax.xaxis, ax.yaxis):  # whole cells: no tick between two cell centres
            axis.set_major_locator(MaxNLocator(integer=True))
        sep = "\n" if w < 6 else " "
        ax.set_title(f"{title}:{sep}{name.replace('_', ' ')}{where}", fontsize="medium")
        colorbar(fig, ax, img, label, 0.2 / (w - 2.6))
        out.append((name, fig))
    return out


def field_plots(run_dir: Path, fields: dict[str, np.ndarray], title: str) -> list[str]:
    """velocity_magnitude.png and vorticity.png with colour bars, solid cells in grey."""
    return [_save(fig, run_dir / "plots" / f"{name}.png", run_dir) for name, fig in field_figures(fields, title)]


def line_points(ax: Any) -> np.ndarray:
    """Display coordinates of every line's points on ``ax`` and of its segments' midpoints (n x 2)."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits before transforming
    pts = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), dtype=np.float64)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if len(xy) > 1:
            xy = np.concatenate([xy, 0.5 * (xy[1:] + xy[:-1])])
        if len(xy):
            pts.append(ax.transData.transform(xy))
    return np.concatenate(pts) if pts else np.empty((0, 2))


def covers(box: Any, pts: np.ndarray, pad: float = 2.0) -> bool:
    """Whether a display-space box (a Bbox) holds any of the points ``pts``, ``pad`` pixels around it included."""
    inside = ((pts[:, 0] >= box.x0 - pad) & (pts[:, 0] <= box.x1 + pad)
              & (pts[:, 1] >= box.y0 - pad) & (pts[:, 1] <= box.y1 + pad))
    return bool(inside.any())


LEGEND_PLACES = ("best", "upper right", "upper left", "lower right", "lower left", "center right", "center left",
                 "upper center", "lower center")


def place_legend(ax: Any, **kw: Any) -> Any:
    """A legend inside ``ax`` where it covers no point of its lines, else outside, to the right of the axes."""
    renderer = ax.figure.canvas.get_renderer()
    pts = line_points(ax)
    for loc in LEGEND_PLACES:
        legend = ax.legend(loc=loc, **kw)
        if not covers(legend.get_window_extent(renderer), pts):
            return legend
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)


def line_figure(series: Sequence[tuple[Sequence[float], Sequence[float], str, str]], *, xlabel: str, ylabel: str,
                title: str, logy: bool = False) -> Any:
    """A figure of (x, y, label, style) series with labelled axes and a legend clear of the lines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for x, y, label, style in series:
        if style == "o":
            ax.plot(x, y, "o", ms=4, label=label, mfc="none")
        else:
            ax.plot(x, y, style, label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    place_legend(ax)
    return fig


def line_plot(
    path: Path,
    series: Sequence[tuple[Sequence[float], Sequence[float], str, str]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    run_dir: Path,
    logy: bool = False,
) -> str:
    """A plot of (x, y, label, style) series with labelled axes and a legend clear of the lines."""
    return _save(line_figure(series, xlabel=xlabel, ylabel=ylabel, title=title, logy=logy), path, run_dir)


def cavity_profiles_plot(run_dir: Path, prof: dict[str, np.ndarray], ref: dict[str, np.ndarray] | None, re: float) -> str:
    """Centre-line u(y) and v(x) of the cavity, with Ghia et al. (1982) points when available."""
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    a1.plot(prof["u"], prof["y"], "-", label="lbm")
    a2.plot(prof["x"], prof["v"], "-", label="lbm")
    if ref is not None:
        a1.plot(ref["u"], ref["y"], "o", mfc="none", label="Ghia et al. 1982")
        a2.plot(ref["x"], ref["v"], "o", mfc="none", label="Ghia et al. 1982")
    a1.set_xlabel("u / U_lid at x = 1/2")
    a1.set_ylabel("y / L")
    a2.set_xlabel("x / L")
    a2.set_ylabel("v / U_lid at y = 1/2")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend()
    fig.suptitle(f"Lid-driven cavity, Re = {re:g}: centre-line profiles")
    return _save(fig, run_dir / "plots" / "profiles.png", run_dir)


def settled_limits(steps: np.ndarray, values: np.ndarray, window: Sequence[int] | None) -> tuple[float, float]:
    """y limits in whose middle half the settled signal lies: the range of the window's part in the run's second
    half (without a window, of the last quarter), at least 0.1% of its size; the start-up runs off the axes instead
    of flattening the converged value to a line."""
    steps, values = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if not len(values):
        return -1.0, 1.0
    if window:
        part = values[(steps >= max(window[0], steps[len(steps) // 2])) & (steps <= window[1])]
    else:
        part = values[len(values) * 3 // 4:]
    if not len(part):
        part = values
    lo, hi = float(np.min(part)), float(np.max(part))
    span = max(hi - lo, 1e-3 * max(abs(lo), abs(hi)), 1e-12)
    mid = 0.5 * (lo + hi)
    return mid - span, mid + span


def with_error(value: float, error: float | None) -> str:
    """``value ± error``, both to the decimal of the error's second significant digit (4 significant without one)."""
    if not error or not math.isfinite(error):
        return f"{value:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(abs(error))))
    return f"{value:.{decimals}f} ± {abs(error):.{decimals}f}"


def _lift_part(metrics: dict[str, Any]) -> list[str]:
    """The lift's statistic: its amplitude and the Strouhal number when it sheds, else its mean value."""
    if metrics.get("strouhal") is not None:
        return [f"cl amplitude = {with_error(metrics['cl_amplitude'], metrics.get('cl_amplitude_error'))}",
                f"St = {with_error(metrics['strouhal'], metrics.get('strouhal_error'))}"]
    cl = metrics.get("cl", metrics.get("cl_mean"))
    return [f"cl = {with_error(cl, None)}"] if cl is not None else []


def force_title(metrics: dict[str, Any]) -> str:
    """The drag, lift (and pressure drop where there is one) with their standard errors, or why there are none;
    wrapped (the values at 100 characters, a note at 80) so that it never widens the plot."""
    if metrics.get("cd_mean") is not None:
        parts = [f"cd = {with_error(metrics['cd_mean'], metrics.get('cd_mean_error'))}", *_lift_part(metrics)]
    elif metrics.get("cd_max") is not None:
        parts = [f"cd max = {with_error(metrics['cd_max'], None)}", f"cl max = {with_error(metrics['cl_max'], None)}"]
    else:
        note = str(metrics.get("stationary_note", "no stationary window: run more steps"))
        return textwrap.fill(note, width=80)
    if metrics.get("dp") is not None:
        parts.append(f"Δp = {with_error(metrics['dp'], None)}")
    elif metrics.get("dp_t8") is not None:
        parts.append(f"Δp(t = 8 s) = {with_error(metrics['dp_t8'], None)}")
    text = ", ".join(parts)
    cycles = metrics.get("stationary_cycles")
    return textwrap.fill(text + f" over {cycles} cycles" if cycles else text, width=100)


def _mark_window(axes: Sequence[Any], metrics: Mapping[str, Any]) -> list[int] | None:
    """Shade the stationary (else the averaging) window on each of ``axes``; returns it (None: neither)."""
    window = metrics.get("stationary_window_steps")
    label = "stationary window"
    if not window and metrics.get("average_window_steps"):
        window, label = metrics["average_window_steps"], "averaging window"
    if window:
        for a in axes:
            a.axvspan(window[0], window[1], color="0.9", zorder=0, label=label)
    return list(window) if window else None


def forces_figure(steps: np.ndarray, cd: np.ndarray, cl: np.ndarray, metrics: dict[str, Any]) -> Any:
    """Drag and lift coefficients against the step, each scaled to its settled part, the window marked."""
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    a1.plot(steps, cd, lw=0.8)
    a2.plot(steps, cl, lw=0.8, color="C1")
    a1.set_ylabel("drag coefficient cd")
    a2.set_ylabel("lift coefficient cl")
    a2.set_xlabel("step")
    window = _mark_window((a1, a2), metrics)
    a1.set_ylim(*settled_limits(steps, cd, window))
    a2.set_ylim(*settled_limits(steps, cl, window))
    if window:
        a1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    a1.set_title(force_title(metrics))
    for a in (a1, a2):
        a.grid(alpha=0.3)
    return fig


def forces_plot(run_dir: Path, steps: np.ndarray, cd: np.ndarray, cl: np.ndarray, metrics: dict[str, Any]) -> str:
    """Drag and lift coefficients against the step, with the averaging window marked."""
    return _save(forces_figure(steps, cd, cl, metrics), run_dir / "plots" / "forces.png", run_dir)


def frame(path: Path, fields: dict[str, np.ndarray], step: int, limit: float | None = None) -> float:
    """One vorticity frame with a colour bar; returns its colour limit (``limit``, else this frame's 99.5th percentile).

    The frames of a run share one limit: the caller passes the first frame's (or the user's) to the others.
    """
    plt = _pyplot()
    _, vort, solid, where = _plane(fields)
    vort = np.ma.masked_where(solid, vort)
    nx, ny = vort.shape
    signed = fields["u"].shape[0] == 2
    lim = symmetric_limit(vort) if limit is None else limit
    w, h, aspect = figure_size(nx, ny, longest=6.0)
    fig, ax = plt.subplots(figsize=(w, h))
    img = ax.imshow(vort.T, origin="lower", cmap="RdBu_r" if signed else "magma", vmin=-lim if signed else 0.0,
                    vmax=lim, interpolation="nearest", aspect=aspect, extent=(-0.5, nx - 0.5, -0.5, ny - 0.5))
    draw_solid(ax, solid)
    colorbar(fig, ax, img, VORTICITY_LABELS[fields["u"].shape[0]], 0.2 / (w - 2.6), extend="both")
    ax.set_title(f"vorticity, step {step}{where}", fontsize="medium")
    ax.set_xlabel("x (cells)")
    ax.set_ylabel("y (cells)")
    fig.tight_layout()  # the figure keeps its size: every frame of a run has the same pixels
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return lim


def animation(run_dir: Path, frames: list[Path]) -> list[str]:
    """plots/vorticity.gif from the frames (Pillow), plus plots/vorticity.mp4 when ffmpeg is installed."""
    import shutil
    import subprocess

    from PIL import Image

    out = run_dir / "plots" / "vorticity.gif"
    out.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.open(p).convert("P", palette=Image.Palette.ADAPTIVE) for p in frames]
    images[0].save(out, save_all=True, append_images=images[1:], duration=120, loop=0)
    written = [str(out.relative_to(run_dir))]
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg:
        listing = run_dir / "frames" / "frames.txt"
        listing.write_text("".join(f"file '{p.resolve()}'\nduration 0.12\n" for p in frames))
        mp4 = run_dir / "plots" / "vorticity.mp4"
        proc = subprocess.run([ffmpeg, "-y", "-loglevel", "error", "-f", "concat", "-safe", "0", "-i", str(listing),
                               "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", "-pix_fmt", "yuv420p", str(mp4)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            written.append(str(mp4.relative_to(run_dir)))
    return written


def oscillation_period(steps: np.ndarray, values: np.ndarray) -> float | None:
    """Period (steps) of the strongest oscillation in the second half of an evenly sampled signal; None where it
    spans fewer than two periods or is a ringing left from the start-up (its spread under 1% of the whole range)."""
    steps, values = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    half = len(values) // 2
    x = values[half:] - np.mean(values[half:]) if len(values) >= 16 else np.zeros(0)
    if not len(x) or not np.all(np.isfinite(values)) or np.std(x) <= 0.01 * np.ptp(values):
        return None
    k = int(np.argmax(np.abs(np.fft.rfft(x * np.hanning(len(x))))[1:])) + 1
    return len(x) / k * float(np.median(np.diff(steps[half:]))) if k >= 2 else None


def aliasing_note(sample_steps: np.ndarray, series: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> str | None:
    """Why samples taken at ``sample_steps`` cannot follow the series' oscillation (None: they can)."""
    if len(sample_steps) < 2:
        return None
    every = float(np.median(np.diff(sample_steps)))
    for name, (steps, values) in series.items():
        period = oscillation_period(steps, values)
        if period is not None and every > 0.5 * period:
            return (f"sampled every {every:.0f} steps, more than half the {period:.0f}-step period of {name}: "
                    "the samples alias it, so they are not joined")
    return None


def monitor_figure(rows: list[tuple[int, float, float]], mass0: float,
                   series: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None, series_label: str = "",
                   window: Sequence[int] | None = None) -> Any:
    """Mass drift, kinetic energy and each of the case's ``series`` (name -> (steps, values)) in a panel of its own,
    scaled to the settled flow (``window``: the stationary steps, else the last quarter)."""
    plt = _pyplot()
    arr = np.array(rows, dtype=np.float64)
    series = dict(series or {})
    n = 2 + len(series)
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.1 * n + 0.6), sharex=True)
    note = aliasing_note(arr[:, 0], series)
    axes[0].plot(arr[:, 0], arr[:, 1] / mass0 - 1.0, "o" if note else ".-", ms=3 if note else 6)
    axes[0].set_ylabel("relative mass drift")
    if note:
        axes[0].set_title(textwrap.fill(note, width=90), fontsize="small")
    axes[1].plot(arr[:, 0], arr[:, 2], ".-", color="C2")
    axes[1].set_ylabel("kinetic energy\n(lattice units)")
    win = list(window) if window else None
    for i, (a, (name, (steps, values))) in enumerate(zip(axes[2:], series.items(), strict=True)):
        a.plot(steps, values, lw=0.8, color=f"C{i}")
        a.set_ylabel(f"{name}\n({series_label})" if series_label else name)
        if win:
            a.axvspan(win[0], win[1], color="0.9", zorder=0, label="stationary window")
        a.set_ylim(*settled_limits(steps, values, win))
    if win and series:
        axes[2].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1].set_xlabel("step")
    for a in axes:
        a.grid(alpha=0.3)
    fig.suptitle("monitored quantities")
    return fig


def monitor_plot(run_dir: Path, rows: list[tuple[int, float, float]], mass0: float,
                 series: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None, series_label: str = "",
                 window: Sequence[int] | None = None) -> str:
    """plots/monitor.png: mass drift, kinetic energy and the case's ``series`` (e.g. drag and lift, labelled
    ``series_label``) against the step, each series scaled to the settled flow (``window``: the stationary steps)."""
    return _save(monitor_figure(rows, mass0, series, series_label, window), run_dir / "plots" / "monitor.png", run_dir)
