"""Shared builders for the boundary-condition and engine tests: random populations, channels, blocks, a DFG-like setup."""

import jax.numpy as jnp
import numpy as np

from lbm.boundaries import Forces, Inlet, InterpolatedBounceBack, PressureOutlet, StepState
from lbm.cases.base import Setup
from lbm.engines.plan import Block
from lbm.lattice import CS2, D2Q9


def random_populations(lat, shape, seed):
    """Populations near the rest weights, 10% random deviations, as the engines hold them: f - w (float64 under x64)."""
    rng = np.random.default_rng(seed)
    w = lat.w.reshape((-1,) + (1,) * lat.d)
    return jnp.asarray(w * 0.1 * rng.standard_normal((lat.q,) + shape))


def channel_setup(solid, boundaries, tau=0.8, force=None, lattice=D2Q9, omega_minus=None):
    """A float64 Setup of given walls and boundary conditions, fluid at rest (BGK, or TRT with ``omega_minus``)."""
    shape = solid.shape
    nu = CS2 * (tau - 0.5)
    return Setup(solid=solid, rho0=np.ones(shape), u0=np.zeros((lattice.d,) + shape), boundaries=tuple(boundaries),
                 lattice=lattice, shape=shape, dtype=jnp.float64, tau=tau, nu=nu, reynolds=1.0, omega_plus=1 / tau,
                 omega_minus=1 / tau if omega_minus is None else omega_minus,
                 force=None if force is None else tuple(force))


def force_driven_channel_error(ny, q, tau, walls, u_max, diffusion_times, omega_minus=None):
    """Max |u - exact| / u_max of a body-force channel (3 x ny) whose walls, ``walls(solid, lo, hi)``, cut the wall
    links at the fraction q, after ``diffusion_times`` times H²/nu (the slowest start-up mode down by
    exp(-diffusion_times pi²))."""
    from lbm.engines.xla import XlaEngine

    lo, hi = 1 - q, ny - 2 + q
    height = hi - lo
    solid = np.zeros((3, ny), bool)
    solid[:, 0] = solid[:, -1] = True
    nu = CS2 * (tau - 0.5)
    force = 8 * nu * u_max / height**2
    setup = channel_setup(solid, (walls(solid, lo, hi),), tau=tau, force=(force, 0.0), omega_minus=omega_minus)
    engine = XlaEngine(setup)
    steps = int(diffusion_times * height**2 / nu)
    f, _ = engine.advance(setup.initial_populations(), steps)
    u = engine.fields(f, steps)["u"][0, 1, 1:-1]
    y = np.arange(1, ny - 1)
    return float(np.abs(u - force / (2 * nu) * (y - lo) * (hi - y)).max() / u_max)


def planes(lo, hi):
    """Walls y = lo and y = hi: where they cut each link (a fraction of it)."""
    def intersect(points, links):
        c = links[:, 1].astype(np.float64)
        y_wall = np.where(c < 0, lo, hi)
        return (y_wall - points[:, 1]) / np.where(c != 0, c, 1.0)
    return intersect


def dfg_like(lattice, shape):
    """A channel periodic across (so every engine applies): ramped inlet, pressure outlet, interpolated cylinder."""
    u_in = np.zeros((lattice.d,) + shape[1:])
    u_in[0] = 0.05
    bc = InterpolatedBounceBack.circle((shape[0] / 3 + 0.3, shape[1] / 2 - 0.2), shape[1] / 5 + 0.1, shape, lattice)
    boundaries = (PressureOutlet(rho=1.0), Inlet(u=u_in, profile="ramp", ramp_steps=6.0), bc,
                  Forces.on(np.asarray(bc.solid), lattice))
    return channel_setup(np.asarray(bc.solid), boundaries, tau=0.7, lattice=lattice)


def shuffled_block(lat, shape, boundaries, seed):
    """A block of every cell the conditions touch plus unrelated cells, in a scrambled order (faces kept contiguous)."""
    from lbm.engines.plan import plan_block

    planned = plan_block(lat, shape, boundaries)
    n = int(np.prod(shape))
    extra = np.setdiff1d(np.arange(n), planned.cells)
    rng = np.random.default_rng(seed)
    extra = rng.permutation(extra)[: max(1, extra.size // 3)]
    written = planned.cells[: planned.size]
    ghosts = planned.cells[planned.size:]
    cells = np.concatenate([written, extra, ghosts])
    return Block(lattice=lat, shape=shape, cells=cells, size=written.size + extra.size)


def dense_and_block(lat, shape, boundaries, seed):
    """One pre-streaming step (every stage but stream) on the whole lattice and on a block of it."""
    from lbm.engines.timestep import run_stages

    names = ("outflow", "macroscopic", "equilibrium", "inlet", "collide", "bounce_back", "forces")

    class _Setup:  # what the core stages read
        lattice = lat
        force_array = None
        omega_plus = omega_minus = 1 / 0.7
        collision = None

    f = random_populations(lat, shape, seed)
    dense = run_stages(names, StepState(f=f), boundaries, _Setup)
    block = shuffled_block(lat, shape, boundaries, seed)
    gathered = jnp.asarray(block.gathered(np.asarray(f)))
    on_block = tuple(bc.on_block(block) for bc in boundaries)
    sparse = run_stages(names, StepState(f=gathered), on_block, _Setup)
    return dense, sparse, block
