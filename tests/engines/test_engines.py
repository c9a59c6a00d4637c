"""Every engine against the reference (xla): every case, both precisions, odd and even step counts; both modes.

The native engine runs the generated C++ kernel on the bulk and the case's own stage
functions on the boundary cells; the xla engine composes the stage functions in one jit
(the reference). They agree to rounding, not bit for bit: the C++ kernel sums the density
pairwise and does not contract multiply-adds, while XLA:CPU contracts them into FMAs and
sums through its own reduction. float64 therefore agrees to ~1e-15 relative after 30
steps; float32 to ~1e-6 of the population scale.
"""

import math
import re

import jax
import numpy as np
import pytest
from helpers.lattices import slow_except
from helpers.runs import advance, run_config, setup_for
from helpers.steps import advanced

from lbm.engines import EngineUnavailable, make_engine
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.native import build as native
from lbm.engines.xla import XlaEngine
from lbm.kernels.equilibrium import absolute
from lbm.simulation import make_case
from lbm.stages import STAGES, split_scope

needs_native = pytest.mark.native  # skips without a compiler; fails instead under LBM_REQUIRE_NATIVE=1 (conftest)

CASES = {
    "cylinder": ["grid.nx=60", "grid.ny=36"],
    "cylinder_halfway_zou_he": ["grid.nx=60", "grid.ny=36", "case.bounce_back=halfway", "case.inlet=zou_he"],
    "cylinder_equilibrium_inlet_trt": ["grid.nx=48", "grid.ny=27", "case.inlet=equilibrium", "collision=trt"],
    "cavity": ["case=cavity", "grid.nx=20", "grid.ny=18"],
    "poiseuille": ["case=poiseuille", "grid.ny=12"],
    "poiseuille_trt": ["case=poiseuille", "grid.ny=12", "collision=trt"],
    "taylor_green": ["case=taylor_green", "grid.nx=16", "grid.ny=12"],
    "cavity_d3q19": ["case=cavity", "lattice=d3q19", "grid.nx=10", "grid.ny=9", "grid.nz=8"],
    "taylor_green_d3q27": ["case=taylor_green", "lattice=d3q27", "grid.nx=8", "grid.ny=6", "grid.nz=5"],
    "cylinder_d3q19": ["grid.nx=40", "grid.ny=27", "lattice=d3q19", "grid.nz=4"],
}


FLOAT32 = ("cylinder", "cavity", "cylinder_d3q19")
"""Cases also compared in float32 (the kernels are the same code for both precisions; the suite's time budget: each
is a kernel build, and these three share theirs with other tests)."""
LONG = ("cylinder", "cavity_d3q19", "poiseuille_trt")
"""Cases also compared over 30 steps (15 in-place pairs); every case runs 7 (a push step, then three pairs)."""


F64, F32 = 7e-15, 4e-6
"""Bounds on max |native - xla| / max |f|: 2-3x the largest measured over every case below, native against xla
(float64: 2.3e-15 after 7 steps, 3.0e-15 after 30; float32: 1.8e-6)."""


@needs_native
@pytest.mark.parametrize("name,precision,tol,steps", slow_except(
    [(n, "float64", F64, 7) for n in sorted(CASES)] + [(n, "float32", F32, 7) for n in FLOAT32]
    + [(n, "float64", F64, 30) for n in LONG],
    fast={("cylinder", "float32", F32, 7), ("taylor_green", "float64", F64, 7)}))
def test_native_engine_equals_the_reference(name, precision, tol, steps):
    setup = setup_for(CASES[name], precision)
    fast = make_engine(setup, engine="native")
    assert fast.name == "native"
    f_ref, aux_ref = advanced(XlaEngine(setup), setup, steps)
    f_fast, aux_fast = advanced(fast, setup, steps)
    assert f_fast.dtype == np.dtype(precision) and f_fast.shape == f_ref.shape
    scale = np.abs(f_ref).max()
    np.testing.assert_allclose(f_fast, f_ref, rtol=0, atol=tol * scale)
    assert aux_fast.keys() == aux_ref.keys()
    for key in aux_ref:
        assert aux_fast[key].shape == (steps, setup.lattice.d)
        np.testing.assert_allclose(aux_fast[key], aux_ref[key], rtol=0,
                                   atol=(1e-3 if precision == "float32" else 1e-12) * np.abs(aux_ref[key]).max())


@needs_native
@pytest.mark.slow
def test_native_agrees_with_instrumented_mode():
    setup = setup_for(CASES["cylinder"], "float64")
    f_fast, aux_fast = advanced(make_engine(setup, engine="native"), setup, 12)
    f_inst, aux_inst = advanced(InstrumentedEngine(setup), setup, 12)
    lat = setup.lattice  # the populations compared as before the engines held deviations f - w
    np.testing.assert_allclose(absolute(np.asarray(f_fast), lat), absolute(np.asarray(f_inst), lat), rtol=1e-12, atol=0)
    np.testing.assert_allclose(aux_fast["force"], aux_inst["force"], rtol=0, atol=1e-12 * np.abs(aux_inst["force"]).max())


@needs_native
@pytest.mark.slow
def test_chunks_compose_like_one_dispatch():
    """Odd chunks (a two-buffer step then in-place pairs) and even chunks chain to the same state."""
    setup = setup_for(CASES["cylinder"], "float64")
    stepper = make_engine(setup, engine="native")
    f = setup.initial_populations()
    forces = []
    for n in (3, 1, 4, 2):
        f, aux = stepper.advance(f, n)
        forces.append(np.asarray(aux["force"]))
    g, aux = make_engine(setup, engine="native").advance(setup.initial_populations(), 10)
    np.testing.assert_allclose(np.asarray(f), np.asarray(g), rtol=1e-14, atol=0)
    np.testing.assert_allclose(np.concatenate(forces), np.asarray(aux["force"]), rtol=1e-12, atol=1e-18)


@needs_native
def test_physics_validations_hold_on_the_native_engine():
    """Taylor-Green decay within 1% of the analytic rate, the mass of a periodic box conserved to round-off."""
    run = run_config("case=taylor_green", "grid.nx=64", "grid.ny=64", "steps=2000", "output.every=500")
    case, setup, fields = advance(run, engine="native")
    assert fields["engine"] == "native"
    for step, amp in case.samples[1:]:
        assert amp == pytest.approx(run.flow.u_lattice * math.exp(-2 * setup.nu * (2 * math.pi / 64) ** 2 * step), rel=0.01)
    run = run_config("case=taylor_green", "grid.nx=32", "grid.ny=24", "steps=501", "precision=float64")
    _, setup, fields = advance(run, engine="native")
    assert fields["engine"] == "native"
    initial = absolute(np.asarray(setup.initial_populations()), setup.lattice)  # the populations, not f - w
    assert absolute(fields["f"], setup.lattice).sum() == pytest.approx(initial.sum(), rel=1e-13)


@needs_native
def test_fused_scopes_name_every_stage_of_the_native_step():
    setup = setup_for(CASES["cylinder"], "float32")
    stepper = make_engine(setup, engine="native")
    hlo = stepper.lower(setup.initial_populations(), 2).as_text(debug_info=True)
    # scope components of the ops' names; the kernel's (fused_bulk+outflow+macroscopic+...) names several stages
    named = {st for comp in re.findall(r"/([^/\"'()]+)", hlo) for st in split_scope(comp)}
    assert set(STAGES) <= named, set(STAGES) - named
    assert "fused_bulk" in hlo


@needs_native
@pytest.mark.slow
def test_native_memory_is_one_population_array_plus_boundary_data():
    """In-place AA pairs: XLA plans no second population buffer (memory_analysis, not timing)."""
    grids = {"taylor_green": ["case=taylor_green", "grid.nx=128", "grid.ny=96"], "cylinder": ["grid.nx=420", "grid.ny=180"]}
    for name, limit in (("taylor_green", 1.01), ("cylinder", 1.25)):
        setup = setup_for(grids[name], "float32")
        stepper = make_engine(setup, engine="native")
        f = setup.initial_populations()
        mem = stepper.compile(f, 10).memory_analysis()
        planned = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
        plan_bytes = sum(np.asarray(a).nbytes for a in jax.tree_util.tree_leaves(stepper.params))
        assert mem.temp_size_in_bytes < 0.25 * f.nbytes, name
        assert planned <= limit * f.nbytes + plan_bytes, name


def test_auto_falls_back_to_xla_when_no_compiler(monkeypatch):
    setup = setup_for(CASES["taylor_green"], "float32")
    monkeypatch.setattr(native, "compiler", lambda: None)
    stepper = make_engine(setup)
    assert stepper.name == "xla" and "compiler" in stepper.note
    with pytest.raises(EngineUnavailable):
        make_engine(setup, engine="native")


@pytest.mark.parametrize("case,platform,expected", [
    ("taylor_green", "tpu", "pallas"),  # wall-free 2D box: the one TPU case where the Pallas kernel wins
    ("cylinder", "tpu", "xla"),  # boundary cells: gathers and scatters serialise on a TPU
    ("cavity", "tpu", "xla"),
    ("taylor_green_d3q27", "tpu", "pallas"),  # a wall-free 3D box too (D3Q19 128^3: 2332 against 870 MLUPS)
    ("cavity_d3q19", "tpu", "pallas"),  # one half-way wall: the in-place kernels apply it (lbm.engines.pallas.walls)
    ("cylinder_d3q19", "tpu", "pallas"),  # inlet, outflow, full-way obstacle, force: the pair's faces (256x128x128 on
    # the v5e: 3606 against xla's 589 MLUPS; lbm.engines.pallas.faces)
    ("cylinder", "gpu", "pallas"),
    ("taylor_green_d3q27", "cuda", "pallas"),
    ("cylinder", "cpu", "native"),
])
def test_auto_choice_by_platform_and_case(case, platform, expected):
    from lbm.engines import auto_choice

    name, why = auto_choice(setup_for(CASES[case], "float32"), platform)
    assert name == expected
    assert ("TPU" in why) == (platform == "tpu")  # a TPU choice says why; the others have no measured rule yet


def test_auto_on_a_tpu_logs_why_in_the_engine_note():
    stepper = make_engine(setup_for(CASES["cylinder"], "float32"), platform="tpu")
    assert stepper.name == "xla" and "auto on a TPU" in stepper.note


@needs_native
@pytest.mark.slow  # the fast lane's 16-bit storage: tests/engines/test_storage.py (every pattern through each conversion)
@pytest.mark.parametrize("engines", [pytest.param(("native", "xla"), id="native+xla")])
@pytest.mark.parametrize("storage,bound", [("float16", 7e-3)])
def test_16bit_storage_accuracy_on_taylor_green(storage, bound, engines):
    """16-bit storage (f - w kept in 16 bits, float32 arithmetic): decay error against the analytic solution.

    48x48 to the same time as 64x64's 3000 steps (t ~ N at fixed Re and u_lattice), a third of the cost: measured
    max error over the 6 samples 2.6e-3 for float16 on both engines, as float32 (at 64: float32 1.3e-3, float16
    2.7e-3 xla, 3.2e-3 native; docs/performance.md). The bound 7e-3 is 2.7x that. Both engines, and their agreement.
    """
    run = run_config("case=taylor_green", "grid.nx=48", "grid.ny=48", "steps=2250")
    case = make_case(run)
    setup = case.setup()
    from lbm.kernels.macroscopic import macroscopic

    errors = {}
    for engine in engines:
        stepper = make_engine(setup, engine=engine, storage=storage)
        f = setup.initial_populations()
        worst = 0.0
        for k in range(1, 7):
            f, _ = stepper.advance(f, 375)
            assert f.dtype == np.float32
            u = np.asarray(macroscopic(f, setup.lattice)[1])
            amp = float(np.sum(u * case.mode) / np.sum(case.mode ** 2)) * run.flow.u_lattice
            worst = max(worst, abs(amp / case.analytic_amplitude(setup, 375 * k) - 1))
        errors[engine] = worst
    assert max(errors.values()) < bound
    if "xla" in engines:  # both engines round to the same 16-bit grid: their errors are alike
        assert errors["native"] == pytest.approx(errors["xla"], rel=0.3)


@needs_native
def test_threads_do_not_change_the_result(monkeypatch):
    setup = setup_for(["case=taylor_green", "grid.nx=96", "grid.ny=200"], "float64")
    results = []
    for threads in ("1", "3"):
        monkeypatch.setenv("LBM_NATIVE_THREADS", threads)
        results.append(advanced(make_engine(setup, engine="native"), setup, 6)[0])
    np.testing.assert_array_equal(results[0], results[1])


@needs_native
@pytest.mark.parametrize("overrides", [["case=taylor_green", "grid.nx=96", "grid.ny=200"],
                                       pytest.param(["grid.nx=240", "grid.ny=90"], marks=pytest.mark.slow)],
                         ids=["periodic", "cylinder"])
def test_threaded_native_equals_xla(overrides, monkeypatch):
    """Above 16384 cells per plane the native kernel splits rows among threads: compared with xla there too."""
    monkeypatch.setenv("LBM_NATIVE_THREADS", "2")
    setup = setup_for(overrides, "float64")
    assert int(np.prod(setup.shape)) >= 16384
    f_ref, aux_ref = advanced(XlaEngine(setup), setup, 7)
    f_nat, aux_nat = advanced(make_engine(setup, engine="native"), setup, 7)
    np.testing.assert_allclose(f_nat, f_ref, rtol=0, atol=1e-13 * np.abs(f_ref).max())
    for key in aux_ref:
        np.testing.assert_allclose(aux_nat[key], aux_ref[key], rtol=0, atol=1e-12 * np.abs(aux_ref[key]).max())


# --- fused and instrumented modes run the same stage functions --------------------------------------

MODE_CASES = {
    "cylinder": ["grid.nx=60", "grid.ny=36"],
    "cavity": ["case=cavity", "grid.nx=20", "grid.ny=18"],
    "poiseuille": ["case=poiseuille", "grid.ny=12"],
    "taylor_green": ["case=taylor_green", "grid.nx=16", "grid.ny=12"],
    "cavity_d3q19": ["case=cavity", "lattice=d3q19", "grid.nx=10", "grid.ny=10", "+grid.nz=10"],
}


@pytest.mark.parametrize("name,precision,rtol", slow_except(
    [(n, "float64", 1e-12) for n in sorted(MODE_CASES)] + [(n, "float32", 2e-5) for n in ("cylinder", "taylor_green")],
    fast={("taylor_green", "float64", 1e-12)}))
def test_fused_and_instrumented_agree(name, precision, rtol):
    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    overrides = [o.replace("+grid.nz", "grid.nz") for o in MODE_CASES[name]]
    run = run_config(*overrides, f"precision={precision}")
    setup = make_case(run).setup()
    results = {}
    for cls in (XlaEngine, InstrumentedEngine):
        f, aux = cls(setup).advance(setup.initial_populations(), 12)
        results[cls.mode] = np.asarray(f), {k: np.asarray(v) for k, v in aux.items()}
    (ff, fa), (inf, ia) = results["fused"], results["instrumented"]
    assert ff.dtype == np.dtype(precision)
    # Same stage functions; XLA may contract/fuse arithmetic differently, so agreement is to rounding.
    # (the native engine sums in another order than XLA: compare relative to the population scale)
    np.testing.assert_allclose(ff, inf, rtol=rtol, atol=rtol * np.abs(inf).max())
    assert fa.keys() == ia.keys()
    for key in fa:
        assert fa[key].shape == (12, setup.lattice.d)
        # forces are sums of O(1e-2) link terms that cancel: compare relative to the force scale
        scale = np.abs(fa[key]).max()
        np.testing.assert_allclose(fa[key], ia[key], rtol=0, atol=(1e-3 if precision == "float32" else 1e-11) * scale)


def test_stage_selection_follows_canonical_order():
    for name, overrides in MODE_CASES.items():
        setup = make_case(run_config(*[o.replace("+grid.nz", "grid.nz") for o in overrides])).setup()
        names = list(setup.stages)
        assert names == [s for s in STAGES if s in names], name
        assert {"macroscopic", "equilibrium", "collide", "stream"} <= set(names)
    cyl = make_case(run_config(*MODE_CASES["cylinder"])).setup()
    assert list(cyl.stages) == list(STAGES)
    tg = make_case(run_config(*MODE_CASES["taylor_green"])).setup()
    assert "bounce_back" not in tg.stages and "inlet" not in tg.stages


def test_instrumented_stages_compile_once_each():
    setup = make_case(run_config(*MODE_CASES["cylinder"])).setup()
    stepper = InstrumentedEngine(setup)
    f = setup.initial_populations()
    f, _ = stepper.advance(f, 3)
    assert set(stepper.compile_times) == set(STAGES)
    before = dict(stepper.compile_times)
    stepper.advance(f, 2)
    assert stepper.compile_times == before


def test_fused_named_scopes_carry_stage_names():
    setup = make_case(run_config(*MODE_CASES["cylinder"])).setup()
    hlo = XlaEngine(setup).lower(setup.initial_populations(), 2).as_text(debug_info=True)
    for stage in STAGES:
        assert f"{stage}/" in hlo or f"/{stage}" in hlo, stage


WALL_CASES = {
    "channel_d3q19": ["case=poiseuille", "lattice=d3q19", "grid.nx=5", "grid.ny=9", "grid.nz=6"],
    "cylinder_halfway_d3q19": ["grid.nx=40", "grid.ny=27", "lattice=d3q19", "grid.nz=4", "case.bounce_back=halfway"],
    "cavity_trt": ["case=cavity", "grid.nx=17", "grid.ny=21", "collision=trt"],
}


@needs_native
@pytest.mark.slow  # the fast lane checks the kernel's walls against the dense rules (test_engines_native)
@pytest.mark.parametrize("name", sorted(WALL_CASES))
@pytest.mark.parametrize("steps", [9, 12])
def test_native_walls_in_the_kernel_equal_the_reference(name, steps):
    """Walls applied by the native kernel (no block for them): float64 equal to the xla engine to 1e-13."""
    setup = setup_for(WALL_CASES[name], "float64")
    fast = make_engine(setup, engine="native")
    assert fast.plan.walls, "the walls of this case run in the kernel"
    f_ref, aux_ref = advanced(XlaEngine(setup), setup, steps)
    f_fast, aux_fast = advanced(fast, setup, steps)
    np.testing.assert_allclose(f_fast, f_ref, rtol=0, atol=1e-13 * np.abs(f_ref).max())
    for key in aux_ref:
        np.testing.assert_allclose(aux_fast[key], aux_ref[key], rtol=0, atol=1e-12 * np.abs(aux_ref[key]).max())


@needs_native
@pytest.mark.slow
def test_native_walls_with_16bit_storage_follow_the_xla_engine():
    """float16 storage on the cavity (moving walls in the kernel) stays within 16-bit rounding of the xla engine."""
    setup = setup_for(CASES["cavity"], "float32")
    f_ref = np.asarray(XlaEngine(setup, "float16").advance(setup.initial_populations(), 20)[0])
    f_fast = np.asarray(make_engine(setup, engine="native", storage="float16").advance(setup.initial_populations(), 20)[0])
    # stored f - w in float16 (11-bit mantissa, |f - w| < 0.1 here): 20 steps of rounding stay far below 1e-3
    f_fast, f_ref = absolute(f_fast, setup.lattice), absolute(f_ref, setup.lattice)  # the populations f
    np.testing.assert_allclose(f_fast, f_ref, rtol=0, atol=1e-3 * np.abs(f_ref).max())
