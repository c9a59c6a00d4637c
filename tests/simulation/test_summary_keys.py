"""The last log line of a run shows the metrics each case declares (lbm.cases.Case.summary_keys)."""

from __future__ import annotations

import logging

import pytest
from helpers.runs import run_config

from lbm.cases import CASES
from lbm.simulation import make_case, summary_keys, summary_line

DEFAULTS = {"duct": ["lattice=d3q19", "grid.nz=18"], "taylor_green_3d": [],
            "schafer_turek": [], "cavity": [], "cylinder": [], "obstacle": [], "poiseuille": [], "taylor_green": []}
"""What each case's own YAML needs to load (the duct's lattice and depth; taylor_green_3d sets its own)."""


def test_every_case_declares_the_metrics_its_summary_shows():
    assert set(DEFAULTS) == set(CASES)
    for name, extra in DEFAULTS.items():
        keys = CASES[name](run_config(f"case={name}", *extra)).summary_keys()  # obstacle: no mask file needed
        assert keys and len(set(keys)) == len(keys), (name, keys)


def test_the_summary_is_the_runs_keys_then_the_cases_own_and_leaves_out_what_was_not_computed():
    case = make_case(run_config("case=cylinder"))
    metrics = {"strouhal": 0.2, "cd_mean": 1.5, "mlups": 3.0, "converged": True, "mass_rel_drift": 1e-7, "x": 1.0}
    assert summary_keys(case, metrics) == ["mlups", "mass_rel_drift", "converged", "cd_mean", "strouhal"]
    assert summary_line(case, metrics) == "mlups=3, mass_rel_drift=1e-07, converged=True, cd_mean=1.5, strouhal=0.2"


RUNS = [
    pytest.param(["case=taylor_green", "grid.nx=12", "grid.ny=12", "steps=5"], id="taylor_green"),
    pytest.param(["case=cavity", "grid.nx=18", "grid.ny=18", "steps=60", "flow.reynolds=100"], id="cavity",
                 marks=pytest.mark.slow),
    pytest.param(["case=poiseuille", "grid.nx=4", "grid.ny=10", "steps=40"], id="poiseuille", marks=pytest.mark.slow),
    pytest.param(["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=40", "case.radius=3"], id="cylinder",
                 marks=pytest.mark.slow),
    pytest.param(["case=duct", "lattice=d3q19", "grid.nx=4", "grid.ny=8", "grid.nz=8", "steps=20", "engine=xla"],
                 id="duct", marks=pytest.mark.slow),
    pytest.param(["case=taylor_green_3d", "lattice=d3q19", "collision=bgk", "grid.nx=8", "grid.ny=8", "grid.nz=8", "steps=12",
                  "output.every=4", "flow.reynolds=100", "engine=xla"], id="taylor_green_3d", marks=pytest.mark.slow),
]
"""The 3D runs on the xla engine: the summary does not depend on the engine, and each would be a native kernel no
other test builds."""


@pytest.mark.parametrize("overrides", RUNS)
def test_the_last_log_line_shows_every_metric_the_case_declares(overrides, simulate_in, caplog):
    overrides = [*overrides, "output.plots=false", "output.progress=none"]
    with caplog.at_level(logging.INFO, logger="lbm"):
        metrics, _ = simulate_in(*overrides)
    declared = make_case(run_config(*overrides)).summary_keys()
    # a metric the run could not compute is left out, and a warning says why (taylor_green_3d's 12 steps: no peak)
    missing = set(declared) - set(metrics)
    assert not missing or any(k.endswith("_note") for k in metrics) and metrics["warnings"], sorted(missing)
    result = [r.getMessage() for r in caplog.records if r.getMessage().startswith("result (")]
    assert len(result) == 1
    shown = ("mlups", "mass_rel_drift", *(k for k in declared if k in metrics))
    assert all(f"{key}=" in result[0] for key in shown) and not any(f"{key}=" in result[0] for key in missing), result[0]
