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

    The image's longer side is ``longest`` inches; a side ratio beyond 10 is drawn at 10 (cells stretched,
    aspect != 1) so that a thin channel stays legible; room is added for the colour bar and labels.
    """
    ratio = nx / ny
    shown = min(10.0, max(0.1, ratio))
    w, h = (longest, longest / shown) if shown >= 1 else (longest * shown, longest)
    return w + 2.6, h + 1.4, shown / ratio


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


def field_plots(run_dir: Path, fields: dict[str, np.ndarray], title: str) -> list[str]:
    """velocity_magnitude.png and vorticity.png with colour bars, solid cells in grey."""
    plt = _pyplot()
    u, vort, solid, where = _plane(fields)
    speed = np.sqrt(u[0] ** 2 + u[1] ** 2)
    nx, ny = speed.shape
    w, h, aspect = figure_size(nx, ny)
    signed = fields["u"].shape[0] == 2
    written = []
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
        sep = "\n" if w < 6 else " "
        ax.set_title(f"{title}:{sep}{name.replace('_', ' ')}{where}", fontsize="medium")
        fig.colorbar(img, ax=ax, label=label, shrink=0.85)
        written.append(_save(fig, run_dir / "plots" / f"{name}.png", run_dir))
    return written


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
    """A plot of (x, y, label, style) series with labelled axes and a legend."""
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
    ax.legend()
    return _save(fig, path, run_dir)


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


def settled_limits(steps: np.ndarray, values: np.ndarray, window: list[int] | None) -> tuple[float, float]:
    """y limits that show the stationary window (else the second half of the run), not the start-up spike."""
    steps, values = np.asarray(steps), np.asarray(values)
    if window:
        part = values[(steps >= window[0]) & (steps <= window[1])]
    else:
        part = values[len(values) // 2:]
    if not len(part):
        part = values
    lo, hi = float(np.min(part)), float(np.max(part))
    pad = 0.25 * (hi - lo) + 1e-3
    return lo - pad, hi + pad


def with_error(value: float, error: float | None) -> str:
    """``value ± error``, both to the decimal of the error's second significant digit (4 significant without one)."""
    if not error or not math.isfinite(error):
        return f"{value:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(abs(error))))
    return f"{value:.{decimals}f} ± {abs(error):.{decimals}f}"


def force_title(metrics: dict[str, Any]) -> str:
    """The force statistics with their standard errors in one line, or why there are none (wrapped to the plot)."""
    if metrics.get("cd_mean") is None:
        note = str(metrics.get("stationary_note", "no stationary window: run more steps"))
        return textwrap.fill(note, width=80)
    text = f"cd = {with_error(metrics['cd_mean'], metrics.get('cd_mean_error'))}"
    if metrics.get("strouhal") is not None:
        text += (f", cl amplitude = {with_error(metrics['cl_amplitude'], metrics.get('cl_amplitude_error'))}"
                 f", St = {with_error(metrics['strouhal'], metrics.get('strouhal_error'))}")
    cycles = metrics.get("stationary_cycles")
    return text + f" over {cycles} cycles" if cycles else text


def forces_plot(run_dir: Path, steps: np.ndarray, cd: np.ndarray, cl: np.ndarray, metrics: dict[str, Any]) -> str:
    """Drag and lift coefficients against the step, with the averaging window marked."""
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    a1.plot(steps, cd, lw=0.8)
    a2.plot(steps, cl, lw=0.8, color="C1")
    a1.set_ylabel("drag coefficient cd")
    a2.set_ylabel("lift coefficient cl")
    a2.set_xlabel("step")
    window = metrics.get("stationary_window_steps")
    if window:
        for a in (a1, a2):
            a.axvspan(window[0], window[1], color="0.9", zorder=0, label="stationary window")
    a1.set_ylim(*settled_limits(steps, cd, window))
    if window:
        a1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    a1.set_title(force_title(metrics))
    for a in (a1, a2):
        a.grid(alpha=0.3)
    return _save(fig, run_dir / "plots" / "forces.png", run_dir)


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
    fig.colorbar(img, ax=ax, label=VORTICITY_LABELS[fields["u"].shape[0]], shrink=0.85, extend="both")
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


def monitor_plot(run_dir: Path, rows: list[tuple[int, float, float]], mass0: float,
                 series: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None, series_label: str = "",
                 window: Sequence[int] | None = None) -> str:
    """Mass drift, kinetic energy and the case's ``series`` (name -> (steps, values); e.g. drag and lift, labelled
    ``series_label``) against the step, the series scaled to the settled flow (``window``: the stationary steps)."""
    plt = _pyplot()
    arr = np.array(rows, dtype=np.float64)
    n = 3 if series else 2
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.3 * n + 0.6), sharex=True)
    axes[0].plot(arr[:, 0], arr[:, 1] / mass0 - 1.0, ".-")
    axes[0].set_ylabel("relative mass drift")
    axes[1].plot(arr[:, 0], arr[:, 2], ".-", color="C2")
    axes[1].set_ylabel("kinetic energy\n(lattice units)")
    if series:
        for name, (steps, values) in series.items():
            axes[2].plot(steps, values, lw=0.8, label=name)
        axes[2].set_ylabel(series_label)
        win = list(window) if window else None
        if win:
            axes[2].axvspan(win[0], win[1], color="0.9", zorder=0, label="stationary window")
        limits = [settled_limits(steps, values, win) for steps, values in series.values()]
        axes[2].set_ylim(min(lo for lo, _ in limits), max(hi for _, hi in limits))
        axes[2].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1].set_xlabel("step")
    for a in axes:
        a.grid(alpha=0.3)
    fig.suptitle("monitored quantities")
    return _save(fig, run_dir / "plots" / "monitor.png", run_dir)
