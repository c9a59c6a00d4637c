"""Lattices, states and parametrisations the tests share: every lattice, random states, the fast lane's picks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lbm.lattice import LATTICES


def random_state(lat: Any, shape: tuple[int, ...], seed: int = 0) -> tuple[Any, Any]:
    """A density near 1 and a small random velocity field on ``shape`` (float64 under x64)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    rho = 1.0 + 0.05 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((lat.d,) + shape)
    return jnp.asarray(rho), jnp.asarray(u)


ALL_LATTICES = sorted(LATTICES.values(), key=lambda lat: lat.name)
"""Every lattice, by name: the list the parametrised tests run over."""


def shape_for(lat: Any) -> tuple[int, ...]:
    """A small grid of the lattice's dimension."""
    return (6, 5) if lat.d == 2 else (5, 4, 3)


def slow_except(params: list[Any], fast: Any) -> list[Any]:
    """Parametrize values marked ``slow`` except those in ``fast``: the fast lane keeps a representative few."""
    out = []
    for p in params:
        args = p if isinstance(p, tuple) else (p,)
        out.append(pytest.param(*args) if p in fast else pytest.param(*args, marks=pytest.mark.slow))
    return out


def alternate(i: int, j: int, pair: tuple[Any, Any]) -> Any:
    """The first or second of ``pair`` by the parity of i + j, for a parametrised grid of (i, j) run once per cell:
    each row and each column meets both values (e.g. every case and every collision in both precisions)."""
    return pair[(i + j) % 2]


def lattice_params(fast: tuple[str, ...] = ("d2q9",)) -> list[Any]:
    """Every lattice as a parametrize value named by the lattice; those not in ``fast`` are marked slow."""
    return [pytest.param(lat, id=name, marks=() if name in fast else pytest.mark.slow)
            for name, lat in sorted(LATTICES.items())]
