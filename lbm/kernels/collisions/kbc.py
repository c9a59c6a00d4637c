"""Entropic multi-relaxation KBC collision (Karlin, Bosch & Chikatamarla 2014) and its native body."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lbm.kernels.collisions.moments import _guo_raw, _project, raw_moment_basis
from lbm.kernels.collisions.native import (
    Cell,
    _fmt,
    _guo,
    _guo_sf,
    _lin,
    _moment,
    _pairs,
    _parity_sums,
    batched_reciprocals,
    fused_dot,
)
from lbm.kernels.collisions.operator import Collision, CollisionOperator, NativeBody, register
from lbm.kernels.directions import Pops, per_direction, qsum
from lbm.lattice import Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


def kbc_matrices(lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KBC's split as static matrices (B, K, S): moments m = B neq, conserved part dk = K m, shear part ds = S m.

    m holds the mass, momentum and second raw moments of the non-equilibrium populations; dk carries
    the mass and momentum (nonzero only with a force), ds the deviatoric second moments (Karlin, Bosch &
    Chikatamarla 2014; the "KBC-D" shear part of Bosch et al. 2015), each as the population vector with
    those raw moments and zero for every other row of :func:`raw_moment_basis`. dh = neq - dk - ds.
    """
    v, exps = raw_moment_basis(lattice)
    v_inv = np.linalg.inv(v)
    d = lattice.d
    unit = [tuple(int(a == b) for b in range(d)) for a in range(d)]
    pairs = list(itertools.combinations_with_replacement(range(d), 2))
    second = [tuple(unit[a][k] + unit[b][k] for k in range(d)) for a, b in pairs]
    rows = [exps.index(e) for e in [(0,) * d, *unit, *second]]
    n_cons = 1 + d
    k_mat = np.zeros((lattice.q, len(rows)))
    k_mat[:, :n_cons] = v_inv[:, rows[:n_cons]]
    deviator = np.eye(len(pairs)) - np.outer([a == b for a, b in pairs], [a == b for a, b in pairs]) / d
    s_mat = np.zeros_like(k_mat)
    s_mat[:, n_cons:] = v_inv[:, rows[n_cons:]] @ deviator
    return v[rows], k_mat, s_mat


def kbc(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, omega: float,
    force: np.ndarray | None = None,
) -> Pops:
    """Entropic multi-relaxation KBC collision (Karlin, Bosch & Chikatamarla 2014), Guo forcing as BGK.

    f* = f - omega dk - beta (2 ds + gamma dh), beta = omega/2 (:func:`kbc_matrices`): the shear part relaxes
    at omega (it sets nu), the higher-order part dh at the rate beta gamma that minimises the entropy
    functional's second-order estimate: gamma = 1/beta - (2 - 1/beta) <ds|dh> / <dh|dh>, <x|y> =
    sum_i x_i y_i / feq_i. gamma = 2 (BGK) where dh vanishes (to rounding) or at omega = 1. dk is computed
    everywhere: a velocity inlet's reconstructed populations need not carry the imposed mass and momentum exactly
    (the native kernel leaves dk out where neither a force nor an inlet acts, where it is rounding).
    """
    import jax.numpy as jnp

    b_mat, k_mat, s_mat = kbc_matrices(lattice)
    neq = f - feq
    m = _project(b_mat, neq)
    ds = _project(s_mat, m)
    kept = _project(k_mat + s_mat, m)  # dk + ds
    dh = neq - kept
    inverse = 1.0 / (feq + per_direction(lattice.w, u, lattice.d))  # the entropic weights: 1 / the absolute f_eq
    weighted = dh * inverse
    sh = qsum(ds * weighted)
    hh = qsum(dh * weighted)
    ss = qsum(ds * ds * inverse)
    # gamma's correction is the projection of ds on dh's direction, whatever dh's size: where dh is rounding
    # noise (|dh| < 1e3 eps |ds|) that direction is noise too, and gamma = 2 (BGK) is taken
    resolved = hh > (1e3 * jnp.finfo(f.dtype).eps) ** 2 * (ss + hh)
    ratio = sh / jnp.where(resolved, hh, 1.0)
    beta = 0.5 * omega
    beta_gamma = jnp.where(resolved, 1.0 - (2.0 * beta - 1.0) * ratio, omega)  # beta * gamma
    # f - omega dk - 2 beta ds - beta gamma dh, with dh = neq - dk - ds
    out = f - beta_gamma * neq - (omega - beta_gamma) * kept
    if force is not None:
        out = out + (1.0 - 0.5 * omega) * _guo_raw(u, force, lattice).astype(out.dtype)
    return out


RECIPROCAL_GROUP = 3
"""KBC's reciprocals 1/feq_i per division (:func:`batched_reciprocals`): 9 divisions on D3Q27 instead of 27 (groups of
2, 4, 6 and 9 measured slower: docs/physics.md, "Cost against BGK"). A product of 3 absolute equilibria (each about
its weight, >= 1/216) is far from float32's smallest normal number."""


def _sign_classes(mat: np.ndarray, dirs: list[int]) -> list[tuple[int, list[tuple[int, int]]]]:
    """The directions ``dirs`` grouped by their row of ``mat`` up to its sign: (representative, [(i, +-1), ...])."""
    classes: list[tuple[int, list[tuple[int, int]]]] = []
    for i in dirs:
        for rep, members in classes:
            sign = next((s for s in (1, -1) if np.allclose(mat[i], s * mat[rep], rtol=0, atol=1e-13)), 0)
            if sign:
                members.append((i, sign))
                break
        else:
            classes.append((i, [(i, 1)]))
    return classes


def kbc_lines(spec: Cell) -> list[str]:
    """C statements of the KBC collision (lbm.kernels.collisions.kbc): its split, the entropic stabiliser gamma.

    Directions whose kept part dk + ds (or shear part ds) is the same row of moments up to its sign share one
    value of it; the entropic sums take ds out of each such class: sh = sum_c ds_c sum_(i in c) +-dh_i/feq_i,
    ss = sum_c ds_c^2 sum_(i in c) 1/feq_i.
    """
    lat = spec.lattice
    q = lat.q
    b_mat, k_mat, s_mat = kbc_matrices(lat)
    # dk = 0 (but for rounding) where the equilibrium has the populations' mass and momentum: without a force and
    # without a velocity inlet (whose reconstructed populations need not carry the imposed moments exactly)
    conserved = not spec.forced and not spec.inlet
    if conserved:  # only the second moments
        n_cons = 1 + lat.d
        b_mat, k_mat, s_mat = b_mat[n_cons:], k_mat[:, n_cons:], s_mat[:, n_cons:]
    eps = float(np.finfo(np.float64 if spec.storage == "float64" else np.float32).eps)
    w = [_fmt(x) for x in lat.w]
    lines = [f"real g{i} = LBM_FMA(-(real){w[i]}, e{i}, f{i});" for i in range(q)]  # f - feq (paired_equilibrium)
    reps, _ = _pairs(lat)
    lines += [f"real gs{i} = g{i} + g{int(lat.opposite[i])};" for i in reps] if conserved else _parity_sums(lat, "g")
    n_m = b_mat.shape[0]
    lines += [f"real m{k}_ = {_moment(lat, b_mat[k], 'g')};" for k in range(n_m)]
    names = [f"m{k}_" for k in range(n_m)]
    kept = s_mat if conserved else k_mat + s_mat
    kept_classes = _sign_classes(kept, [i for i in range(q) if np.abs(kept[i]).max() > 1e-13])
    shear_classes = _sign_classes(s_mat, [i for i in range(q) if np.abs(s_mat[i]).max() > 1e-13])
    lines += [f"real kp{rep} = {_lin(kept[rep], names)};" for rep, _ in kept_classes]
    lines += [f"real ds{rep} = {_lin(s_mat[rep], names)};" for rep, _ in shear_classes]
    kept_of = {i: (rep, sign) for rep, members in kept_classes for i, sign in members}
    for i in range(q):
        rep, sign = kept_of.get(i, (None, 0))
        dh = f"g{i} {'-' if sign > 0 else '+'} kp{rep}" if sign else f"g{i}"
        lines.append(f"real dh{i} = {dh}, a{i} = LBM_FMA((real){w[i]}, e{i}, (real){w[i]});")  # a: the absolute f_eq
    lines += batched_reciprocals([f"a{i}" for i in range(q)], [f"iv{i}" for i in range(q)], RECIPROCAL_GROUP)
    lines += [f"real v{i} = dh{i} * iv{i};" for i in range(q)]
    lines.append(f"real hh = {fused_dot([(f'dh{i}', f'v{i}') for i in range(q)])};")
    sums = [(rep, _lin([s for _, s in m], [f"v{i}" for i, _ in m]), " + ".join(f"iv{i}" for i, _ in m))
            for rep, m in shear_classes]
    lines.append(f"real sh = {fused_dot([(f'ds{rep}', f'({v})') for rep, v, _ in sums])};")
    lines.append(f"real ss = {fused_dot([(f'ds{rep}', f'(ds{rep} * ({iv}))') for rep, _, iv in sums])};")
    # gamma = 2 (BGK) where dh is rounding noise: |dh| < 1e3 eps |ds| in the entropic norm
    lines.append(f"bool resolved = hh > (real){_fmt((1e3 * eps) ** 2)} * (ss + hh);")
    lines.append("real bg = resolved ? (real)1 - om1_ * (sh / hh) : om_;")
    lines.append("real rest_ = om_ - bg;")
    lines += [f"real pk{rep} = rest_ * kp{rep};" for rep, _ in kept_classes]
    if spec.forced:  # BGK's (1 - omega/2) F_i: the table's prefactors with omega+ = omega- = omega
        lines.append(_guo_sf(spec))
    for i in range(q):
        rep, sign = kept_of.get(i, (None, 0))
        kept_term = f" {'-' if sign > 0 else '+'} pk{rep}" if sign else ""
        force = f" + {_guo(spec, i)}" if spec.forced else ""
        lines.append(f"real o{i} = (LBM_FMA(-bg, g{i}, f{i}){kept_term}){force};")
    return lines



def kbc_constants(spec: Cell) -> list[tuple[str, str]]:
    """The per-call constants of the KBC cell (R = omega)."""
    return [("om_", "R[0]"), ("om1_", "R[0] - (real)1")]


class Kbc(CollisionOperator):
    """KBC: the shear part at 1/tau, the higher-order part at the entropic stabiliser's rate (:func:`kbc`)."""

    name = "kbc"
    native = NativeBody(rates=("omega",), lines=kbc_lines, constants=kbc_constants, fused=True)

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """:func:`kbc`."""
        return kbc(f, feq, u, lattice, spec.omega, force)


register(Kbc())
