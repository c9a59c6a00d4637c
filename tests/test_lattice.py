"""Velocity sets: weights, symmetry and isotropy up to fourth order."""

import numpy as np
import pytest

from lbm.lattice import CS2, LATTICES

ALL = sorted(LATTICES.values(), key=lambda lat: lat.name)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_weights_and_moments(lat):
    c, w = lat.c.astype(float), lat.w
    d = lat.d
    assert lat.q == {"d2q9": 9, "d3q19": 19, "d3q27": 27}[lat.name]
    assert w.sum() == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(np.einsum("i,ia->a", w, c), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.einsum("i,ia,ib->ab", w, c, c), CS2 * np.eye(d), atol=1e-15)
    np.testing.assert_allclose(np.einsum("i,ia,ib,ic->abc", w, c, c, c), 0.0, atol=1e-15)
    delta = np.eye(d)
    iso4 = CS2**2 * (np.einsum("ab,cd->abcd", delta, delta) + np.einsum("ac,bd->abcd", delta, delta)
                     + np.einsum("ad,bc->abcd", delta, delta))
    np.testing.assert_allclose(np.einsum("i,ia,ib,ic,id->abcd", w, c, c, c, c), iso4, atol=1e-15)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_opposite_and_rest(lat):
    assert not lat.c[0].any(), "rest velocity comes first"
    np.testing.assert_array_equal(lat.c[lat.opposite], -lat.c)
    np.testing.assert_array_equal(lat.opposite[lat.opposite], np.arange(lat.q))
    assert len({tuple(v) for v in lat.c.tolist()}) == lat.q
