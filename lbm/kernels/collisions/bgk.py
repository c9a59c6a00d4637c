"""Single-relaxation-time BGK: f - omega (f - f_eq)."""

from __future__ import annotations

from lbm.kernels.collisions.moments import Rate
from lbm.kernels.directions import Pops


def bgk(f: Pops, feq: Pops, omega: Rate) -> Pops:
    """BGK collision: f - omega (f - f_eq)."""
    return f - omega * (f - feq)

