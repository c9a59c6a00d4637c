"""One cell's macroscopic + equilibrium + collide, on per-direction arrays: the body of the Pallas bulk kernels.

Pallas kernels hold the populations as a list of Q arrays (a cell block per direction), not as
one ``(Q, ...)`` array: Triton needs power-of-two tensor shapes and TPU vector registers hold a
tile of cells per direction. The formulas and their order of operations are those of
lbm.kernels (macroscopic, equilibrium, collision: BGK, TRT, Guo forcing), which is the reference
physics (the xla engine runs it); it reuses lbm.kernels.equilibrium.velocity_dot where a list of
arrays allows. tests/test_engines_pallas.py pins a Pallas step to the xla step to rounding
(``test_kernels_equal_collide_then_stream`` on one periodic step, ``test_flat_kernel_engine_equals_the_reference``
on whole cases).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lbm.kernels.equilibrium import velocity_dot
from lbm.lattice import CS2, Lattice


def _signed_sum(terms: list[tuple[int, Any]]) -> Any:
    """sum of +-x for unit coefficients, in list order (as lbm.kernels.macroscopic.momentum)."""
    picked = [x if k > 0 else -x for k, x in terms if k != 0]
    return sum(picked[1:], picked[0])


def collide_cell(f: Sequence[Any], lattice: Lattice, omega_plus: float, omega_minus: float,
                 force: np.ndarray | None) -> list[Any]:
    """Post-collision populations of the cells in ``f`` (one array per direction, all the same shape)."""
    q, d = lattice.q, lattice.d
    c = lattice.c
    rho = sum(f[1:], f[0])
    mom = [_signed_sum([(int(c[i, a]), f[i]) for i in range(q)]) for a in range(d)]
    if force is not None:
        mom = [m + 0.5 * float(force[a]) for a, m in enumerate(mom)]
    u = [m / rho for m in mom]
    usq = sum((v * v for v in u[1:]), u[0] * u[0])
    base = 1.0 - 1.5 * usq
    cu = [velocity_dot(tuple(c[i].tolist()), u) if c[i].any() else None for i in range(q)]
    feq = [float(lattice.w[i]) * rho * (base + cu[i] * (3.0 + 4.5 * cu[i])) if cu[i] is not None
           else float(lattice.w[i]) * rho * base for i in range(q)]
    if omega_plus == omega_minus:
        out = [f[i] - omega_plus * (f[i] - feq[i]) for i in range(q)]
    else:
        neq = [f[i] - feq[i] for i in range(q)]
        opp = lattice.opposite
        out = [f[i] - omega_plus * (0.5 * (neq[i] + neq[opp[i]])) - omega_minus * (0.5 * (neq[i] - neq[opp[i]]))
               for i in range(q)]
    if force is not None:
        force = np.asarray(force, np.float64)
        uf = sum(float(force[a]) * u[a] for a in range(d) if force[a] != 0.0)
        for i in range(q):
            cf = float(np.dot(c[i], force))
            cui = cu[i] if cu[i] is not None else 0.0 * rho
            sym = float(lattice.w[i]) * (-uf / CS2 + cui * cf / CS2**2)
            anti = float(lattice.w[i]) * cf / CS2
            out[i] = out[i] + ((1.0 - 0.5 * omega_plus) * sym + (1.0 - 0.5 * omega_minus) * anti)
    return out
