"""Fused and instrumented modes run the same stage functions and give the same fields."""

import jax
import numpy as np
import pytest
from conftest import run_config

from lbm.simulation import make_case
from lbm.stepper import STAGES, FusedStepper, InstrumentedStepper, stage_functions

CASES = {
    "cylinder": ["grid.nx=60", "grid.ny=36"],
    "cavity": ["case=cavity", "grid.nx=20", "grid.ny=18"],
    "poiseuille": ["case=poiseuille", "grid.ny=12"],
    "taylor_green": ["case=taylor_green", "grid.nx=16", "grid.ny=12"],
    "cavity_d3q19": ["case=cavity", "lattice=d3q19", "grid.nx=10", "grid.ny=10", "+grid.nz=10"],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("precision,rtol", [("float64", 1e-12), ("float32", 2e-5)])
def test_fused_and_instrumented_agree(name, precision, rtol):
    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    overrides = [o.replace("+grid.nz", "grid.nz") for o in CASES[name]]
    run = run_config(*overrides, f"precision={precision}")
    setup = make_case(run).setup()
    results = {}
    for cls in (FusedStepper, InstrumentedStepper):
        f, aux = cls(setup).advance(setup.initial_populations(), 30)
        results[cls.mode] = np.asarray(f), {k: np.asarray(v) for k, v in aux.items()}
    (ff, fa), (inf, ia) = results["fused"], results["instrumented"]
    assert ff.dtype == np.dtype(precision)
    # Same stage functions; XLA may contract/fuse arithmetic differently, so agreement is to rounding.
    # (the native engine sums in another order than XLA: compare relative to the population scale)
    np.testing.assert_allclose(ff, inf, rtol=rtol, atol=rtol * np.abs(inf).max())
    assert fa.keys() == ia.keys()
    for key in fa:
        assert fa[key].shape == (30, setup.lattice.d)
        # forces are sums of O(1e-2) link terms that cancel: compare relative to the force scale
        scale = np.abs(fa[key]).max()
        np.testing.assert_allclose(fa[key], ia[key], rtol=0, atol=(1e-3 if precision == "float32" else 1e-11) * scale)


def test_stage_selection_follows_canonical_order():
    for name, overrides in CASES.items():
        setup = make_case(run_config(*[o.replace("+grid.nz", "grid.nz") for o in overrides])).setup()
        names = list(stage_functions(setup))
        assert names == [s for s in STAGES if s in names], name
        assert {"macroscopic", "equilibrium", "collide", "stream"} <= set(names)
    cyl = make_case(run_config(*CASES["cylinder"])).setup()
    assert list(stage_functions(cyl)) == list(STAGES)
    tg = make_case(run_config(*CASES["taylor_green"])).setup()
    assert "bounce_back" not in stage_functions(tg) and "inlet" not in stage_functions(tg)


def test_instrumented_stages_compile_once_each():
    setup = make_case(run_config(*CASES["cylinder"])).setup()
    stepper = InstrumentedStepper(setup)
    f = setup.initial_populations()
    f, _ = stepper.advance(f, 3)
    assert set(stepper.compile_times) == set(STAGES)
    before = dict(stepper.compile_times)
    stepper.advance(f, 2)
    assert stepper.compile_times == before


def test_fused_named_scopes_carry_stage_names():
    setup = make_case(run_config(*CASES["cylinder"])).setup()
    stepper = FusedStepper(setup)
    hlo = stepper._chunk_fn(2).lower(setup.initial_populations(), stepper.arrays).as_text(debug_info=True)
    for stage in STAGES:
        assert f"{stage}/" in hlo or f"/{stage}" in hlo, stage
