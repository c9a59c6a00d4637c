"""Plots a person reads: sizes, solid cells, titles to the right precision, legends clear of the data, ticks."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from lbm.io import plots
from lbm.io.fields import with_wall_velocity


def channel_fields(nx: int, ny: int) -> dict[str, np.ndarray]:
    """A half-way-wall channel with a parabolic u_x (walls in the rows 0 and ny - 1)."""
    y = np.arange(ny) - 0.5
    ux = np.tile(0.01 * y * (ny - 2 - y), (nx, 1))
    solid = np.zeros((nx, ny), bool)
    solid[:, [0, -1]] = True
    return with_wall_velocity({"rho": np.ones((nx, ny)), "u": np.stack([ux, 0 * ux]), "solid": solid}, None)


def test_a_thin_channel_gives_plots_of_a_readable_size(tmp_path):
    written = plots.field_plots(tmp_path, channel_fields(4, 34), "poiseuille")
    for name in written:
        width, height = Image.open(tmp_path / name).size
        assert height <= 1200 and width <= 1200 and width >= 150  # was 567 x 2991 px for this grid


def test_solid_cells_fill_whole_cells_up_to_the_axes_edge():
    plt = plots._pyplot()
    nx = ny = 10
    solid = np.zeros((nx, ny), bool)
    solid[[0, -1], :] = solid[:, [0, -1]] = True  # a ring of wall cells on the border
    fig, ax = plt.subplots(figsize=(4, 4))
    ax.imshow(np.ma.masked_where(solid, np.ones((nx, ny))).T, origin="lower", cmap="viridis",
              extent=(-0.5, nx - 0.5, -0.5, ny - 0.5))
    plots.draw_solid(ax, solid)
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    box = ax.get_window_extent()
    height = rgba.shape[0]
    # pixels 3 px inside each corner and mid-edge of the axes: all within the outer wall cells, so grey
    xs = [box.x0 + 3, box.x1 - 3, 0.5 * (box.x0 + box.x1)]
    ys = [box.y0 + 3, box.y1 - 3]
    for x in xs:
        for y in ys:
            r, g, b, _ = rgba[int(height - y), int(x)]
            assert abs(int(r) - 140) < 12 and r == g == b, (x, y, (r, g, b))
    plt.close(fig)


@pytest.mark.parametrize("value,error,text", [(0.71917, 0.00251, "0.7192 ± 0.0025"), (2.3871, 0.12, "2.39 ± 0.12"),
                                             (1.686134, 5.0e-5, "1.686134 ± 0.000050"), (123.4, 12.0, "123 ± 12"),
                                             (0.0011, None, "0.0011")])
def test_values_are_written_to_the_precision_of_their_error(value, error, text):
    assert plots.with_error(value, error) == text


def test_force_title_gives_each_value_the_decimals_of_its_error():
    title = plots.force_title({"cd_mean": 2.38712, "cd_mean_error": 0.1234, "cl_amplitude": 0.00114,
                               "cl_amplitude_error": 0.00103, "strouhal": 0.2341, "strouhal_error": 3.1e-5,
                               "stationary_cycles": 6})
    pairs = re.findall(r"(-?\d+\.?(\d*)) ± (\d+\.?(\d*))", title)
    assert len(pairs) == 3 and all(len(v[1]) == len(v[3]) for v in pairs), title
    assert title.endswith("over 6 cycles")


class FakeCylinder:
    """A case with forces: per-step rows [step, fx, fy, cd, cl]."""

    def coefficients(self) -> np.ndarray:
        steps = np.arange(1, 601, dtype=float)
        cd = 1.6 + 0.1 * np.sin(steps / 40.0)
        cl = 0.7 * np.sin(steps / 80.0)
        return np.stack([steps, cd, cl, cd, cl], axis=1)


def legend_overlaps(fig) -> list[bool]:
    """For every legend of ``fig``: does it cover its axes' plotting area?"""
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            out.append(legend.get_window_extent().overlaps(ax.get_window_extent()))
    return out


def test_legends_stay_off_the_data(tmp_path, monkeypatch):
    seen: list[list[bool]] = []
    real_save = plots._save

    def checking_save(fig, path, run_dir):
        seen.append(legend_overlaps(fig))
        return real_save(fig, path, run_dir)

    monkeypatch.setattr(plots, "_save", checking_save)
    rows = [(s, 1000.0, 0.5) for s in range(100, 601, 100)]
    window = {"stationary_window_steps": [300, 600]}
    forces = FakeCylinder().coefficients()
    series = {"cd": (forces[:, 0], forces[:, -2]), "cl": (forces[:, 0], forces[:, -1])}
    plots.monitor_plot(tmp_path, rows, 1000.0, series, "force coefficients", window["stationary_window_steps"])
    plots.forces_plot(tmp_path, forces[:, 0], forces[:, -2], forces[:, -1],
                      window | {"cd_mean": 1.6, "cd_mean_error": 0.01})
    assert seen == [[False], [False]]


def test_convergence_plot_ticks_are_the_grid_sizes(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from lbm.bench.convergence import plot

    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), real_close(fig)))
    record = {"case": "taylor_green", "order": 2.0, "error": "velocity L2 error",
              "grids": [{"n": n, "error": 2.5 / n**2} for n in (16, 24, 32)]}
    plot(record, tmp_path / "convergence.png")
    ax = figures[0].axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    assert labels == ["16", "24", "32"]
    assert ax.xaxis.get_minorticklabels() == [] or all(not t.get_text() for t in ax.xaxis.get_minorticklabels())


def test_force_title_without_a_window_is_the_note_wrapped_to_the_plot():
    """A long reason must not widen the figure: the title is the note itself, in lines of at most 80 characters."""
    note = ("no statistically stationary window in 1500 steps (even the last 4 batches: its batches are shorter "
            "than its oscillation's period (173 samples); 7.5 lift periods in the second half): run more steps")
    title = plots.force_title({"cd_mean": None, "stationary_note": note})
    assert title.replace("\n", " ") == note and max(len(line) for line in title.split("\n")) <= 80
