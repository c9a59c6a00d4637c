"""Boundary condition ``MovingWall`` (stage ``bounce_back``): half-way bounce-back on walls with a tangential velocity."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from lbm.boundaries.base import pytree_dataclass
from lbm.boundaries.bounce_back import HalfwayBounceBack, halfway_links
from lbm.lattice import CS2, Lattice


def moving_wall_term(links: np.ndarray, wall_velocity: np.ndarray, lattice: Lattice, rho_wall: float = 1.0) -> np.ndarray:
    """The wall term 2 w_j rho_w (c_j . u_w) / cs^2 on the half-way links of walls moving with ``wall_velocity``
    (D, *grid): the momentum the wall adds to each population it reflects."""
    cu = np.einsum("qd,d...->q...", lattice.c.astype(np.float64), wall_velocity)
    w = lattice.w.reshape((-1,) + (1,) * lattice.d)
    return np.where(links, 2.0 * w * rho_wall * cu / CS2, 0.0)


@pytree_dataclass
class MovingWall(HalfwayBounceBack):
    """Half-way walls on ``solid``; the wall term ``wall_term`` (``(Q, *grid)``, :func:`moving_wall_term`) adds the
    momentum of the wall's velocity (Ladd)."""

    wall_term: Any = None

    @classmethod
    def with_velocity(cls, solid: np.ndarray, wall_velocity: np.ndarray, lattice: Lattice, dtype: Any) -> MovingWall:
        """Walls on the surface of ``solid`` moving with ``wall_velocity`` (shape ``(D, *grid)``, zero where at rest)."""
        links = halfway_links(solid, lattice)
        return cls(solid=solid, links=links, wall_term=moving_wall_term(links, wall_velocity, lattice).astype(dtype))

    def with_velocity_scaled(self, ratio: Any) -> MovingWall:
        """The walls moving ``ratio`` times as fast: the wall term is linear in the wall's velocity."""
        return self if self.wall_term is None else dataclasses.replace(self, wall_term=self.wall_term * ratio)

    def laid_out(self, place: Callable[[np.ndarray, int], Any]) -> MovingWall:
        """The same walls with each per-cell array laid out by ``place`` (the wall term too)."""
        form = super().laid_out(place)
        if self.wall_term is None:
            return form  # type: ignore[return-value]
        return dataclasses.replace(form, wall_term=place(np.asarray(self.wall_term), 1))  # type: ignore[return-value]
