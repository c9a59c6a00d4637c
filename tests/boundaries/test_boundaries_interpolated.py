"""InterpolatedBounceBack (lbm.boundaries.interpolated): wall fractions, second-order Poiseuille, forces, engines.

Also the time-dependent inlet (lbm.boundaries.inlet: profile/ramp_steps) and the native engine running
the three new conditions (pressure outlet, ramped inlet, interpolated cylinder) like the xla reference.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.boundaries import channel_setup, dfg_like, force_driven_channel_error, planes

from lbm.boundaries import Forces, HalfwayBounceBack, Inlet, InterpolatedBounceBack, PressureOutlet, StepState
from lbm.boundaries.inlet import time_factor
from lbm.boundaries.interpolated import bfl_weights, circle_intersect
from lbm.engines import make_engine
from lbm.engines.xla import XlaEngine
from lbm.lattice import D2Q9, D3Q19
from lbm.stages import STAGES


def bfl_channel_error(ny, q, tau, interpolated=True):
    """Max |u - exact| / u_max of a body-force channel whose walls cut the wall links at fraction q (BFL or half-way)."""
    def walls(solid, lo, hi):
        if interpolated:
            return InterpolatedBounceBack.from_shape(solid, planes(lo, hi), D2Q9)
        return HalfwayBounceBack.around(solid, D2Q9)

    return force_driven_channel_error(ny, q, tau, walls, u_max=0.02, diffusion_times=4)


def test_bfl_weights_are_consistent():
    """Each link's coefficients sum to 1 (a uniform field is reflected unchanged); q = 1/2 is half-way bounce-back."""
    q = np.array([0.0, 0.1, 0.3, 0.5, 0.7, 1.0, 0.2])
    w = bfl_weights(q, np.array([True] * 6 + [False]))
    np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=1e-15)
    np.testing.assert_allclose(w[:, 3], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(w[:, -1], [1.0, 0.0, 0.0])  # no fluid cell behind: half-way fallback
    np.testing.assert_allclose(w[:, 1], [0.2, 0.8, 0.0])
    np.testing.assert_allclose(w[:, 4], [1 / 1.4, 0.0, 0.4 / 1.4])


def test_circle_wall_fractions_lie_on_the_circle():
    center, radius = (10.3, 9.6), 4.7
    bc = InterpolatedBounceBack.circle(center, radius, (22, 20), D2Q9)
    fluid = np.stack(np.unravel_index(np.asarray(bc.link_fluid), (22, 20)), axis=1)
    hit = fluid + np.asarray(bc.q)[:, None] * D2Q9.c[np.asarray(bc.link_dir)]
    np.testing.assert_allclose(np.hypot(hit[:, 0] - center[0], hit[:, 1] - center[1]), radius, rtol=1e-12)
    assert np.all((np.asarray(bc.q) > 0) & (np.asarray(bc.q) <= 1))
    solid = np.asarray(bc.solid)
    assert solid.reshape(-1)[np.asarray(bc.link_solid)].all() and not solid.reshape(-1)[np.asarray(bc.link_fluid)].any()
    # every link of the mask's surface is listed once
    assert len(bc.q) == len(Forces.on(solid, D2Q9).link_dir)
    assert circle_intersect(center, radius)(np.array([[10.3, 2.0]]), np.array([[0, 1]]))[0] == pytest.approx(2.9)


@pytest.mark.slow
def test_interpolated_walls_converge_at_second_order():
    """Poiseuille between walls at a fractional offset (q = 0.3): error / 4.7 per doubling (second order).

    Measured (tau 0.8): 8.1e-3 at H = 8.6, 1.7e-3 at H = 18.6, ratio 4.68; half-way bounce-back, which
    puts the same walls at q = 1/2, stays first order. Bounds: ratio > 3.5, error < 2x measured.
    """
    with jax.enable_x64(True):
        coarse, fine = bfl_channel_error(11, 0.3, 0.8), bfl_channel_error(21, 0.3, 0.8)
        assert coarse / fine > 3.5
        assert fine < 3.5e-3
        assert bfl_channel_error(21, 0.3, 0.8, interpolated=False) > 5 * fine


def test_force_is_the_momentum_exchange_of_the_interpolated_populations():
    """Forces over the same links sums c_i (f*_i(x_f) + the BFL population written for x_f)."""
    with jax.enable_x64(True):
        shape = (14, 12)
        bc = InterpolatedBounceBack.circle((6.4, 5.7), 3.2, shape, D2Q9)
        forces = Forces.on(np.asarray(bc.solid), D2Q9)
        post = jnp.asarray(D2Q9.w.reshape(-1, 1, 1) * (1 + 0.1 * np.random.default_rng(1).random((9,) + shape)))
        s = bc.apply(StepState(f=post, collided=post, post=post), D2Q9)
        force = np.asarray(forces.apply(s, D2Q9).force)
        flat, out = np.asarray(post).reshape(9, -1), np.asarray(s.post).reshape(9, -1)
        i, xf, xs = (np.asarray(a) for a in (bc.link_dir, bc.link_fluid, bc.link_solid))
        w = np.asarray(bc.weights)
        far = np.asarray(bc.link_far)
        opp = D2Q9.opposite[i]
        back = w[0] * flat[i, xf] + w[1] * flat[i, far] + w[2] * flat[opp, xf]
        np.testing.assert_allclose(out[opp, xs], back, rtol=1e-14)
        expected = (D2Q9.c[i] * (flat[i, xf] + back)[:, None]).sum(axis=0)
        np.testing.assert_allclose(force, expected, rtol=1e-12)


def test_inlet_time_profiles():
    """sine: U sin(pi t / 2T) (DFG 2D-3 with T = 4 s); ramp: the same up to T, then constant; constant: 1."""
    t = jnp.arange(0, 25)
    np.testing.assert_allclose(np.asarray(time_factor(t, "sine", 8.0, jnp.float32)), np.sin(np.pi * np.arange(25) / 16),
                               atol=1e-6)
    ramp = np.asarray(time_factor(t, "ramp", 8.0, jnp.float32))
    np.testing.assert_allclose(ramp[:9], np.sin(np.pi * np.arange(9) / 16), atol=1e-6)
    np.testing.assert_allclose(ramp[8:], 1.0, atol=1e-6)
    assert time_factor(t, "constant", 0.0, jnp.float32) == 1.0
    with pytest.raises(ValueError):
        Inlet(u=np.zeros((2, 4)), profile="sine")


def test_ramped_inlet_imposes_the_velocity_of_its_step():
    """The face velocity at step t is u * sin(pi t / (2T)), through the engine's step index."""
    with jax.enable_x64(True):
        shape = (8, 6)
        u_in = np.zeros((2, 6))
        u_in[0] = 0.05
        setup = channel_setup(np.zeros(shape, bool), (PressureOutlet(rho=1.0), Inlet(u=u_in, profile="sine",
                                                                                      ramp_steps=10.0)))
        engine = XlaEngine(setup)
        f = setup.initial_populations()
        for t in (0, 3, 10, 17):
            np.testing.assert_allclose(engine.fields(f, t)["u"][0, 0], 0.05 * np.sin(np.pi * t / 20), atol=1e-15)


@pytest.mark.native
@pytest.mark.parametrize("lattice,shape", [(D2Q9, (40, 22)), (D3Q19, (24, 15, 4))], ids=["d2q9", "d3q19"])
@pytest.mark.slow
def test_native_engine_runs_the_new_conditions_like_the_reference(lattice, shape):
    """Engine equality (as tests/engines/test_engines.py): float64 agrees to rounding, forces too, odd step count."""
    with jax.enable_x64(True):
        setup = dfg_like(lattice, shape)
        assert {"outflow", "inlet", "bounce_back", "forces"} <= set(setup.stages) <= set(STAGES)
        fast = make_engine(setup, engine="native")
        assert fast.name == "native"
        f0 = setup.initial_populations()
        f_ref, aux_ref = XlaEngine(setup).advance(f0, 23)
        f_fast, aux_fast = fast.advance(setup.initial_populations(), 23)
        f_ref = np.asarray(f_ref)
        np.testing.assert_allclose(np.asarray(f_fast), f_ref, rtol=0, atol=1e-13 * np.abs(f_ref).max())
        force = np.asarray(aux_ref["force"])
        assert force.shape == (23, lattice.d) and np.abs(force[:, 0]).max() > 0
        np.testing.assert_allclose(np.asarray(aux_fast["force"]), force, rtol=0, atol=1e-12 * np.abs(force).max())


def test_what_a_differentiable_run_asks_of_the_conditions():
    """Each condition says how its continuous inputs enter (lbm.diff asks, never checks a type): a prescribed velocity
    scales (the inlet's u, a moving wall's wall term), a curved wall names its nodes on the wall and moves; the others
    keep themselves and have no curved wall."""
    from lbm.boundaries import FullwayBounceBack, MovingWall
    from lbm.boundaries.base import FormUnavailable
    from lbm.boundaries.parabolic import ParabolicBounceBack

    solid = np.zeros((12, 8), bool)
    solid[5:7, 3:5] = True
    u = np.full((2, 8), 0.01) * [[1], [0]]
    wall_u = np.zeros((2, 12, 8))
    wall_u[0, 5:7, 3:5] = 0.02
    inlet, moving = Inlet(u=u), MovingWall.with_velocity(solid, wall_u, D2Q9, np.float64)
    np.testing.assert_array_equal(inlet.with_velocity_scaled(3.0).u, 3.0 * u)
    np.testing.assert_array_equal(moving.with_velocity_scaled(3.0).wall_term, 3.0 * moving.wall_term)
    assert np.abs(moving.wall_term).max() > 0
    resting = (HalfwayBounceBack.around(solid, D2Q9), FullwayBounceBack(solid=solid), Forces.on(solid, D2Q9), inlet)
    for bc in resting[:3]:
        assert bc.with_velocity_scaled(3.0) is bc and bc.moved_to(circle_intersect((6, 4), 1.0), (12, 8), D2Q9) is bc
    assert all(bc.nodes_on_the_wall(1e-6) is None for bc in resting)
    # the circle of radius 2 about (10, 10) passes through nodes: q = 0 or 1 on some links, the nodes named once each
    wall = InterpolatedBounceBack.circle((10.0, 10.0), 2.0, (40, 20), D2Q9)
    nodes = wall.nodes_on_the_wall(1e-6)
    q = np.asarray(wall.q)
    assert nodes.size == np.sum((q < 1e-6) | (q > 1 - 1e-6)) > 0
    assert set(np.unravel_index(nodes, (40, 20))[0].tolist()) <= {8, 10, 12}
    # moved to its own circle (jax, traced) the wall keeps its links and mask, with the fractions of that circle
    from lbm.boundaries.interpolated import ball_intersect

    moved = wall.moved_to(ball_intersect(jnp.asarray([10.0, 10.0]), jnp.asarray(2.5), jnp), (40, 20), D2Q9)
    assert moved.link_dir is wall.link_dir and moved.solid is wall.solid
    assert np.all(np.asarray(moved.q) <= q) and np.any(np.asarray(moved.q) < q)  # a larger circle: nearer every node
    with pytest.raises(FormUnavailable, match="no traced wall fractions"):
        ParabolicBounceBack.like(wall, 1.0).moved_to(circle_intersect((10.0, 10.0), 2.0), (40, 20), D2Q9)
