"""Each pure kernel (lbm.kernels) against its closed form, on every lattice where it applies (in float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.lattices import ALL_LATTICES, random_state, shape_for

from lbm.boundaries.bounce_back import bounce_back_halfway, halfway_links
from lbm.kernels.collisions import collide
from lbm.kernels.equilibrium import absolute, equilibrium
from lbm.kernels.forces import boundary_links, momentum_exchange
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import CS2, D2Q9

ALL = ALL_LATTICES


pytestmark = pytest.mark.usefixtures("x64")
"""These closed forms are checked to 1e-13: float64 for this module's tests only."""


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_equilibrium_moments(lat):
    rho, u = random_state(lat, shape_for(lat))
    feq = np.asarray(absolute(equilibrium(rho - 1.0, u, lat), lat))
    c = lat.c.astype(float)
    np.testing.assert_allclose(feq.sum(0), rho, rtol=1e-13)
    np.testing.assert_allclose(np.einsum("ia,i...->a...", c, feq), rho * u, atol=1e-14)
    pi = np.einsum("ia,ib,i...->ab...", c, c, feq)
    expected = np.einsum("...,a...,b...->ab...", rho, u, u) + CS2 * np.einsum("ab,...->ab...", np.eye(lat.d), rho)
    np.testing.assert_allclose(pi, expected, atol=1e-14)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_macroscopic_inverts_equilibrium(lat):
    rho, u = random_state(lat, shape_for(lat), seed=1)
    drho2, u2 = macroscopic(equilibrium(rho - 1.0, u, lat), lat)
    np.testing.assert_allclose(drho2, rho - 1.0, atol=1e-15)
    np.testing.assert_allclose(u2, u, atol=1e-14)
    force = np.array([1e-3] + [0.0] * (lat.d - 1))
    _, u3 = macroscopic(equilibrium(rho - 1.0, u, lat), lat, force)
    np.testing.assert_allclose(u3[0], u[0] + 0.5e-3 / rho, atol=1e-14)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_stream_moves_each_population_along_its_velocity(lat):
    shape = shape_for(lat)
    rng = np.random.default_rng(4)
    f = rng.random((lat.q,) + shape)
    out = np.asarray(stream(jnp.asarray(f), lat))
    for i in range(lat.q):
        expected = np.roll(f[i], tuple(lat.c[i]), axis=tuple(range(lat.d)))
        np.testing.assert_array_equal(out[i], expected)
    # a single particle at the origin arrives at c_i (mod the grid)
    one = np.zeros((lat.q,) + shape)
    one[(slice(None),) + (0,) * lat.d] = 1.0
    moved = np.asarray(stream(jnp.asarray(one), lat))
    for i in range(lat.q):
        pos = tuple(int(c) % n for c, n in zip(lat.c[i], shape, strict=False))
        assert moved[(i,) + pos] == 1.0 and moved[i].sum() == 1.0


def test_momentum_exchange_balances_body_force():
    """At steady state the walls carry exactly the body force applied to the fluid."""
    lat = D2Q9
    shape = (4, 12)
    solid = np.zeros(shape, bool)
    solid[:, 0] = solid[:, -1] = True
    links = halfway_links(solid, lat)
    d, s, t = (jnp.asarray(a) for a in boundary_links(solid, ~solid, lat))
    force = np.array([1e-5, 0.0])
    tau = 0.9

    @jax.jit
    def run(f):
        def body(f, _):
            drho, u = macroscopic(f, lat, force)
            post = collide(f, equilibrium(drho, u, lat), u, lat, 1 / tau, 1 / tau, force)
            bb = bounce_back_halfway(post, solid, links, lat)
            return stream(bb, lat), momentum_exchange(post, bb, d, s, t, lat)
        return jax.lax.scan(body, f, None, length=6000)

    _, fwall = run(equilibrium(jnp.zeros(shape), jnp.zeros((2,) + shape), lat))
    total = force[0] * (~solid).sum()
    np.testing.assert_allclose(np.asarray(fwall[-1]), [total, 0.0], rtol=1e-8, atol=1e-15)
