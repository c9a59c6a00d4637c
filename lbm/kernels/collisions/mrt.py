"""Multiple-relaxation-time collision in the orthogonal moment basis, Guo forcing in moment space; its native body.

Native: ``M^-1 S M x = sum_c s_c P_c x`` over the moment classes c (P_c the projection onto c's rows). The odd rows
span the antisymmetric populations with the momentum rows, the even ones the symmetric with density, bulk and
shear, so ``sum_c s_c P_c x = s_even sym(x) + s_odd anti(x) - s_even P_density x + (s_bulk - s_even) P_bulk x
+ (s_shear - s_even) P_shear x - s_odd P_momentum x``: only 2 + 2D + D(D-1)/2 moments are taken. Guo's term
enters as ``f* = f - L(neq + F/2) + F`` (L the relaxation above, F the forcing populations), one relaxation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lbm.kernels.collisions.moments import _combine, _guo_raw, moment_basis, smagorinsky_omega
from lbm.kernels.collisions.native import Cell, _fmt, _guo, _guo_sf, _lin, _moment, _pairs, _parity_sums
from lbm.kernels.collisions.operator import Collision, CollisionOperator, NativeBody, rate, register
from lbm.kernels.collisions.trt import MAGIC, traced_magic_rate, trt_omega_minus
from lbm.kernels.directions import Pops, stack
from lbm.lattice import Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


def mrt(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, spec: Collision,
    force: np.ndarray | None = None,
) -> Pops:
    """Multiple-relaxation-time collision in the orthogonal moment basis, Guo forcing in moment space.

    f* = f + M^-1 [ -S M (f - feq) + (I - S/2) M F ], S = diag(rates of each moment's class), F Guo's
    forcing populations: each moment k relaxes at s_k and gains (1 - s_k/2) of the force's moment k.
    Conserved moments have s = 0, so density keeps its value and momentum gains exactly F.
    """
    import jax.numpy as jnp

    m, m_inv, classes = moment_basis(lattice)
    rates = spec.rates()
    s: list[float | jnp.ndarray] = [rates[cls] for cls in classes]
    if spec.smagorinsky:
        omega = smagorinsky_omega(f, feq, u, lattice, spec.omega, spec.smagorinsky, force)
        s = [omega if cls == "shear" else rate for cls, rate in zip(classes, s, strict=True)]
    neq = list(f - feq)
    src = list(_guo_raw(u, force, lattice).astype(f.dtype)) if force is not None else None
    dm = []
    for k, (row, s_k) in enumerate(zip(m, s, strict=True)):
        term = -s_k * _combine(row, neq) if classes[k] not in ("density", "momentum") else jnp.zeros_like(neq[0])
        if src is not None:
            term = term + (1.0 - 0.5 * s_k) * _combine(row, src)
        dm.append(term)
    return f + stack([_combine(m_inv[i], dm) for i in range(lattice.q)], f)


_MRT_PROJECTED = {"density": "-R[3]", "momentum": "-R[2]", "bulk": "R[0] - R[3]", "shear": "R[1] - R[3]"}
"""MRT's classes taken as moments, and the rate (of R = bulk, shear, odd, even) their projection carries."""


def mrt_lines(spec: Cell) -> list[str]:
    """C statements of the MRT collision (lbm.kernels.collisions.mrt; the rearrangement in the module doc)."""
    lat = spec.lattice
    q, opp = lat.q, lat.opposite
    m, _, classes = moment_basis(lat)
    lines = []
    if spec.forced:  # the force table holds Guo's populations without prefactors: f* = f - L(neq + F/2) + F
        lines.append(_guo_sf(spec))
        lines += [f"real fg{i} = {_guo(spec, i)};" for i in range(q)]
        lines += [f"real g{i} = (f{i} - feq{i}) + (real)0.5 * fg{i};" for i in range(q)]
    else:
        lines += [f"real g{i} = f{i} - feq{i};" for i in range(q)]
    lines += _parity_sums(lat, "g")
    reps, rest = _pairs(lat)
    kept = [k for k, cls in enumerate(classes) if cls in _MRT_PROJECTED]
    lines += [f"real t{k} = sk{k}_ * ({_moment(lat, m[k], 'g')});" for k in kept]
    for i in range(q):
        proj = _lin([m[k][i] for k in kept], [f"t{k}" for k in kept])
        if i in rest:
            relax = f"se_ * g{i}"
        else:
            p = i if i in reps else int(opp[i])
            relax = f"hse_ * gs{p} {'+' if i == p else '-'} hso_ * ga{p}"
        force = f" + fg{i}" if spec.forced else ""
        lines.append(f"real o{i} = f{i} - (({relax}) + ({proj})){force};")
    return lines



def mrt_constants(spec: Cell) -> list[tuple[str, str]]:
    """The per-call constants of the MRT cell (R = bulk, shear, odd, even): the rates each moment class's
    projection carries, over the row's norm."""
    m, _, classes = moment_basis(spec.lattice)
    out = [("se_", "R[3]"), ("hse_", "(real)0.5 * R[3]"), ("hso_", "(real)0.5 * R[2]")]
    return out + [(f"sk{k}_", f"({_MRT_PROJECTED[cls]}) / (real){_fmt(float(m[k] @ m[k]))}")
                  for k, cls in enumerate(classes) if cls in _MRT_PROJECTED]


@dataclass(frozen=True)
class MrtRates:
    """``collision=mrt``: the rates of the moment classes (null: from 1/tau, or from ``magic`` for ``odd``)."""

    magic: float = rate(MAGIC)
    bulk: float | None = rate(1.0, 0.0, 2.0, optional=True)
    ghost: float | None = rate(1.0, 0.0, 2.0, optional=True)
    odd: float | None = rate(1.0, 0.0, 2.0, optional=True)
    smagorinsky: float = rate(0.0, low_open=False)


class Mrt(CollisionOperator):
    """MRT in the orthogonal moment basis (lbm.kernels.collisions.moments.moment_basis)."""

    name = "mrt"
    Rates = MrtRates
    smagorinsky = True
    traced_odd = True

    def traced_omega_minus(self, omega_plus: Any, tau: Any, params: Any) -> Any:
        """``odd``, else from the magic parameter and the traced tau."""
        return params.odd if params.odd is not None else traced_magic_rate(tau, params.magic)
    native = NativeBody(rates=("bulk", "shear", "odd", "even"), lines=mrt_lines, constants=mrt_constants,
                        bare_force=True)

    def relaxation(self, omega: float, params: Any) -> tuple[float, Collision | None]:
        """The odd moments' rate (``odd``, else from ``magic``) and the spec with the bulk and ghost rates."""
        omega_minus = params.odd or trt_omega_minus(omega, params.magic)
        les = {} if params.smagorinsky is None else {"smagorinsky": params.smagorinsky}
        return omega_minus, Collision(self.name, omega, omega_minus, params.bulk, params.ghost, **les)

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """:func:`mrt`."""
        return mrt(f, feq, u, lattice, spec, force)


register(Mrt())
