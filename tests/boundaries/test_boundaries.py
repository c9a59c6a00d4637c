"""Boundary conditions (lbm.boundaries): each dense rule against its closed form, and each block form against its dense rule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.boundaries import dense_and_block, shuffled_block
from helpers.lattices import ALL_LATTICES, lattice_params, random_state, shape_for, slow_except

from lbm.boundaries import (
    BoundaryCondition,
    Forces,
    FullwayBounceBack,
    HalfwayBounceBack,
    Inlet,
    InterpolatedBounceBack,
    MovingWall,
    Outflow,
    PressureOutlet,
    StepState,
)
from lbm.boundaries.bounce_back import (
    HalfwayWithAdjoint,
    PulledHalfway,
    PulledWithAdjoint,
    bounce_back_fullway,
    bounce_back_halfway,
    halfway_links,
)
from lbm.boundaries.inlet import inlet
from lbm.boundaries.moving_wall import moving_wall_term
from lbm.boundaries.outflow import outflow
from lbm.engines.plan import Block
from lbm.kernels.collisions import collide
from lbm.kernels.equilibrium import absolute, equilibrium, shifted
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import D2Q9, LATTICES

ALL = ALL_LATTICES


pytestmark = pytest.mark.usefixtures("x64")
"""Closed forms checked to 1e-13: float64 for this module's tests only."""


def test_outflow_copies_unknowns_only():
    lat = D2Q9
    f = jnp.asarray(np.random.default_rng(5).random((9, 6, 4)))
    out = np.asarray(outflow(f, lat))
    unknown = lat.c[:, 0] < 0
    np.testing.assert_array_equal(out[unknown, -1], np.asarray(f)[unknown, -2])
    np.testing.assert_array_equal(out[~unknown], np.asarray(f)[~unknown])
    np.testing.assert_array_equal(out[:, :-1], np.asarray(f)[:, :-1])


INLET_KINDS = ("zou_he", "nebb", "equilibrium")
INLETS = [(lat, kind) for lat in ALL for kind in INLET_KINDS]
INLET_FAST = {(D2Q9, kind) for kind in INLET_KINDS} | {(LATTICES["d3q27"], "zou_he")}
"""The fast lane: every kind in 2D, and Zou-He (the one that solves for the unknowns) on the largest 3D lattice."""


@pytest.mark.parametrize("lat,kind", slow_except(INLETS, fast=INLET_FAST), ids=lambda v: getattr(v, "name", v))
def test_inlet_imposes_velocity(lat, kind):
    shape = shape_for(lat)
    rho, u = random_state(lat, shape, seed=6)
    noise = 1 + 0.01 * jnp.asarray(np.random.default_rng(7).random((lat.q,) + shape))
    f = shifted(absolute(equilibrium(rho - 1.0, u, lat), lat) * noise, lat)
    u_in = jnp.zeros((lat.d,) + shape[1:]).at[0].set(0.04)
    drho_m, u_m = macroscopic(f, lat)
    feq = equilibrium(drho_m, u_m, lat)
    f2, drho2, u2, feq2 = inlet(f, drho_m, u_m, feq, u_in, lat, kind)
    drho_col, u_col = macroscopic(f2[:, :1], lat)
    np.testing.assert_allclose(u_col[0, 0], 0.04, atol=1e-13)
    if kind != "nebb":  # nebb imposes the normal component only
        np.testing.assert_allclose(u_col[1:, 0], 0.0, atol=1e-13)
    np.testing.assert_allclose(drho_col[0], drho2[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(u2[:, 0], u_in, atol=0)
    # only the inlet column changes
    np.testing.assert_array_equal(np.asarray(f2)[:, 1:], np.asarray(f)[:, 1:])


def test_fullway_bounce_back_reverses_pre_collision_populations():
    lat = D2Q9
    rng = np.random.default_rng(8)
    pre, post = jnp.asarray(rng.random((9, 5, 5))), jnp.asarray(rng.random((9, 5, 5)))
    solid = np.zeros((5, 5), bool)
    solid[2, 2] = True
    out = np.asarray(bounce_back_fullway(post, pre, jnp.asarray(solid), lat))
    np.testing.assert_array_equal(out[:, 2, 2], np.asarray(pre)[lat.opposite, 2, 2])
    np.testing.assert_array_equal(out[:, ~solid], np.asarray(post)[:, ~solid])


def test_halfway_bounce_back_returns_populations_to_their_cell():
    """After collide -> bounce_back -> stream, a population that hit a wall comes back reversed at the same cell."""
    lat = D2Q9
    solid = np.zeros((6, 5), bool)
    solid[:, 0] = solid[:, -1] = True
    links = halfway_links(solid, lat)
    rng = np.random.default_rng(9)
    post = jnp.asarray(rng.random((9, 6, 5)))
    out = np.asarray(stream(bounce_back_halfway(post, jnp.asarray(solid), jnp.asarray(links), lat), lat))
    p = np.asarray(post)
    for i in range(9):
        cy = lat.c[i, 1]
        if cy < 0:  # cells next to the bottom wall send population i into it
            np.testing.assert_array_equal(out[lat.opposite[i], :, 1], p[i, :, 1])
        if cy > 0:
            np.testing.assert_array_equal(out[lat.opposite[i], :, -2], p[i, :, -2])


WALL_TERMS = ("resting", "one_velocity", "two_velocities")
FOLDED = [(walls, lat) for walls in WALL_TERMS for lat in ALL]
FOLDED_FAST = {(walls, lat) for walls, lat in zip(WALL_TERMS, ALL, strict=True)}
"""The fast lane: each wall term once and each lattice once."""


@pytest.mark.parametrize("walls,lat", slow_except(FOLDED, fast=FOLDED_FAST), ids=lambda v: getattr(v, "name", v))
def test_halfway_walls_while_streaming_equal_the_dense_rule_then_stream(lat, walls):
    """PulledHalfway on stream(post) equals stream(bounce_back_halfway(post)) on every cell, fluid and solid, exactly.

    The mask has walls on the periodic seam, a solid block and a lone solid cell; the wall term is none, one
    wall velocity (the per-direction table) or two (the dense term): the three forms of the folded rule.
    """
    shape = (7, 6) if lat.d == 2 else (6, 5, 4)
    solid = np.zeros(shape, bool)
    solid[0] = True  # a wall across the periodic seam x = 0 | x = nx - 1
    solid[3:5, 2:4] = True
    solid[(5, 4) + (1,) * (lat.d - 2)] = True
    rng = np.random.default_rng(3)
    post = jnp.asarray(rng.random((lat.q, *shape)))
    wall_u = np.zeros((lat.d, *shape))
    if walls != "resting":
        wall_u[1, 0] = 0.07  # the wall x = 0 slides along y
    if walls == "two_velocities":
        wall_u[0, 3:5, 2:4] = -0.03
    bc = HalfwayBounceBack.around(solid, lat) if walls == "resting" else MovingWall.with_velocity(
        solid, wall_u, lat, post.dtype)
    form = bc.folded(lat)
    assert isinstance(form, PulledHalfway)
    assert (form.wall_term is None) == (walls == "resting")
    if walls == "one_velocity":  # a table per direction; which links carry it: in the bits where they fit, or apart
        # the term 2 w_i rho (c_i . u_w) / cs^2 of the x = 0 wall sliding along y: on the links with c_x and c_y
        assert form.wall_term.shape == (lat.q,) and form.carried == tuple(np.flatnonzero(lat.c[:, 0] * lat.c[:, 1]))
        assert (form.wall_term_bits is None) == (lat.q + 1 + len(form.carried) <= 32)
    if walls == "two_velocities":
        assert form.wall_term.shape == (lat.q, *shape)
    dense = stream(bounce_back_halfway(post, jnp.asarray(solid), jnp.asarray(bc.links), lat,
                                       None if bc.wall_term is None else jnp.asarray(bc.wall_term)), lat)
    folded = form.apply(StepState(f=stream(post, lat), post=post), lat).f
    np.testing.assert_array_equal(np.asarray(folded), np.asarray(dense))
    # links that are not those of the mask have no folded form
    assert HalfwayBounceBack(solid=solid, links=np.zeros_like(bc.links)).folded(lat) is None


@pytest.mark.parametrize("moving", [False, True], ids=["resting", "moving"])
def test_a_halfway_wall_gives_its_rules_with_their_adjoints_for_a_differentiable_run(moving):
    """with_adjoint: a half-way wall (resting or moving) answers with the same rules carrying hand-written adjoints
    (lbm.diff asks; tests/diff/test_adjoint.py pins the adjoints), dense and applied while streaming, the wall term
    gathered into the stream kernel on a GPU or TPU and scattered on a CPU; a condition without one answers itself."""
    lat, shape = D2Q9, (7, 6)
    solid = np.zeros(shape, bool)
    solid[0], solid[3:5, 2:4] = True, True
    wall_u = np.zeros((lat.d, *shape))
    wall_u[1, 0] = 0.07 if moving else 0.0
    post = jnp.asarray(np.random.default_rng(4).random((lat.q, *shape)))
    bc = MovingWall.with_velocity(solid, wall_u, lat, post.dtype) if moving else HalfwayBounceBack.around(solid, lat)
    for platform, gathered in (("cpu", False), ("cuda", True), ("tpu", True)):
        form = bc.with_adjoint(platform)
        assert type(form) is HalfwayWithAdjoint and form.gathered == gathered
        assert form.solid is bc.solid and form.links is bc.links and form.wall_term is bc.wall_term
        state = StepState(f=post, post=post)
        np.testing.assert_array_equal(np.asarray(form.apply(state, lat).post), np.asarray(bc.apply(state, lat).post))
        pulled = form.folded(lat)
        assert type(pulled) is PulledWithAdjoint and pulled.stage == "stream" and pulled.affine
        assert (pulled.index is not None) == (moving and gathered)
        streamed = StepState(f=stream(post, lat), post=post)
        np.testing.assert_allclose(np.asarray(pulled.apply(streamed, lat).f),
                                   np.asarray(bc.folded(lat).apply(streamed, lat).f), rtol=0, atol=1e-15)
    for other in (FullwayBounceBack(solid=solid), Outflow()):
        assert other.with_adjoint("cpu") is other


@pytest.mark.parametrize("overrides", [
    pytest.param(["case=cavity", "grid.nx=12", "grid.ny=10"], id="cavity"),
    pytest.param(["case=poiseuille", "lattice=d3q19", "grid.nx=4", "grid.ny=9", "grid.nz=5"], id="channel_d3q19",
                 marks=pytest.mark.slow),
    pytest.param(["case=cylinder", "grid.nx=30", "grid.ny=16", "case.bounce_back=halfway"], id="cylinder_halfway",
                 marks=pytest.mark.slow),
])
def test_xla_engine_folds_the_walls_into_streaming_without_changing_a_bit(overrides):
    """The xla engine's step equals the timestep with the dense wall rule, whole arrays (solid cells too) and forces.

    The moving-lid cavity and the forced D3Q19 channel fold their walls into streaming; the half-way cylinder
    does not (its momentum exchange reads the bounced populations before they stream). Odd step count: one
    single step and a pair.
    """
    from helpers.runs import run_config

    from lbm.engines.timestep import as_arrays, fold_walls, step_index, timestep
    from lbm.engines.xla import XlaEngine
    from lbm.simulation import make_case

    setup = make_case(run_config(*overrides, "precision=float64", "steps=3")).setup()
    folds = "cylinder" not in overrides[0]
    kinds = [type(bc) for bc in fold_walls(setup.boundaries, setup.lattice)]
    assert (PulledHalfway in kinds) == folds
    engine = XlaEngine(setup)
    f0 = setup.initial_populations()
    f, aux = engine.advance(jnp.array(f0), 3)
    step = jax.jit(lambda f, t, bcs: timestep(f, t, bcs, setup))
    ref, dense = f0, as_arrays(setup.boundaries)
    forces = []
    for t in range(3):
        ref, out = step(ref, step_index(t), dense)
        forces.append(out.get("force"))
    np.testing.assert_array_equal(np.asarray(f), np.asarray(ref))
    if not folds:
        np.testing.assert_array_equal(np.asarray(aux["force"]), np.stack([np.asarray(v) for v in forces]))


def test_couette_halfway_moving_wall_is_exact():
    """Moving-wall half-way bounce-back gives the exact linear Couette profile for any tau (reference table)."""
    lat = D2Q9
    n, uw = 10, 0.05
    shape = (3, n + 2)
    solid = np.zeros(shape, bool)
    solid[:, 0] = solid[:, -1] = True
    wall_u = np.zeros((2,) + shape)
    wall_u[0, :, -1] = uw
    links = halfway_links(solid, lat)
    wall_term = jnp.asarray(moving_wall_term(links, wall_u, lat))
    def make_run(tau):
        @jax.jit
        def run(f):
            def body(f, _):
                drho, u = macroscopic(f, lat)
                post = collide(f, equilibrium(drho, u, lat), u, lat, 1 / tau, 1 / tau)
                return stream(bounce_back_halfway(post, solid, links, lat, wall_term), lat), None
            return jax.lax.scan(body, f, None, length=40000)[0]
        return run

    for tau in (0.6, 1.0, 2.0):
        f = equilibrium(jnp.zeros(shape), jnp.zeros((2,) + shape), lat)
        run = make_run(tau)
        ux = np.asarray(macroscopic(run(f), lat)[1][0])[1, 1:-1]
        y = np.arange(n) + 0.5
        np.testing.assert_allclose(ux, uw * y / n, atol=1e-11 * uw / 1e-3)


def _cylinder_conditions(lat, shape, halfway):
    coords = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    obstacle = (coords[0] - shape[0] // 2) ** 2 + (coords[1] - shape[1] // 2) ** 2 < 2.0**2
    u_in = np.zeros((lat.d,) + shape[1:])
    u_in[0] = 0.04 * (1 + 0.1 * np.sin(np.arange(shape[1]) / shape[1] * 2 * np.pi)).reshape((-1,) + (1,) * (lat.d - 2))
    walls = HalfwayBounceBack.around(obstacle, lat) if halfway else FullwayBounceBack(solid=obstacle)
    return (Outflow(), Inlet(u=u_in, kind="zou_he"), walls, Forces.on(obstacle, lat))


def _pressure_and_interpolated(lat, shape):
    """Ramped inlet, pressure outlet, interpolated cylinder off the nodes, forces."""
    u_in = np.zeros((lat.d,) + shape[1:])
    u_in[0] = 0.04
    cylinder = InterpolatedBounceBack.circle((shape[0] / 2 - 0.3, shape[1] / 2 + 0.2), 2.3, shape, lat)
    rho_out = 1.0 + 0.01 * np.cos(np.arange(shape[1]) / shape[1] * 2 * np.pi).reshape((-1,) + (1,) * (lat.d - 2))
    return (PressureOutlet(rho=np.broadcast_to(rho_out, shape[1:]).copy()), Inlet(u=u_in, profile="ramp", ramp_steps=5.0),
            cylinder, Forces.on(np.asarray(cylinder.solid), lat))


def _moving_wall(lat, shape):
    solid = np.zeros(shape, bool)
    solid[:, 0] = solid[:, -1] = True
    wall_u = np.zeros((lat.d,) + shape)
    wall_u[0, :, -1] = 0.05
    return (MovingWall.with_velocity(solid, wall_u, lat, np.float64),)


@pytest.mark.parametrize("lat", lattice_params(fast=("d2q9",)))
@pytest.mark.parametrize("conditions", slow_except(
    ["cylinder_fullway", "cylinder_halfway", "moving_wall", "pressure_interpolated"],
    fast={"moving_wall", "pressure_interpolated"}))
def test_block_forms_equal_the_dense_rules(lat, conditions):
    """Every condition run on gathered cells gives, on the written cells, what the dense rule gives there."""
    shape = (12, 9) if lat.d == 2 else (10, 8, 3)
    if conditions == "moving_wall":
        bcs = _moving_wall(lat, shape)
    elif conditions == "pressure_interpolated":
        bcs = _pressure_and_interpolated(lat, shape)
    else:
        bcs = _cylinder_conditions(lat, shape, conditions.endswith("halfway"))
    dense, sparse, block = dense_and_block(lat, shape, bcs, seed=len(conditions))
    written = block.cells[: block.size]
    for field in ("post", "drho", "u"):
        d = np.asarray(getattr(dense, field)).reshape(getattr(dense, field).shape[: -lat.d] + (-1,))[..., written]
        s = np.asarray(getattr(sparse, field)).reshape(getattr(sparse, field).shape[: -lat.d] + (-1,))[..., : block.size]
        np.testing.assert_allclose(s, d, rtol=1e-14, atol=1e-15, err_msg=field)
    if dense.force is not None:
        np.testing.assert_allclose(np.asarray(sparse.force), np.asarray(dense.force), rtol=1e-12, atol=1e-15)


def test_a_block_without_a_needed_cell_is_refused():
    lat = D2Q9
    shape = (12, 9)
    bcs = _cylinder_conditions(lat, shape, halfway=True)
    full = shuffled_block(lat, shape, bcs, 0)
    partial = Block(lattice=lat, shape=shape, cells=full.cells[1:], size=full.size - 1)
    with pytest.raises(ValueError):
        for bc in bcs:
            bc.on_block(partial)


def test_a_subclass_of_a_condition_keeps_the_fast_paths():
    """A subclass that keeps the rule (here: only a new name) is asked for its forms, not dropped by a type check:
    the native kernel applies its walls, inlet, outflow and forces, the xla engine folds its half-way wall into
    streaming, and it has its mesh forms."""
    from lbm.boundaries.base import pytree_dataclass
    from lbm.engines.plan import plan_kernel
    from lbm.engines.timestep import fold_walls

    @pytree_dataclass
    class Wall(HalfwayBounceBack):
        pass

    @pytree_dataclass
    class Face(Inlet):
        pass

    @pytree_dataclass
    class Exit(Outflow):
        pass

    @pytree_dataclass
    class Drag(Forces):
        pass

    shape = (12, 8)
    solid = np.zeros(shape, bool)
    solid[5:7, 3:5] = True
    wall = Wall.around(solid, D2Q9)
    face, exit_, drag = Face(u=np.full((2, shape[1]), 0.01) * [[1], [0]]), Exit(), Drag.on(solid, D2Q9)
    plan = plan_kernel(D2Q9, shape, (face, exit_, wall, drag))
    assert plan.walls == (wall,) and plan.faces == (face, exit_) and plan.forces is drag and plan.block is None
    assert plan.inlet is face and plan.outflow
    assert isinstance(fold_walls((wall,), D2Q9)[0], PulledHalfway)
    from types import SimpleNamespace

    from lbm.boundaries.forms import OnEdge, OnExtended, ShardForces
    from lbm.engines.sharded import Layout

    layout = Layout(SimpleNamespace(shape=shape), (1, 1))
    forms = [bc.on_mesh(layout, D2Q9, np.float64) for bc in (wall, face, exit_, drag)]
    assert [type(f) for f in forms] == [OnExtended, OnEdge, OnEdge, ShardForces]
    assert isinstance(forms[0].inner, Wall) and isinstance(forms[1].inner, Face)
    assert BoundaryCondition.bulk_rule(wall) is None  # what a condition without a kernel rule answers


@pytest.mark.parametrize("lat", lattice_params(fast=("d3q19",)))
def test_face_rules_take_their_directions_by_static_slices(lat):
    """The inlet, pressure and characteristic rules take and set populations by static slices, never by a gather over
    an index array: XLA:TPU (jax 0.10.2, v5e) computed the inlet's f[unknown] = feq[unknown] + f[opp] - feq[opp]
    wrongly when jitted (1.4e-2 of the largest |f| after 500 cylinder steps) and right from slices. The zero-gradient
    outflow keeps its one gather and scatter of the unknowns: the chip computed it exactly (scripts/backends_agree.py),
    and in slices XLA:TPU no longer kept the cylinder's loop on chip (inspect target=v5e: 180 B per cell and step)."""
    from lbm.boundaries.characteristic import characteristic_outlet
    from lbm.boundaries.pressure import pressure_outlet

    shape = shape_for(lat)
    f = jnp.zeros((lat.q, *shape), jnp.float32)
    drho, u = jnp.zeros(shape, jnp.float32), jnp.zeros((lat.d, *shape), jnp.float32)
    u_in = jnp.full((lat.d, *shape[1:]), 0.01, jnp.float32)
    rules = {f"inlet {kind}": lambda f, kind=kind: inlet(f, drho, u, f, u_in, lat, kind)[0]
             for kind in ("nebb", "zou_he", "equilibrium")}
    rules |= {"pressure": lambda f: pressure_outlet(f, 1.0, lat),
              "characteristic": lambda f: characteristic_outlet(f, 1.0, 0.3, lat)}
    gathers = {name: jax.jit(rule).lower(f).as_text().count("stablehlo.gather") for name, rule in rules.items()}
    assert gathers == dict.fromkeys(rules, 0)
