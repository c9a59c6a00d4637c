"""The native engine's parts: generated kernels against the reference step, their slots, and the streaming slot maps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.boundaries import random_populations
from helpers.lattices import ALL_LATTICES, slow_except
from helpers.steps import reference_step

from lbm.engines.native import build as native
from lbm.engines.native.codegen import KernelSpec
from lbm.engines.plan import slot_maps
from lbm.kernels.collisions import collide, trt_omega_minus
from lbm.kernels.equilibrium import absolute, equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import D2Q9, LATTICES

ALL = ALL_LATTICES


pytestmark = pytest.mark.usefixtures("x64")
"""Kernels compared to 1e-14 in float64."""


needs_native = pytest.mark.native  # skips without a compiler; fails instead under LBM_REQUIRE_NATIVE=1 (conftest)
NATIVE_SHAPES = {2: [(7, 5), (3, 2), (16, 33)], 3: [(5, 4, 3), (3, 6, 2)]}


@needs_native
@pytest.mark.parametrize("lat,collision", slow_except(
    [(lat, c) for c in ("bgk", "trt", "trt_force") for lat in ALL],
    fast={(ALL_LATTICES[0], "trt_force")}), ids=lambda v: getattr(v, "name", v))
def test_native_kernels_equal_collide_then_stream(lat, collision):
    """push = one reference step; an AA pair (even, odd, in place) = two reference steps; any grid shape."""
    op = 1 / 0.8
    om = trt_omega_minus(op, 3 / 16) if collision != "bgk" else op
    force = np.array([2e-4, -1e-4, 5e-5][: lat.d]) if collision == "trt_force" else None
    spec = KernelSpec(lat, "float64", collision != "bgk", force is not None)

    def rule(f, feq, u, lat, force):
        return collide(f, feq, u, lat, op, om, force)
    for k, shape in enumerate(NATIVE_SHAPES[lat.d]):
        f = random_populations(lat, shape, k)
        one = reference_step(f, lat, rule, force)
        two = reference_step(one, lat, rule, force)
        pushed, *_ = native.push(spec, f, jnp.zeros_like(f), op, om, force)
        np.testing.assert_allclose(pushed, one, rtol=1e-14, atol=1e-16)
        a, *_ = native.aa_step(spec, f + 0, 0, op, om, force)
        a, *_ = native.aa_step(spec, a, 1, op, om, force)
        np.testing.assert_allclose(a, two, rtol=1e-14, atol=1e-16)


@needs_native
def test_native_kernels_read_their_slots_before_writing():
    """The slots a kernel returns are the old values, for every scheme; scatter writes exactly those slots."""
    lat = D2Q9
    shape = (6, 5)
    spec = KernelSpec(lat, "float64", False, False)
    f = random_populations(lat, shape, 3)
    cells = np.array([0, 7, 29])
    for scheme in ("push", "aa_even", "aa_odd"):
        read, write = slot_maps(lat, shape, cells, scheme)
        slots = jnp.asarray(read.astype(np.int32))
        if scheme == "push":
            out, old, _ = native.push(spec, f, jnp.zeros_like(f), 1.2, 1.2, None, slots)
        else:
            out, old, _ = native.aa_step(spec, f + 0, 0 if scheme == "aa_even" else 1, 1.2, 1.2, None, slots)
        np.testing.assert_array_equal(np.asarray(old), np.asarray(f).reshape(-1)[read])
        vals = jnp.asarray(np.arange(read.size, dtype=np.float64).reshape(read.shape))
        written = np.asarray(native.scatter(spec, out, jnp.asarray(write.astype(np.int32)), vals)).reshape(-1)
        np.testing.assert_array_equal(written[write], np.asarray(vals))
        untouched = np.setdiff1d(np.arange(written.size), write.reshape(-1))
        np.testing.assert_array_equal(written[untouched], np.asarray(out).reshape(-1)[untouched])


def test_slot_maps_follow_the_streaming_schemes():
    """push writes each post-collision population to its downstream neighbour; AA odd reads where AA even wrote."""
    lat = D2Q9
    shape = (5, 4)
    n = 20
    cells = np.arange(n)
    read_p, write_p = slot_maps(lat, shape, cells, "push")
    read_e, write_e = slot_maps(lat, shape, cells, "aa_even")
    read_o, write_o = slot_maps(lat, shape, cells, "aa_odd")
    for i in range(lat.q):
        moved = np.roll(np.arange(n).reshape(shape), tuple(lat.c[i]), axis=(0, 1)).reshape(-1)
        # push: population i of cell x lands on x + c_i, i.e. cell y receives it from y - c_i
        np.testing.assert_array_equal(np.sort(write_p[i] - i * n), np.arange(n))
        np.testing.assert_array_equal(write_p[i][moved] - i * n, np.arange(n))
        # AA: the odd step reads f_i(x) where the even step at x - c_i stored it, and each cell owns its slots
        np.testing.assert_array_equal(read_e[i], i * n + cells)
        np.testing.assert_array_equal(write_e[lat.opposite[i]], i * n + cells)
    assert np.unique(read_o).size == read_o.size and np.array_equal(np.sort(read_o.ravel()), np.sort(write_o.ravel()))
    even_targets = {(i, int(x)): int(write_e[i, x]) for i in range(lat.q) for x in cells}
    for i in range(lat.q):
        src = np.roll(np.arange(n).reshape(shape), tuple(lat.c[i]), axis=(0, 1)).reshape(-1)  # cell x - c_i
        np.testing.assert_array_equal(read_o[i], [even_targets[(i, int(s))] for s in src])


def _wall_setups(lat):
    """Solid masks with runs along rows, a lone solid cell, solid rows, and walls across the periodic seam."""
    from lbm.boundaries import FullwayBounceBack, HalfwayBounceBack, MovingWall

    shape = (9, 8) if lat.d == 2 else (6, 5, 7)
    rng = np.random.default_rng(11)
    solid = np.zeros(shape, bool)
    solid[:, 0] = True  # a whole wall (rows entirely solid in 2D, runs at the row start in 3D)
    solid[(2,) + (slice(3, 6),) * (lat.d - 1)] = True  # a block: runs inside rows
    solid[(shape[0] - 1,) + (shape[1] - 1,) * (lat.d - 1)] = True  # a lone cell at the row end (periodic seam)
    velocity = np.zeros((lat.d,) + shape)
    velocity[0][:, 0] = 0.05
    velocity[lat.d - 1][:, 0] = -0.02
    return shape, [HalfwayBounceBack.around(solid, lat), FullwayBounceBack(solid=solid),
                   MovingWall.with_velocity(solid, velocity, lat, np.float64), rng]


@needs_native
@pytest.mark.parametrize("lat", [D2Q9, pytest.param(LATTICES["d3q19"], marks=pytest.mark.slow)],
                         ids=lambda lat: lat.name)  # 3D: a kernel no other fast test builds, slow
def test_kernel_walls_equal_the_dense_bounce_back(lat):
    """The step kernels with wall records = collide, the dense bounce-back rule, stream: push and an AA pair."""
    from lbm.boundaries.base import StepState
    from lbm.engines.plan import wall_records

    op = om = 1 / 0.7
    spec = KernelSpec(lat, "float64", False, False)
    shape, walls = _wall_setups(lat)[0], _wall_setups(lat)[1][:3]
    for k, wall in enumerate(walls):
        f = random_populations(lat, shape, 20 + k)

        def reference(f, wall=wall):
            drho, u = macroscopic(f, lat, None)
            post = collide(f, equilibrium(drho, u, lat), u, lat, op, om, None)
            return stream(wall.apply(StepState(f=f, post=post), lat).post, lat)

        one = reference(f)
        two = reference(one)
        rec = {s: {key: jnp.asarray(v) for key, v in wall_records(lat, shape, (wall,), s).items()}
               for s in ("push", "aa_even", "aa_odd")}
        pushed, *_ = native.push(spec, f, jnp.zeros_like(f), op, om, None, None, rec["push"])
        np.testing.assert_allclose(pushed, one, rtol=1e-14, atol=1e-16, err_msg=type(wall).__name__)
        a, *_ = native.aa_step(spec, f + 0, 0, op, om, None, None, rec["aa_even"])
        a, *_ = native.aa_step(spec, a, 1, op, om, None, None, rec["aa_odd"])
        np.testing.assert_allclose(a, two, rtol=1e-14, atol=1e-16, err_msg=type(wall).__name__)


@needs_native
def test_kernel_walls_observe_slots_after_the_walls():
    """The observe slots return the step's result, walls applied (what forces read)."""
    from lbm.engines.plan import wall_records

    lat = D2Q9
    shape, (wall, *_) = _wall_setups(lat)
    spec = KernelSpec(lat, "float64", False, False)
    f = random_populations(lat, shape, 5)
    rec = {key: jnp.asarray(v) for key, v in wall_records(lat, shape, (wall,), "aa_even").items()}
    observe = jnp.asarray(np.array([0, 17, 5 * 72 + 3, 8 * 72 + 71], np.int32))
    out, _, seen = native.aa_step(spec, f + 0, 0, 1.3, 1.3, None, None, rec, observe)
    np.testing.assert_array_equal(np.asarray(seen), np.asarray(out).reshape(-1)[np.asarray(observe)])


def test_walls_go_to_the_kernel_unless_a_writer_touches_them():
    """plan_kernel: walls, inlet, outflow and forces in the kernel; a wall on the inlet face falls back to the block."""
    from lbm.boundaries import Forces, FullwayBounceBack, HalfwayBounceBack, Inlet, Outflow
    from lbm.engines.plan import plan_kernel, wall_records

    lat, shape = D2Q9, (12, 9)
    obstacle = np.zeros(shape, bool)
    obstacle[5:7, 3:6] = True
    bcs = (Outflow(), Inlet(u=np.full((2, 9), 0.01)), HalfwayBounceBack.around(obstacle, lat), Forces.on(obstacle, lat))
    plan = plan_kernel(lat, shape, bcs)
    assert [type(w).__name__ for w in plan.walls] == ["HalfwayBounceBack"]
    assert {type(f).__name__ for f in plan.faces} == {"Inlet", "Outflow"} and plan.outflow and plan.inlet is bcs[1]
    assert plan.forces is bcs[3] and plan.block is None and plan.general == ()
    # two observers: forces stay on the block, reading the walls' solid cells from the kernel
    plan = plan_kernel(lat, shape, bcs + (Forces.on(obstacle, lat),))
    assert plan.forces is None and plan.block is not None and plan.block.observed > 0
    observed = plan.block.cells[plan.block.size - plan.block.observed:plan.block.size]
    assert np.isin(np.flatnonzero(obstacle), observed).all()
    touching = obstacle.copy()
    touching[0, 4] = True  # a solid cell on the inlet face, which the inlet rewrites: the wall stays on the block
    plan = plan_kernel(lat, shape, bcs[:2] + (FullwayBounceBack(solid=touching),))
    assert plan.walls == () and plan.faces == () and plan.records == {}
    assert np.isin(np.flatnonzero(touching), plan.block.cells).all()
    assert plan_kernel(lat, (2, 9), bcs[:2]).faces == ()  # inlet, outflow and its upstream column need nx >= 3
    both = (FullwayBounceBack(solid=obstacle), HalfwayBounceBack.around(obstacle, lat))
    assert wall_records(lat, shape, both, "push") is None  # two walls on one cell: not independent link rules
    plan = plan_kernel(lat, shape, both)  # so both run on the block, in their order, as the dense step does
    assert plan.walls == () and plan.records == {}
    assert np.isin(np.flatnonzero(obstacle), plan.block.cells[: plan.block.size]).all()


@needs_native
@pytest.mark.parametrize("lat,kind,collision", [  # the fast lane: the kernel the cylinder's native runs build
    (D2Q9, "nebb", "bgk"), pytest.param(D2Q9, "zou_he", "trt_force", marks=pytest.mark.slow),
    pytest.param(LATTICES["d3q19"], "zou_he", "bgk", marks=pytest.mark.slow)],
                         ids=lambda v: getattr(v, "name", v))
def test_kernel_faces_equal_the_dense_inlet_and_outflow(lat, kind, collision):
    """Inlet (x = 0) and outflow (x = nx - 1) applied by the step kernels = outflow, moments, inlet, collide, stream.

    Dense rules of lbm.boundaries (Zou-He builds on the non-equilibrium bounce-back rule, so both are checked),
    a non-uniform inflow; push and an AA pair, float64 to 1e-14 as the bulk test.
    """
    from lbm.boundaries import Inlet, Outflow
    from lbm.boundaries.base import StepState

    op = 1 / 0.7
    om = trt_omega_minus(op, 3 / 16) if collision != "bgk" else op
    force = np.array([2e-4, -1e-4, 5e-5][: lat.d]) if collision.endswith("force") else None
    shape = (6, 5) if lat.d == 2 else (5, 4, 3)
    rng = np.random.default_rng(7)
    u_in = 0.05 * rng.standard_normal((lat.d,) + shape[1:])
    inlet, outflow = Inlet(u=jnp.asarray(u_in), kind=kind), Outflow()
    spec = KernelSpec(lat, "float64", collision != "bgk", force is not None, kind)

    def reference(f):
        s = outflow.apply(StepState(f=f), lat)
        drho, u = macroscopic(s.f, lat, force)
        s = inlet.apply(s.replace(drho=drho, u=u, feq=equilibrium(drho, u, lat)), lat)
        return stream(collide(s.f, s.feq, s.u, lat, op, om, force), lat)

    f = random_populations(lat, shape, 9)
    one, two = reference(f), reference(reference(f))
    faces = {"u_in": jnp.asarray(u_in), "outflow": True}
    pushed, *_ = native.push(spec, f, jnp.zeros_like(f), op, om, force, **faces)
    np.testing.assert_allclose(pushed, one, rtol=1e-14, atol=1e-16)
    a, *_ = native.aa_step(spec, f + 0, 0, op, om, force, **faces)
    a, *_ = native.aa_step(spec, a, 1, op, om, force, **faces)
    np.testing.assert_allclose(a, two, rtol=1e-14, atol=1e-16)
    bulk = np.asarray(native.push(spec, f, jnp.zeros_like(f), op, om, force)[0])
    assert np.abs(bulk - np.asarray(one)).max() > 1e-3  # the faces change the step: the test sees them


@needs_native
@pytest.mark.slow  # two engines compiled for the cylinder: ~15 s on 2 loaded cores
def test_kernel_faces_and_forces_with_16bit_storage_follow_the_xla_engine():
    """The cylinder (inlet, outflow, walls and forces all in the kernel) in float16 storage stays near the xla engine."""
    from helpers.runs import run_config

    from lbm.engines import make_engine
    from lbm.engines.xla import XlaEngine
    from lbm.simulation import make_case

    with jax.enable_x64(False):
        setup = make_case(run_config("grid.nx=40", "grid.ny=27", "precision=float32")).setup()
        fast = make_engine(setup, engine="native", storage="float16")
        assert fast.block is None and fast.plan.forces is not None and len(fast.plan.faces) == 2
        f_ref, aux_ref = XlaEngine(setup, "float16").advance(setup.initial_populations(), 8)
        f_fast, aux_fast = fast.advance(setup.initial_populations(), 8)
    # both engines round f - w to float16 (11-bit mantissa) each step, in different orders: measured 3.2e-5 of the
    # population scale and 2.9e-5 of the largest force component after 8 steps (a force missing the rest weights
    # of 16-bit storage is off by O(1)); compared as populations f (the engines hold f - w)
    f_fast, f_ref = absolute(np.asarray(f_fast), setup.lattice), absolute(np.asarray(f_ref), setup.lattice)
    np.testing.assert_allclose(np.asarray(f_fast), np.asarray(f_ref), rtol=0, atol=1e-4 * np.abs(np.asarray(f_ref)).max())
    force_ref = np.asarray(aux_ref["force"])
    np.testing.assert_allclose(np.asarray(aux_fast["force"]), force_ref, rtol=0, atol=1e-4 * np.abs(force_ref).max())
