"""Each stage kernel against its closed form, on every lattice where it applies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lbm.cases.base import halfway_links, moving_wall_term
from lbm.kernels.boundaries import bounce_back_fullway, bounce_back_halfway, inlet, outflow
from lbm.kernels.collision import collide, trt_omega_minus
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.forces import boundary_links, momentum_exchange
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import CS2, D2Q9, LATTICES

jax.config.update("jax_enable_x64", True)
ALL = sorted(LATTICES.values(), key=lambda lat: lat.name)


def random_state(lat, shape, seed=0):
    rng = np.random.default_rng(seed)
    rho = 1.0 + 0.05 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((lat.d,) + shape)
    return jnp.asarray(rho), jnp.asarray(u)


def shape_for(lat):
    return (6, 5) if lat.d == 2 else (5, 4, 3)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_equilibrium_moments(lat):
    rho, u = random_state(lat, shape_for(lat))
    feq = np.asarray(equilibrium(rho, u, lat))
    c = lat.c.astype(float)
    np.testing.assert_allclose(feq.sum(0), rho, rtol=1e-13)
    np.testing.assert_allclose(np.einsum("ia,i...->a...", c, feq), rho * u, atol=1e-14)
    pi = np.einsum("ia,ib,i...->ab...", c, c, feq)
    expected = np.einsum("...,a...,b...->ab...", rho, u, u) + CS2 * np.einsum("ab,...->ab...", np.eye(lat.d), rho)
    np.testing.assert_allclose(pi, expected, atol=1e-14)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_macroscopic_inverts_equilibrium(lat):
    rho, u = random_state(lat, shape_for(lat), seed=1)
    rho2, u2 = macroscopic(equilibrium(rho, u, lat), lat)
    np.testing.assert_allclose(rho2, rho, rtol=1e-13)
    np.testing.assert_allclose(u2, u, atol=1e-14)
    force = np.array([1e-3] + [0.0] * (lat.d - 1))
    _, u3 = macroscopic(equilibrium(rho, u, lat), lat, force)
    np.testing.assert_allclose(u3[0], u[0] + 0.5e-3 / rho, atol=1e-14)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
@pytest.mark.parametrize("collision", ["bgk", "trt"])
def test_collision_conserves_mass_and_momentum(lat, collision):
    rng = np.random.default_rng(2)
    f = jnp.asarray(lat.w.reshape((-1,) + (1,) * lat.d) * (1 + 0.1 * rng.random((lat.q,) + shape_for(lat))))
    rho, u = macroscopic(f, lat)
    feq = equilibrium(rho, u, lat)
    op = 1 / 0.8
    om = trt_omega_minus(op, 3 / 16) if collision == "trt" else op
    out = collide(f, feq, u, lat, op, om)
    rho2, u2 = macroscopic(out, lat)
    np.testing.assert_allclose(rho2, rho, rtol=1e-13)
    np.testing.assert_allclose(u2, u, atol=1e-14)
    # BGK closed form
    if collision == "bgk":
        np.testing.assert_allclose(out, f - op * (f - feq), rtol=1e-14)


def test_trt_magic_parameter():
    op = 1 / 0.9
    om = trt_omega_minus(op, 0.25)
    assert (1 / op - 0.5) * (1 / om - 0.5) == pytest.approx(0.25)


def test_guo_forcing_adds_exact_momentum():
    lat = D2Q9
    rho, u = random_state(lat, (4, 4), seed=3)
    force = np.array([2e-4, -1e-4])
    f = equilibrium(rho, u, lat)
    rho_m, u_m = macroscopic(f, lat, force)
    feq = equilibrium(rho_m, u_m, lat)
    out = collide(f, feq, u_m, lat, 1 / 0.7, 1 / 0.7, force)
    mom_before = np.einsum("ia,i...->a...", lat.c, np.asarray(f))
    mom_after = np.einsum("ia,i...->a...", lat.c, np.asarray(out))
    np.testing.assert_allclose(mom_after - mom_before, np.broadcast_to(force[:, None, None], mom_before.shape),
                               atol=1e-15)
    np.testing.assert_allclose(np.asarray(out).sum(0), np.asarray(f).sum(0), rtol=1e-14)


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


def test_outflow_copies_unknowns_only():
    lat = D2Q9
    f = jnp.asarray(np.random.default_rng(5).random((9, 6, 4)))
    out = np.asarray(outflow(f, lat))
    unknown = lat.c[:, 0] < 0
    np.testing.assert_array_equal(out[unknown, -1], np.asarray(f)[unknown, -2])
    np.testing.assert_array_equal(out[~unknown], np.asarray(f)[~unknown])
    np.testing.assert_array_equal(out[:, :-1], np.asarray(f)[:, :-1])


@pytest.mark.parametrize("kind", ["zou_he", "nebb", "equilibrium"])
@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_inlet_imposes_velocity(lat, kind):
    shape = shape_for(lat)
    rho, u = random_state(lat, shape, seed=6)
    f = equilibrium(rho, u, lat) * (1 + 0.01 * jnp.asarray(np.random.default_rng(7).random((lat.q,) + shape)))
    u_in = jnp.zeros((lat.d,) + shape[1:]).at[0].set(0.04)
    rho_m, u_m = macroscopic(f, lat)
    feq = equilibrium(rho_m, u_m, lat)
    f2, rho2, u2, feq2 = inlet(f, rho_m, u_m, feq, u_in, lat, kind)
    rho_col, u_col = macroscopic(f2[:, :1], lat)
    np.testing.assert_allclose(u_col[0, 0], 0.04, atol=1e-13)
    if kind != "nebb":  # nebb imposes the normal component only
        np.testing.assert_allclose(u_col[1:, 0], 0.0, atol=1e-13)
    np.testing.assert_allclose(rho_col[0], rho2[0], rtol=1e-13)
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
                rho, u = macroscopic(f, lat)
                post = collide(f, equilibrium(rho, u, lat), u, lat, 1 / tau, 1 / tau)
                return stream(bounce_back_halfway(post, solid, links, lat, wall_term), lat), None
            return jax.lax.scan(body, f, None, length=40000)[0]
        return run

    for tau in (0.6, 1.0, 2.0):
        f = equilibrium(jnp.ones(shape), jnp.zeros((2,) + shape), lat)
        run = make_run(tau)
        ux = np.asarray(macroscopic(run(f), lat)[1][0])[1, 1:-1]
        y = np.arange(n) + 0.5
        np.testing.assert_allclose(ux, uw * y / n, atol=1e-11 * uw / 1e-3)


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
            rho, u = macroscopic(f, lat, force)
            post = collide(f, equilibrium(rho, u, lat), u, lat, 1 / tau, 1 / tau, force)
            bb = bounce_back_halfway(post, solid, links, lat)
            return stream(bb, lat), momentum_exchange(post, bb, d, s, t, lat)
        return jax.lax.scan(body, f, None, length=6000)

    _, fwall = run(equilibrium(jnp.ones(shape), jnp.zeros((2,) + shape), lat))
    total = force[0] * (~solid).sum()
    np.testing.assert_allclose(np.asarray(fwall[-1]), [total, 0.0], rtol=1e-8, atol=1e-15)


# --- the native (hand-fused C++) kernels and the boundary block's slot maps ------------------

from lbm.kernels import native  # noqa: E402
from lbm.kernels.sparse import Block, bounce_back_halfway_sparse, slot_maps  # noqa: E402

needs_native = pytest.mark.skipif(not native.available(), reason="native kernels need the CPU backend and a C++ compiler")
NATIVE_SHAPES = {2: [(7, 5), (3, 2), (16, 33)], 3: [(5, 4, 3), (3, 6, 2)]}


def _reference_step(f, lat, op, om, force):
    rho, u = macroscopic(f, lat, force)
    return stream(collide(f, equilibrium(rho, u, lat), u, lat, op, om, force), lat)


def _random_populations(lat, shape, seed):
    rng = np.random.default_rng(seed)
    w = lat.w.reshape((-1,) + (1,) * lat.d)
    return jnp.asarray(w * (1.0 + 0.1 * rng.standard_normal((lat.q,) + shape)))


@needs_native
@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
@pytest.mark.parametrize("collision", ["bgk", "trt", "trt_force"])
def test_native_kernels_equal_collide_then_stream(lat, collision):
    """push = one reference step; an AA pair (even, odd, in place) = two reference steps; any grid shape."""
    op = 1 / 0.8
    om = trt_omega_minus(op, 3 / 16) if collision != "bgk" else op
    force = np.array([2e-4, -1e-4, 5e-5][: lat.d]) if collision == "trt_force" else None
    spec = native.KernelSpec(lat, "float64", collision != "bgk", force is not None)
    for k, shape in enumerate(NATIVE_SHAPES[lat.d]):
        f = _random_populations(lat, shape, k)
        one = _reference_step(f, lat, op, om, force)
        two = _reference_step(one, lat, op, om, force)
        pushed, _ = native.push(spec, f, jnp.zeros_like(f), op, om, force)
        np.testing.assert_allclose(pushed, one, rtol=1e-14, atol=1e-16)
        a, _ = native.aa_step(spec, f + 0, 0, op, om, force)
        a, _ = native.aa_step(spec, a, 1, op, om, force)
        np.testing.assert_allclose(a, two, rtol=1e-14, atol=1e-16)


@needs_native
def test_native_kernels_read_their_slots_before_writing():
    """The slots a kernel returns are the old values, for every scheme; scatter writes exactly those slots."""
    lat = D2Q9
    shape = (6, 5)
    spec = native.KernelSpec(lat, "float64", False, False)
    f = _random_populations(lat, shape, 3)
    cells = np.array([0, 7, 29])
    for scheme in ("push", "aa_even", "aa_odd"):
        read, write = slot_maps(lat, shape, cells, scheme)
        slots = jnp.asarray(read.astype(np.int32))
        if scheme == "push":
            out, old = native.push(spec, f, jnp.zeros_like(f), 1.2, 1.2, None, slots)
        else:
            out, old = native.aa_step(spec, f + 0, 0 if scheme == "aa_even" else 1, 1.2, 1.2, None, slots)
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


def test_block_halfway_bounce_back_matches_the_dense_rule():
    lat = D2Q9
    shape = (6, 5)
    solid = np.zeros(shape, bool)
    solid[:, 0] = solid[:, -1] = True
    links = halfway_links(solid, lat)
    wall_u = np.zeros((2,) + shape)
    wall_u[0, :, -1] = 0.05
    wall = moving_wall_term(links, wall_u, lat)
    post = _random_populations(lat, shape, 11)
    dense = np.asarray(bounce_back_halfway(post, jnp.asarray(solid), jnp.asarray(links), lat, jnp.asarray(wall)))
    cells = np.arange(np.prod(shape))
    block = Block(lattice=lat, shape=shape, cells=cells)
    from lbm.kernels.sparse import neighbour

    nbr = np.stack([block.index_of(neighbour(cells, shape, lat.c[j])) for j in range(lat.q)])
    flat = lambda a: jnp.asarray(np.asarray(a).reshape(lat.q, -1))  # noqa: E731
    sparse = bounce_back_halfway_sparse(flat(post), jnp.asarray(solid.reshape(-1)), flat(links), jnp.asarray(nbr), lat,
                                        flat(wall))
    np.testing.assert_array_equal(np.asarray(sparse), dense.reshape(lat.q, -1))
