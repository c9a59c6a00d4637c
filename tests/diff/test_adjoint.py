"""lbm.diff.adjoint and the walls' (lbm.boundaries.bounce_back): each hand-written adjoint equals jax's own
differentiation of the kernel it stands for."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.lattices import ALL_LATTICES, random_state, shape_for

from lbm.boundaries.base import StepState
from lbm.boundaries.bounce_back import (
    HalfwayWithAdjoint,
    bounce_back_halfway,
    bounce_back_halfway_pulled,
    halfway_links,
    halfway_with_adjoint,
    pull_bits,
    pulled_with_adjoint,
)
from lbm.boundaries.moving_wall import moving_wall_term
from lbm.diff.adjoint import (
    collide_cell,
    collide_cell_cpu,
    equilibrium_of,
    moments_of,
    relax,
    relax_equilibrium,
)
from lbm.kernels.collisions import bgk, trt
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream, streamed

pytestmark = pytest.mark.usefixtures("x64")
LATTICES = [pytest.param(lat, id=lat.name, marks=[pytest.mark.slow] if lat.d == 3 else []) for lat in ALL_LATTICES]
"""D2Q9 in the fast lane, the 3D lattices in the slow one."""


def same_vjp(ours, theirs, args, cotangent):
    """The two functions' values and their pullbacks of ``cotangent`` agree to rounding."""
    def both(fn):
        value, pull = jax.vjp(fn, *args)
        return value, pull(cotangent)

    (value, grads), (expected, reference) = jax.jit(lambda: (both(ours), both(theirs)))()
    for a, b in zip(jax.tree_util.tree_leaves(value), jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-15, atol=1e-16)  # the forward is the kernel's
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(reference), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def populations(lat, shape, seed=0):
    """Populations near equilibrium as the engines hold them, deviations f - w (a random state plus a random
    non-equilibrium part), and a random cotangent."""
    rho, u = random_state(lat, shape, seed)
    rng = np.random.default_rng(seed + 1)
    f = equilibrium(rho - 1.0, u, lat) + 1e-3 * jnp.asarray(rng.standard_normal((lat.q, *shape)))
    return f, jnp.asarray(rng.standard_normal((lat.q, *shape)))


@pytest.mark.parametrize("lat", LATTICES)
def test_core_adjoints_equal_autodiff_of_the_kernels(lat):
    shape = shape_for(lat)
    f, ct = populations(lat, shape)
    rng = np.random.default_rng(3)
    ct_moments = (jnp.asarray(rng.standard_normal(shape)), jnp.asarray(rng.standard_normal((lat.d, *shape))))
    force = tuple(float(x) for x in 1e-4 * np.arange(1, lat.d + 1))
    same_vjp(lambda f: moments_of(f, lat, None), lambda f: macroscopic(f, lat), (f,), ct_moments)
    same_vjp(lambda f: moments_of(f, lat, force), lambda f: macroscopic(f, lat, np.asarray(force)), (f,), ct_moments)
    drho, u = macroscopic(f, lat)
    same_vjp(lambda r, v: equilibrium_of(r, v, lat), lambda r, v: equilibrium(r, v, lat), (drho, u), ct)
    feq = equilibrium(drho, u, lat)
    rates = (jnp.asarray(1.3), jnp.asarray(0.9))
    same_vjp(lambda *a: relax(*a, lat, True), lambda f, e, wp, wm: trt(f, e, lat, wp, wm), (f, feq, *rates), ct)
    same_vjp(lambda f, e, w: relax(f, e, w, w, lat, False), lambda f, e, w: bgk(f, e, w), (f, feq, rates[0]), ct)
    same_vjp(lambda p: streamed(p, lat), lambda p: stream(p, lat), (f,), ct)
    # equilibrium and collision under one adjoint (the rates' sums from the equilibrium's)
    same_vjp(lambda *a: relax_equilibrium(*a, lat, True),
             lambda f, r, v, wp, wm: trt(f, equilibrium(r, v, lat), lat, wp, wm), (f, drho, u, *rates), ct)
    same_vjp(lambda f, r, v, w: relax_equilibrium(f, r, v, w, w, lat, False),
             lambda f, r, v, w: bgk(f, equilibrium(r, v, lat), w), (f, drho, u, rates[0]), ct)
    # moments, equilibrium and collision under one adjoint (with the Setup's static force in the moments)
    def kernels(f, wp, wm, force=None):
        r, v = macroscopic(f, lat, None if force is None else np.asarray(force))
        return trt(f, equilibrium(r, v, lat), lat, wp, wm)

    for cell in (collide_cell, collide_cell_cpu):  # the GPU's form and the CPU's (from the cotangent's moments)
        same_vjp(lambda f, wp, wm, cell=cell: cell(f, wp, wm, lat, True, force), lambda f, wp, wm: kernels(f, wp, wm, force),
                 (f, *rates), ct)
        same_vjp(lambda f, w, cell=cell: cell(f, w, w, lat, False, None), lambda f, w: kernels(f, w, w), (f, rates[0]),
                 ct)


@pytest.mark.slow  # D2Q9 4.0 CPU-s; the fast lane: the core adjoints (above) and the walls' gradients (test_gradient)
@pytest.mark.parametrize("lat", LATTICES)
def test_wall_adjoints_equal_autodiff_of_the_rules(lat):
    shape = shape_for(lat)
    solid = np.zeros(shape, bool)
    solid[0], solid[-1] = True, True  # walls across x, and a moving one at x = nx - 1
    solid[(slice(None), 0)] = True
    links = halfway_links(solid, lat)
    velocity = np.zeros((lat.d, *shape))
    velocity[1, -1] = 0.1
    term = jnp.asarray(moving_wall_term(links, velocity, lat))
    post, ct = populations(lat, shape, seed=5)
    for wall in (None, term):
        extra = () if wall is None else (wall,)
        same_vjp(lambda p, *w: halfway_with_adjoint(p, solid, links, w[0] if w else None, lat),
                 lambda p, *w: bounce_back_halfway(p, solid, links, lat, w[0] if w else None), (post, *extra), ct)
    bits = pull_bits(solid, lat)
    same_vjp(lambda s, p: pulled_with_adjoint(s, p, bits, lat), lambda s, p: bounce_back_halfway_pulled(s, p, bits, lat),
             (stream(post, lat), post), ct)

    for gathered in (False, True):  # the term scattered onto its links (CPU), gathered into the stream kernel (GPU)
        def folded(p, w, gathered=gathered):  # the folded form: the dense rule, then streaming
            walls = HalfwayWithAdjoint(solid=solid, links=links, wall_term=w, gathered=gathered).folded(lat)
            return walls.apply(StepState(f=stream(p, lat), post=p), lat).f

        same_vjp(folded, lambda p, w: stream(bounce_back_halfway(p, solid, links, lat, w), lat), (post, term), ct)
