"""Plots right at a glance, checked on the figures: legends off the curves, axes scaled to the settled signal, colour
bars no taller than their image, fields at a legible side ratio, titles that say what the values are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.reports import drawn

from lbm.io import plots

REFERENCE = Path(plots.__file__).parents[1] / "reference" / "tgv_re1600_spectral_512.csv"


def dense_points(ax, per_segment: int = 8) -> np.ndarray:
    """Display coordinates along every line of ``ax``, ``per_segment`` points on each segment."""
    out = []
    for line in ax.get_lines():
        xy = ax.transData.transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        f = np.linspace(0.0, 1.0, per_segment, endpoint=False)
        out.append((xy[:-1, None, :] + f[None, :, None] * (xy[1:] - xy[:-1])[:, None, :]).reshape(-1, 2))
    return np.concatenate(out)


def tgv_series():
    """The reference's dissipation, an under-resolved run's earlier peak and its low enstrophy curve (as at 24^3)."""
    lines = [line for line in REFERENCE.read_text().splitlines() if line and not line.startswith("#")]
    ref = dict(zip(lines[0].split(","), np.loadtxt(lines[1:], delimiter=",").T, strict=True))
    t = np.linspace(0.0, 20.0, 400)
    eps = np.interp(t + 2.3, ref["t"], ref["dissipation"])
    enstrophy = 4.5e-4 + 1.8e-3 * np.exp(-(((t - 6.5) / 4.5) ** 2)) + 1e-4 * t / 20
    return [(ref["t"], ref["dissipation"], "spectral DNS 512^3 (reference)", "k-"), (t, eps, "-dK/dt", "-"),
            (t, enstrophy, "2 nu enstrophy", "--")]


def test_the_dissipation_legend_covers_no_curve():
    fig = plots.line_figure(tgv_series(), xlabel="t (L / V0)", ylabel="dissipation rate (V0^3 / L)",
                            title="Taylor-Green vortex Re 1600, 24^3 d3q27 cumulant")
    renderer = drawn(fig)
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent(renderer)
    pts = dense_points(ax)
    inside = (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)
    assert not inside.any(), f"the legend covers {inside.sum()} points of the curves"


def steady_forces(n: int = 4000):
    """A DFG 2D-1-like run: cd settles at 5.58 with a decaying acoustic ringing, cl at 0.0108 after a start-up of
    -10..25; the averaging window is the last 800 steps."""
    steps = np.arange(1, n + 1, dtype=float)
    ring = np.exp(-steps / 250.0) * np.sin(steps / 7.0)
    cd = 5.58 + 3.0 * ring + 0.002 * np.sin(steps / 50.0)
    cl = 0.0108 + 17.5 * ring + 7.5 * np.exp(-steps / 100.0) + 2e-5 * np.sin(steps / 50.0)
    metrics = {"cd": 5.58, "cl": 0.0108, "dp": 0.1175, "cd_mean": 5.58, "average_window_steps": [n - 799, n]}
    return steps, cd, cl, metrics


def settled_fraction(ax, values: np.ndarray, steps: np.ndarray, window) -> tuple[float, float, float]:
    """The settled part's (bottom margin, top margin, height) as fractions of the axis' span."""
    lo, hi = ax.get_ylim()
    part = values[(steps >= window[0]) & (steps <= window[1])]
    span = hi - lo
    return (part.min() - lo) / span, (hi - part.max()) / span, (part.max() - part.min()) / span


def test_force_axes_follow_the_converged_signal_with_the_start_up_running_off():
    steps, cd, cl, metrics = steady_forces()
    fig = plots.forces_figure(steps, cd, cl, metrics)
    a1, a2 = fig.axes[:2]
    window = metrics["average_window_steps"]
    for ax, values in ((a1, cd), (a2, cl)):
        below, above, height = settled_fraction(ax, values, steps, window)
        assert below >= 0.1 and above >= 0.1, (below, above)  # off the edges
        assert height >= 0.2, height  # not a flat line
        lo, hi = ax.get_ylim()
        assert values.max() > hi or values.min() < lo  # the start-up exceeds the axes (it is drawn, not rescaled to)
    assert a2.get_ylim()[1] - a2.get_ylim()[0] < 0.01  # was -10..25: cl = 0.0108 a flat line
    title = a1.get_title()
    assert "cd = 5.58" in title and "cl = 0.0108" in title and "Δp = 0.1175" in title


def test_force_titles_name_drag_lift_and_pressure_drop_of_every_variant():
    shedding = plots.force_title({"cd_mean": 3.23, "cd_mean_error": 0.01, "cl_amplitude": 0.99,
                                  "cl_amplitude_error": 0.02, "strouhal": 0.301, "strouhal_error": 0.001})
    assert "cd = " in shedding and "cl amplitude = " in shedding and "St = " in shedding
    steady_cylinder = plots.force_title({"cd_mean": 1.6, "cd_mean_error": 0.01, "cl_mean": 2e-5, "strouhal": None})
    assert "cl = 2e-05" in steady_cylinder
    unsteady = plots.force_title({"cd_mean": None, "cd_max": 2.95, "cl_max": 0.48, "dp_t8": -0.11})
    assert unsteady == "cd max = 2.95, cl max = 0.48, Δp(t = 8 s) = -0.11"


def monitor_rows(every: int, n: int, period: float) -> tuple[list[tuple[int, float, float]], dict]:
    """Monitor rows every ``every`` steps of a mass oscillating with the lift, whose period is ``period`` steps."""
    steps = np.arange(1, n + 1, dtype=float)
    cd = 1.4 + 0.05 * np.sin(4 * np.pi * steps / period)
    cl = 0.7 * np.sin(2 * np.pi * steps / period)
    rows = [(s, 1000.0 * (1 + 5e-4 * np.sin(2 * np.pi * s / period)), 10.0) for s in range(every, n + 1, every)]
    return rows, {"cd": (steps, cd), "cl": (steps, cl)}


def test_monitor_gives_each_coefficient_a_panel_scaled_to_it():
    steps, cd, cl, _ = steady_forces()
    rows = [(s, 1000.0, 2.0) for s in range(400, 4001, 400)]
    fig = plots.monitor_figure(rows, 1000.0, {"cd": (steps, cd), "cl": (steps, cl)}, "force coefficients", None)
    panels = {ax.get_ylabel().split("\n")[0]: ax for ax in fig.axes}
    late = [len(steps) * 3 // 4 + 1, len(steps)]
    for name, values in (("cd", cd), ("cl", cl)):
        below, above, height = settled_fraction(panels[name], values, steps, late)
        assert below >= 0.1 and above >= 0.1 and height >= 0.2, (name, below, above, height)


def test_monitor_does_not_join_mass_samples_that_alias_the_shedding():
    rows, series = monitor_rows(every=1000, n=12000, period=1300.0)
    fig = plots.monitor_figure(rows, 1000.0, series, "force coefficients")
    mass = fig.axes[0].get_lines()[0]
    assert mass.get_linestyle() == "None" and "alias" in fig.axes[0].get_title()
    rows, series = monitor_rows(every=100, n=12000, period=1300.0)  # 13 samples a period: joined, no note
    fig = plots.monitor_figure(rows, 1000.0, series, "force coefficients")
    assert fig.axes[0].get_lines()[0].get_linestyle() == "-" and fig.axes[0].get_title() == ""


def channel(nx: int, ny: int, cylinder: bool) -> dict[str, np.ndarray]:
    """A channel's fields with walls at y = 0 and ny - 1, and a cylinder at nx / 10 when asked."""
    x, y = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    solid = (y == 0) | (y == ny - 1)
    if cylinder:
        solid |= (x - nx / 10) ** 2 + (y - ny / 2) ** 2 < (ny / 8) ** 2
    ux = np.where(solid, 0.0, 0.01 * y * (ny - 1 - y))
    return {"rho": np.ones((nx, ny)), "u": np.stack([ux, 0.1 * ux * np.sin(x / 5)]), "solid": solid}


@pytest.mark.parametrize("nx, ny, cylinder", [(221, 43, True), (4, 34, False)])
def test_colour_bars_are_no_taller_than_their_field(nx, ny, cylinder):
    for name, fig in plots.field_figures(channel(nx, ny, cylinder), "schafer_turek Re=20"):
        renderer = drawn(fig)
        image = fig.axes[0]
        (bar,) = image.child_axes
        box, bar_box = image.get_window_extent(renderer), bar.get_window_extent(renderer)
        assert bar_box.height <= box.height + 1.0, (name, bar_box.height, box.height)
        assert bar_box.x0 >= box.x1  # beside it, not over it


@pytest.mark.parametrize("nx, ny, shown", [(4, 34, 0.5), (400, 20, 10.0), (221, 43, 221 / 43)])
def test_fields_are_drawn_at_their_side_ratio_within_half_to_ten(nx, ny, shown):
    """A 4-cell strip is drawn half as wide as tall, with a one-line title; a 20:1 channel at 10:1."""
    for name, fig in plots.field_figures(channel(nx, ny, False), "poiseuille Re=10"):
        renderer = drawn(fig)
        ax = fig.axes[0]
        box = ax.get_window_extent(renderer)
        assert box.width / box.height == pytest.approx(shown, rel=0.03), (name, box.width, box.height)
        assert "\n" not in ax.get_title()
        assert ax.title.get_window_extent(renderer).width <= fig.bbox.width
