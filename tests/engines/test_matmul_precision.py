"""Every matrix product lbm's programs hold asks for float32 precision (HIGHEST): on a TPU, a float32 product at
JAX's default precision runs in bfloat16 passes (about 3 significant digits), which a moment or a wall's momentum
cannot afford. The check reads the lowered programs (StableHLO, before any backend), so it runs without a TPU."""

import re

import jax
import pytest
from helpers.runs import setup_for

from lbm.engines.base import spec_of
from lbm.engines.timestep import step_index
from lbm.engines.xla import XlaEngine

CONFIGS = {
    "schafer_turek_2d1": ["case=schafer_turek", "case.variant=2D-1", "case.cells_per_diameter=4"],  # parabolic wall
    "cylinder": ["case=cylinder", "grid.nx=48", "grid.ny=24"],
    "cavity_mrt": ["case=cavity", "grid.nx=12", "grid.ny=12", "collision=mrt"],
    "tgv3d_cumulant": ["case=taylor_green_3d", "lattice=d3q27", "grid.nx=8", "grid.ny=8", "grid.nz=8"],
    "box_kbc": ["case=taylor_green_3d", "lattice=d3q27", "collision=kbc", "grid.nx=8", "grid.ny=8", "grid.nz=8"],
}
WITH_PRODUCTS = ("schafer_turek_2d1", "tgv3d_cumulant", "box_kbc")
"""The parabolic wall's momentum (its einsum once ran at JAX's default precision: bfloat16 passes on a TPU), and the
3D collisions' moments."""
DOT = re.compile(r"stablehlo\.dot_general[^\n]*")


def _products(text: str) -> list[str]:
    return DOT.findall(text)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_product_in_a_chunk_asks_for_float32_precision(name):
    setup = setup_for(CONFIGS[name], "float32")
    engine = XlaEngine(setup)
    f = jax.ShapeDtypeStruct((setup.lattice.q, *setup.shape), setup.dtype)
    text = engine.chunk_function(2).trace(f, spec_of(engine.params), spec_of(step_index(0))).lower().as_text()
    loose = [p for p in _products(text) if "precision = [HIGHEST, HIGHEST]" not in p]
    assert not loose, loose[:2]
    if name in WITH_PRODUCTS:  # not vacuous: these programs hold products
        assert _products(text)


def test_the_check_sees_a_product_at_default_precision():
    """The pattern the test relies on: a default-precision product lowers without the HIGHEST attribute."""
    x = jax.ShapeDtypeStruct((3, 4), "float32")
    loose = jax.jit(lambda a: a.T @ a).trace(x).lower().as_text()
    tight = jax.jit(lambda a: jax.numpy.matmul(a.T, a, precision=jax.lax.Precision.HIGHEST)).trace(x).lower().as_text()
    assert _products(loose) and "HIGHEST" not in _products(loose)[0]
    assert "precision = [HIGHEST, HIGHEST]" in _products(tight)[0]


def test_the_naive_baseline_products_ask_for_float32_precision_too():
    """bench's naive step (its velocity a tensordot): a TPU baseline in bfloat16 passes would not be the same physics."""
    from lbm.bench.naive import naive_step
    from lbm.lattice import get_lattice

    lattice = get_lattice("d2q9")
    f = jax.ShapeDtypeStruct((9, 16, 16), "float32")
    products = _products(jax.jit(lambda g: naive_step(g, lattice, 1.2)).trace(f).lower().as_text())
    assert products and all("precision = [HIGHEST, HIGHEST]" in p for p in products)
