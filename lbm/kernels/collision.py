"""Stage ``collide``: BGK, TRT, MRT and regularized relaxation, with Guo's forcing term.

Every operator takes populations ``f`` and their equilibrium ``feq`` (shape ``(Q, *grid)``),
the velocity ``u`` (shape ``(D, *grid)``, half-force shifted when a body force acts) and
returns the post-collision populations. Lattice constants and rates are static Python/numpy
values; the moment bases are built once per lattice from its velocity set.

- :func:`collide` is the BGK/TRT entry point the engines have always called.
- :class:`Collision` is a frozen spec (kind + rates) for every kind; ``spec(f, feq, u, lattice, force)``
  is the post-collision state. ``Collision.bgk_trt(omega_plus, omega_minus)`` rebuilds the old pair.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from lbm.lattice import CS2, Lattice

Rate = float | jnp.ndarray
"""A relaxation rate: a constant, or one per cell (Smagorinsky)."""

COLLISION_KINDS = ("bgk", "trt", "mrt", "regularized")
"""Collision operators :class:`Collision` implements."""

MOMENT_CLASSES = ("density", "momentum", "bulk", "shear", "odd", "even")
"""Classes of the orthogonal moments: conserved (density, momentum), second order (bulk = trace,
shear = traceless), and the non-hydrodynamic ("ghost") moments of odd and even polynomial degree."""


def bgk(f: jnp.ndarray, feq: jnp.ndarray, omega: float) -> jnp.ndarray:
    """BGK collision: f - omega (f - f_eq)."""
    return f - omega * (f - feq)


def trt(f: jnp.ndarray, feq: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float) -> jnp.ndarray:
    """Two-relaxation-time collision: symmetric part relaxed with omega+, antisymmetric with omega-."""
    opp = lattice.opposite
    neq = f - feq
    neq_opp = neq[opp]
    sym = 0.5 * (neq + neq_opp)
    anti = 0.5 * (neq - neq_opp)
    return f - omega_plus * sym - omega_minus * anti


def guo_source(
    u: jnp.ndarray, force: np.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float
) -> jnp.ndarray:
    """Guo forcing term with the relaxation prefactors of the symmetric and antisymmetric parts."""
    # one broadcast expression over the directions (per-direction constants times fields of u), not a stack of
    # Q arrays: XLA fuses it into its consumer instead of writing the Q source populations out (XLA:CPU did)
    force = np.asarray(force, dtype=np.float64)
    c = lattice.c.astype(np.float64)
    cf, w = c @ force, lattice.w.astype(np.float64)

    def per_direction(v: np.ndarray) -> jnp.ndarray:
        return jnp.asarray(v.reshape((-1,) + (1,) * lattice.d), u.dtype)

    cu = sum(per_direction(c[:, a]) * u[a] for a in range(lattice.d))
    uf = sum(float(force[a]) * u[a] for a in range(lattice.d) if force[a] != 0.0)
    sym = (1.0 - 0.5 * omega_plus) * w / CS2
    return per_direction(sym * cf / CS2) * cu - per_direction(sym) * uf + per_direction(
        (1.0 - 0.5 * omega_minus) * w * cf / CS2)


def collide(
    f: jnp.ndarray,
    feq: jnp.ndarray,
    u: jnp.ndarray,
    lattice: Lattice,
    omega_plus: float,
    omega_minus: float,
    force: np.ndarray | None = None,
) -> jnp.ndarray:
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

    kind         bgk | trt | mrt | regularized
    omega        shear rate 1/tau (sets the viscosity nu = cs2 (1/omega - 1/2))
    omega_minus  trt: the antisymmetric rate; mrt: the rate of the odd ghost moments (energy flux q, ...);
                 None = omega
    bulk         mrt: rate of the trace of the second moment (bulk viscosity); None = omega
    ghost        mrt: rate of the even ghost moments (degree >= 4, e.g. eps); None = omega
    smagorinsky  Smagorinsky constant C_s (0 = off): omega is lowered per cell from the local
                 non-equilibrium stress (bgk, mrt's shear moments, regularized)
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
        if self.smagorinsky and self.kind == "trt":
            raise ValueError("the Smagorinsky model applies to bgk, mrt and regularized, not trt")

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
        self, f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, force: np.ndarray | None = None
    ) -> jnp.ndarray:
        """Post-collision populations, with Guo's forcing term when ``force`` is given."""
        if self.kind == "mrt":
            return mrt(f, feq, u, lattice, self, force)
        if self.kind == "regularized":
            return regularized(f, feq, u, lattice, self.omega, force, self.smagorinsky, self.bulk)
        if self.smagorinsky:
            omega = smagorinsky_omega(f, feq, u, lattice, self.omega, self.smagorinsky, force)
            out = f - omega * (f - feq)
            if force is not None:
                out = out + (1.0 - 0.5 * omega) * _guo_raw(u, force, lattice).astype(out.dtype)
            return out
        return collide(f, feq, u, lattice, self.omega, self.omega if self.kind == "bgk" else self.rates()["odd"],
                       force)


def _guo_raw(u: jnp.ndarray, force: np.ndarray, lattice: Lattice) -> jnp.ndarray:
    """Guo's forcing populations F_i = w_i [(c_i - u)/cs2 + (c_i.u) c_i/cs2^2] . F, without a prefactor."""
    return guo_source(u, force, lattice, 0.0, 0.0)  # both prefactors (1 - omega/2) equal to 1


def stress_neq(
    f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, force: np.ndarray | None = None
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
    f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, omega: float, constant: float,
    force: np.ndarray | None = None,
) -> jnp.ndarray:
    """Per-cell rate 1/tau_eff with tau_eff = (tau + sqrt(tau^2 + 18 sqrt2 C^2 |Pi_neq| / rho)) / 2 (Hou et al. 1996)."""
    pi = stress_neq(f, feq, u, lattice, force)
    norm2 = sum((1.0 if a == b else 2.0) * p * p for (a, b), p in pi.items())
    rho = jnp.sum(feq, axis=0)
    tau = 1.0 / omega
    tau_eff = 0.5 * (tau + jnp.sqrt(tau * tau + 18.0 * math.sqrt(2.0) * constant**2 * jnp.sqrt(norm2) / rho))
    return 1.0 / tau_eff


def mrt(
    f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, spec: Collision,
    force: np.ndarray | None = None,
) -> jnp.ndarray:
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
    return f + jnp.stack([_combine(m_inv[i], dm) for i in range(lattice.q)])


def regularized(
    f: jnp.ndarray, feq: jnp.ndarray, u: jnp.ndarray, lattice: Lattice, omega: float,
    force: np.ndarray | None = None, smagorinsky: float = 0.0, bulk: float | None = None,
) -> jnp.ndarray:
    """Regularized BGK (Latt & Chopard 2006), collision and Guo forcing in Hermite space.

    f*_i = feq_i + w_i [c_i.A1 / cs2 + H_i : A2 / (2 cs2^2)] with the non-equilibrium Hermite
    coefficients a1 = sum c g, a2 = sum H g (g = f - feq) and Guo's b1 = F, b2 = u F + F u:
    A1 = (1 - omega) a1 + (1 - omega/2) b1, A2 = R(a2) + R'(b2), where R relaxes the traceless part
    at 1 - omega and the trace at 1 - bulk (R' at 1 - omega/2, 1 - bulk/2): f* - feq has no Hermite
    component above second order. a1 = -F/2 with a force (0 without), so the momentum gains exactly F.
    """
    d = lattice.d
    neq = list(f - feq)
    pairs, h = hermite2(lattice)
    c = lattice.c.astype(np.float64)
    if smagorinsky:
        omega = smagorinsky_omega(f, feq, u, lattice, omega, smagorinsky, force)
    a2 = {pair: _combine(row, neq) for pair, row in zip(pairs, h, strict=True)}
    b2 = {}
    if force is not None:
        b2 = {(a, b): float(force[b]) * u[a] + float(force[a]) * u[b] for a, b in pairs if force[a] or force[b]}

    def relax(t: dict[tuple[int, int], jnp.ndarray], rate: Rate, rate_bulk: Rate | None, factor: float
              ) -> dict[tuple[int, int], jnp.ndarray]:
        """1 - factor*rate times the traceless part of a symmetric tensor, 1 - factor*rate_bulk times its trace part."""
        keep = 1.0 - factor * rate
        if rate_bulk is None:
            return {pair: keep * x for pair, x in t.items()}
        diag = [t[(a, a)] for a in range(d) if (a, a) in t]
        if not diag:
            return {pair: keep * x for pair, x in t.items()}
        trace_part = sum(diag[1:], diag[0]) / d
        out = {pair: keep * x for pair, x in t.items() if pair[0] != pair[1]}
        for a in range(d):
            out[(a, a)] = keep * (t[(a, a)] - trace_part) if (a, a) in t else -keep * trace_part
            out[(a, a)] = out[(a, a)] + (1.0 - factor * rate_bulk) * trace_part
        return out

    big_a2 = relax(a2, omega, bulk, 1.0)
    for pair, x in relax(b2, omega, bulk, 0.5).items():
        big_a2[pair] = big_a2[pair] + x
    big_a1 = []
    if force is not None:
        big_a1 = [(1.0 - omega) * _combine(c[:, a], neq) + (1.0 - 0.5 * omega) * float(force[a]) for a in range(d)]
    keys = list(big_a2)
    out = []
    for i in range(lattice.q):
        w = float(lattice.w[i])
        # H_i : A2 counts each off-diagonal pair twice.
        coef = np.array([(1.0 if a == b else 2.0) * h[pairs.index((a, b)), i] for a, b in keys]) * w / (2 * CS2**2)
        p = _combine(coef, [big_a2[k] for k in keys])
        if big_a1:
            p = p + _combine(c[i] * w / CS2, big_a1)
        out.append(feq[i] + p)
    return jnp.stack(out)
