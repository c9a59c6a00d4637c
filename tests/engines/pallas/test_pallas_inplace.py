"""The in-place AA kernels of the TPU rows form in 3D (lbm.engines.pallas.aa), in Pallas's TPU interpret mode on the CPU
(lbm.engines.pallas.tpu_interpret: it models the DMAs, semaphores and VMEM).

Each kernel alone against the reference step written with jax.numpy (lbm.kernels): the even step is collide,
each post-collision population into the opposite slot of its own cell; the odd step reads population i from
the opposite slot of the cell upstream (x - c_i), collides, and streams to x + c_i. An even-odd pair is two
push steps. Then the pallas engine on a TPU target (the AA pair in its loop, a push step first in an odd
chunk) against the xla engine, on periodic boxes and with walls, an inlet, an outflow and an obstacle's
force (the boundary cells' ``aa_even`` / ``aa_odd`` slots). Bounds as tests/engines/pallas/test_engines_pallas.py:
float32 2e-6 on populations of order 0.1-0.4 (random) and 0.01 (the cases), measured at most 2e-8.
The deviceless v5e compiles (marked ``accel``) need ``bash scripts/accel_env.sh``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.inspect_cli import installed, v5e_planned_over_populations
from helpers.jaxprs import equations
from helpers.lattices import slow_except
from helpers.runs import pair_2d_at_every_size, run_config, setup_for

from lbm.engines.pallas import aa, planes
from lbm.engines.pallas.aa import aa2d_not_chosen, aa_even_step, aa_odd_step, aa_rows, aa_unsupported
from lbm.engines.pallas.engine import PallasEngine
from lbm.engines.pallas.kernels import rows_unsupported
from lbm.engines.timestep import step_index
from lbm.engines.xla import XlaEngine
from lbm.kernels.collisions import Collision, collide
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import LATTICES

TOL = 2e-6
FORCE = np.array([2e-3, -1e-3, 5e-4])
COLLISIONS = {"trt": None, "cumulant": Collision("cumulant", 1.7)}
"""TRT (rates 1.3, 0.8: lbm.kernels.collisions.collide) and the cumulant operator, each with the force FORCE."""


def _random(lat, shape, seed=1):
    rng = np.random.default_rng(seed)
    w = lat.w.reshape((-1,) + (1,) * len(shape))
    return jnp.asarray(w * 0.2 * rng.standard_normal((lat.q, *shape)), jnp.float32)


def _collide(f, lat, collision):
    force = FORCE[: lat.d]
    drho, u = macroscopic(f, lat, force)
    feq = equilibrium(drho, u, lat)
    if collision is None:
        return collide(f, feq, u, lat, 1.3, 0.8, force)  # TRT
    return collision(f, feq, u, lat, force)


def _kernel_args(collision, lat=None):
    rate = (1.3, 0.8) if collision is None else (collision.omega, collision.omega)
    force = FORCE[: lat.d] if lat is not None else FORCE
    return dict(omega_plus=rate[0], omega_minus=rate[1], force=force, interpret=True, collision=collision)


def _upstream(a, lat):
    """The odd step's pre-collision populations of every cell: f_i(x) = a[opp(i), x - c_i]."""
    axes = tuple(range(lat.d))
    return jnp.stack([jnp.roll(a[int(lat.opposite[i])], tuple(lat.c[i]), axis=axes) for i in range(lat.q)])


KERNEL_CASES = [("d3q19", (4, 8, 128), 1, "trt"), ("d3q19", (4, 8, 128), 2, "trt"), ("d3q19", (4, 8, 128), 4, "trt"),
                ("d3q27", (6, 8, 128), 3, "trt"), ("d3q27", (6, 16, 128), 2, "cumulant"),
                ("d2q9", (6, 1024), 1, "trt"), ("d2q9", (6, 2048), 2, "trt"), ("d2q9", (4, 1024), 4, "cumulant")]
"""Block heights of one row (unrolled), several (the row loop), and the whole axis (every window of the odd step
wraps inside one block); an odd height; TRT with a force, and the cumulant operator. D2Q9 with ny = 1024 and 2048:
y viewed as (8, 128) and (16, 128) planes (lbm.engines.pallas.planes.plane_view), so the y shift crosses lanes and
sublanes and wraps from the last sublane row to the first."""


# all slow: the fast lane runs both kernels through the engine (the 2D pair, box_d2q9 against xla, below) and the 3D
# DMA ring's waits under TPU interpret mode; these pin each kernel alone (5.8 CPU-s for the cheapest case, cold)
@pytest.mark.parametrize("lattice,shape,rows,collision", slow_except(KERNEL_CASES, fast=set()))
def test_each_aa_kernel_equals_its_reference_and_a_pair_two_push_steps(lattice, shape, rows, collision):
    lat, collision = LATTICES[lattice], COLLISIONS[collision]
    kw = _kernel_args(collision, lat)
    f = _random(lat, shape)
    post = _collide(f, lat, collision)
    even = aa_even_step(f, lat, rows=rows, **kw)
    np.testing.assert_allclose(np.asarray(even), np.asarray(post)[lat.opposite], rtol=0, atol=TOL)
    a = _random(lat, shape, seed=2)  # the odd step alone, on any array
    odd = aa_odd_step(a, lat, rows=rows, **kw)
    np.testing.assert_allclose(np.asarray(odd), np.asarray(stream(_collide(_upstream(a, lat), lat, collision), lat)),
                               rtol=0, atol=TOL)
    pair = aa_odd_step(aa_even_step(f, lat, rows=rows, **kw), lat, rows=rows, **kw)
    two = stream(_collide(stream(post, lat), lat, collision), lat)
    np.testing.assert_allclose(np.asarray(pair), np.asarray(two), rtol=0, atol=TOL)


RING_CASES = [("d3q19", (8, 8, 128), 1, 3), ("d3q19", (8, 8, 128), 2, 2), ("d3q19", (8, 8, 128), 2, 3),
              ("d2q9", (8, 2048), 2, 3)]
"""(lattice, grid, rows, buffers) of the ring tests; D2Q9 8 x 2048: planes of (16, 128), blocks of 2 rows."""


# all slow: the fast lane runs the odd kernel's ring of 3 buffers in test_a_dropped_dma_wait_is_seen
@pytest.mark.parametrize("lattice,shape,rows,buffers", slow_except(RING_CASES, fast=set()))
def test_the_dma_ring_under_tpu_interpret_mode(lattice, shape, rows, buffers):
    """Both kernels on the DMA ring (the even one too: ``pipeline="dma"``), with a ring of 2 and 3 buffers, under TPU
    interpret mode (every TPU kernel's, lbm.engines.pallas.tpu_interpret: a DMA lands when it is waited on, so a
    missing or misplaced wait leaves stale populations; test_a_dropped_dma_wait_is_seen below). TRT with a force, in
    3D and 2D."""
    lat = LATTICES[lattice]
    f = _random(lat, shape)
    kw = _kernel_args(None, lat)
    pair = aa_odd_step(aa_even_step(f, lat, rows=rows, pipeline="dma", **kw), lat, rows=rows, buffers=buffers, **kw)
    post = _collide(f, lat, None)
    two = stream(_collide(stream(post, lat), lat, None), lat)
    np.testing.assert_allclose(np.asarray(pair), np.asarray(two), rtol=0, atol=TOL)


class _NoWait:
    """An async copy whose wait does nothing (the copy still starts)."""

    def __init__(self, copy):
        self.copy = copy

    def start(self):
        self.copy.start()

    def wait(self):
        pass


def test_a_dropped_dma_wait_is_seen(monkeypatch):
    """The TPU kernels run under TPU interpret mode on a CPU (lbm.engines.pallas.tpu_interpret), which lands a DMA
    only when it is waited on: the odd kernel on its ring of 3 buffers equals the odd step's reference, and with its
    waits dropped leaves populations of at most 0.073 off by 0.23, where the generic interpret mode (each DMA done at
    once) gives bitwise the kernel's result and cannot see it."""
    from jax.experimental.pallas import tpu as pltpu

    lat = LATTICES["d3q19"]
    f = _random(lat, (8, 8, 128))
    kw = _kernel_args(None, lat)
    good = np.asarray(aa_odd_step(f, lat, rows=2, buffers=3, **kw))
    np.testing.assert_allclose(good, np.asarray(stream(_collide(_upstream(f, lat), lat, None), lat)), rtol=0, atol=TOL)
    copy = pltpu.make_async_copy
    monkeypatch.setattr(pltpu, "make_async_copy", lambda *a, **k: _NoWait(copy(*a, **k)))
    bad = np.asarray(aa_odd_step(f, lat, rows=2, buffers=3, **kw))
    assert np.abs(bad - good).max() > 0.05


SWAP_CASES = [("d2q9", (9, 1024), None, 3, 1), ("d3q19", (6, 8, 128), None, 2, 1), ("d3q27", (4, 16, 128), None, 4, 1),
              ("d2q9", (16, 300), (4, 300), 2, 4), ("d2q9", (8, 1100), (1100,), 1, 1), ("d3q19", (6, 9, 100), None, 2, 1)]
"""(lattice, grid, the view's plane (None: the grid's), rows, rows of x per plane) of the swap pass: several rows per
block and all of them (every window wraps inside one block), k = 4 rows of x per 2D plane (the edge planes' roll), y
padded from 1100 to 2048, and a 3D grid viewed flat (planes.flat_plane)."""


@pytest.mark.parametrize("lattice,shape,plane,rows,group", slow_except(SWAP_CASES, fast={SWAP_CASES[3]}))
def test_the_swap_pass_streams_the_even_steps_slots_in_place_bitwise(lattice, shape, plane, rows, group):
    """After an even step slot opp(i) of x holds f*_i: the swap pass exchanges it with slot i of x + c_i, in place, and
    leaves bitwise the streaming of the opposite slots (the dense step's populations), on every form of the view."""
    from lbm.engines.pallas.aa import aa_swap_step, streamed_after_even

    lat = LATTICES[lattice]
    a = _random(lat, shape, seed=4)
    want = np.asarray(streamed_after_even(a, lat))
    if plane is None:  # the grid's shape (3D flat: through the view and back)
        got = aa_swap_step(a, lat, interpret=True, rows=rows)
    else:
        got = planes.from_view(aa_swap_step(planes.plane_view(a, group), lat, interpret=True, rows=rows, plane=plane),
                               shape, group)
    assert planes.plane_of(shape, group) == (plane or planes.plane_of(shape, group))
    np.testing.assert_array_equal(np.asarray(got), want)
    assert not np.array_equal(want, np.asarray(a)[np.asarray(lat.opposite)])  # the pass moved populations


@pytest.mark.slow
def test_the_even_kernel_through_the_dma_ring_equals_it_through_blocks():
    lat = LATTICES["d3q19"]
    f = _random(lat, (4, 8, 128))
    kw = _kernel_args(None)
    blocks = aa_even_step(f, lat, rows=2, **kw)
    np.testing.assert_array_equal(np.asarray(aa_even_step(f, lat, rows=2, pipeline="dma", **kw)), np.asarray(blocks))


BOX19 = ["case=taylor_green", "lattice=d3q19", "grid.nx=6", "grid.ny=8", "grid.nz=128"]
BOX27 = ["case=taylor_green", "lattice=d3q27", "grid.nx=16", "grid.ny=8", "grid.nz=128"]
CAVITY = ["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12"]
CYLINDER = ["case=cylinder", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12"]
BOX9 = ["case=taylor_green", "lattice=d2q9", "grid.nx=8", "grid.ny=1024"]
CASES = {"box_d3q19": BOX19, "box_d3q27_cumulant": BOX27 + ["collision=cumulant"], "cavity_d3q19": CAVITY,
         "cylinder_d3q19": CYLINDER, "box_d2q9": BOX9, "box_d2q9_mrt": BOX9 + ["collision=mrt"],
         "cavity_d2q9": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1024"],
         "cylinder_d2q9": ["case=cylinder", "lattice=d2q9", "grid.nx=24", "grid.ny=1024", "case.radius=5"],
         "cylinder_d2q9_halfway": ["case=cylinder", "lattice=d2q9", "grid.nx=24", "grid.ny=1024", "case.radius=5",
                                   "case.bounce_back=halfway"],
         "box_d2q9_pad": ["case=taylor_green", "lattice=d2q9", "grid.nx=8", "grid.ny=1000"],
         "box_d2q9_pad1030": ["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=1030"],
         "cavity_d2q9_pad": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1100"],
         "cylinder_d2q9_pad": ["case=cylinder", "lattice=d2q9", "grid.nx=24", "grid.ny=1030", "case.radius=5"],
         "box_d2q9_rows": ["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=300"],
         "box_d2q9_rows8": ["case=taylor_green", "lattice=d2q9", "grid.nx=64", "grid.ny=300"],
         "box_d3q19_flat": ["case=taylor_green", "lattice=d3q19", "grid.nx=6", "grid.ny=10", "grid.nz=12"],
         "box_d3q27_cumulant_flat": ["case=taylor_green", "lattice=d3q27", "grid.nx=8", "grid.ny=9", "grid.nz=10",
                                     "collision=cumulant"]}
ENGINE_CASES = [("box_d3q19", 3), ("box_d3q19", 4), ("box_d3q27_cumulant", 2), ("cavity_d3q19", 3),
                ("cylinder_d3q19", 4), ("box_d2q9", 3), ("box_d2q9", 4), ("box_d2q9_mrt", 2), ("cavity_d2q9", 3),
                ("cylinder_d2q9", 4), ("box_d2q9_pad", 3), ("box_d2q9_pad1030", 3), ("box_d2q9_pad1030", 4),
                ("cavity_d2q9_pad", 3), ("cavity_d2q9_pad", 4), ("cylinder_d2q9_pad", 3), ("cylinder_d2q9_pad", 4),
                ("box_d3q19_flat", 3), ("box_d3q19_flat", 4), ("box_d3q27_cumulant_flat", 2), ("box_d2q9_rows", 4),
                ("box_d2q9_rows8", 3), ("cylinder_d2q9_halfway", 3)]
"""Periodic D3Q19 (BGK; one row per block) over an odd chunk (the even step and the swap pass, then a pair) and an even
one; D3Q27 cumulant (two rows per block); the lid-driven cavity (its walls and moving lid in the kernels,
lbm.engines.pallas.walls) and the cylinder (inlet, outflow, full-way obstacle and its force as face rows,
lbm.engines.pallas.faces). The same in 2D with ny = 1024 (the 2D pair on the engine's view of the populations,
lbm.engines.pallas.planes.plane_view; one row per block in the box, two in the cavity), and D2Q9 MRT; and with ny off
1024 (``_pad``: the view pads y to P = 1024 or 2048, the streaming wraps at ny); where k rows of x per plane pad less
(planes.row_group: 1030 and 1100 with k = 2, rows of 1536 cells; ``_rows``: 16 x 300, k = 2, and 64 x 300, k = 8,
rows of 384) the box, the cavity and the cylinder group them; a half-way cylinder (``_halfway``) runs on the boundary
plan's slots, its odd chunk's even step too (then the swap pass). In 3D the cavity and the cylinder (10 x 12 planes)
and ``_flat`` run on flat planes (planes.flat_plane: 1024 cells, where the tiles of (10, 12) take 2048), the streaming
wrapping at ny and nz; the boxes of nz = 128 on the grid as it is."""


@pytest.mark.parametrize("name,steps", slow_except(ENGINE_CASES, fast={("box_d2q9", 3), ("box_d2q9_rows", 4)}))
def test_the_inplace_engine_equals_the_xla_engine(name, steps):
    setup = setup_for(CASES[name], "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.form == "rows" and engine.bulk.inplace
    assert engine.viewed == (setup.lattice.d == 2 or "nz=128" not in " ".join(CASES[name]))
    assert engine.group == {"box_d2q9_pad1030": 2, "cavity_d2q9_pad": 2, "cylinder_d2q9_pad": 2, "box_d2q9_rows": 2,
                            "box_d2q9_rows8": 8}.get(name, 1)
    assert (engine.block is not None) == name.endswith("_halfway")  # the boundary plan's slots, not faces or walls
    assert engine.block is None or engine.block.rest.size > 0  # the obstacle's interior held at rest (on the view)
    f0 = np.asarray(setup.initial_populations())  # 1% noise: every bulk cell off equilibrium from the first step
    f0 = (f0 * (1 + 0.01 * np.random.default_rng(2).standard_normal(f0.shape))).astype(f0.dtype)
    f_ref, aux_ref = XlaEngine(setup).advance(jnp.array(f0), steps)
    f, aux = engine.advance(jnp.array(f0), steps)
    assert np.abs(np.asarray(f_ref) - f0).max() > 1e-4  # the steps did change the populations
    np.testing.assert_allclose(np.asarray(f), np.asarray(f_ref), rtol=0, atol=TOL)
    assert set(aux) == set(aux_ref)
    for k in aux:
        np.testing.assert_allclose(np.asarray(aux[k]), np.asarray(aux_ref[k]), rtol=0, atol=10 * TOL)


@pytest.mark.parametrize("grid", [(2, 10, 12), (2, 64, 64), (2, 3, 130), (2, 9, 100), (2, 258, 258)])
def test_the_flat_shift_of_a_3d_plane_wraps_at_ny_and_nz(grid):
    """A 3D grid's (y, z) planes viewed flat (planes.shifted_flat with the plane, jnp.roll for pltpu.roll) shift as
    np.roll of the grid by (c_y, c_z), periodic along each axis, whether P fills the plane (64 x 64) or pads it, and
    wherever the shift and its wraps cross lanes and sublanes; the pads take finite values; the boundary plan's flat
    slots map into the view."""
    rng = np.random.default_rng(grid[2])
    x = rng.standard_normal(grid).astype(np.float32)
    v = planes.to_view(jnp.asarray(x), grid)
    assert v.shape == (2, planes.padded_plane(grid) // 128, 128) and np.array_equal(np.asarray(planes.from_view(v, grid)), x)
    for cy in (-1, 0, 1, 2):
        for cz in (-2, -1, 0, 1):
            out = planes.shifted_flat(v, np.array([1, cy, cz]), jnp.roll, grid[1:])
            np.testing.assert_array_equal(np.asarray(planes.from_view(out, grid)), np.roll(x, (cy, cz), axis=(1, 2)),
                                          err_msg=str((cy, cz)))
            assert np.isfinite(np.asarray(out)).all()
    i = np.arange(x.size)
    np.testing.assert_array_equal(np.asarray(v).reshape(-1)[planes.view_index(i, grid)], x.reshape(-1))


def test_the_3d_pair_views_its_planes_flat_where_that_pads_less():
    """3D: flat planes where the (8, 128) tiles of (ny, nz) would pad more (nz no multiple of 128), the grid as it is
    where they fill whole tiles; 2D: always flat."""
    for grid in [(256, 256, 256), (4, 128, 128), (6, 8, 128), (8, 6, 7)]:  # 8 x 6 x 7: 1024 cells either way
        assert not planes.flat_plane(grid) and planes.view_shape(grid) == grid and planes.plane_of(grid) is None
    assert planes.view_shape((64, 64, 64)) == (64, 32, 128) and planes.pad_factor((64, 64, 64)) == 1.0  # tiles: 64 x 128
    assert planes.view_shape((258, 258, 258)) == (258, 528, 128) and planes.pad_factor((258, 258, 258)) < 1.016  # 264 x 384
    assert planes.tiled_plane((258, 258, 258)) == 264 * 384 and planes.plane_of((16, 10, 12)) == (10, 12)
    assert planes.flat_plane((4, 1000)) and planes.view_shape((4, 1000)) == (4, 8, 128)


@pytest.mark.parametrize("ny", [1024, 1000, 1030, 1100, 2047, 128, 600])
def test_the_flat_shift_of_the_padded_view_wraps_at_ny(ny):
    """The y shift of a 2D row in the kernels' view (planes.shifted_flat, with jnp.roll for pltpu.roll) is np.roll of
    the grid's row by c_y, periodic at ny, whatever P; the pads take finite values (real or pad cells)."""
    rng = np.random.default_rng(ny)
    grid = (2, ny)
    x = rng.standard_normal(grid).astype(np.float32)
    v = planes.to_view(jnp.asarray(x), grid)
    assert v.shape == (2, planes.padded_ny(ny) // 128, 128) and np.array_equal(np.asarray(planes.from_view(v, grid)), x)
    for cy in (1, -1, 2, -3, 127, -127):
        out = planes.shifted_flat(v, np.array([0, cy]), jnp.roll, (ny,))
        np.testing.assert_array_equal(np.asarray(planes.from_view(out, grid)), np.roll(x, cy, axis=1), err_msg=str(cy))
        assert np.isfinite(np.asarray(out)).all()
    i = np.arange(2 * ny)  # the boundary plan's flat slots, into the view
    np.testing.assert_array_equal(np.asarray(v).reshape(-1)[planes.view_index(i, grid)], x.reshape(-1))


@pytest.mark.parametrize("shape,group,cells", [((3360, 1440), 2, 1536), ((4098, 4098), 2, 4608), ((64, 300), 8, 384),
                                               ((2000, 1100), 8, 1152), ((4096, 4096), 1, 4096), ((8, 1000), 1, 1024),
                                               ((4097, 1100), 1, 2048), ((16, 1030), 2, 1536)])
def test_2d_planes_group_the_rows_of_x_that_pad_least(shape, group, cells):
    """k rows of x per plane where rows of fewer cells fill whole tiles: k Y / 128 sublanes a multiple of 8, k dividing
    nx with 8 planes left (4098 = 2 x 3 x 683: k = 2, Y = 4608, not 5120; nx odd or 8 rows: one row per plane)."""
    assert planes.row_group(shape) == group and planes.row_cells(shape[1], group) == cells
    assert planes.view_shape(shape, group) == (shape[0] // group, group * cells // 128, 128)
    assert planes.pad_factor(shape, group) == cells / shape[1]


@pytest.mark.parametrize("shape,group", [((64, 300), 8), ((48, 1440), 2), ((32, 200), 4)])
def test_a_2d_view_of_several_rows_per_plane_holds_x_strided_and_shifts_y_within_each_row(shape, group):
    """Row m of plane p is x = p + m nx / k, padded with zeros to Y; to_view, from_view and view_index agree; the flat
    shift of a plane (k, ny) moves y by c_y within each row, wrapping at ny (np.roll), and never x."""
    a = np.random.default_rng(0).standard_normal((3, *shape)).astype(np.float32)
    v = planes.to_view(a, shape, group)
    n, y = shape[0] // group, planes.row_cells(shape[1], group)
    rows = v.reshape(3, n, group, y)
    assert np.array_equal(rows[1, 5, group - 1, :shape[1]], a[1, 5 + (group - 1) * n]) and not rows[..., shape[1]:].any()
    assert np.array_equal(planes.from_view(v, shape, group), a)
    assert np.array_equal(np.asarray(planes.from_view(jnp.asarray(v), shape, group)), a)
    assert np.array_equal(v.reshape(-1)[planes.view_index(np.arange(a.size), shape, group)], a.reshape(-1))
    for c in LATTICES["d2q9"].c:
        out = planes.shifted_flat(jnp.asarray(v[0]), c, jnp.roll, plane=(group, shape[1]))
        np.testing.assert_array_equal(planes.from_view(np.asarray(out), shape, group), np.roll(a[0], c[1], axis=1))
    assert planes.edge_rows(LATTICES["d2q9"], v.shape, (group, shape[1])) == y // 128
    assert planes.edge_rows(LATTICES["d3q19"], v.shape, (group, shape[1])) == 0  # a 3D plane (ny, nz)


def test_the_odd_kernel_on_an_unpadded_view_is_the_program_it_was():
    """ny a multiple of 1024 (P = ny): the odd kernel traces to the program without ``ny`` (two rolls and one lane
    iota per y shift: 6 directions read and write, 24 rolls); ny = 1030 (P = 2048) adds a lane and a sublane roll and
    a flat iota per shift, and a grid's ny of 1024 no pad or slice around the chunk."""
    lat = LATTICES["d2q9"]

    def traced(grid_ny, **kw):
        view = jax.ShapeDtypeStruct((9, 8, planes.padded_ny(grid_ny) // 128, 128), jnp.float32)
        return str(jax.make_jaxpr(lambda f: aa_odd_step(f, lat, 1.3, 0.8, None, rows=1, **kw))(view))

    plain = traced(1024)
    assert traced(1024, plane=(1024,)) == plain and plain.count(" roll") == 24 and plain.count("iota") == 12
    padded = traced(1030, plane=(1030,))
    assert padded.count(" roll") == 48 and padded.count("iota") == 24
    setup = setup_for(BOX9, "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=False)
    text = engine.chunk_function(4).trace(jax.ShapeDtypeStruct(engine.state_shape, jnp.float32), engine.params,
                                          step_index(0)).lower(lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 2 and "stablehlo.pad" not in text and "stablehlo.slice" not in text


@pytest.mark.slow  # 3.3 CPU-s; the fast lane: the flat shift's wrap at ny (above)
def test_the_padded_pair_keeps_its_pads_out_of_sight():
    """D2Q9 8 x 1000 (P = 1024): the state's pads start at rest (zero deviations); whatever they hold (here NaN) reaches
    no grid cell, no health check and no field: the populations, the fluid mask and the fields the engine gives back
    are the grid's, equal to the xla engine's; the note says the padding."""
    from lbm.simulation.health import chunk_stats

    setup, engine, f0 = _pair_2d(CASES["box_d2q9_pad"])
    assert engine.state_shape == (9, 8, 8, 128) and "from 1000 to 1024 cells (1.024x" in engine.note
    state = engine.place(jnp.array(f0))
    assert np.all(np.asarray(state).reshape(9, 8, 1024)[..., 1000:] == 0)
    fluid = engine.place_cells(setup.fluid)
    outside = engine.outside_cells()
    assert np.asarray(fluid).reshape(8, 1024)[:, :1000].all() and not np.asarray(fluid).reshape(8, 1024)[:, 1000:].any()
    assert np.array_equal(np.asarray(outside).reshape(8, 1024)[0], np.arange(1024) >= 1000)
    pads = np.asarray(outside)[None] & np.ones((9, 1, 1, 1), bool)
    state, _ = engine.advance(jnp.where(pads, jnp.nan, state), 2)
    assert np.isnan(np.asarray(state)[pads]).any()  # the pads kept what they held
    assert chunk_stats(state, fluid, setup.lattice, outside)[0] and not chunk_stats(state, fluid, setup.lattice)[0]
    converted, _ = XlaEngine(setup).advance(jnp.array(f0), 2)
    np.testing.assert_allclose(engine.host_populations(state), np.asarray(converted), rtol=0, atol=TOL)
    fields = engine.fields(state, 2)
    assert fields["rho"].shape == setup.shape and fields["u"].shape == (2, *setup.shape)


@pytest.mark.parametrize("name", slow_except(["box_d2q9_pad", "cavity_d2q9", "cylinder_d2q9", "box_d3q19",
                                                "cavity_d3q19"], fast={"cavity_d2q9"}))
def test_an_odd_chunk_runs_only_in_place_kernels(name):
    """An odd chunk's lone step is the even kernel and the swap pass (then the walls' fix, where the kernels apply
    walls): the chunk holds no push kernel, whose second array an odd chunk planned (up to 4.5x the populations in 2D);
    every kernel in it aliases its input to its output."""
    from lbm.engines.pallas.aa import SWAP_SCOPE

    setup = setup_for(CASES[name], "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    f = jax.ShapeDtypeStruct(engine.state_shape, jnp.float32)
    traced = engine.chunk_function(3).trace(f, engine.params, step_index(0))
    calls = [e for e in equations(traced.jaxpr) if e.primitive.name == "pallas_call"]
    names = [str(e.params.get("name") or e.params["name_and_src_info"]).split()[0] for e in calls]  # jax 0.12, 0.10
    assert names.count(SWAP_SCOPE) == 1, names
    assert all(e.params["input_output_aliases"] for e in calls), names


def test_block_heights_and_what_the_inplace_kernels_refuse():
    d3q19, d3q27 = LATTICES["d3q19"], LATTICES["d3q27"]
    assert aa_rows(d3q19, (256, 256, 256)) == 2  # a row is 4.75 MiB in VMEM: 2 rows fit 16 MiB, 4 do not
    assert aa_rows(d3q27, (256, 256, 256)) == 2  # 6.75 MiB a row
    assert aa_rows(d3q19, (512, 512, 512)) == 1  # 19 MiB a row: more than the target, one row
    assert aa_rows(d3q19, (32, 32, 32)) == 4  # at least 8 blocks (a row pads to 32 x 128 lanes: 0.3 MiB)
    assert aa_rows(d3q19, (6, 8, 128)) == 1
    assert aa_unsupported(d3q19, (512, 512, 512), jnp.float32) == ""
    assert "does not fit" in aa_unsupported(d3q27, (512, 512, 512), jnp.float32)  # 27 MiB a row
    d2q9 = LATTICES["d2q9"]
    assert aa_rows(d2q9, (4096, 4096)) == 64  # a row is 144 KiB: 64 rows fit 16 MiB, and leave 64 blocks
    assert aa_rows(d2q9, (16, 1024)) == 2
    assert aa_unsupported(d2q9, (4096, 4096), jnp.float32) == aa_unsupported(d2q9, (24, 1024), jnp.float32) == ""
    assert aa_unsupported(d2q9, (1024, 1000), jnp.float32) == aa_unsupported(d2q9, (64, 512), jnp.float32) == ""
    assert aa_rows(d2q9, (4098, 4098)) == 6  # nx = 2 x 3 x 683; a padded row (5120 cells) is 180 KiB


@pytest.fixture(autouse=True)
def _the_2d_pair_on_small_grids(monkeypatch):
    """The tests' 2D grids (ny = 1024, a few rows) run the pair."""
    pair_2d_at_every_size(monkeypatch)


def _pair_2d(overrides=BOX9):
    """The pallas engine's 2D pair on a TPU target (interpret mode), and the case's noisy initial populations."""
    setup = setup_for(overrides, "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.bulk.inplace and engine.viewed
    f0 = np.asarray(setup.initial_populations())
    return setup, engine, (f0 * (1 + 0.01 * np.random.default_rng(2).standard_normal(f0.shape))).astype(f0.dtype)


def test_the_ring_kernels_declare_the_bytes_of_their_windows():
    """What a DMA-ring kernel declares to XLA (and inspect counts): without walls every slot's R rows read and written
    once per block, the populations' bytes twice; with them the 10 (D3Q19) slots that move along x read R + 1 rows,
    and the bits are read once (a view's rows of 40 x 128 cells)."""
    f = jax.ShapeDtypeStruct((19, 12, 40, 128), jnp.float32)
    cx = [int(c) for c in LATTICES["d3q19"].c[:, 0]]
    row = 40 * 128 * 4
    for scheme in aa.SCHEMES:
        reads, writes, _ = aa.ring_regions(cx, 3, scheme, False)
        assert aa.ring_bytes(f, reads, writes, 3) == 2 * 19 * 12 * row
    reads, writes, _ = aa.ring_regions(cx, 3, "aa_odd", True)
    bits = jax.ShapeDtypeStruct((12, 40, 128), jnp.int32)
    assert aa.ring_bytes(f, reads, writes, 3, (bits,)) == 4 * (19 * 3 + 10 + 19 * 3) * row + 12 * row


def test_the_pairs_chunk_on_its_state_keeps_the_chunks_name():
    """The viewed engine's chunk (which refuses the grid's layout) is still the program ``jit_chunk``, as on every
    engine: the traces' XLA Modules and XProf name it so (a TPU trace of the 3D cavity read ``jit_checked``)."""
    _, engine, f0 = _pair_2d()
    chunk = engine.chunk_function(2)
    assert chunk.__name__ == "chunk"
    text = chunk.lower(jax.ShapeDtypeStruct(engine.state_shape, f0.dtype), engine.params, step_index(0)).as_text()
    assert text.startswith("module @jit_chunk")


@pytest.mark.slow  # 3.9 CPU-s; the fast lane runs the pair's state through the run loop (below)
def test_the_2d_pair_holds_its_state_in_the_kernels_view_from_chunk_to_chunk():
    """The engine's state is the kernels' view (Q, nx, ny / 128, 128), the chunks step it with no copy and refuse the
    grid's layout, and an odd chunk (the even step and the swap pass first) and an even one on the held state give
    bitwise what they give when each call converts the populations (Q, nx, ny) in and out (the chunk's copy before);
    fields read the state."""
    setup, engine, f0 = _pair_2d()
    assert engine.state_shape == (9, 8, 8, 128)
    state = engine.place(jnp.array(f0))
    assert state.shape == engine.state_shape and engine.place_cells(setup.fluid).shape == (8, 8, 128)
    np.testing.assert_array_equal(engine.host_populations(state), f0)  # the same elements in the same order
    with pytest.raises(ValueError, match="steps its state"):
        engine.chunk_function(2).trace(jax.ShapeDtypeStruct(f0.shape, f0.dtype), engine.params, step_index(0))
    converted, t = jnp.array(f0), 0
    for n in (3, 2):
        state, _ = engine.advance(state, n, first_step=t)
        converted, _ = engine.advance(converted, n, first_step=t)
        t += n
        assert state.shape == engine.state_shape and converted.shape == f0.shape
        np.testing.assert_array_equal(np.asarray(engine.canonical(state)), np.asarray(converted))
    assert np.abs(np.asarray(converted) - f0).max() > 1e-4  # the steps did change the populations
    fields, ref = engine.fields(state, t), XlaEngine(setup).fields(converted, t)
    assert fields["rho"].shape == setup.shape and fields["u"].shape == (2, *setup.shape)
    for k in ("rho", "u"):
        np.testing.assert_array_equal(fields[k], ref[k])


@pytest.mark.slow  # 2.3 CPU-s
def test_the_health_check_names_the_first_bad_cell_of_the_grid_not_of_the_view():
    """A NaN at cell (3, 700) of the pair's state: after a chunk of 2 steps the first bad cell is (1, 698) on the
    grid, (1, 5, 58) in the view."""
    from types import SimpleNamespace

    from lbm.errors import DivergenceError
    from lbm.simulation import Position, advance_chunk

    setup, engine, f0 = _pair_2d()
    f0[:, 3, 700] = np.nan
    s = SimpleNamespace(engine=engine, fluid=engine.place_cells(setup.fluid), outside=engine.outside_cells(), setup=setup)
    at = Position(step=0, f=engine.place(jnp.array(f0)))
    with pytest.raises(DivergenceError, match=r"first bad cell \(1, 698\)"):
        advance_chunk(s, at, 2)


@pytest.fixture
def run_on_the_pair(monkeypatch):
    """The run loop's engine: the pallas engine's 2D pair on a TPU target in interpret mode (on any machine)."""
    import importlib

    start = importlib.import_module("lbm.simulation.start")  # the module (lbm.simulation's ``start`` is its function)
    monkeypatch.setattr(start, "make_engine", lambda setup, *a, **kw: PallasEngine(setup, platform="tpu",
                                                                                    interpret=True))


def test_a_run_on_the_2d_pair_writes_fields_and_checkpoints_of_the_grid_and_resumes_bitwise(tmp_path, monkeypatch,
                                                                                           run_on_the_pair):
    """steps=3 in chunks of 2 and 1 (odd: the even step and the swap pass), a checkpoint at step 2: the checkpoint
    holds the populations (Q, nx, ny), fields.npz the grid's fields, a case's observation the populations (Q, nx,
    ny), and a run resumed from the checkpoint ends bitwise where the whole run did (the resumed one places the
    checkpoint's populations into the view)."""
    from lbm.cases import CASES
    from lbm.io.checkpoint import load_checkpoint
    from lbm.simulation import simulate

    seen, observe = [], CASES["taylor_green"].observe
    monkeypatch.setattr(CASES["taylor_green"], "observe",
                        lambda self, snapshot: (seen.append(snapshot.populations.shape), observe(self, snapshot))[1])
    base = [*BOX9, "engine=pallas", "output.every=2", "checkpoint.every=2", "output.plots=false", "steps=3"]
    whole = simulate(run_config(*base), tmp_path / "a")
    assert whole["engine"] == "pallas" and whole["chunk_steps"] == 2
    assert seen == [(9, 8, 1024)] * 2
    ckpt = load_checkpoint(next((tmp_path / "a" / "checkpoints").glob("*")))
    assert ckpt["step"] == 2 and ckpt["f"].shape == (9, 8, 1024)  # not the view's (9, 8, 8, 128)
    simulate(run_config(*base, f"checkpoint.resume={tmp_path / 'a' / 'checkpoints'}"), tmp_path / "b")
    a, b = (np.load(tmp_path / d / "fields.npz") for d in "ab")
    assert a["rho"].shape == (8, 1024) and a["u"].shape == (2, 8, 1024)
    for k in ("rho", "u", "vorticity"):
        np.testing.assert_array_equal(a[k], b[k])


def test_a_2d_grid_takes_the_pair_from_40_mib_and_the_push_kernel_below(monkeypatch):
    """The pair runs from AA2D_MIN_BYTES, walls or not (measured on the chip: the box 1800^2 8387 MLUPS on the pair
    against the push kernel's 4153 and 2000x1200 8238 against 7252 at 1.07x the populations, not 2.09x; the box
    1024^2, below it, 5871 against the push kernel's 8695; the cavity 1500^2 5516 against xla's 2151)."""
    monkeypatch.setattr(aa, "AA2D_MIN_BYTES", 40 * 2**20)  # the module's fixture sets it to 0
    d2q9, d3q19 = LATTICES["d2q9"], LATTICES["d3q19"]
    assert aa2d_not_chosen(d2q9, (4096, 4096), jnp.float32) == "" == aa2d_not_chosen(d3q19, (8, 8, 128), jnp.float32)
    assert "36 MiB of populations, under the 40 MiB" in aa2d_not_chosen(d2q9, (1024, 1024), jnp.float32)
    assert aa2d_not_chosen(d2q9, (1024, 1200), jnp.float32) == ""  # 42 MiB
    assert aa2d_not_chosen(d2q9, (1500, 1500), jnp.float32) == ""
    assert "more than its 2.0x" in aa2d_not_chosen(d2q9, (8000, 500), jnp.float32)  # 15 MiB x 2.05
    box = setup_for(["case=taylor_green", "lattice=d2q9", "grid.nx=1500", "grid.ny=1500"], "float32")
    mid = setup_for(["case=taylor_green", "lattice=d2q9", "grid.nx=2000", "grid.ny=1200"], "float32")
    small = setup_for(["case=taylor_green", "lattice=d2q9", "grid.nx=1024", "grid.ny=1024"], "float32")
    assert "does not fit" in rows_unsupported(d2q9, (1500, 1500), jnp.float32)  # 1500 = 8 x 187.5: whole columns
    assert rows_unsupported(d2q9, (2000, 1200), jnp.float32) == ""  # the push kernel could run it
    engine = PallasEngine(box, platform="tpu", interpret=True)
    assert engine.bulk.inplace and "flat planes of 2 rows of x, each padded from 1500 to 1536" in engine.note
    engine = PallasEngine(mid, platform="tpu", interpret=True)
    assert engine.bulk.inplace and "flat planes of 4 rows of x, each padded from 1200 to 1280" in engine.note
    engine = PallasEngine(small, platform="tpu", interpret=True)
    assert not engine.bulk.inplace and "under the 40 MiB" in engine.note
    assert "push rows kernel runs every step" in engine.note


def test_a_2d_grid_the_pair_would_pad_by_more_than_2x_runs_the_push_kernel_and_says_so():
    """ny = 200 pads to 512 in planes of two rows of x (2.56x the populations; 1024 in planes of one): the push rows
    kernel, as before the padded view (ny = 512, 2.0x, runs the pair)."""
    setup = setup_for(["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=200"], "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert not engine.bulk.inplace and "from 200 to 512 cells (2.56x)" in engine.note and engine.group == 1
    assert "push rows kernel" in engine.note
    engine.chunk_function(3)  # the push kernel's chunk: any number of steps
    assert PallasEngine(setup_for(["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=512"], "float32"),
                        platform="tpu", interpret=True).viewed


def test_a_grid_only_the_inplace_kernels_fit_runs_odd_chunks_too():
    """D3Q19 planes of 512 x 512 (a row of 19 MiB, as at 512^3, where two buffers would not fit the chip either):
    the push kernel's row does not fit its VMEM budget, the AA pair's does, and an odd chunk needs no push step (the
    even kernel and the swap pass). 8 rows, not 512: the same rows, and a setup of 2 M cells, not 134 M (45 s on a
    2-core CPU)."""
    setup = setup_for(["case=taylor_green", "lattice=d3q19", "grid.nx=8", "grid.ny=512", "grid.nz=512"], "float32")
    assert "does not fit" in rows_unsupported(setup.lattice, setup.shape, jnp.float32)
    engine = PallasEngine(setup, platform="tpu")
    assert engine.bulk.inplace
    f = jax.ShapeDtypeStruct(engine.state_shape, jnp.float32)
    out, _ = engine.chunk_function(11).eval_shape(f, engine.params, step_index(0))
    assert out.shape == engine.state_shape


# --- deviceless compiles (bash scripts/accel_env.sh; .venv-accel/bin/python -m pytest -m accel) ----------------


@pytest.mark.accel
@pytest.mark.parametrize("case,lattice,steps,low,high", [
    ("taylor_green", "d3q19", 10, 0.99, 1.01), ("taylor_green", "d3q19", 11, 0.99, 1.01),
    ("cavity", "d2q9", 10, 1.0, 1.12), ("cavity", "d2q9", 11, 1.0, 1.12), ("taylor_green", "d2q9", 11, 0.99, 1.01)])
def test_v5e_chunk_holds_the_populations_once(case, lattice, steps, low, high):
    """Planned memory of the compiled chunk (D3Q19 128^3): the populations once, in an odd chunk too (the even kernel
    and the swap pass: twice with the push step it ran before, 2.25x and 3.04x on the 2D box and cavity). The D2Q9
    cavity 2048^2 (the 2D pair on the engine's state, the kernels' view of the populations): once, plus its
    kernel walls' words, held as the kernels read them (int32 in the view, walls.wall_params: 4 B against 36 B of
    populations per cell, 1.111 on jax 0.10.2 and 0.12.0.1; with uint16 words converted in every chunk it was 1.056 on
    0.12.0.1, where the int32 copy stayed in VMEM, and 1.167 on 0.10.2 at 4096^2)."""
    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    grid = ["grid.nx=128", "grid.ny=128", "grid.nz=128"] if lattice == "d3q19" else ["grid.nx=2048", "grid.ny=2048"]
    engine, planned = v5e_planned_over_populations([f"case={case}", f"lattice={lattice}", *grid], steps)
    assert engine.viewed == (lattice == "d2q9") and (engine.walls is not None) == (case == "cavity")
    assert low <= planned <= high


@pytest.mark.accel
def test_v5e_inspect_plans_the_2d_pair_on_its_state_once(tmp_path):
    """``lbm inspect target=v5e`` on the D2Q9 box 2048^2 (the pair): the chunk compiled on the populations as the run
    loop holds them, the kernels' view, plans them once (it planned twice with a copy into the view and back in every
    chunk: the (8, 128) tiles of (x, y) are not those of (y / 128, 128)), and reads and writes them once a step."""
    from helpers.inspect_cli import inspect_json

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "case=taylor_green", "lattice=d2q9", "grid.nx=2048", "grid.ny=2048",
                       "engine=pallas", "steps=10")
    assert rec["engine"] == "pallas" and rec["population_bytes"] == 9 * 2048 * 2048 * 4
    assert rec["planned_peak_over_population"] == pytest.approx(1.0, abs=0.01)
    assert rec["traffic_ratio"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.accel
def test_v5e_inspect_plans_and_moves_the_padded_pair_p_over_ny(tmp_path):
    """``lbm inspect target=v5e`` on the D2Q9 box 2048 x 2050 (y padded to 2176 in planes of 8 rows of x, 1.06x; in
    planes of one row it would be 3072, 1.50x): the pair, moving and planning the populations Y / ny times (4098^2,
    planes of two rows: 81.0 B, 1.124x)."""
    from helpers.inspect_cli import inspect_json

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "case=taylor_green", "lattice=d2q9", "grid.nx=2048", "grid.ny=2050",
                       "engine=auto", "steps=10")
    assert rec["engine"] == "pallas" and rec["population_bytes"] == 9 * 2048 * 2050 * 4
    assert rec["traffic_ratio"] == pytest.approx(2176 / 2050, abs=0.01)
    assert rec["planned_peak_over_population"] == pytest.approx(2176 / 2050, abs=0.02)
