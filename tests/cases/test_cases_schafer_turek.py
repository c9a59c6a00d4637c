"""The DFG cylinder benchmark (lbm.cases.schafer_turek): geometry, metrics on known fields, config errors, a coarse 2D-1 run."""

import math

import numpy as np
import pytest
from helpers.runs import advance, run_config

from lbm.boundaries import CharacteristicOutlet, HalfwayBounceBack, Inlet, InterpolatedBounceBack, PressureOutlet
from lbm.cases.base import Published, published_phrase, published_verdict, result_checks
from lbm.cases.schafer_turek import line_value
from lbm.errors import ConfigError
from lbm.lattice import CS2
from lbm.simulation import make_case

LEGACY = ("collision=bgk", "case.outlet=zou_he", "case.wall=bfl", "flow.tau=null")
"""The settings these tests were written for (BGK, the pressure outlet, linear BFL, U_mean = flow.u_lattice 0.05),
in place of the variants' validated defaults."""


def legacy(*overrides):
    """``overrides`` after the LEGACY settings they do not set themselves."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return (*(o for o in LEGACY if o.split("=", 1)[0] not in keys), *overrides)


def case_of(*overrides):
    return make_case(run_config("case=schafer_turek", *legacy(*overrides)))


def test_geometry_follows_the_published_set_up():
    case = case_of("case.cells_per_diameter=10")
    nx, ny = case.run.grid
    assert (nx, ny) == (221, 43)  # 2.2 m / 0.01 m + 1 nodes; 0.41 m = 41 rows between the half-way walls
    assert case.run.flow.reynolds == 20.0 and case.diameter == 10.0
    setup = case.setup()
    cx, cy, r = case.geometry()
    assert (cx, cy, r) == (20.0, 20.5, 5.0)  # (0.2, 0.2) m: fluid row j lies at y = (j - 1/2) dx
    cylinder = next(bc for bc in setup.boundaries if isinstance(bc, InterpolatedBounceBack))
    # the exact circle: every wall link is cut at the radius
    xf = np.stack(np.unravel_index(np.asarray(cylinder.link_fluid), (nx, ny)), axis=1)
    hit = xf + np.asarray(cylinder.q)[:, None] * setup.lattice.c[np.asarray(cylinder.link_dir)]
    np.testing.assert_allclose(np.hypot(hit[:, 0] - cx, hit[:, 1] - cy), r, rtol=1e-12)
    assert setup.solid[:, 0].all() and setup.solid[:, -1].all() and setup.solid[:, 1:-1].sum() == cylinder.solid.sum()
    assert [type(bc) for bc in setup.boundaries][:3] == [PressureOutlet, Inlet, HalfwayBounceBack]
    inflow = np.asarray(next(bc for bc in setup.boundaries if isinstance(bc, Inlet)).u)[0, 1:-1]
    # U_mean = u_lattice: the midpoint rule over the 41 rows overshoots the integral by 1/(2 * 41^2)
    assert inflow.mean() == pytest.approx(0.05 * (1 + 1 / (2 * 41**2)), rel=1e-12)
    assert setup.derived["dt_s"] == pytest.approx(0.01 * 0.05 / 0.2)
    # start from the developed flow: the Poiseuille pressure gradient, density 1 at the outlet
    np.testing.assert_allclose(setup.rho0[-1], 1.0)
    drop = (setup.rho0[0, 0] - 1.0) * CS2 / (nx - 1)
    assert drop == pytest.approx(8 * setup.nu * 0.075 / 41**2, rel=1e-12)


def test_variants_set_reynolds_number_and_length():
    assert case_of("case.variant=2D-2").run.flow.reynolds == 100.0
    ramp = case_of("case.variant=2D-3", "case.cells_per_diameter=8")
    assert ramp.run.steps * ramp.dt == pytest.approx(8.0)  # steps=auto: exactly t = 8 s
    inlet = next(bc for bc in ramp.setup().boundaries if isinstance(bc, Inlet))
    assert inlet.profile == "sine" and inlet.ramp_steps * ramp.dt == pytest.approx(4.0)  # U_m sin(pi t / 8 s)
    tau = case_of("flow.tau=0.6", "case.cells_per_diameter=10")  # diffusive scaling: U follows from Re and tau
    assert tau.run.flow.u_lattice == pytest.approx(20 * CS2 * 0.1 / 10)


@pytest.mark.parametrize("override,key", [
    ("case.variant=3D-1Z", "case.variant"),
    ("case.cells_per_diameter=2", "case.cells_per_diameter"),
    ("case.outlet=neumann", "case.outlet"),
    ("case.wall=quadratic", "case.wall"),
    ("case.variant=2D-2 case.wall=parabolic", "case.wall"),
    ("case.variant=2D-3 case.outlet=characteristic", "case.outlet"),
    ("lattice=d3q19", "lattice"),
])
def test_bad_options_are_one_line_errors(override, key):
    extra = ["grid.nz=4"] if override.startswith("lattice") else []
    with pytest.raises(ConfigError) as err:
        case_of(*override.split(), *extra).setup()
    assert key in str(err.value) and "\n" not in str(err.value)


def test_pressure_difference_and_recirculation_length_on_known_fields():
    """Δp from a linear density (exact under quadratic extrapolation); La from a known zero crossing of u_x."""
    case = case_of("case.cells_per_diameter=10")
    nx, ny = case.run.grid
    cx, _, r = case.geometry()
    x = np.arange(nx, dtype=np.float64)[:, None] * np.ones(ny)
    rho = 1.0 - 2e-4 * x + 1e-6 * x**2
    drho = (1 - 2e-4 * (cx - r) + 1e-6 * (cx - r) ** 2) - (1 - 2e-4 * (cx + r) + 1e-6 * (cx + r) ** 2)
    assert case.pressure_difference(rho) == pytest.approx(CS2 * drho * (0.2 / 0.05) ** 2, rel=1e-9)
    x_r = cx + r + 8.3  # the wake ends 8.3 cells behind the rear point
    ux = np.tile((x[:, :1] - x_r) * 1e-3, (1, ny))
    assert case.recirculation_length(ux) == pytest.approx(8.3 * 0.01, rel=1e-9)
    assert case.recirculation_length(np.abs(ux)) == 0.0
    # N = 40: the rear point cx + r = 100 lies 0.006 cells before a node, whose u_x is the wall's ~0 (here +1e-9)
    n40 = case_of("case.cells_per_diameter=40")
    cx, _, r = n40.geometry()
    x = np.arange(n40.run.grid[0], dtype=np.float64)[:, None] * np.ones(n40.run.grid[1])
    ux = (x - (cx + r + 3.4)) * 1e-3
    ux[int(np.ceil(cx + r))] = 1e-9
    assert n40.recirculation_length(ux) == pytest.approx(3.4 * 0.1 / 40, rel=1e-9)
    assert line_value(np.arange(10.0) ** 2, 4.5, -1) == pytest.approx(20.25)


@pytest.mark.slow
def test_metrics_of_a_short_run_are_named_as_published():
    case, setup, fields = advance(run_config("case=schafer_turek", *legacy("case.cells_per_diameter=6", "steps=40",
                                                                           "output.every=20")))
    m = case.metrics(setup, fields, 40)
    assert {"cd", "cl", "dp", "la"} <= m.keys() and all(math.isfinite(m[k]) for k in ("cd", "cl", "dp", "la"))
    case, setup, fields = advance(run_config("case=schafer_turek", *legacy("case.variant=2D-3",
                                                                           "case.cells_per_diameter=6", "steps=40",
                                                                           "output.every=20")))
    m = case.metrics(setup, fields, 40)
    assert {"cd_max", "cl_max", "dp_t8"} <= m.keys() and "dp_t8_note" in m  # 40 steps is not t = 8 s


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_coarse_2d1_run_is_near_the_published_values():
    """2D-1 at 10 cells per diameter (tau 0.6, steps=auto: steady after 14 s of flow, 4200 steps).

    Measured (docs/dfg.md): cd 5.944, cl 0.0133, dp 0.1257, La 0.0857 against 5.58, 0.0107, 0.1174,
    0.0847; at 20 and 30 cells cd falls to 5.665 and 5.616 (second order, extrapolating to 5.577).
    Bounds about twice the measured error at this resolution.
    """
    case, setup, fields = advance(run_config("case=schafer_turek", *legacy("case.cells_per_diameter=10", "flow.tau=0.6",
                                                                           "output.every=300")))
    m = case.metrics(setup, fields, case.run.steps)
    assert m["cd"] == pytest.approx(5.58, rel=0.13)
    assert m["dp"] == pytest.approx(0.1174, rel=0.15)
    assert 0.0107 / 2 < m["cl"] < 0.0107 * 2
    assert m["la"] == pytest.approx(0.0847, rel=0.05)


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_characteristic_outlet_lets_the_start_up_wave_out_and_keeps_the_outlet_near_density_one():
    """case.outlet=characteristic on a coarse 2D-1 (8 cells per diameter, TRT, tau 0.53, 3000 steps).

    The outlet gets the developed channel's density gradient (the one of the initial Poiseuille
    flow). Measured: the drag's spread over the last 1000 steps (the start-up wave ringing between
    inlet and outlet) 5.24 with the pressure outlet, 0.52 with this one; the outlet density 1.00165 (its level relaxes slowly, at
    0.28 c_s / L per step, from the start-up transient). Bounds: a spread 4x smaller, |rho - 1| < 0.005.
    """
    spreads = {}
    for outlet in ("zou_he", "characteristic"):
        case, setup, fields = advance(run_config("case=schafer_turek", *legacy(
            "case.cells_per_diameter=8", "flow.tau=0.53", "collision=trt", f"case.outlet={outlet}", "steps=3000",
            "output.every=1000")))
        cd = case.coefficients()[-1000:, -2]
        spreads[outlet] = float(cd.max() - cd.min())
    outlet = next(b for b in setup.boundaries if isinstance(b, CharacteristicOutlet))
    assert float(outlet.gradient) == pytest.approx(float(setup.rho0[0, 10] - setup.rho0[1, 10]), rel=1e-6)
    assert abs(float(fields["rho"][-1, 1:-1].mean()) - 1.0) < 0.005
    assert spreads["characteristic"] < spreads["zou_he"] / 4, spreads


def test_parabolic_wall_option_uses_the_bfl_links_with_the_runs_antisymmetric_rate():
    """case.wall=parabolic: the cylinder's links and wall fractions are BFL's, the weights are for TRT's omega-."""
    from lbm.boundaries import ParabolicBounceBack
    from lbm.boundaries.parabolic import parabolic_weights

    bfl = next(bc for bc in case_of("case.cells_per_diameter=10", "collision=trt").setup().boundaries
               if isinstance(bc, InterpolatedBounceBack))
    setup = case_of("case.cells_per_diameter=10", "collision=trt", "case.wall=parabolic").setup()
    wall = next(bc for bc in setup.boundaries if isinstance(bc, ParabolicBounceBack))
    assert type(bfl) is InterpolatedBounceBack
    np.testing.assert_array_equal(np.asarray(wall.link_fluid), np.asarray(bfl.link_fluid))
    np.testing.assert_array_equal(np.asarray(wall.q), np.asarray(bfl.q))
    far_ok = np.asarray(wall.link_far) != np.asarray(wall.link_fluid)
    np.testing.assert_allclose(np.asarray(wall.weights), parabolic_weights(np.asarray(wall.q), far_ok, setup.omega_minus))
    assert setup.omega_minus != setup.omega_plus and setup.derived["wall"] == "parabolic"


@pytest.mark.parametrize("variant,cells,outlet,wall", [
    ("2D-1", 30, CharacteristicOutlet, "parabolic"), ("2D-2", 70, CharacteristicOutlet, "bfl"),
    ("2D-3", 20, PressureOutlet, "bfl")])
def test_each_variant_defaults_to_its_validated_settings(variant, cells, outlet, wall):
    """case.variant alone: TRT (Lambda 3/16), tau 0.53, and the variant's resolution, outlet and wall (docs/dfg.md)."""
    case = make_case(run_config("case=schafer_turek", f"case.variant={variant}"))
    assert (case.run.collision, case.run.collision_params.magic, case.run.flow.tau, case.cells) == ("trt", 0.1875, 0.53, cells)
    assert case.params["outlet"] == ("characteristic" if outlet is CharacteristicOutlet else "zou_he")
    assert case.params["wall"] == wall and case.differences_from_validated() == []
    assert case.run.flow.u_lattice == pytest.approx(case.run.flow.reynolds * CS2 * 0.03 / cells)  # diffusive scaling
    if variant == "2D-2":
        assert case.run.steps * case.dt == pytest.approx(7.5)  # the saturated window of docs/dfg.md, "2D-2 resolution"
    if variant == "2D-3":
        assert type(next(bc for bc in case.setup().boundaries if isinstance(bc, (PressureOutlet, CharacteristicOutlet)))) \
            is outlet
    other = make_case(run_config("case=schafer_turek", f"case.variant={variant}", "collision=bgk", "case.wall=bfl"))
    assert other.run.collision == "bgk" and other.differences_from_validated()[0] == "collision=bgk"


def test_the_log_says_how_far_from_the_published_interval_the_resolution_is(caplog):
    """The measured numbers at this N with the validated settings, and their distance to each published interval."""
    with caplog.at_level("INFO", logger="lbm"):
        case_default = make_case(run_config("case=schafer_turek", "case.variant=2D-2"))
        case_default.log_expectation()
        make_case(run_config("case=schafer_turek", "case.cells_per_diameter=30")).log_expectation()
        make_case(run_config("case=schafer_turek", "case.cells_per_diameter=30", "collision=bgk")).log_expectation()
        make_case(run_config("case=schafer_turek", "case.cells_per_diameter=25")).log_expectation()
        make_case(run_config("case=schafer_turek", "case.variant=2D-2", "case.cells_per_diameter=30")).log_expectation()
        make_case(run_config("case=schafer_turek", "case.variant=3D-1Z", "lattice=d3q19", "grid.nz=4")).log_expectation()
    text = caplog.text
    assert "N = 70, float32, validated settings: expect cd_max 3.2349 (inside [3.22, 3.24]), cl_max 0.9895 " \
           "(0.051% below [0.99, 1.01])" in text
    # issue 39: the float32 expectation is today's (cl 0.01026 was measured before the f - w storage; the run gives
    # 0.01086), and float64's follows it
    assert "cl 0.01086 (inside [0.0104, 0.011])" in text and "precision=float64 measured cd 5.5857 (inside)" in text
    assert "0.01026" not in text
    assert "differ from the validated ones (collision=bgk)" in text and "held against the published intervals" in text
    assert "not measured at this resolution" in text and "(measured at N = 30: docs/dfg.md)" in text
    assert "DFG 2D-2, N = 30, float32: not measured at this resolution" in text  # measured before the storage
    assert "DFG 3D-1Z, N = 10, float32, validated settings: expect cd 6.23 (inside [6.05, 6.25]), cl 0.009551 " \
           "(inside [0.008, 0.01]), dp 0.1646 (0.24% below [0.165, 0.175])" in text
    with caplog.at_level("INFO", logger="lbm"):
        make_case(run_config("case=schafer_turek", "case.variant=3D-1Z", "lattice=d3q19", "grid.nz=4",
                             "precision=float64")).log_expectation()
    assert "DFG 3D-1Z, N = 10, float64: not measured at this resolution with the validated settings (none measured " \
           "since the engines store f - w" in caplog.text


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_2d2_with_the_default_rules_is_stable_where_bgk_and_the_pressure_outlet_diverge():
    """2D-2 at N = 20, tau 0.53: BGK with the pressure outlet (the old defaults) diverged by step 750 (native engine);
    TRT with the characteristic outlet (the validated rules) stays finite, with the lift already shedding."""
    base = ("case=schafer_turek", "case.variant=2D-2", "case.cells_per_diameter=20", "steps=1000", "output.every=500")
    _, _, fields = advance(run_config(*base))
    assert np.isfinite(fields["f"]).all() and float(np.abs(fields["u"]).max()) < 0.2
    _, _, old = advance(run_config(*base, "collision=bgk", "case.outlet=zou_he"))
    assert not np.isfinite(old["f"]).all() or float(np.abs(old["u"]).max()) > 0.2


def test_published_verdicts_of_known_values():
    """Inside, how far outside (relative to the bound crossed), not measured; all inside or not, and the log line."""
    published = Published({"cd": (5.57, 5.59), "cl": (0.0104, 0.0110)}, "Schäfer & Turek 1996")
    inside = published_verdict(published, {"cd": 5.58, "cl": 0.0105})
    assert inside["inside_published"] is True and inside["published"]["cd"] == {"value": 5.58, "low": 5.57,
                                                                                "high": 5.59, "verdict": "inside"}
    below = published_verdict(published, {"cd": 5.66, "cl": 0.0103})
    assert below["inside_published"] is False
    assert below["published"]["cd"]["verdict"] == "1.3% above" and below["published"]["cl"]["verdict"] == "0.96% below"
    assert published_phrase("schafer_turek", below) == ("schafer_turek: NOT inside the published intervals (Schäfer & "
                                                        "Turek 1996): cd 5.66 1.3% above [5.57, 5.59], cl 0.0103 0.96% "
                                                        "below [0.0104, 0.011]")
    partial = published_verdict(published, {"cd": 5.58})
    assert partial["inside_published"] is False and partial["published"]["cl"]["verdict"] == "not measured"
    assert published_verdict(published, {})["inside_published"] is None
    far = published_verdict(published, {"cd": 7.546, "cl": 0.02482})  # 3D-1Z's first 2000 steps, on 2D-1's intervals
    assert far["published"]["cd"]["verdict"] == "35% above" and far["published"]["cl"]["verdict"] == "126% above"


def test_the_steady_variants_judge_convergence_on_the_drag_over_acoustic_periods():
    """2D-1 and 3D-1Z: converged when the drag's mean over the last acoustic period moved less than
    case.steady_tolerance (relative) from the period before; fewer than two periods: not converged, value None."""
    case = case_of("case.cells_per_diameter=6", "steps=100")
    setup = case.setup()
    span = case.acoustic_period
    norm = 0.5 * case.run.flow.u_lattice ** 2 * case.reference_area
    t = np.arange(3 * span, dtype=np.float64)
    case.force_rows = [np.stack([5.6 * norm * np.ones_like(t), 0 * t], axis=1)]
    verdict = case.convergence(setup, len(t))
    assert verdict.converged and verdict.measure == "drag_change_over_acoustic_period" and verdict.value < 1e-12
    case.force_rows = [np.stack([5.6 * norm * (1 + 1e-3 * t / span), 0 * t], axis=1)]  # drifts 1e-3 per period
    verdict = case.convergence(setup, len(t))
    assert not verdict.converged and verdict.value == pytest.approx(1e-3, rel=0.01) and verdict.bound == 2e-4
    checks = result_checks(case, setup, {"cd": 5.6, "cl": 0.0103, "dp": 0.1174}, len(t), ("cd", "cl", "dp"))
    assert checks["converged"] is False and checks["inside_published"] is False
    assert checks["published"]["cl"]["verdict"] == "0.96% below" and checks["published"]["cd"]["verdict"] == "0.18% above"
    assert [w.split(":")[0] for w in checks["warnings"]] == ["schafer_turek", "schafer_turek is not converged at step "
                                                             f"{len(t)}"]
    case.force_rows = [case.force_rows[0][: span + 10]]
    assert case.convergence(setup, span + 10).value is None
    assert case_of("case.variant=2D-2", "case.cells_per_diameter=6").convergence(setup, 10) is None  # periodic


@pytest.mark.slow  # a 100-step run (5 s under load); the fast lane keeps result_checks on the case (above)
def test_a_short_2d1_run_says_it_is_neither_converged_nor_inside(tmp_path, caplog):
    """Issue 39 item 5: DFG 2D-1 reported converged: null and only "no measurement to compare with"; now metrics.json
    and the log give the convergence verdict and where each published quantity lies."""
    import json

    from lbm.simulation import simulate

    with caplog.at_level("INFO", logger="lbm"):
        metrics = simulate(run_config("case=schafer_turek", *legacy("case.cells_per_diameter=6", "steps=100",
                                                                    "output.plots=false", "engine=xla")), tmp_path / "r")
    on_disk = json.loads((tmp_path / "r" / "metrics.json").read_text())
    for m in (metrics, on_disk):
        assert m["converged"] is False and m["convergence"]["measure"] == "drag_change_over_acoustic_period"
        assert m["convergence"]["value"] is None  # 100 steps hold no two acoustic periods (2 x 915 steps)
        assert m["inside_published"] is False and set(m["published"]) == {"cd", "cl", "dp"}
        assert m["published"]["cd"]["value"] == m["cd"] and m["published"]["cd"]["verdict"] != "inside"
    warnings = " ".join(on_disk["warnings"])
    assert "schafer_turek is not converged at step 100" in warnings
    assert "schafer_turek: NOT inside the published intervals (Schäfer & Turek 1996): cd" in warnings
    assert "converged=False, inside_published=False" in caplog.text
