"""Stage ``collide``: the cumulant collision (Geier, Schoenherr, Pasquali & Krafczyk 2015, Comput. Math. Appl. 70,
507), with the parametrisation for fourth-order accurate diffusion (Geier, Pasquali & Schoenherr 2017, J. Comput.
Phys. 348, 862: "part I", its Eqs. (111)-(113), (115)-(116) at bulk rate 1, the form VirtualFluids' K17 kernel uses).

The populations are deviations g_i = f_i - w_i from the rest state (lbm.kernels.equilibrium), and every step below
works on small quantities, so that float32 keeps the digits the flow needs:

1. central moments in the frame moving with u (Geier's "chimera" transform: three populations along one axis at a
   time, (g-, g0, g+) -> sum (c - u)^k g for k = 0, 1, 2; linear in g). The rest weights' own central moments are
   known in closed form (the weights are the product of (1/6, 2/3, 1/6) over the axes), so the "excess"
   e_n = kappa_n - rho M_n over the Maxwellian's product moments M_n (M = 1, 0, 1/3 per axis) is built from g and
   u alone;
2. cumulants of the density-normalised distribution from eps_n = e_n / rho, by the moment-cumulant recursion with
   zero mean, each carried as a static constant plus a small part (:class:`Split`): the Maxwellian's cumulants
   (1/3 for c_aa, 0 above second order) are exact constants, never computed by cancellation;
3. relaxation: the trace of the second order at ``bulk`` (1), its deviator and the off-diagonal c_ab at omega =
   1/tau (nu = cs2 (tau - 1/2)), both with Geier's correction -3 u_a^2 d_a u_a for Galilean invariance; on D3Q27
   the third order at omega3 (c_abb + c_acc), omega4 (c_abb - c_acc), omega5 (c_xyz) of the 2017 parametrisation,
   the fourth order to its parametrised value (-(1/omega - 1/2) (2/3) A (d_a u_a + d_b u_b) for c_aabb,
   -(1/omega - 1/2) (1/3) B (d_b u_c + d_c u_b) for c_aabc; the third-order rates limited as in section 6, lambda
   0.01), fifth and sixth to zero; on D2Q9 (the 2015 scheme) every order above two to zero;
4. back by the same recursion and the inverse chimera transform. Mass and momentum: their excess over the frame
   (rho_eq = 1 + sum feq, u) relaxes at omega like BGK, plus (1 - omega/2) F with a body force, which gives
   exactly the momentum F where u carries the half-force shift (Geier 2015's first-moment shift).

The parametrisation holds near tau = 1/2, where the operator is used: from omega = 1.8 (tau <= 5/9,
:data:`OMEGA_PARAMETRISED`). Below, every order above two relaxes to zero at rate 1 (the 2015 operator).

One function, :func:`relax_cell`, computes a cell on any numbers with +, -, * and /: jax arrays (the xla,
instrumented and Pallas engines, lbm.kernels.collisions.Collision) and the native engine's C recorder
(lbm.kernels.collisions.recorder), so the engines cannot diverge. Tensor-product lattices only (every velocity of
{-1, 0, 1}^d): D2Q9 and D3Q27.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lbm.kernels.collisions.native import Cell
from lbm.kernels.collisions.operator import Collision, CollisionOperator, NativeBody, register
from lbm.kernels.collisions.recorder import Recorder, literal
from lbm.kernels.directions import Pops, qsum, split, stack
from lbm.lattice import Lattice

TENSOR_LATTICES = ("d2q9", "d3q27")
"""The lattices the cumulant operator runs on (every velocity of {-1, 0, 1}^d), as the config checks them."""

Exps = tuple[int, ...]
_M1 = (1.0, 0.0, 1.0 / 3.0)
"""Central moments of order 0, 1, 2 of the 1D Maxwellian's three populations at rest: 1, 0, cs2."""


def _add(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a + b


def _sub(a: Any, b: Any) -> Any:
    return a if b is None else -b if a is None else a - b


def _scale(x: Any, c: float) -> Any:
    return None if x is None or c == 0.0 else x if c == 1.0 else c * x


class Split:
    """A number c + s: a static constant c (a Python float) and a small part s (an array, a recorded value; None = 0).

    Arithmetic keeps the two apart, so that constants (the Maxwellian's moments) cancel exactly, in Python, and the
    small parts never round against them."""

    __slots__ = ("c", "s")

    def __init__(self, c: float = 0.0, s: Any = None) -> None:
        self.c, self.s = float(c), s

    def __add__(self, o: Split) -> Split:
        return Split(self.c + o.c, _add(self.s, o.s))

    def __sub__(self, o: Split) -> Split:
        return Split(self.c - o.c, _sub(self.s, o.s))

    def __mul__(self, o: Split) -> Split:
        cross = None if self.s is None or o.s is None else self.s * o.s
        return Split(self.c * o.c, _add(_add(_scale(o.s, self.c), _scale(self.s, o.c)), cross))

    def scaled(self, k: float) -> Split:
        """k times this number (k static)."""
        return Split(k * self.c, _scale(self.s, k))


@dataclass(frozen=True)
class CumulantRates:
    """The rates of one cell (numbers of any kind: floats, traced values, recorded C values).

    omega: shear (1/tau); bulk: trace of the second order; w3, w4, w5: third order (2017 part I, Eqs. 111-113);
    a, b: the fourth-order factors (1/omega - 1/2) A and (1/omega - 1/2) B / 3 (A, B: Eqs. 115-116)."""

    omega: Any
    bulk: Any
    w3: Any
    w4: Any
    w5: Any
    a: Any
    b: Any


BULK_RATE = 1.0
"""The rate of the second-order cumulants' trace (the bulk): the 2017 parametrisation's formulas assume it."""
OMEGA_PARAMETRISED = 1.8
"""The shear rate from which the 2017 parametrisation is used (tau <= 5/9). Below, its fourth-order terms make the
D3Q27 shear wave grow (tau = 0.58: measured, tests/kernels/collisions/test_collision_cumulant.py; the parametrised
rates leave (0, 2) below omega = 7/4, lbmpy's note), and the operator is the 2015 one: every order above two relaxed to zero."""


def parametrised(omega: Any) -> Any:
    """1 where the 2017 parametrisation applies (omega >= :data:`OMEGA_PARAMETRISED`), else 0: a float, or an array."""
    if isinstance(omega, (int, float)):
        return float(omega >= OMEGA_PARAMETRISED)
    import jax.numpy as jnp

    return jnp.where(omega >= OMEGA_PARAMETRISED, 1.0, 0.0)


def cumulant_rates(omega: Any, on: Any = None) -> CumulantRates:
    """The 2017 part I parametrisation at bulk rate 1 from the shear rate omega (any number type), where ``on`` = 1
    (:func:`parametrised` of omega unless given); where 0, rates 1 and A = B = 0 (the 2015 scheme)."""
    on = parametrised(omega) if on is None else on
    w = on * omega + (1.0 - on) * 1.9  # a rate where the formulas are finite, for the branch not taken
    w3 = 8.0 * (w - 2.0) * (1.0 + 2.0 * w) / (7.0 * w * w - 14.0 * w - 8.0)
    w4 = 8.0 * (w - 2.0) * (4.0 * w - 7.0) / (9.0 * w * w - 50.0 * w + 56.0)
    w5 = 24.0 * (w - 2.0) * (3.0 * w * w - 7.0 * w - 2.0) / (29.0 * w * w * w - 130.0 * w * w + 152.0 * w + 48.0)
    inv = 1.0 / ((w - 1.0) * (5.0 * w - 2.0))
    visc = 1.0 / w - 0.5
    a = visc * (4.0 + 2.0 * w - 3.0 * w * w) * inv
    b = visc * (4.0 + 28.0 * w - 14.0 * w * w) * inv * (1.0 / 9.0)  # B = num / (3 x), times the 1/3 of c_aabc
    off = 1.0 - on
    return CumulantRates(omega=omega, bulk=BULK_RATE, w3=on * w3 + off, w4=on * w4 + off, w5=on * w5 + off, a=on * a,
                         b=on * b)


# --- static structure: exponents, recursion -------------------------------------------------------

def _unit(d: int, a: int, k: int = 1) -> Exps:
    return tuple(k if b == a else 0 for b in range(d))


def _plus(x: Exps, y: Exps) -> Exps:
    return tuple(p + q for p, q in zip(x, y, strict=True))


@functools.cache
def exponents(d: int) -> tuple[Exps, ...]:
    """Every exponent tuple of {0, 1, 2}^d, lowest degree first."""
    return tuple(sorted(itertools.product((0, 1, 2), repeat=d), key=lambda e: (sum(e), [-x for x in e])))


@functools.cache
def recursion(d: int) -> dict[Exps, tuple[tuple[float, Exps, Exps], ...]]:
    """For each exponent n of degree >= 2: the terms (C, k, r) of mu_n = c_n + sum C c_k mu_r (zero mean).

    The moment-cumulant relation mu_n = sum_(m <= n - e_j) C(n - e_j, m) c_(m + e_j) mu_(n - e_j - m), j the first
    axis with n_j > 0, C the product of binomials; the m = n - e_j term is c_n (mu_0 = 1) and every term with a
    first-order factor vanishes (zero mean), so k and r have degree 2 .. |n| - 2. Up to degree 3 moments and cumulants
    are equal (zero mean), so the terms (C, k, r) and (C', r, k) of such k and r are one, (C + C', k, r)."""
    out = {}
    for n in exponents(d):
        if sum(n) < 2:
            continue
        j = next(a for a in range(d) if n[a])
        n1 = _plus(n, _unit(d, j, -1))
        terms: dict[tuple[Exps, Exps], float] = {}
        for m in itertools.product(*(range(x + 1) for x in n1)):
            k, r = _plus(m, _unit(d, j)), tuple(p - q for p, q in zip(n1, m, strict=True))
            if m == n1 or sum(k) < 2 or sum(r) < 2:
                continue
            if max(sum(k), sum(r)) <= 3 and (r, k) in terms:  # c_k mu_r = c_k c_r = c_r mu_k: one term
                k, r = r, k
            terms[(k, r)] = terms.get((k, r), 0.0) + math.prod(math.comb(p, q) for p, q in zip(n1, m, strict=True))
        out[n] = tuple((float(coef), k, r) for (k, r), coef in terms.items())
    return out


def maxwell(e: Exps) -> float:
    """The Maxwellian's (product) central moment M_e = prod_a (1, 0, 1/3)[e_a]."""
    return math.prod(_M1[x] for x in e)


def _maxwell_cumulant(e: Exps) -> float:
    return 1.0 / 3.0 if sorted(e)[-1] == 2 and sum(e) == 2 else 0.0


def to_cumulants(mu: dict[Exps, Split], d: int) -> dict[Exps, Split]:
    """Cumulants c_n (degree >= 2) of the normalised central moments mu_n (zero mean, mu_0 = 1)."""
    c: dict[Exps, Split] = {}
    for n, terms in recursion(d).items():
        acc = mu[n]
        for coef, k, r in terms:
            acc = acc - (c[k] * mu[r]).scaled(coef)
        c[n] = _exact(acc, _maxwell_cumulant(n))
    return c


def to_moments(c: dict[Exps, Split], d: int) -> dict[Exps, Split]:
    """Normalised central moments mu_n (degree >= 2) of the cumulants c_n: the inverse of :func:`to_cumulants`."""
    mu: dict[Exps, Split] = {}
    for n, terms in recursion(d).items():
        acc = c[n]
        for coef, k, r in terms:
            acc = acc + (c[k] * mu[r]).scaled(coef)
        mu[n] = _exact(acc, maxwell(n))
    return mu


def _exact(x: Split, const: float) -> Split:
    """x with its constant set to the exact value it approximates (the recursion's float constants, to rounding)."""
    if abs(x.c - const) > 1e-12:
        raise AssertionError(f"constant part {x.c} where {const} is exact")
    return Split(const, x.s)


# --- the chimera transform ------------------------------------------------------------------------

def _velocities(lattice: Lattice) -> list[Exps]:
    c = [tuple(int(v) for v in row) for row in lattice.c]
    if lattice.name not in TENSOR_LATTICES or sorted(c) != sorted(itertools.product((-1, 0, 1), repeat=lattice.d)):
        raise ValueError(f"the cumulant collision needs every velocity of {{-1, 0, 1}}^d (d2q9, d3q27), "
                         f"not {lattice.name}")
    return c


def chimera(values: dict[Exps, Any], u: Sequence[Any], d: int, inverse: bool = False) -> dict[Exps, Any]:
    """Populations keyed by velocity -> central moments keyed by exponent in the frame moving with u (or back).

    Axis by axis (Geier 2015, Appendix J): forward (x-, x0, x+) -> k0 = x- + x0 + x+, k1 = (x+ - x-) - u k0,
    k2 = (x+ + x-) - 2u (x+ - x-) + u^2 k0; inverse through the raw moments r1 = k1 + u k0, r2 = k2 + 2u r1 - u^2 k0:
    x0 = k0 - r2, x+- = (r2 +- r1) / 2 (k2 and r2 written with k1, r1: fewer operations). The inverse's halves are
    taken once at the end, 1/2 per nonzero component of the velocity (exact: powers of two, the same bits)."""
    out = dict(values)
    axes = range(d - 1, -1, -1) if not inverse else range(d)
    for a in axes:
        ua = u[a]
        src = (-1, 0, 1) if not inverse else (0, 1, 2)
        nxt = {}
        for key in out:
            if key[a] != src[0]:
                continue
            lo, mid, hi = (out[key[:a] + (s,) + key[a + 1:]] for s in src)
            at = [key[:a] + (s,) + key[a + 1:] for s in ((0, 1, 2) if not inverse else (-1, 0, 1))]
            if not inverse:  # k2 = (x+ + x-) - u (x+ - x- + k1)
                plus, diff = hi + lo, hi - lo
                k0 = plus + mid
                k1 = diff - ua * k0
                vals = (k0, k1, plus - ua * (diff + k1))
            else:  # r2 = k2 + u (r1 + k1)
                r1 = mid + ua * lo
                r2 = hi + ua * (r1 + mid)
                vals = (r2 - r1, lo - r2, r2 + r1)
            nxt.update(zip(at, vals, strict=True))
        out = nxt
    if inverse:
        out = {v: x * 0.5 ** sum(map(abs, v)) for v, x in out.items()}
    return out


def _weights_excess(e: Exps, u: Sequence[Any], usq: Sequence[Any]) -> Split:
    """The rest weights' central moment in the frame u as M_e + P_e (per axis: 1, -u_a, 1/3 + u_a^2)."""
    out = Split(1.0)
    for a, x in enumerate(e):
        out = out * Split(_M1[x], None if x == 0 else (-u[a] if x == 1 else usq[a]))
    return out


# --- the collision ---------------------------------------------------------------------------------

def relax_cell(g: Sequence[Any], drho: Any, u: Sequence[Any], lattice: Lattice, rates: CumulantRates,
               force: Sequence[float] | None = None, barrier: Callable[[list[Any]], list[Any]] | None = None,
               ) -> list[Any]:
    """Post-collision deviations g*_i of one cell (or of arrays of cells) from g_i = f_i - w_i, the frame's density
    deviation ``drho`` (rho = 1 + drho), its velocity ``u`` and the ``rates``; the steps of the module doc.

    ``barrier`` (the xla form: jax.lax.optimization_barrier) takes the central moments and the post-collision ones
    and returns them as they are: XLA's CPU fusion otherwise re-computes them inside the consumers (0.08 against
    0.5 MLUPS at 24³, measured in one process)."""
    d = lattice.d
    vel = _velocities(lattice)
    usq = [ua * ua for ua in u]
    kappa = _fenced(chimera(dict(zip(vel, g, strict=True)), u, d), barrier)
    rho = 1.0 + drho
    inv_rho = 1.0 / rho
    weights = {e: _weights_excess(e, u, usq) for e in exponents(d)}
    excess = {}  # e_n = kappa_n - rho M_n = kappa^g_n + P_n - drho M_n
    for e in exponents(d):
        val = _add(kappa[e], weights[e].s)
        excess[e] = val if maxwell(e) == 0.0 else val - maxwell(e) * drho
    mu = {e: Split(maxwell(e), excess[e] * inv_rho) for e in exponents(d) if sum(e) >= 2}
    post = _relax(to_cumulants(mu, d), u, d, rates)
    mu_post = to_moments(post, d)
    keep = 1.0 - rates.omega
    post_excess = {e: rho * mu_post[e].s if mu_post[e].s is not None else None for e in mu_post}
    zero = (0,) * d
    post_excess[zero] = keep * excess[zero]
    for a in range(d):
        e1 = _unit(d, a)
        post_excess[e1] = keep * excess[e1]
        if force is not None and force[a] != 0.0:
            push = force[a] if not isinstance(force[a], numbers.Real) else float(force[a])  # static, or recorded
            post_excess[e1] = post_excess[e1] + (1.0 - 0.5 * rates.omega) * push
    # kappa*^g = e* + drho M - P (the rest weights' part taken back out)
    back = {}
    for e in exponents(d):
        val = post_excess[e]
        if maxwell(e) != 0.0:
            val = _add(val, maxwell(e) * drho)
        if weights[e].s is not None:
            val = _add(val, -weights[e].s)
        back[e] = val if val is not None else 0.0 * drho
    out = chimera(_fenced(back, barrier), u, d, inverse=True)
    return [out[v] for v in vel]


def _fenced(values: dict[Exps, Any], barrier: Callable[[list[Any]], list[Any]] | None) -> dict[Exps, Any]:
    if barrier is None:
        return values
    return dict(zip(values, barrier(list(values.values())), strict=True))


def _relax(c: dict[Exps, Split], u: Sequence[Any], d: int, r: CumulantRates) -> dict[Exps, Split]:
    """Post-collision cumulants (step 3 of the module doc)."""
    om = r.omega
    diag = [c[_unit(d, a, 2)].s for a in range(d)]
    trace = diag[0]
    for x in diag[1:]:
        trace = trace + x
    dev = [x - trace * (1.0 / d) for x in diag]
    grad = [(-1.5 * om) * dv - (1.5 / d) * r.bulk * trace for dv in dev]  # d_a u_a
    corr = [-3.0 * (u[a] * u[a]) * grad[a] for a in range(d)]  # Galilean-invariance correction terms
    corr_sum = corr[0]
    for x in corr[1:]:
        corr_sum = corr_sum + x
    keep, half = 1.0 - om, 1.0 - 0.5 * om
    trace_post = (1.0 - r.bulk) * trace + (1.0 - 0.5 * r.bulk) * corr_sum
    post: dict[Exps, Split] = {}
    for a in range(d):
        dev_post = keep * dev[a] + half * (corr[a] - corr_sum * (1.0 / d))
        post[_unit(d, a, 2)] = Split(1.0 / 3.0, dev_post + trace_post * (1.0 / d))
    shear = {}
    for a, b in itertools.combinations(range(d), 2):
        e = _plus(_unit(d, a), _unit(d, b))
        shear[(a, b)] = (-3.0 * om) * c[e].s  # d_a u_b + d_b u_a
        post[e] = Split(0.0, keep * c[e].s)
    for n in exponents(d):
        if sum(n) >= 3:
            post[n] = Split(0.0, None)
    if d == 3:
        _relax_3d(c, post, grad, shear, r)
    return post


LIMITER = 0.01
"""lambda of the third-order limiter (2017 part I, section 6; VirtualFluids' default for P, M and D)."""


def _limited(relaxing: list[tuple[Any, Any]]) -> list[Any]:
    """Each cumulant x of the (k (1 - omega), x) pairs relaxed at its limited rate omega + (1 - omega) |x| / (|x| +
    lambda) (1 where x is large: under-resolved), times k: k (x - rate x) = k (1 - omega) x / (1 + |x| / lambda)."""
    return [(keep * x) / (1.0 + abs(x) * (1.0 / LIMITER)) for keep, x in relaxing]


def _relax_3d(c: dict[Exps, Split], post: dict[Exps, Split], grad: list[Any], shear: dict[tuple[int, int], Any],
              r: CumulantRates) -> None:
    """D3Q27's third and fourth order (2017 part I): into ``post``, whose higher orders are zero."""
    odd = []  # c_aab, c_bcc pairs: the odd axis b, the even axes a < c; their sum p and difference m relaxed, halved
    relaxing = []
    for b in range(3):
        a, cc = (x for x in range(3) if x != b)
        e1, e2 = _plus(_unit(3, a, 2), _unit(3, b)), _plus(_unit(3, b), _unit(3, cc, 2))
        odd.append((e1, e2))
        relaxing += [(0.5 * (1.0 - r.w3), c[e1].s + c[e2].s), (0.5 * (1.0 - r.w4), c[e1].s - c[e2].s)]
    relaxing.append((1.0 - r.w5, c[(1, 1, 1)].s))
    relaxed = _limited(relaxing)
    for k, (e1, e2) in enumerate(odd):
        p, m = relaxed[2 * k], relaxed[2 * k + 1]
        post[e1], post[e2] = Split(0.0, p + m), Split(0.0, p - m)
    post[(1, 1, 1)] = Split(0.0, relaxed[-1])
    for a, b in itertools.combinations(range(3), 2):  # c_aabb
        post[_plus(_unit(3, a, 2), _unit(3, b, 2))] = Split(0.0, (-2.0 / 3.0) * r.a * (grad[a] + grad[b]))
    for a in range(3):  # c_aabc: the off-diagonal gradient of the two other axes
        b, cc = (x for x in range(3) if x != a)
        post[_plus(_unit(3, a, 2), _plus(_unit(3, b), _unit(3, cc)))] = Split(0.0, -r.b * shear[(b, cc)])


def cumulant(f: Pops, feq: Pops, u: Any, lattice: Lattice, omega: Any, force: Sequence[float] | None = None) -> Pops:
    """Post-collision populations (deviations f - w, in the form of ``f``) of the cumulant operator (module doc)."""
    g = list(f) if split(f) else [f[i] for i in range(lattice.q)]
    import jax

    barrier = None if split(f) else jax.lax.optimization_barrier
    out = relax_cell(g, qsum(feq), [u[a] for a in range(lattice.d)], lattice, cumulant_rates(omega), force, barrier)
    return stack(out, f)


_CUMULANT_RATES = ("omega", "w3", "w4", "w5", "a", "b")
"""The per-call rates of :class:`CumulantRates` the cumulant cell reads (bulk is the constant BULK_RATE)."""


def cumulant_lines(spec: Cell) -> list[str]:
    """C statements of the cumulant collision: lbm.kernels.collisions.cumulant.relax_cell run on recorded C values."""
    lat = spec.lattice
    rec = Recorder("cu_")
    rates = CumulantRates(bulk=BULK_RATE, **{name: rec.name(f"{name}_") for name in _CUMULANT_RATES})
    force = [rec.name(f"F{a}_") for a in range(lat.d)] if spec.forced else None
    out = relax_cell([rec.name(f"f{i}") for i in range(lat.q)], rec.name("drho"),
                     [rec.name(f"u{a}") for a in range(lat.d)], lat, rates, force)
    return rec.program({f"o{i}": o for i, o in enumerate(out)})



def cumulant_constants(spec: Cell) -> list[tuple[str, str]]:
    """The per-call constants of the cumulant cell (R = omega): the rates of :func:`cumulant_rates`, as nested C
    expressions."""
    rec = Recorder(emit=False)
    on = rec.name(f"(R[0] >= {literal(OMEGA_PARAMETRISED)} ? (real)1 : (real)0)")
    rates = cumulant_rates(rec.name("R[0]"), on)
    return [(f"{name}_", getattr(rates, name).text) for name in _CUMULANT_RATES]


class Cumulant(CollisionOperator):
    """The cumulant collision (Geier et al.): on the lattices with every velocity of {-1, 0, 1}^d."""

    name = "cumulant"
    lattices = TENSOR_LATTICES
    lattice_reason = "it needs every velocity of {-1, 0, 1}^d"
    instead = "kbc"
    native = NativeBody(rates=("omega",), lines=cumulant_lines, constants=cumulant_constants, fused=True,
                        scheduled=True)
    """Scheduled: GCC's instruction scheduler before register allocation (-fschedule-insns -fsched-pressure; the same
    operations, so the same bits): the cumulant took 0.92-0.96x of its time without them at 64³ (two runs, by its
    ratio to BGK's time in the same round) and 0.93x at 128³; KBC 1.02x at 64³ and 0.93x at 128³, so it is left out
    (docs/physics.md, "Cost against BGK")."""

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: Any, lattice: Lattice, force: Any) -> Pops:
        """:func:`cumulant`."""
        return cumulant(f, feq, u, lattice, spec.omega, force)


register(Cumulant())
