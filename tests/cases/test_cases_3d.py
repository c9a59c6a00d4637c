"""3D validation cases: the duct against its Fourier series, the cubic cavity's reference (Albensoeder &
Kuhlmann 2005), and the DFG 3D-1Z set-up."""

import math

import numpy as np
import pytest
from helpers.paths import REPO
from helpers.runs import advance, run_config

from lbm.boundaries import Forces, Inlet, InterpolatedBounceBack
from lbm.cases.cavity import AK_FILE, albensoeder_reference, ghia_reference
from lbm.cases.duct import duct_series
from lbm.errors import ConfigError
from lbm.simulation import make_case


def test_duct_series_solves_the_poisson_problem():
    """nu (u_yy + u_zz) = -F inside, u = 0 on the walls, and the plane-channel limit for a wide duct."""
    h, w, accel, nu = 1.0, 1.5, 2.0, 0.1
    d = 1e-3
    y, z = np.meshgrid(np.linspace(0.1, 0.9, 9), np.linspace(0.1, 1.4, 9), indexing="ij")
    u = duct_series(y, z, h, w, accel, nu)
    lap = (duct_series(y + d, z, h, w, accel, nu) + duct_series(y - d, z, h, w, accel, nu)
           + duct_series(y, z + d, h, w, accel, nu) + duct_series(y, z - d, h, w, accel, nu) - 4 * u) / d**2
    # central differences: truncation error ~ d^2 u'''' / 12 ~ 1e-6 relative to F / nu = 20
    np.testing.assert_allclose(nu * lap, -accel, rtol=1e-4)
    s = np.linspace(0, 1, 7)
    assert np.abs(duct_series(s, 0 * s, h, w, accel, nu)).max() < 1e-12
    assert np.abs(duct_series(s * 0 + h, s * w, h, w, accel, nu)).max() < 1e-9
    # a duct 20 times wider than high is a plane channel in its middle: F H^2 / (8 nu) on the axis
    assert duct_series(np.array(0.5), np.array(10.0), 1.0, 20.0, 1.0, 1.0) == pytest.approx(1 / 8, rel=1e-10)
    # an independent solution: the 5-point finite-difference Poisson problem on the unit square (n = 199 interior
    # nodes), solved exactly by its sine eigenvectors; second order: measured difference 2.0e-5 of the peak
    n = 199
    k = np.arange(1, n + 1)
    sine = np.sin(np.pi * np.outer(k, k) / (n + 1))  # symmetric; sine @ sine = (n + 1) / 2 * identity
    eig = (2 - 2 * np.cos(np.pi * k / (n + 1))) * (n + 1) ** 2
    rhs_hat = sine @ np.ones((n, n)) @ sine * (2 / (n + 1)) ** 2
    fd = sine @ (rhs_hat / (eig[:, None] + eig[None, :])) @ sine
    pick = np.arange(9, n, 10)  # every 10th node (the series is costly on all of them)
    yy, zz = np.meshgrid(k[pick] / (n + 1), k[pick] / (n + 1), indexing="ij")
    np.testing.assert_allclose(duct_series(yy, zz, 1.0, 1.0, 1.0, 1.0), fd[np.ix_(pick, pick)], atol=5e-5 * fd.max())


@pytest.mark.slow
def test_coarse_lbm_duct_matches_the_series():
    """8 x 8 cells, TRT (Lambda = 3/16), steps=auto (1.5 diffusion times)."""
    run = run_config("case=duct", "lattice=d3q19", "grid.ny=10", "grid.nz=10", "collision=trt")
    case, setup, fields = advance(run)
    m = case.metrics(setup, fields, case.run.steps)
    # measured (native, float32): max 3.79e-3 of u_max, L2 4.28e-3, flow rate -4.5e-3 (second order:
    # 9.1e-4 at 16 x 16, 2.6e-4 at 32 x 32; docs/validation_3d.md), cross-flow 8.6e-4 (1.4e-4 at 16 x 16,
    # 2.9e-5 at 32 x 32: a discretisation error); bounds 2-3x above
    assert m["duct_max_error_over_umax"] < 1e-2
    assert m["duct_l2_rel_error"] < 1e-2
    assert abs(m["flow_rate_rel_error"]) < 1e-2
    assert m["cross_velocity_max_over_umax"] < 2e-3
    # the case's body force drives the requested axis speed (the axis lies between nodes for even H)
    assert case.axis_factor() * setup.force_array[0] / setup.nu == pytest.approx(run.flow.u_lattice, rel=1e-12)


def test_duct_runs_on_d3q19_by_default_and_refuses_a_2d_lattice_in_one_line():
    run = run_config("case=duct")
    assert run.lattice == "d3q19" and tuple(run.grid) == (4, 18, 18)
    with pytest.raises(ConfigError) as err:
        make_case(run_config("case=duct", "lattice=d2q9"))
    assert str(err.value).startswith("lattice=d2q9 is invalid") and "\n" not in str(err.value)


def test_albensoeder_reference_is_read_whole_and_oriented():
    packaged = (REPO / "lbm" / "reference" / AK_FILE).read_text()
    assert packaged.startswith("# Albensoeder & Kuhlmann (2005)")
    ref = albensoeder_reference(1000.0)
    assert ref is not None and albensoeder_reference(100.0) is None
    assert len(ref["y"]) == len(ref["x"]) == 17
    # the mapped positions are Ghia's 17 points, which A&K's Tables 5 and 6 use
    ghia = ghia_reference(1000.0)
    assert len(ghia["y"]) == len(ghia["x"]) == 17  # Re 1000 has no excluded misprint
    np.testing.assert_allclose(ref["y"], ghia["y"], atol=6e-5)  # A&K print 4 decimals of (j - 1) / 128
    np.testing.assert_allclose(ref["x"], ghia["x"], atol=6e-5)
    np.testing.assert_array_equal(np.diff(ref["y"]) > 0, True)
    assert (ref["u"][0], ref["u"][-1], ref["v"][0], ref["v"][-1]) == (0.0, 1.0, 0.0, 0.0)
    # lid at y = 1 moving in +x: backflow near the bottom, up along x = 0, down along x = 1 -- as in 2D, but
    # weaker (the end walls brake the vortex): compare with Ghia's 2D extremes at Re 1000
    assert ghia["u"].min() < ref["u"].min() < 0 and ref["y"][np.argmin(ref["u"])] < 0.2
    assert 0 < ref["v"].max() < ghia["v"].max() and ghia["v"].min() < ref["v"].min() < 0
    assert ref["x"][np.argmax(ref["v"])] < 0.5 < ref["x"][np.argmin(ref["v"])]


def test_cube_cavity_metrics_against_albensoeder():
    """A field whose mid-plane centre lines are the reference gives errors of the interpolation only."""
    n = 34
    case = make_case(run_config("case=cavity", "lattice=d3q19", f"grid.nx={n}", f"grid.ny={n}", f"grid.nz={n}",
                                "flow.reynolds=1000", "flow.u_lattice=0.1", "steps=10"))
    setup = case.setup()
    ref = albensoeder_reference(1000.0)
    pos = (np.arange(n) - 0.5) / (n - 2)  # cell centres of the fluid nodes, walls at 0 and 1
    u = np.zeros((3, n, n, n))
    lid = case.run.flow.u_lattice
    u[0] = lid * np.interp(pos, ref["y"], ref["u"])[None, :, None]  # u(y), the same on every x and z
    u[1] = lid * np.interp(pos, ref["x"], ref["v"])[:, None, None]
    m = case.metrics(setup, {"u": u, "rho": np.ones((n,) * 3)}, 10)
    assert m["albensoeder_reynolds"] == 1000
    # linear interpolation of the reference onto 32 cells and back: measured 0.046 (u, near the lid) and
    # 0.029 (v); an orientation or sign error gives ~0.5 and more
    assert m["albensoeder_u_max_abs_error"] < 0.1 and m["albensoeder_v_max_abs_error"] < 0.1
    assert m["albensoeder_u_rms_error"] < 0.02 and m["albensoeder_v_rms_error"] < 0.02
    assert m["u_min"] == pytest.approx(ref["u"].min(), abs=0.01)
    flipped = case.metrics(setup, {"u": -u, "rho": np.ones((n,) * 3)}, 10)
    assert flipped["albensoeder_v_max_abs_error"] > 0.4
    # a box that is not a cube has no reference
    box = make_case(run_config("case=cavity", "lattice=d3q19", "grid.nx=34", "grid.ny=34", "grid.nz=18",
                               "flow.reynolds=1000", "steps=10"))
    assert box.reference(box.setup()) is None


@pytest.mark.parametrize("lattice", ["d2q9", "d3q19", "d3q27"])
def test_cavity_lid_moves_only_above_the_fluid(lattice):
    """Every link that carries the lid's momentum crosses the lid's open face, none its edges or the side walls."""
    n, lid = 8, 0.1
    extra = () if lattice == "d2q9" else (f"grid.nz={n}",)
    case = make_case(run_config("case=cavity", f"lattice={lattice}", f"grid.nx={n}", f"grid.ny={n}", *extra,
                                f"flow.u_lattice={lid}", "steps=10"))
    setup = case.setup()
    lat = case.lattice
    wall_u = np.asarray(setup.wall_velocity)
    top = wall_u[0, :, -1]  # the top wall, (nx,) or (nx, nz)
    lid_face = np.zeros(top.shape, bool)
    lid_face[(slice(1, -1),) * top.ndim] = True
    assert np.all(top[lid_face] == lid) and np.all(top[~lid_face] == 0.0)  # the edges belong to the side walls
    assert np.all(np.delete(wall_u, -1, axis=2) == 0.0) and np.all(wall_u[1:] == 0.0)
    term = np.asarray(setup.boundaries[0].wall_term, np.float64)
    cells = np.argwhere(term != 0)  # (j, *solid cell)
    assert len(cells) > 0
    mid = cells[:, 1:] + 0.5 * lat.c[cells[:, 0]]  # where the link crosses the wall, in cell units
    assert np.all(mid[:, 1] == n - 1.5)  # on the lid's plane
    inside = [a for a in range(lat.d) if a != 1]
    assert np.all((mid[:, inside] > 0.5) & (mid[:, inside] < n - 1.5))  # strictly inside its face


def dfg3d(*overrides):
    return make_case(run_config("case=schafer_turek", "case.variant=3D-1Z", "lattice=d3q19", "grid.nz=4", *overrides))


def test_dfg_3d1z_geometry_follows_the_published_set_up():
    case = dfg3d("case.cells_per_diameter=10", "flow.tau=0.6")
    assert case.run.grid == (251, 43, 43)  # 2.5 m / 0.01 m + 1 nodes; 0.41 m = 41 cells between half-way walls
    assert case.run.flow.reynolds == 20.0 and case.depth == 41.0 and case.diameter == 10.0
    assert case.geometry() == (50.0, 20.5, 5.0)  # axis at (0.5, 0.2) m
    setup = case.setup()
    cylinder = next(bc for bc in setup.boundaries if isinstance(bc, InterpolatedBounceBack))
    forces = next(bc for bc in setup.boundaries if isinstance(bc, Forces))
    fluid = ~setup.solid.reshape(-1)
    # every link starts in the fluid and is cut by the exact circle (in x, y)
    assert fluid[np.asarray(cylinder.link_fluid)].all() and fluid[np.asarray(cylinder.link_far)].all()
    assert fluid[np.asarray(forces.link_src)].all() and len(forces.link_dir) == len(cylinder.link_dir)
    xf = np.stack(np.unravel_index(np.asarray(cylinder.link_fluid), case.run.grid), axis=1)
    hit = xf + np.asarray(cylinder.q)[:, None] * setup.lattice.c[np.asarray(cylinder.link_dir)]
    np.testing.assert_allclose(np.hypot(hit[:, 0] - 50.0, hit[:, 1] - 20.5), 5.0, rtol=1e-12)
    # the cylinder spans the fluid height; the wall planes stay walls
    assert np.asarray(cylinder.solid)[50, 20, 1:-1].all() and not np.asarray(cylinder.solid)[:, :, [0, -1]].any()
    inflow = np.asarray(next(bc for bc in setup.boundaries if isinstance(bc, Inlet)).u)[0]
    # U_mean = 4 U_m / 9 = u_lattice: the midpoint rule overshoots each factor's integral by 1/(2 * 41^2)
    assert inflow[1:-1, 1:-1].mean() == pytest.approx(case.run.flow.u_lattice * (1 + 1 / (2 * 41**2)) ** 2, rel=1e-6)  # float32
    assert inflow.max() == pytest.approx(2.25 * case.run.flow.u_lattice, rel=1e-6)  # U_m on the centre node (41 cells)


def test_dfg_3d1z_metrics_on_known_fields():
    """cd, cl with the 3D normalisation 2 F / (U^2 D H); Δp on the mid-plane z = 0.205 m."""
    case = dfg3d("case.cells_per_diameter=4", "flow.u_lattice=0.05", "steps=10")
    setup = case.setup()
    nx, ny, nz = case.run.grid
    u = case.run.flow.u_lattice
    case.force_rows = [np.tile([0.5 * u**2 * 4 * 16 * 6.1, 0.5 * u**2 * 4 * 16 * 0.009, 0.0], (10, 1))]
    x = np.arange(nx, dtype=np.float64)[:, None, None] * np.ones((nx, ny, nz))
    rho = 1.0 - 2e-4 * x
    m = case.metrics(setup, {"rho": rho, "u": np.ones((3, nx, ny, nz))}, 10)
    assert case.depth == 16.0  # round(4.1 * 4) = 16 cells
    assert m["cd"] == pytest.approx(6.1) and m["cl"] == pytest.approx(0.009)
    assert m["dp"] == pytest.approx(1 / 3 * 2e-4 * 4 * (0.2 / u) ** 2, rel=1e-9)  # linear rho, 2r = 4 cells apart
    assert m["span_cells"] == 16.0


@pytest.mark.parametrize("overrides,key", [
    (("case=schafer_turek", "case.variant=3D-1Z"), "case.variant"),  # a 3D variant on d2q9
    (("case=schafer_turek", "case.variant=3D-1Z", "lattice=d3q19", "grid.nz=4", "case.cells_per_diameter=200"),
     "case.cells_per_diameter"),
])
def test_dfg_3d1z_bad_options_are_one_line_errors(overrides, key):
    with pytest.raises(ConfigError) as err:
        make_case(run_config(*overrides)).setup()
    assert key in str(err.value) and "\n" not in str(err.value)


def test_dfg_3d_lattice_message_names_the_variant():
    with pytest.raises(ConfigError) as err:
        make_case(run_config("case=schafer_turek", "case.variant=2D-1", "lattice=d3q19", "grid.nz=4"))
    assert "3D-1Z" in str(err.value)
    assert math.isfinite(dfg3d("case.cells_per_diameter=4").dt)
