"""Honest run status: ``converged`` where a case has a criterion, warnings for unconverged metrics and mass drift."""

from __future__ import annotations

import logging
import math

import pytest
from helpers.runs import advance, run_config

from lbm.cases.base import mass_drift_bound, result_checks
from lbm.simulation import prepare, simulate


def test_a_cavity_stopped_before_steady_says_so_in_metrics_and_log(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="lbm")
    metrics = simulate(run_config("case=cavity", "grid.nx=18", "grid.ny=18", "steps=400", "output.plots=false"),
                       tmp_path / "r")
    assert metrics["status"] == "completed" and metrics["converged"] is False
    assert metrics["convergence"]["measure"] == "steady_change_per_1000_steps"
    assert metrics["convergence"]["value"] > metrics["convergence"]["bound"] == 5e-5
    [warning] = [w for w in metrics["warnings"] if "not converged" in w]
    assert "ghia_u_max_abs_error" in warning and "run more steps" in warning
    assert warning in [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.slow
def test_steps_auto_at_its_cap_is_not_converged_and_a_steady_one_is(tmp_path):
    capped = simulate(run_config("case=cavity", "grid.nx=7", "grid.ny=7", "steps=auto", "flow.reynolds=10",
                                 "case.steady_tolerance=1e-14", "output.plots=false"), tmp_path / "capped")
    assert capped["converged"] is False and "stopped_early" not in capped
    assert any("steps=auto reached its cap" in w for w in capped["warnings"])
    steady = simulate(run_config("case=cavity", "grid.nx=7", "grid.ny=7", "steps=auto", "flow.reynolds=10",
                                 "output.plots=false"), tmp_path / "steady")
    assert steady["converged"] is True and "stopped_early" in steady
    assert steady["convergence"]["value"] < 5e-5 and steady["warnings"] == []


@pytest.mark.slow
def test_poiseuille_transient_estimate_matches_the_simulated_start_up():
    """The criterion's estimate of the start-up mode left agrees with the simulated centre-line deficit."""
    run = run_config("case=poiseuille", "grid.nx=4", "grid.ny=10", "collision=trt", "precision=float64",
                     "steps=400", "engine=xla")
    case, setup, fields = advance(run)
    exact = case.analytic(setup)[1]  # TRT with magic 3/16: the half-way walls hold the parabola exactly
    sim = case.profile(fields)
    deficit = float((exact.max() - sim.max()) / exact.max())
    crit = case.convergence(setup, 400)
    assert crit.converged is False and crit.measure == "transient_over_umax"
    assert crit.value == pytest.approx(deficit, rel=0.05)
    steady = case.convergence(setup, case.auto_steps())
    assert steady.converged and steady.value < 1e-6


def test_duct_criterion_and_the_cases_without_one():
    case, setup = prepare(run_config("case=duct", "lattice=d3q19", "grid.nx=4", "grid.ny=10", "grid.nz=8",
                                     "steps=auto"))
    assert not case.convergence(setup, 100).converged and case.convergence(setup, case.run.steps).converged
    tg_case, tg_setup = prepare(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=10"))
    checks = result_checks(tg_case, tg_setup, {"mass_rel_drift": 0.0}, 10, [])
    assert "converged" not in checks and checks["warnings"] == []


def test_mass_drift_bound_flags_a_closed_domain_only():
    # float32's closed cavity: 2.4e-4 after 19000 steps and 1.8e-3 after 128000 are flagged
    assert mass_drift_bound(19000) == pytest.approx(10 * 2.0**-23 * math.sqrt(19000)) and mass_drift_bound(19000) < 2.4e-4
    assert mass_drift_bound(128000) < 1.8e-3
    case, setup = prepare(run_config("case=cavity", "grid.nx=10", "grid.ny=10", "steps=1000", "flow.reynolds=10"))
    bound = mass_drift_bound(1000)
    assert setup.closed
    flagged = result_checks(case, setup, {"mass_rel_drift": -2 * bound}, 1000, [])
    assert flagged["mass_drift_bound"] == bound and any("mass drifts" in w for w in flagged["warnings"])
    quiet = result_checks(case, setup, {"mass_rel_drift": 0.5 * bound}, 1000, [])
    assert not any("mass drifts" in w for w in quiet["warnings"])
    cyl_case, cyl_setup = prepare(run_config("grid.nx=60", "grid.ny=27", "steps=100", "flow.reynolds=20"))
    assert not cyl_setup.closed and cyl_setup.periodic == (False, True)
    open_flow = result_checks(cyl_case, cyl_setup, {"mass_rel_drift": 1e-2}, 100, [])
    assert "mass_drift_bound" not in open_flow and open_flow["warnings"] == []
