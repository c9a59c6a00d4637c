"""Velocity sets (D2Q9, D3Q19, D3Q27) as static numpy constants.

A lattice is data: the velocities ``c`` (shape ``(Q, D)``, integers), the weights
``w`` (shape ``(Q,)``) and ``opposite`` (index of ``-c_i``). Kernels read these
as compile-time constants, so one dimension-generic implementation serves all.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

CS2 = 1.0 / 3.0
"""Lattice speed of sound squared (lattice units) for every set defined here."""


@dataclass(frozen=True, eq=False)
class Lattice:
    """A DdQq velocity set with its weights and opposite-direction table."""

    name: str
    c: np.ndarray = field(repr=False)
    w: np.ndarray = field(repr=False)
    opposite: np.ndarray = field(repr=False)

    @property
    def d(self) -> int:
        """Number of spatial dimensions."""
        return int(self.c.shape[1])

    @property
    def q(self) -> int:
        """Number of discrete velocities."""
        return int(self.c.shape[0])

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lattice) and other.name == self.name


def _build(name: str, d: int, weight_by_norm2: dict[int, float]) -> Lattice:
    """Lattice with all velocities in {-1,0,1}^d whose squared norm has a weight."""
    vel = [v for v in itertools.product((0, 1, -1), repeat=d) if sum(x * x for x in v) in weight_by_norm2]
    # Order: rest first, then by norm, then lexicographically with +1 before -1.
    vel.sort(key=lambda v: (sum(x * x for x in v), [(-x if x else 0, x == 0) for x in v]))
    c = np.array(vel, dtype=np.int32)
    w = np.array([weight_by_norm2[int((v * v).sum())] for v in c], dtype=np.float64)
    index = {tuple(v): i for i, v in enumerate(c.tolist())}
    opposite = np.array([index[tuple((-v).tolist())] for v in c], dtype=np.int32)
    for arr in (c, w, opposite):
        arr.setflags(write=False)
    return Lattice(name=name, c=c, w=w, opposite=opposite)


D2Q9 = _build("d2q9", 2, {0: 4 / 9, 1: 1 / 9, 2: 1 / 36})
D3Q19 = _build("d3q19", 3, {0: 1 / 3, 1: 1 / 18, 2: 1 / 36})
D3Q27 = _build("d3q27", 3, {0: 8 / 27, 1: 2 / 27, 2: 1 / 54, 3: 1 / 216})

LATTICES: dict[str, Lattice] = {lat.name: lat for lat in (D2Q9, D3Q19, D3Q27)}


def get_lattice(name: str) -> Lattice:
    """Return the velocity set called ``name`` (d2q9, d3q19, d3q27)."""
    from lbm.errors import ConfigError

    try:
        return LATTICES[name]
    except KeyError:
        raise ConfigError("lattice", name, f"one of {', '.join(sorted(LATTICES))}") from None
