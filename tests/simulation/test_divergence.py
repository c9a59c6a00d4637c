"""What a diverged run says (lbm.simulation.first_bad_cell, likely_cause): the density rule, the cause and its fix."""

import numpy as np
import pytest
from helpers.runs import run_config

from lbm.kernels.equilibrium import equilibrium
from lbm.simulation import RHO_BOUNDS, first_bad_cell, likely_cause, prepare


def populations(shape=(6, 5), rho=None):
    """Equilibrium populations (deviations f - w) of d2q9 at rest with density ``rho`` (1 everywhere by default)."""
    from lbm.lattice import LATTICES

    lat = LATTICES["d2q9"]
    rho = np.ones(shape) if rho is None else rho
    return np.array(equilibrium(rho - 1.0, np.zeros((2, *shape)), lat)), lat


@pytest.mark.parametrize("value", [RHO_BOUNDS[1] + 0.1, RHO_BOUNDS[0] - 0.1, RHO_BOUNDS[1], np.nan])
def test_first_bad_cell_is_the_first_with_a_density_out_of_bounds(value):
    rho = np.ones((6, 5))
    rho[4, 1] = rho[2, 3] = value  # (2, 3) comes first in index order
    f, lat = populations(rho=rho)
    assert first_bad_cell(f, lat) == (2, 3)


def test_a_healthy_state_and_a_fast_cell():
    f, lat = populations()
    assert first_bad_cell(f, lat) == ()
    east, rest = int(np.flatnonzero((lat.c == (1, 0)).all(1))[0]), int(np.flatnonzero(~lat.c.any(1))[0])
    f[east, 3, 2] += 3.0
    f[rest, 3, 2] -= 2.0  # density 2 (inside the bounds), velocity 1.5 in cell (3, 2)
    assert first_bad_cell(f, lat) == (3, 2)


@pytest.mark.parametrize("overrides,words", [
    (("flow.tau=0.51",), ["tau=0.5100 is too close to 0.5", "collision=trt"]),
    (("flow.u_lattice=0.2", "flow.reynolds=10"), ["Mach 0.35 is too high", "lower flow.u_lattice"]),
    (("flow.reynolds=10",), ["the resolution is probably too low for Re=10", "raise the grid resolution"]),
])
def test_the_cause_and_its_fix(overrides, words):
    _, setup = prepare(run_config("case=cylinder", "grid.nx=40", "grid.ny=20", *overrides))
    for w in words:
        assert w in likely_cause(setup, (30, 3))  # a bulk cell: no boundary condition named
    assert "boundary condition" not in likely_cause(setup, (30, 3))


def test_a_cell_on_a_boundary_condition_names_it():
    _, setup = prepare(run_config("case=cylinder", "grid.nx=40", "grid.ny=20", "case.inlet=zou_he",
                                  "case.bounce_back=fullway", "flow.reynolds=10"))
    inlet = likely_cause(setup, (0, 7))
    assert "lies on the boundary condition inlet (Inlet, kind zou_he)" in inlet and "case.inlet=nebb" in inlet
    assert "the resolution is probably too low" in inlet  # the general cause follows
    cx, cy = setup.derived["center"]
    assert "bounce_back (FullwayBounceBack)" in likely_cause(setup, (int(cx), int(cy)))
    assert "outflow (Outflow)" in likely_cause(setup, (39, 7))


def test_the_advice_offers_only_what_changes_the_run():
    """Issue 39: a diverged run with a nebb inlet was told to try case.inlet=nebb, and a TRT run collision=trt."""
    _, setup = prepare(run_config("case=cylinder", "grid.nx=40", "grid.ny=20", "case.inlet=nebb", "flow.tau=0.51"))
    inlet = likely_cause(setup, (0, 7))
    assert "lies on the boundary condition inlet (Inlet, kind nebb)" in inlet
    assert "case.inlet=nebb" not in inlet and "case.inlet=zou_he or case.inlet=equilibrium" in inlet
    assert inlet.count("collision=trt") == 2  # BGK: the boundary's fix and the tau cause's
    _, setup = prepare(run_config("case=cylinder", "grid.nx=40", "grid.ny=20", "case.inlet=zou_he", "flow.tau=0.51",
                                  "collision=trt"))
    inlet = likely_cause(setup, (0, 7))
    assert "collision=trt" not in inlet and "case.inlet=nebb or case.inlet=equilibrium" in inlet
    assert "collision=trt" not in likely_cause(setup, (30, 3))
