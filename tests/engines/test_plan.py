"""The boundary plan's cells held at rest (lbm.engines.plan): an obstacle's interior leaves the block, the bulk kernel
steps it in a chunk, and the chunk ends with it, and what it sent, at rest; every cell as the xla engine's."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.lattices import slow_except
from helpers.runs import setup_for

from lbm.boundaries.base import Footprint, resting_cells
from lbm.engines.plan import held_at_rest, plan_block
from lbm.engines.xla import XlaEngine

HALFWAY = ["case=cylinder", "case.bounce_back=halfway", "grid.nx=96", "grid.ny=40"]
INTERPOLATED = ["case=schafer_turek"]
CYLINDER_3D = ["case=cylinder", "grid.nx=40", "grid.ny=24", "grid.nz=6", "case.radius=6"]
OBSTACLES = {"halfway": HALFWAY, "interpolated": INTERPOLATED,
             "halfway_d3q19": [*CYLINDER_3D, "lattice=d3q19", "case.bounce_back=halfway"],
             "interpolated_d3q27": [*CYLINDER_3D, "lattice=d3q27", "case.bounce_back=interpolated"]}


def interior(solid: np.ndarray) -> np.ndarray:
    """Solid cells whose eight neighbours (D2Q9) are solid, by shifting the mask."""
    inner = solid.copy()
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            inner &= np.roll(solid, (dx, dy), axis=(0, 1))
    return inner


@pytest.mark.parametrize("obstacle", ["halfway", "interpolated"])
def test_an_obstacles_interior_leaves_the_block(obstacle):
    """The half-way cylinder's and Schafer-Turek's interior solid cells are held at rest, out of the block, but for
    those next to a link's solid cell (the forces read it, so nothing may reach it from a held cell): the solid cells
    two cells deep; every other cell the block held stays in it."""
    setup = setup_for(OBSTACLES[obstacle], "float64")
    lat, shape = setup.lattice, setup.shape
    whole = plan_block(lat, shape, setup.boundaries, hold_at_rest=False)
    block = plan_block(lat, shape, setup.boundaries)
    (wall,) = [bc for bc in setup.boundaries if bc.stage == "bounce_back" and np.asarray(bc.solid).sum() < 1000]
    solid = np.asarray(wall.solid, bool)
    assert np.array_equal(wall.footprint(shape, lat).rest, np.flatnonzero(interior(solid).reshape(-1)))
    expected = np.flatnonzero(interior(interior(solid)).reshape(-1))
    assert expected.size >= 5 and np.array_equal(block.rest, expected)
    assert whole.rest.size == 0 and np.intersect1d(block.cells, block.rest).size == 0
    assert np.array_equal(np.sort(np.concatenate([block.cells, block.rest])), np.sort(whole.cells))
    assert block.size == whole.size - expected.size


def test_a_solid_cell_a_link_sends_to_is_not_resting():
    """resting_cells: a solid cell is resting only if no link of the rule sends into it (a rule's links need not be
    the mask's half-way links) and it sends none itself."""
    lat = setup_for(HALFWAY, "float64").lattice
    solid = np.zeros((9, 9), bool)
    solid[2:7, 2:7] = True
    emits = np.zeros((lat.q, 9, 9), bool)
    assert resting_cells(solid, emits, lat).size == 9  # (3..5, 3..5): every neighbour solid
    i = int(np.flatnonzero((lat.c == (1, 0)).all(axis=1))[0])
    emits[i, 3, 4] = True  # (3, 4) sends along +x into (4, 4)
    x, y = np.unravel_index(resting_cells(solid, emits, lat), (9, 9))
    held = set(zip(x.tolist(), y.tolist(), strict=True))
    assert held == {(3, 3), (3, 5), (4, 3), (4, 5), (5, 3), (5, 4), (5, 5)}  # not the sender, nor the cell it sends to


def test_a_cell_near_another_condition_is_not_held():
    """A cell held at rest by one condition stays in the block where another condition touches it or a neighbour."""
    shape = (8, 8)
    lat = setup_for(HALFWAY, "float64").lattice
    cells = np.arange(64)
    rest = np.ravel_multi_index(np.mgrid[0:4, 0:4].reshape(2, -1), shape)  # the cells (0..3, 0..3)
    wall = Footprint(cells=cells, rest=rest)
    assert np.array_equal(held_at_rest(lat, shape, [wall]), rest)
    face = Footprint(face=np.ravel_multi_index((np.zeros(8, int), np.arange(8)), shape))  # x = 0
    held = np.stack(np.unravel_index(held_at_rest(lat, shape, [wall, face]), shape))
    assert set(held[0]) == {2, 3}  # x = 0 on the face, x = 1 its neighbour; x = 7 (the wrap) holds none
    ghost = Footprint(ghosts=np.array([np.ravel_multi_index((3, 3), shape)]))
    held = held_at_rest(lat, shape, [wall, ghost])
    assert held.size == 16 - 4 and np.ravel_multi_index((2, 2), shape) not in held  # (3, 3) and 3 neighbours out


def make(engine: str, setup):
    """The bulk-kernel engine named: pallas (interpret mode, this machine's form) or native."""
    from lbm.engines.native.engine import NativeEngine
    from lbm.engines.pallas.engine import PallasEngine

    return NativeEngine(setup) if engine == "native" else PallasEngine(setup, interpret=True)


def with_native_marked(params: list) -> list:
    """``params`` with the native engine's marked ``native`` (skipped without a compiler)."""
    return [pytest.param(*p.values, marks=[*p.marks, *([pytest.mark.native] if "native" in p.values else [])])
            for p in params]


@pytest.mark.parametrize("obstacle,engine,steps", with_native_marked(slow_except(
    [("halfway", "pallas", 3), ("halfway", "pallas", 4), ("interpolated", "pallas", 3), ("interpolated", "native", 3),
     ("interpolated", "native", 4), ("halfway_d3q19", "pallas", 4), ("interpolated_d3q27", "native", 3)],
    fast={("halfway", "pallas", 3)})))
def test_held_cells_and_every_other_equal_the_xla_engine(obstacle, engine, steps):
    """From populations off equilibrium everywhere (the obstacle's interior too), an odd and an even chunk end with
    every cell, solid ones included, and the forces as on the xla engine; without the chunk's end at rest, the solid
    cells next to the interior keep what it sent (5e-3 measured at 96 x 40)."""
    setup = setup_for(OBSTACLES[obstacle], "float64")
    eng = make(engine, setup)
    assert eng.block is not None and eng.block.rest.size > 0
    f0 = np.asarray(setup.initial_populations())
    f0 = f0 + 1e-3 * np.random.default_rng(2).standard_normal(f0.shape)
    ref, aux_ref = XlaEngine(setup).advance(jnp.array(f0), steps)
    f, aux = eng.advance(jnp.array(f0), steps)
    ref, f = np.asarray(ref), np.asarray(f)
    assert np.abs(ref - f0).max() > 1e-4
    np.testing.assert_allclose(f, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    held = np.unravel_index(eng.block.rest, setup.shape)
    assert np.all(f[(slice(None), *held)] == 0)
    assert aux.keys() == aux_ref.keys()
    for k in aux:
        np.testing.assert_allclose(np.asarray(aux[k]), np.asarray(aux_ref[k]), rtol=0, atol=1e-12)
