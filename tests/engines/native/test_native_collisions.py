"""The native engine's mrt, regularized, recursive_regularized and kbc kernels against the reference (xla) physics.

Kernel level: one push step and one in-place AA pair of the generated kernel equal the reference collision
(lbm.kernels.collisions.Collision) then streaming, on random populations of a periodic box, with and without a
body force, for two sets of rates through one built kernel (the rates are run-time values). Engine level: every
new collision on the native engine follows the xla engine over several steps on a periodic box (taylor_green), a
walled one (cavity: resting and moving walls in the kernel), a force-driven channel (poiseuille) and the cylinder
(inlet, outflow and obstacle forces in the kernel), in float64 and float32, on D2Q9 and a 3D lattice; 16-bit
storage stays within its rounding of the xla engine's. The fast lane keeps the KBC kernel with a force.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.boundaries import random_populations
from helpers.lattices import ALL_LATTICES, alternate, slow_except
from helpers.runs import setup_for
from helpers.steps import advanced, reference_step

from lbm.engines import EngineUnavailable, make_engine
from lbm.engines.native import build as native
from lbm.engines.native.codegen import KernelSpec
from lbm.engines.native.collisions import KINDS, collision_rates
from lbm.engines.xla import XlaEngine
from lbm.kernels.collisions import Collision
from lbm.lattice import D2Q9

needs_native = pytest.mark.native  # skips without a compiler; fails instead under LBM_REQUIRE_NATIVE=1 (conftest)

RATES = {
    "mrt": [Collision("mrt", 1 / 0.8, 1.1, 1.0, 1.3), Collision("mrt", 1.9, 0.7, 1.2, 1.0)],
    "regularized": [Collision("regularized", 1 / 0.8, bulk=1.0), Collision("regularized", 1.9)],
    "recursive_regularized": [Collision("recursive_regularized", 1 / 0.8),
                              Collision("recursive_regularized", 1.9, bulk=1.3)],
    "kbc": [Collision("kbc", 1 / 0.8), Collision("kbc", 1.95)],
}
"""Two rate sets per kind (tau 0.8 and near 1/2), both run through the same built kernel."""
SHAPES = {2: [(7, 5), (3, 16)], 3: [(5, 4, 3), (2, 3, 16)]}
"""Periodic boxes: inner axes of 5 and 3 cells (a row's edge cells apart from its vectors) and of 16 (two float64
vectors: kbc's row as head_lanes and whole vectors, kernels.cc)."""


KERNELS = [(lat, kind, alternate(i, j, (False, True))) for i, lat in enumerate(ALL_LATTICES)
           for j, kind in enumerate(k for k in KINDS if k in RATES)]
"""Every generated kind but the cumulant, whose kernel (recorded from its Python cell function)
tests/kernels/collisions/test_collision_cumulant.py checks against the xla engine."""
KERNEL_FAST: set[tuple] = set()
"""None in the fast lane: each kernel is a native build of its own on a clean machine (the fast lane's native kernel
checks are tests/engines/native/test_engines_native.py's); every generated collision is checked here in the full suite."""


@needs_native
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("lat,kind,forced", slow_except(KERNELS, fast=KERNEL_FAST),
                         ids=lambda v: getattr(v, "name", str(v)))
def test_native_collision_kernels_equal_collide_then_stream(lat, kind, forced):
    """push = one reference step, an AA pair = two, in float64 to rounding, for two rate sets of one kernel."""
    force = np.array([2e-4, -1e-4, 5e-5][: lat.d]) if forced else None
    spec = KernelSpec(lat, "float64", False, forced, "", kind)
    for k, collision in enumerate(RATES[kind]):
        rates = collision_rates(collision)
        op = collision.omega
        om = collision.rates()["odd"]
        for shape in SHAPES[lat.d]:
            f = random_populations(lat, shape, k)
            one = reference_step(f, lat, collision, force)
            two = reference_step(one, lat, collision, force)
            assert np.abs(np.asarray(one - f)).max() > 1e-3  # the step changes the populations: the test sees it
            pushed, *_ = native.push(spec, f, jnp.zeros_like(f), op, om, force, rates=rates)
            np.testing.assert_allclose(pushed, one, rtol=0, atol=1e-14)
            a, *_ = native.aa_step(spec, f + 0, 0, op, om, force, rates=rates)
            a, *_ = native.aa_step(spec, a, 1, op, om, force, rates=rates)
            np.testing.assert_allclose(a, two, rtol=0, atol=1e-14)


CASES = {
    "taylor_green": ["case=taylor_green", "grid.nx=16", "grid.ny=12"],
    "cavity": ["case=cavity", "grid.nx=20", "grid.ny=18"],
    "poiseuille": ["case=poiseuille", "grid.ny=12"],
    "cylinder": ["grid.nx=48", "grid.ny=27", "case.inlet=zou_he", "case.bounce_back=halfway"],
    "cylinder_nebb": ["grid.nx=48", "grid.ny=27", "case.inlet=nebb", "case.bounce_back=halfway"],  # the default inlet
    "taylor_green_d3q27": ["case=taylor_green", "lattice=d3q27", "grid.nx=8", "grid.ny=6", "grid.nz=5"],
    "cavity_d3q19": ["case=cavity", "lattice=d3q19", "grid.nx=10", "grid.ny=9", "grid.nz=8"],
    "poiseuille_d3q19": ["case=poiseuille", "lattice=d3q19", "grid.ny=10", "grid.nz=4", "grid.nx=6"],
}
TOL = {"float64": 8e-15, "float32": 1e-5}
"""Bounds on max |native - xla| / max |f| after 9 steps: about 3x the largest measured over the cases below at XLA's
backend level 0 (the suite's) and 3: float64 2.8e-15 and 2.1e-15, float32 1.8e-6 and 3.1e-6 (both KBC)."""
ENGINE_CASES = [("taylor_green", "recursive_regularized", "float64"), ("cavity", "mrt", "float64"),
                ("poiseuille", "kbc", "float64"), ("cavity_d3q19", "kbc", "float64"),
                ("cavity_d3q19", "regularized", "float64"), ("poiseuille_d3q19", "recursive_regularized", "float64"),
                ("taylor_green_d3q27", "mrt", "float64"),
                ("cylinder", "regularized", "float32"), ("cavity", "kbc", "float32"),
                ("cylinder_nebb", "kbc", "float64")]
"""Every collision on the engine at least twice: each case (periodic, walls in the kernel, a body force, the
cylinder's inlet, outflow and obstacle forces) on D2Q9 and 3D lattices; float64 where its kernel is one that
test_native_collision_kernels_equal_collide_then_stream builds (the same lattice, kind and force: one build serves
both), float32 on the cylinder and the walled KBC cavity (each a build of its own), and KBC behind the cylinder's default
(NEBB) inlet in float64 (which imposes rho and u_x only: f - feq carries transverse momentum at the inlet's cells,
and the kernel computes dk there)."""
ENGINE_FAST: set[tuple[str, str, str]] = set()
"""None in the fast lane (see KERNEL_FAST)."""
@needs_native
@pytest.mark.parametrize("name,kind,precision", slow_except(ENGINE_CASES, fast=ENGINE_FAST))
def test_native_engine_collisions_follow_the_xla_engine(name, kind, precision):
    """Nine steps (a push step, then four in-place pairs) of the native engine equal the xla engine's to rounding."""
    setup = setup_for([*CASES[name], f"collision={kind}"], precision)
    fast = make_engine(setup, engine="native")
    assert fast.name == "native" and fast.spec.collision == kind
    f_ref, aux_ref = advanced(XlaEngine(setup), setup, 9)
    f_fast, aux_fast = advanced(fast, setup, 9)
    assert np.abs(f_ref - setup.initial_populations()).max() > 1e-6  # the flow moves: the test sees the collision
    scale = np.abs(f_ref).max()
    np.testing.assert_allclose(f_fast, f_ref, rtol=0, atol=TOL[precision] * scale)
    assert aux_fast.keys() == aux_ref.keys()
    for key in aux_ref:
        np.testing.assert_allclose(aux_fast[key], aux_ref[key], rtol=0,
                                   atol=(1e-3 if precision == "float32" else 1e-11) * np.abs(aux_ref[key]).max())


@needs_native
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mrt", "kbc"])  # moment space and the entropic one; the 16-bit load and store
@pytest.mark.parametrize("storage", ["float16"])  # around the collision are the same code for every kind
def test_native_collisions_with_16bit_storage_follow_the_xla_engine(kind, storage):
    """16-bit storage (f - w stored, float32 compute) on the cavity stays within 16-bit rounding of the xla engine."""
    with jax.enable_x64(False):
        setup = setup_for([*CASES["cavity"], f"collision={kind}"], "float32")
        f_ref = np.asarray(XlaEngine(setup, storage).advance(setup.initial_populations(), 20)[0])
        f_fast = np.asarray(make_engine(setup, engine="native", storage=storage).advance(
            setup.initial_populations(), 20)[0])
    # |f - w| < 0.01 here; float16 keeps 11 bits: 20 steps of rounding in different orders, measured up to
    # 1.5e-5 = 1.7e-3 of the largest |f - w| (kbc; 2 float16 spacings there)
    bound = 4e-3
    np.testing.assert_allclose(f_fast, f_ref, rtol=0, atol=bound * np.abs(f_ref).max())


def test_native_engine_refuses_the_smagorinsky_model_in_one_line():
    """Smagorinsky is not in the native kernel: engine=native says so, engine=auto falls back to xla."""
    setup = setup_for([*CASES["cavity"], "collision=mrt", "collision.smagorinsky=0.1"], "float32")
    with pytest.raises(EngineUnavailable, match="Smagorinsky") as err:
        make_engine(setup, engine="native")
    assert "\n" not in str(err.value)
    auto = make_engine(setup)
    assert auto.name == "xla" and "Smagorinsky" in auto.note


def test_the_native_kernel_covers_every_collision_kind():
    """A new kind in lbm.kernels.collisions must get a native generator, or the native engine would build none."""
    from lbm.kernels.collisions import COLLISION_KINDS

    assert set(COLLISION_KINDS) == {"bgk", "trt", *KINDS}
    assert set(KINDS) - set(RATES) == {"cumulant"}  # every other kind is in this file's kernel matrix
    with pytest.raises(ValueError, match="no native collision 'bogus'"):
        KernelSpec(D2Q9, "float64", False, False, "", "bogus")


def test_the_recorder_fuses_each_product_that_one_sum_alone_uses():
    """a b + c -> LBM_FMA(a, b, c), c - a b -> LBM_FMA(-a, b, c); a product with another use stays, dead values go."""
    from lbm.kernels.collisions.recorder import Recorder

    rec = Recorder("t")
    a, b, c = rec.name("a"), rec.name("b"), rec.name("c")
    shared = a * c
    out = {"o0": a * b + c, "o1": c - b * c, "o2": shared + b, "o3": shared * b}
    _ = (a - b) * c  # recorded, unused: not in the program
    assert rec.program(out) == [
        "real t0 = a * c;", "real t2 = LBM_FMA(a, b, c);", "real t4 = LBM_FMA(-b, c, c);", "real t5 = t0 + b;",
        "real t6 = t0 * b;", "real o0 = t2;", "real o1 = t4;", "real o2 = t5;", "real o3 = t6;"]
    assert rec.lines[1:3] == ["real t1 = a * b;", "real t2 = t1 + c;"]  # as recorded


def test_only_the_scheduled_kinds_get_the_scheduler_flags(monkeypatch):
    """The cumulant's library is built with GCC's scheduler (the same operations); BGK's and KBC's flags are cxxflags()."""
    monkeypatch.delenv("LBM_NATIVE_EXTRA_FLAGS", raising=False)
    monkeypatch.setattr(native, "compiler_version", lambda cxx: "g++ (GCC) 12.2.0\nFree Software Foundation, Inc.")
    plain = native.cxxflags()
    for kind in ("", "kbc", "mrt"):
        assert native.kernel_flags(KernelSpec(D2Q9, "float32", False, False, collision=kind), "g++") == plain
    cumulant = native.kernel_flags(KernelSpec(D2Q9, "float32", False, False, collision="cumulant"), "g++")
    assert cumulant == [*plain, "-fschedule-insns", "-fsched-pressure"]
    monkeypatch.setattr(native, "compiler_version", lambda cxx: "clang version 17.0.0")
    assert native.kernel_flags(KernelSpec(D2Q9, "float32", False, False, collision="cumulant"), "clang++") == plain
