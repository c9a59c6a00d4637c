"""What the collision kinds share: the moment bases (orthogonal, raw, Hermite), Guo's forcing term, the
non-equilibrium stress and the Smagorinsky rate. Static matrices are built once per lattice from its velocity set.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from lbm.kernels.directions import Directions, Pops, per_direction, qsum, split
from lbm.lattice import CS2, Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp

Rate: TypeAlias = "float | jnp.ndarray"
"""A relaxation rate: a constant, or one per cell (Smagorinsky)."""


MOMENT_CLASSES = ("density", "momentum", "bulk", "shear", "odd", "even")
"""Classes of the orthogonal moments: conserved (density, momentum), second order (bulk = trace,
shear = traceless), and the non-hydrodynamic ("ghost") moments of odd and even polynomial degree."""


def guo_source(
    u: jnp.ndarray | Sequence[jnp.ndarray], force: np.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float
) -> Pops:
    """Guo forcing term with the relaxation prefactors of the symmetric and antisymmetric parts."""
    # one broadcast expression over the directions (per-direction constants times fields of u), not a stack of
    # Q arrays: XLA fuses it into its consumer instead of writing the Q source populations out (XLA:CPU did)
    force = np.asarray(force, dtype=np.float64)
    c = lattice.c.astype(np.float64)
    cf, w = c @ force, lattice.w.astype(np.float64)

    def constants(v: np.ndarray) -> Pops:
        return per_direction(v, u, lattice.d)

    cu = sum(constants(c[:, a]) * u[a] for a in range(lattice.d))
    uf = sum(float(force[a]) * u[a] for a in range(lattice.d) if force[a] != 0.0)
    sym = (1.0 - 0.5 * omega_plus) * w / CS2
    return constants(sym * cf / CS2) * cu - constants(sym) * uf + constants((1.0 - 0.5 * omega_minus) * w * cf / CS2)


def _guo_raw(u: jnp.ndarray | Sequence[jnp.ndarray], force: np.ndarray, lattice: Lattice) -> Pops:
    """Guo's forcing populations F_i = w_i [(c_i - u)/cs2 + (c_i.u) c_i/cs2^2] . F, without a prefactor."""
    return guo_source(u, force, lattice, 0.0, 0.0)  # both prefactors (1 - omega/2) equal to 1


def _combine(coeffs: np.ndarray, xs: Sequence[jnp.ndarray]) -> jnp.ndarray:
    """sum_j coeffs[j] xs[j] for static coefficients (zeros skipped, +-1 as add/subtract)."""
    out = None
    for coef, x in zip(coeffs.tolist(), xs, strict=True):
        if coef == 0.0:
            continue
        term = x if coef == 1.0 else -x if coef == -1.0 else coef * x
        out = term if out is None else out + term
    if out is None:
        import jax.numpy as jnp

        return jnp.zeros_like(xs[0])
    return out


def _polynomials(d: int) -> list[tuple[str, tuple[tuple[int, ...], ...], tuple[int, ...]]]:
    """Candidate moment polynomials, lowest degree first: (class, monomials as exponent tuples, signs)."""
    unit = [tuple(int(a == b) for b in range(d)) for a in range(d)]
    sq = [tuple(2 * e for e in u) for u in unit]
    polys: list[tuple[str, tuple[tuple[int, ...], ...], tuple[int, ...]]] = [("density", ((0,) * d,), (1,))]
    polys += [("momentum", (u,), (1,)) for u in unit]
    polys.append(("bulk", tuple(sq), (1,) * d))
    polys += [("shear", (sq[a], sq[a + 1]), (1, -1)) for a in range(d - 1)]
    polys += [("shear", (tuple(x + y for x, y in zip(unit[a], unit[b], strict=True)),), (1,))
              for a, b in itertools.combinations(range(d), 2)]
    # c_a^3 = c_a on these lattices: exponents up to 2 span every function of the velocity set.
    higher = [e for e in itertools.product((0, 1, 2), repeat=d) if sum(e) >= 3]
    higher.sort(key=lambda e: (sum(e), [-x for x in e]))
    polys += [("odd" if sum(e) % 2 else "even", (e,), (1,)) for e in higher]
    return polys


@functools.cache
def moment_basis(lattice: Lattice) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Orthogonal moment matrix M (rows orthogonal, Q x Q), its inverse and each row's class.

    Gram-Schmidt (plain Euclidean product over the velocities, as Lallemand & Luo 2000 and
    d'Humieres et al. 2002) on the polynomials of :func:`_polynomials`; rows that vanish on
    the velocity set are dropped, each row is scaled to integers where its entries allow.
    For D2Q9 this is Lallemand & Luo's basis (rho, e, eps, j, q, p_xx, p_xy) up to row order and sign.
    """
    c = lattice.c.astype(np.float64)
    rows: list[np.ndarray] = []
    classes: list[str] = []
    for cls, monos, signs in _polynomials(lattice.d):
        v = sum(s * np.prod(c ** np.array(m, dtype=np.float64), axis=1) for m, s in zip(monos, signs, strict=True))
        v = np.asarray(v, dtype=np.float64)
        for r in rows:
            v = v - (v @ r) / (r @ r) * r
        if np.abs(v).max() < 1e-9:
            continue
        v = v / np.abs(v[np.abs(v) > 1e-9]).min()
        v = np.where(np.abs(v - np.round(v)) < 1e-9, np.round(v), v)
        rows.append(v)
        classes.append(cls)
    m = np.array(rows)
    if m.shape != (lattice.q, lattice.q):
        raise AssertionError(f"{lattice.name}: moment basis has {m.shape[0]} rows, expected {lattice.q}")
    m_inv = m.T / (m * m).sum(axis=1)
    for arr in (m, m_inv):
        arr.setflags(write=False)
    return m, m_inv, tuple(classes)


def hermite2(lattice: Lattice) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Second-order Hermite polynomials H_ab(c_i) = c_a c_b - cs2 delta_ab for a <= b: (pairs, values (P, Q))."""
    c = lattice.c.astype(np.float64)
    pairs = [(a, b) for a in range(lattice.d) for b in range(a, lattice.d)]
    h = np.array([c[:, a] * c[:, b] - (CS2 if a == b else 0.0) for a, b in pairs])
    return pairs, h


@functools.cache
def hermite3(lattice: Lattice) -> tuple[list[tuple[int, int, int]], np.ndarray, np.ndarray]:
    """Third-order Hermite polynomials the lattice resolves: (index triples a <= b <= c, values H (T, Q), R (Q, T)).

    H_abc = c_a c_b c_c - cs2 (delta_ab c_c + delta_ac c_b + delta_bc c_a); a triple is kept where its
    lattice norm sum_i w_i H_abc^2 equals the continuous one, cs2^3 n_x! n_y! n_z! (D2Q9: xxy, xyy; D3Q19: the
    six aab; D3Q27: those and xyz). R = w H^T G^-1 (G = H diag(w) H^T) gives the populations R a whose
    third moments sum_i H_t,i (R a)_i are the coefficients a_t, with nothing of order <= 2: where the
    kept polynomials are orthogonal (D2Q9, D3Q27) it is w_i H_t,i / norm_t, the Hermite series term; on
    D3Q19, where H_xxy and H_yzz (and the like) are not, it is the sum-and-difference form of
    Jacob, Malaspinas & Sagaut (2018).
    """
    c = lattice.c.astype(np.float64)
    w = lattice.w.astype(np.float64)
    triples, rows = [], []
    for t in itertools.combinations_with_replacement(range(lattice.d), 3):
        a, b, g = t
        h = c[:, a] * c[:, b] * c[:, g] - CS2 * ((a == b) * c[:, g] + (a == g) * c[:, b] + (b == g) * c[:, a])
        norm = CS2**3 * math.prod(math.factorial(t.count(k)) for k in range(lattice.d))
        if abs(float(w @ (h * h)) - norm) < 1e-12:
            triples.append(t)
            rows.append(h)
    h3 = np.array(rows)
    rec = (w[:, None] * h3.T) @ np.linalg.inv((h3 * w) @ h3.T)
    for arr in (h3, rec):
        arr.setflags(write=False)
    return triples, h3, rec


@functools.cache
def raw_moment_basis(lattice: Lattice) -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
    """Raw ("natural") moment matrix V (Q x Q, V f = the moments sum_i c_i^e f_i) and the exponent tuple e of each row.

    Monomials with exponents <= 2 (c_a^3 = c_a on these lattices), lowest degree first, each kept where
    it is independent of those before: on D2Q9 and D3Q27 the tensor-product moments M_pq(r), on D3Q19
    its usual 19 (no c_x c_y c_z, no degree above four).
    """
    c = lattice.c.astype(np.float64)
    exps = sorted(itertools.product((0, 1, 2), repeat=lattice.d), key=lambda e: (sum(e), [-x for x in e]))
    rows: list[np.ndarray] = []
    kept: list[tuple[int, ...]] = []
    for e in exps:
        v = np.prod(c ** np.array(e, dtype=np.float64), axis=1)
        if np.linalg.matrix_rank(np.array(rows + [v])) > len(rows):
            rows.append(v)
            kept.append(tuple(int(x) for x in e))
    if len(rows) != lattice.q:
        raise AssertionError(f"{lattice.name}: {len(rows)} independent raw moments, expected {lattice.q}")
    m = np.array(rows)
    m.setflags(write=False)
    return m, tuple(kept)


def _project(matrix: np.ndarray, x: Pops) -> Pops:
    """sum_j matrix[k, j] x[j] along the leading axis: one dot on an array, sums of single terms on Directions.

    XLA keeps a dot's result instead of re-computing its inputs inside each consumer's fusion, which
    elementwise sums of many populations made it do (KBC and the regularized kinds ran ~50x slower
    than BGK on the CPU that way). A Pallas kernel body (Directions) has no dot over Q: each row is
    its sum of terms, coefficients below 1e-13 of the row's largest (rounding of the matrix's inverse) left out.
    """
    if split(x):
        rows = [np.where(np.abs(row) > 1e-13 * np.abs(row).max(), row, 0.0) for row in np.asarray(matrix)]
        return Directions(_combine(row, x) for row in rows)
    import jax
    import jax.numpy as jnp

    return jnp.einsum("kq,q...->k...", jnp.asarray(matrix, x.dtype), x, precision=jax.lax.Precision.HIGHEST)


def stress_neq(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, force: np.ndarray | None = None
) -> dict[tuple[int, int], jnp.ndarray]:
    """Non-equilibrium second moment Pi_ab = sum_i H_ab(c_i)(f_i - feq_i) (+ (F_a u_b + u_a F_b)/2 with a force), a <= b."""
    pairs, h = hermite2(lattice)
    neq = list(f - feq)
    out = {}
    for (a, b), row in zip(pairs, h, strict=True):
        pi = _combine(row, neq)
        if force is not None and (force[a] or force[b]):
            pi = pi + 0.5 * (float(force[a]) * u[b] + float(force[b]) * u[a])
        out[(a, b)] = pi
    return out


def smagorinsky_omega(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, omega: float, constant: float,
    force: np.ndarray | None = None,
) -> jnp.ndarray:
    """Per-cell rate 1/tau_eff with tau_eff = (tau + sqrt(tau^2 + 18 sqrt2 C^2 |Pi_neq| / rho)) / 2 (Hou et al. 1996)."""
    pi = stress_neq(f, feq, u, lattice, force)
    norm2 = sum((1.0 if a == b else 2.0) * p * p for (a, b), p in pi.items())
    rho = 1.0 + qsum(feq)  # the equilibrium's deviations sum to δρ
    tau = 1.0 / omega
    import jax.numpy as jnp

    tau_eff = 0.5 * (tau + jnp.sqrt(tau * tau + 18.0 * math.sqrt(2.0) * constant**2 * jnp.sqrt(norm2) / rho))
    return 1.0 / tau_eff

