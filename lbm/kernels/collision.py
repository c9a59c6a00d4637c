"""Stage ``collide``: BGK, TRT, MRT, regularized, recursive regularized, KBC and cumulant relaxation, with Guo's forcing term.

Every operator takes populations ``f`` and their equilibrium ``feq`` (shape ``(Q, *grid)``),
the velocity ``u`` (shape ``(D, *grid)``, half-force shifted when a body force acts) and
returns the post-collision populations. Populations and equilibria are deviations from the rest
state, f_i - w_i (lbm.kernels.equilibrium): BGK, TRT, MRT and the regularized kinds are affine in f
and f_eq with weights that keep the rest state (w_i = w_opp(i), zero moments of w beyond the density),
so they act on the deviations unchanged; where an operator needs ρ it is 1 + Σ f_eq, and KBC's
entropic weights divide by the absolute f_eq; the cumulant operator (lbm.kernels.cumulant) works on the deviations
themselves. Lattice constants and rates are static Python/numpy
values; the moment bases are built once per lattice from its velocity set.

- :func:`collide` is the BGK/TRT entry point (the rates ``omega_plus``, ``omega_minus`` of a Setup).
- :class:`Collision` is a frozen spec (kind + rates) for every kind; ``spec(f, feq, u, lattice, force)``
  is the post-collision state. ``Collision.bgk_trt(omega_plus, omega_minus)`` gives the spec of a rate pair.

Every operator is written once for two forms of the populations: a ``(Q, *grid)`` array (what the xla
and instrumented engines run: this is the reference) and :class:`Directions`, a tuple of Q per-direction
arrays (the body of the Pallas kernels, lbm.engines.pallas.cell, which cannot hold a ``(Q, ...)`` tensor:
Triton needs power-of-two shapes). lbm.kernels.directions gives each operation the form of its operand;
on Directions a matrix product over Q is its sum of single populations, equal to the dot to rounding.
tests/test_pallas_collisions.py pins every kind on the pallas engine to the xla engine.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from lbm.kernels.cumulant import cumulant
from lbm.kernels.directions import Directions, Pops, per_direction, qsum, split, stack
from lbm.lattice import CS2, Lattice

Rate = float | jnp.ndarray
"""A relaxation rate: a constant, or one per cell (Smagorinsky)."""

COLLISION_KINDS = ("bgk", "trt", "mrt", "regularized", "recursive_regularized", "kbc", "cumulant")
"""Collision operators :class:`Collision` implements."""

MOMENT_CLASSES = ("density", "momentum", "bulk", "shear", "odd", "even")
"""Classes of the orthogonal moments: conserved (density, momentum), second order (bulk = trace,
shear = traceless), and the non-hydrodynamic ("ghost") moments of odd and even polynomial degree."""


def bgk(f: Pops, feq: Pops, omega: Rate) -> Pops:
    """BGK collision: f - omega (f - f_eq)."""
    return f - omega * (f - feq)


def trt(f: Pops, feq: Pops, lattice: Lattice, omega_plus: float, omega_minus: float) -> Pops:
    """Two-relaxation-time collision: symmetric part relaxed with omega+, antisymmetric with omega-."""
    opp = lattice.opposite
    neq = f - feq
    neq_opp = neq[opp]
    sym = 0.5 * (neq + neq_opp)
    anti = 0.5 * (neq - neq_opp)
    return f - omega_plus * sym - omega_minus * anti


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


def collide(
    f: Pops,
    feq: Pops,
    u: jnp.ndarray | Sequence[jnp.ndarray],
    lattice: Lattice,
    omega_plus: float,
    omega_minus: float,
    force: np.ndarray | None = None,
) -> Pops:
    """Post-collision populations: BGK when omega+ == omega-, else TRT; Guo forcing if ``force``."""
    if omega_plus == omega_minus:
        out = bgk(f, feq, omega_plus)
    else:
        out = trt(f, feq, lattice, omega_plus, omega_minus)
    if force is not None:
        out = out + guo_source(u, force, lattice, omega_plus, omega_minus).astype(out.dtype)
    return out


def trt_omega_minus(omega_plus: float, magic: float) -> float:
    """Antisymmetric rate omega- from omega+ and the magic parameter Lambda=(1/w+ - 1/2)(1/w- - 1/2)."""
    tau_minus = 0.5 + magic / (1.0 / omega_plus - 0.5)
    return 1.0 / tau_minus


# --- moment bases --------------------------------------------------------------------------------

def _combine(coeffs: np.ndarray, xs: Sequence[jnp.ndarray]) -> jnp.ndarray:
    """sum_j coeffs[j] xs[j] for static coefficients (zeros skipped, +-1 as add/subtract)."""
    out = None
    for coef, x in zip(coeffs.tolist(), xs, strict=True):
        if coef == 0.0:
            continue
        term = x if coef == 1.0 else -x if coef == -1.0 else coef * x
        out = term if out is None else out + term
    return jnp.zeros_like(xs[0]) if out is None else out


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


# --- the collision spec --------------------------------------------------------------------------

@dataclass(frozen=True)
class Collision:
    """A collision operator and its relaxation rates (static, hashable: closed over by jit).

    kind         bgk | trt | mrt | regularized | recursive_regularized | kbc | cumulant (D2Q9, D3Q27)
    omega        shear rate 1/tau (sets the viscosity nu = cs2 (1/omega - 1/2))
    omega_minus  trt: the antisymmetric rate; mrt: the rate of the odd ghost moments (energy flux q, ...);
                 None = omega
    bulk         mrt: rate of the trace of the second moment (bulk viscosity); None = omega
    ghost        mrt: rate of the even ghost moments (degree >= 4, e.g. eps); None = omega
    smagorinsky  Smagorinsky constant C_s (0 = off): omega is lowered per cell from the local
                 non-equilibrium stress (bgk, mrt's shear moments, regularized, recursive_regularized)
    """

    kind: str = "bgk"
    omega: float = 1.0
    omega_minus: float | None = None
    bulk: float | None = None
    ghost: float | None = None
    smagorinsky: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in COLLISION_KINDS:
            raise ValueError(f"collision kind must be one of {', '.join(COLLISION_KINDS)}, not {self.kind!r}")
        for name in ("omega", "omega_minus", "bulk", "ghost"):
            rate = getattr(self, name)
            if rate is not None and not 0.0 < rate < 2.0:
                raise ValueError(f"collision rate {name}={rate!r} must lie in (0, 2)")
        if not self.smagorinsky >= 0.0:
            raise ValueError(f"smagorinsky constant must be >= 0, not {self.smagorinsky!r}")
        if self.smagorinsky and self.kind in ("trt", "kbc", "cumulant"):
            raise ValueError(f"the Smagorinsky model applies to bgk, mrt and the regularized kinds, not {self.kind}")

    @classmethod
    def bgk_trt(cls, omega_plus: float, omega_minus: float) -> Collision:
        """The spec :func:`collide` computes: BGK when the two rates are equal, else TRT."""
        if omega_plus == omega_minus:
            return cls("bgk", omega_plus)
        return cls("trt", omega_plus, omega_minus)

    def rates(self) -> dict[str, float]:
        """Relaxation rate of each moment class (conserved moments: 0, their change is the force's moment)."""
        shear = self.omega
        return {
            "density": 0.0, "momentum": 0.0, "bulk": shear if self.bulk is None else self.bulk, "shear": shear,
            "odd": shear if self.omega_minus is None else self.omega_minus,
            "even": shear if self.ghost is None else self.ghost,
        }

    def __call__(
        self, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
        force: np.ndarray | None = None,
    ) -> Pops:
        """Post-collision populations (in the form of ``f``), with Guo's forcing term when ``force`` is given."""
        if self.kind == "mrt":
            return mrt(f, feq, u, lattice, self, force)
        if self.kind in ("regularized", "recursive_regularized"):
            return regularized(f, feq, u, lattice, self.omega, force, self.smagorinsky, self.bulk,
                               recursive=self.kind == "recursive_regularized")
        if self.kind == "kbc":
            return kbc(f, feq, u, lattice, self.omega, force)
        if self.kind == "cumulant":
            return cumulant(f, feq, u, lattice, self.omega, force)
        if self.smagorinsky:
            omega = smagorinsky_omega(f, feq, u, lattice, self.omega, self.smagorinsky, force)
            out = f - omega * (f - feq)
            if force is not None:
                out = out + (1.0 - 0.5 * omega) * _guo_raw(u, force, lattice).astype(out.dtype)
            return out
        return collide(f, feq, u, lattice, self.omega, self.omega if self.kind == "bgk" else self.rates()["odd"],
                       force)


def _guo_raw(u: jnp.ndarray | Sequence[jnp.ndarray], force: np.ndarray, lattice: Lattice) -> Pops:
    """Guo's forcing populations F_i = w_i [(c_i - u)/cs2 + (c_i.u) c_i/cs2^2] . F, without a prefactor."""
    return guo_source(u, force, lattice, 0.0, 0.0)  # both prefactors (1 - omega/2) equal to 1


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
    tau_eff = 0.5 * (tau + jnp.sqrt(tau * tau + 18.0 * math.sqrt(2.0) * constant**2 * jnp.sqrt(norm2) / rho))
    return 1.0 / tau_eff


def mrt(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, spec: Collision,
    force: np.ndarray | None = None,
) -> Pops:
    """Multiple-relaxation-time collision in the orthogonal moment basis, Guo forcing in moment space.

    f* = f + M^-1 [ -S M (f - feq) + (I - S/2) M F ], S = diag(rates of each moment's class), F Guo's
    forcing populations: each moment k relaxes at s_k and gains (1 - s_k/2) of the force's moment k.
    Conserved moments have s = 0, so density keeps its value and momentum gains exactly F.
    """
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
    return jnp.einsum("kq,q...->k...", jnp.asarray(matrix, x.dtype), x, precision=jax.lax.Precision.HIGHEST)


def regularized(
    f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice, omega: float,
    force: np.ndarray | None = None, smagorinsky: float = 0.0, bulk: float | None = None, recursive: bool = False,
) -> Pops:
    """Regularized BGK (Latt & Chopard 2006), collision and Guo forcing in Hermite space.

    f*_i = feq_i + w_i [c_i.A1 / cs2 + H_i : A2 / (2 cs2^2)] with the non-equilibrium Hermite
    coefficients a1 = sum c g, a2 = sum H g (g = f - feq) and Guo's b1 = F, b2 = u F + F u:
    A1 = (1 - omega) a1 + (1 - omega/2) b1, A2 = R(a2) + R'(b2), where R relaxes the traceless part
    at 1 - omega and the trace at 1 - bulk (R' at 1 - omega/2, 1 - bulk/2): f* - feq has no Hermite
    component above second order. a1 = -F/2 with a force (0 without), so the momentum gains exactly F.

    ``recursive`` (Malaspinas 2015; Coreixas et al. 2017): the third-order Hermite terms the lattice
    resolves (:func:`hermite3`) are added, to the equilibrium (a0_abc = rho u_a u_b u_c) and to the
    non-equilibrium part, built from the relaxed second order by the recursion
    A3_abc = u_a A2_bc + u_b A2_ac + u_c A2_ab. They carry no mass, momentum or second moment.
    """
    d = lattice.d
    neq = f - feq
    pairs, h = hermite2(lattice)
    c = lattice.c.astype(np.float64)
    w = lattice.w.astype(np.float64)
    if smagorinsky:
        omega = smagorinsky_omega(f, feq, u, lattice, omega, smagorinsky, force)
    diag = np.array([float(a == b) for a, b in pairs])
    a2 = _project(h, neq)
    if force is not None:
        b2 = stack([float(force[b]) * u[a] + float(force[a]) * u[b] for a, b in pairs], neq)

    def relax(t: Pops, factor: float) -> Pops:
        """1 - factor*omega times the traceless part of a tensor (P, *grid), 1 - factor*bulk times its trace part."""
        if bulk is None:
            return (1.0 - factor * omega) * t
        trace_part = per_direction(diag, t, d) * (qsum(t * per_direction(diag, t, d)) / d)
        return (1.0 - factor * omega) * (t - trace_part) + (1.0 - factor * bulk) * trace_part

    big_a2 = relax(a2, 1.0) if force is None else relax(a2, 1.0) + relax(b2, 0.5)
    # H_i : A2 counts each off-diagonal pair twice.
    out = feq + _project((h * (2.0 - diag)[:, None]).T * (w / (2 * CS2**2))[:, None], big_a2)
    if force is not None:
        big_a1 = stack([(1.0 - omega) * x + (1.0 - 0.5 * omega) * float(force[a])
                        for a, x in enumerate(_project(c.T, neq))], neq)
        out = out + _project(c * (w / CS2)[:, None], big_a1)
    if recursive:
        triples, _, rec3 = hermite3(lattice)
        rho = 1.0 + _project(np.ones((1, lattice.q)), feq)[0]  # the equilibrium's deviations sum to δρ
        index = {pair: k for k, pair in enumerate(pairs)}

        def a2_of(x: int, y: int) -> jnp.ndarray:
            return big_a2[index[(min(x, y), max(x, y))]]

        third = stack([rho * u[a] * u[b] * u[g] + u[a] * a2_of(b, g) + u[b] * a2_of(a, g) + u[g] * a2_of(a, b)
                       for a, b, g in triples], neq)
        out = out + _project(rec3, third)
    return out


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
