"""case=obstacle: a shape from an image or an array, placed in the channel, with forces like the cylinder's."""

import numpy as np
import pytest
from helpers.runs import advance, run_config

from lbm.cases.obstacle import read_mask
from lbm.config import load
from lbm.errors import ConfigError
from lbm.simulation import make_case


@pytest.fixture
def triangle_png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img = np.ones((20, 30, 3))
    yy, xx = np.mgrid[0:20, 0:30]
    solid = (xx > 4) & (xx < 25) & (np.abs(yy - 10) < (xx - 4) * 0.45)
    img[solid] = 0.0
    path = tmp_path / "triangle.png"
    plt.imsave(path, img)
    return path, solid


def test_image_dark_pixels_become_solid_cells_upright(triangle_png):
    path, solid = triangle_png
    mask = read_mask(path, 2)
    assert mask.shape == (30, 20)  # (x, y): columns along x, rows from the top along -y
    np.testing.assert_array_equal(mask, solid[::-1].T)


@pytest.mark.slow  # two 300-step cylinder runs (5 s cold, 2 cores); the fast lane keeps a mask read from .npy and .png
# (the image test above, the bad .npy masks' refusals below) and the obstacle case's run and forces (the triangle's)
def test_array_mask_equals_the_cylinder_case_exactly(tmp_path):
    """The cylinder's own mask given as a .npy gives the same flow and forces (same BCs, same viscosity)."""
    common = ["grid.nx=80", "grid.ny=36", "steps=300", "flow.tau=0.6", "case.inlet=nebb", "case.bounce_back=fullway"]
    cyl_case, cyl_setup, cyl_fields = advance(run_config(*common))
    path = tmp_path / "circle.npy"
    solid = cyl_setup.solid
    coords = np.argwhere(solid)
    np.save(path, solid[tuple(slice(a, b + 1) for a, b in zip(coords.min(0), coords.max(0), strict=True))])
    center = [float(v) for v in (coords.min(0) + coords.max(0) + 1) / 2]
    obs_case, obs_setup, obs_fields = advance(run_config("case=obstacle", f"case.mask={path}",
                                                         f"case.center=[{center[0]},{center[1]}]", *common))
    np.testing.assert_array_equal(obs_setup.solid, solid)
    np.testing.assert_array_equal(obs_fields["f"], cyl_fields["f"])
    np.testing.assert_array_equal(np.concatenate(obs_case.force_rows), np.concatenate(cyl_case.force_rows))
    assert obs_case.diameter == solid.any(axis=0).sum()  # the frontal height, in cells


@pytest.mark.slow  # 4000 native steps (5.0 CPU-s cold, one process): the obstacle's stationary cd is checked in the
# slow lane (here and the ellipse below); the fast lane keeps the .png read (test_image_dark_pixels...) and the
# frontal area and blockage (test_blockage_and_resolution...)
def test_triangle_reports_forces(triangle_png):
    path, solid = triangle_png
    case, setup, fields = advance(run_config("case=obstacle", f"case.mask={path}", "grid.nx=120", "grid.ny=48",
                                             "flow.reynolds=20", "steps=4000", "output.every=500"))
    m = case.metrics(setup, fields, 4000)
    assert np.all(np.isfinite(case.coefficients()))
    assert setup.solid.sum() == solid.sum()
    assert setup.derived["frontal_height"] == solid.any(axis=1).sum()
    # measured: cd 4.8966 +- 0.0008 over steps 1778-4000 (a blunt wedge at Re 20, blocking 35% of a periodic
    # channel), 4.8978 +- 0.0002 over 3001-6000; cl 1.2e-4. A window spans four convective times D/U (4 x 425
    # steps): 1500 steps hold none (they once gave 4.926 +- 0.025 over steps 901-1500, the wake still settling)
    assert m["stationary_batch_min_steps"] == 425 and m["stationary_window_steps"][1] - m["stationary_window_steps"][0] >= 1700
    assert m["cd_mean"] == pytest.approx(4.8978, abs=0.003) and m["cd_mean_error"] < 0.002
    assert abs(m["cl_mean"]) < 5e-3  # symmetric shape, symmetric flow: only the 1e-4 inflow perturbation


@pytest.mark.slow
def test_voxel_mask_in_3d(tmp_path):
    cube = np.zeros((4, 4, 3), bool)
    cube[1:3, 1:3, :] = True
    path = tmp_path / "cube.npy"
    np.save(path, cube)
    case, setup, fields = advance(run_config("case=obstacle", f"case.mask={path}", "lattice=d3q19", "grid.nx=24",
                                             "grid.ny=12", "grid.nz=6", "steps=20"))
    assert setup.solid.sum() == 2 * 2 * 3
    assert np.all(np.isfinite(np.concatenate(case.force_rows)))


@pytest.mark.parametrize("mask,extra,message", [
    (None, [], "path of an image"),
    ("missing.png", [], "existing"),
    ("empty.npy", [], "at least one solid"),
    ("flat.npy", ["lattice=d3q19", "grid.nz=8"], "3D array"),
    ("big.npy", [], "fits"),
    ("soft.npy", [], r"0 and 1 only \(this float64 array holds values in \[0, 0.9"),
])
def test_bad_masks_are_one_line_errors(tmp_path, mask, extra, message):
    np.save(tmp_path / "empty.npy", np.zeros((3, 3), bool))
    np.save(tmp_path / "flat.npy", np.ones((3, 3), bool))
    np.save(tmp_path / "big.npy", np.ones((100, 10), bool))
    np.save(tmp_path / "soft.npy", np.linspace(0, 0.9, 16).reshape(4, 4))  # issue 39: not silently a solid block
    overrides = ["case=obstacle", "grid.nx=60", "grid.ny=30", *extra]
    if mask is not None:
        overrides.append(f"case.mask={tmp_path / mask}")
    with pytest.raises(ConfigError, match=message):
        make_case(load(overrides))


def ellipse(tmp_path, height=10):
    """A 20 x ``height`` ellipse (x by y cells) as a .npy mask: the frontal height D = ``height``."""
    x, y = np.mgrid[0:20, 0:height + 2]
    path = tmp_path / "ellipse.npy"
    np.save(path, ((x - 9.5) / 10) ** 2 + ((y - (height + 1) / 2) / (height / 2)) ** 2 < 1)
    return path


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_default_inlet_is_stable_where_zou_he_diverges_and_the_error_names_the_inlet(tmp_path):
    """Issue 21: a 20x10 ellipse, 128x64, Re 40 (tau 0.53, BGK): the Zou-He inlet diverged by step 600 (measured on
    the native and the xla engine; the error grows along the whole inlet face, cell (0, 0) is only the first in
    index order); the default inlet (nebb) runs 3000 steps, and the error of a diverging run names the inlet."""
    from lbm.errors import DivergenceError
    from lbm.simulation import simulate

    base = ("case=obstacle", f"case.mask={ellipse(tmp_path)}", "grid.nx=128", "grid.ny=64", "flow.reynolds=40",
            "output.plots=false")
    metrics = simulate(run_config(*base, "steps=5000"), tmp_path / "default")
    assert metrics["status"] == "completed" and metrics["tau"] == pytest.approx(0.53)
    # measured 2.1933 +- 0.0003 (steps 2273-5000), 2.1930 +- 0.0005 over 2770-6000; 3000 steps, whose last four
    # acoustic round trips (4 x 444 steps) still drift, once gave 2.2026 +- 0.0044 over steps 1351-3000
    assert metrics["cd_mean"] == pytest.approx(2.1931, abs=0.002)
    # the same forces cut at step 1200: MSER alone started the window at step 301, where cd still swings from -0.14
    # to 5.56 (the issue's -0.7 to 6.6); the stationarity test moves it to step 901 (cd within 1.82-2.90)
    from lbm.cases.signals import stationary_window

    forces = np.genfromtxt(tmp_path / "default" / "forces.csv", delimiter=",", names=True)[:1200]
    window = stationary_window(forces["cd"], reference=forces["cl"], min_cycle=int(10 / (0.2 * 0.04) / 3))
    assert window is not None and window.start >= 800 and np.ptp(forces["cd"][window.start:]) < 1.5
    # on the xla engine: it diverges there by the same step 600 with the same message, and the native engine's
    # Zou-He kernel (built for this run alone, at -O1) cost 3.8 CPU-s more
    with pytest.raises(DivergenceError) as err:
        simulate(run_config(*base, "steps=1000", "case.inlet=zou_he", "engine=xla"), tmp_path / "zou_he")
    assert "first bad cell (0, 0)" in str(err.value) and "inlet (Inlet, kind zou_he)" in str(err.value)
    assert "case.inlet=nebb" in str(err.value)


def test_a_mask_of_0_and_1_numbers_is_read_as_booleans(tmp_path):
    np.save(tmp_path / "ones.npy", np.eye(4))
    np.testing.assert_array_equal(read_mask(tmp_path / "ones.npy", 2), np.eye(4, dtype=bool))


@pytest.mark.parametrize(("height", "ny", "notes"), [(10, 120, set()), (10, 30, {"blockage_note"}),
                                                     (6, 120, {"resolution_note"})])
def test_blockage_and_resolution_are_flagged_and_the_frontal_area_given(tmp_path, height, ny, notes):
    """Issue 39 item 6: the area the forces are divided by, the blockage, and notes where they limit the forces."""
    case = make_case(load(["case=obstacle", f"case.mask={ellipse(tmp_path, height)}", "grid.nx=120", f"grid.ny={ny}"]))
    out = case.confinement()
    assert out["frontal_area"] == case.reference_area == height  # D x depth 1 in 2D
    assert out["blockage_ratio"] == pytest.approx(height / ny) == out["blockage_area_ratio"]
    assert {k for k in out if k.endswith("_note")} == notes


def test_a_3d_obstacle_blockage_is_its_largest_extent_across_the_flow(tmp_path):
    box = np.ones((4, 8, 4), bool)  # 8 cells along y, 4 along z
    np.save(tmp_path / "box.npy", box)
    case = make_case(load(["case=obstacle", f"case.mask={tmp_path / 'box.npy'}", "lattice=d3q19", "grid.nx=40",
                           "grid.ny=24", "grid.nz=24"]))
    out = case.confinement()
    assert out["frontal_area"] == 32  # the projection on the inlet plane: no full span
    assert out["blockage_ratio"] == pytest.approx(8 / 24) and out["blockage_area_ratio"] == pytest.approx(32 / 576)
    assert "blockage_note" in out and "resolution_note" in out  # D = 8 cells
