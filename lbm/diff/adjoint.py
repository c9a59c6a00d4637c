"""Hand-written adjoints of the core stages, so that reverse mode through a run costs a few forward steps.

Reverse mode through the stage functions as written for the forward fusion is slow: they index the
populations one direction at a time (``f[i]``, unrolled sums over Q), and the transpose of each such
slice is a pad of the whole ``(Q, *grid)`` array, so the transposed step does O(Q^2) work per cell
(docs/differentiable.md, "How it is built"). Each core stage here is the kernel's own forward function
under ``jax.custom_vjp`` with its transposed Jacobian written out, cell-locally and O(Q) per cell:

- ``macroscopic``: on the deviations f_i - w_i the engines hold (lbm.kernels.equilibrium), drho = sum_i f_i and
  u = (m + F/2) / rho with rho = 1 + drho: f_bar_j = drho_bar - u . u_bar / rho + c_j . u_bar / rho;
- ``equilibrium``: feq_i - w_i = w_i (drho + rho P_i), P_i = 3 c_i.u + 9/2 (c_i.u)^2 - 3/2 u^2: its derivatives
  w_i (1 + P_i) by drho and rho w_i dP_i/du by u;
- ``collide``: BGK/TRT f* = f - (omega+ P+ + omega- P-) (f - feq) (P+-: the parts symmetric and
  antisymmetric under c -> -c, both symmetric matrices): f_bar = lambda - mu, feq_bar = mu with
  mu = (omega+ P+ + omega- P-) lambda, and the rates' cotangents -sum lambda . P+- (f - feq); Guo's
  source term of a traced body force by jax.vjp (it is small);
- the three together (:func:`collide_cell`, where no condition acts from the moments to the collision and no
  traced force) or equilibrium and collision together (:func:`relax_equilibrium`, where none acts between
  them): one adjoint that never recomputes the equilibrium; the rates' cotangents take sum lambda.P+- feq from
  the equilibrium adjoint's per-cell sums, and the per-cell sums come out of one kernel (:func:`core_for`
  chooses, statically). On a CPU (:func:`collide_cell_cpu`) the equilibrium's and the moments' adjoints reduce to
  f_bar_j = lambda_j - mu_j + A + c_j . B, A and B from the cotangent's weighted moments (:func:`_cell_adjoint`);
- ``stream``: f_i(x) <- f_i(x - c_i) is a permutation: its transpose pulls from x + c_i
  (lbm.kernels.streaming.streamed, with the kernel it stands for).

A boundary condition gives its own form with hand-written adjoints (lbm.boundaries.base.BoundaryCondition.with_adjoint;
half-way and moving walls: lbm.boundaries.bounce_back); :func:`with_adjoints` asks every condition of a run for it and
applies the walls while streaming as the xla engine does. The other boundary conditions and the objectives stay with
jax's automatic differentiation: they act on a face or on a wall's links. :data:`CORE` is what
lbm.engines.timestep.timestep takes as its ``core`` stages; the forward values are the kernels' own.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, StepState
from lbm.cases.base import Setup
from lbm.engines.timestep import Core, core_stages, fold_walls
from lbm.kernels.equilibrium import equilibrium, velocity_dot
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.platforms import cell_form
from lbm.kernels.streaming import streamed
from lbm.lattice import Lattice
from lbm.stages import STAGES


def _dot(c_i: np.ndarray, v: Any) -> Any:
    """c_i . v for a static integer velocity and D fields ``v`` (a stacked array or a sequence)."""
    return velocity_dot(tuple(int(x) for x in c_i), v)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def moments_of(f: jnp.ndarray, lattice: Lattice, force: tuple[float, ...] | None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Density deviation and velocity of the deviations ``f`` (lbm.kernels.macroscopic.macroscopic, a static
    ``force``), with an O(Q) adjoint."""
    return macroscopic(f, lattice, None if force is None else np.asarray(force, np.float64))


def _moments_fwd(f: jnp.ndarray, lattice: Lattice, force: tuple[float, ...] | None
                 ) -> tuple[tuple[jnp.ndarray, jnp.ndarray], Any]:
    drho, u = moments_of(f, lattice, force)
    return (drho, u), (drho, u)


def _moments_bwd(lattice: Lattice, force: tuple[float, ...] | None, res: Any, ct: Any) -> tuple[jnp.ndarray]:
    drho, u = res
    drho_bar, u_bar = ct
    inv = 1.0 / (1.0 + drho)
    m_bar = u_bar * inv
    base = drho_bar - sum(m_bar[a] * u[a] for a in range(lattice.d))  # D terms, elementwise: no reduction kernel
    return (jnp.stack([base + _dot(lattice.c[j], m_bar) for j in range(lattice.q)]),)


moments_of.defvjp(_moments_fwd, _moments_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def equilibrium_of(drho: jnp.ndarray, u: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """lbm.kernels.equilibrium.equilibrium (deviations f_eq - w of the density deviation ``drho``) with an O(Q)
    adjoint."""
    return equilibrium(drho, u, lattice)


def _equilibrium_fwd(drho: jnp.ndarray, u: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, Any]:
    return equilibrium(drho, u, lattice), (drho, u)


def _equilibrium_bwd(lattice: Lattice, res: Any, ct: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    drho, u = res
    rho = 1.0 + drho
    base = 1.0 - 1.5 * sum(u[a] * u[a] for a in range(lattice.d))
    drho_bar, total, flux = 0.0, 0.0, [0.0] * lattice.d
    for i in range(lattice.q):
        w = float(lattice.w[i])
        g = w * ct[i]
        cu = _dot(lattice.c[i], u)
        drho_bar = drho_bar + g * (base + cu * (3.0 + 4.5 * cu))
        total = total + g
        if lattice.c[i].any():
            k = g * (3.0 + 9.0 * cu)
            flux = [fa + k if ca > 0 else fa - k if ca < 0 else fa for fa, ca in zip(flux, lattice.c[i], strict=True)]
    # one array, kept whole: XLA then computes the D + 1 sums over the populations in one kernel, not one per shape
    bars = jax.lax.optimization_barrier(jnp.stack([drho_bar, *(rho * (flux[a] - 3.0 * u[a] * total)
                                                               for a in range(lattice.d))]))
    return bars[0], bars[1:]


equilibrium_of.defvjp(_equilibrium_fwd, _equilibrium_bwd)


def _even_odd(x: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The parts of a per-direction quantity symmetric and antisymmetric under c_i -> -c_i."""
    opp = x[lattice.opposite]
    return 0.5 * (x + opp), 0.5 * (x - opp)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def relax(f: jnp.ndarray, feq: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool
          ) -> jnp.ndarray:
    """BGK (``two_rates`` False: omega+ only) or TRT relaxation of ``f`` towards ``feq``, with an O(Q) adjoint."""
    from lbm.kernels.collisions import bgk, trt

    return trt(f, feq, lattice, omega_plus, omega_minus) if two_rates else bgk(f, feq, omega_plus)


def _relax_fwd(f: jnp.ndarray, feq: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool
               ) -> tuple[jnp.ndarray, Any]:
    # the rates' cotangents need f - feq alone: one population array kept, not two
    return relax(f, feq, omega_plus, omega_minus, lattice, two_rates), (f - feq, omega_plus, omega_minus)


def _relax_bwd(lattice: Lattice, two_rates: bool, res: Any, lam: jnp.ndarray) -> tuple[Any, ...]:
    neq, omega_plus, omega_minus = res
    if two_rates:
        lam_even, lam_odd = _even_odd(lam, lattice)
        mu = omega_plus * lam_even + omega_minus * lam_odd
        neq_even, neq_odd = _even_odd(neq, lattice)
        bar_plus = -jnp.sum(lam * neq_even)
        bar_minus = -jnp.sum(lam * neq_odd)
    else:
        mu = omega_plus * lam
        bar_plus = -jnp.sum(lam * neq)
        bar_minus = jnp.zeros_like(bar_plus)
    cast = [jnp.asarray(b).astype(jnp.result_type(w)) for b, w in ((bar_plus, omega_plus), (bar_minus, omega_minus))]
    return lam - mu, mu, cast[0].reshape(jnp.shape(omega_plus)), cast[1].reshape(jnp.shape(omega_minus))


relax.defvjp(_relax_fwd, _relax_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def relax_equilibrium(f: jnp.ndarray, drho: jnp.ndarray, u: jnp.ndarray, omega_plus: Any, omega_minus: Any,
                      lattice: Lattice, two_rates: bool) -> jnp.ndarray:
    """:func:`relax` of ``f`` towards the equilibrium of ``drho``, ``u`` (computed under the scope ``equilibrium``),
    with one adjoint for both that never recomputes the equilibrium."""
    from lbm.kernels.collisions import bgk, trt

    with jax.named_scope("equilibrium"):
        feq = equilibrium(drho, u, lattice)
    return trt(f, feq, lattice, omega_plus, omega_minus) if two_rates else bgk(f, feq, omega_plus)


def _relax_equilibrium_fwd(f: jnp.ndarray, drho: jnp.ndarray, u: jnp.ndarray, omega_plus: Any, omega_minus: Any,
                           lattice: Lattice, two_rates: bool) -> tuple[jnp.ndarray, Any]:
    out = relax_equilibrium(f, drho, u, omega_plus, omega_minus, lattice, two_rates)
    return out, (f, drho, u, omega_plus, omega_minus)


def _relaxation_sums(f: jnp.ndarray, drho: jnp.ndarray, u: jnp.ndarray, omega_plus: Any, omega_minus: Any,
                     lam: jnp.ndarray, lattice: Lattice, two_rates: bool) -> tuple[Any, ...]:
    """The adjoint of relax(f, equilibrium(drho, u)) at ``lam``, cell by cell: f_bar = lam - mu, drho_bar, u_bar (D)
    (the equilibrium's adjoint of mu) and the rates' per-cell terms (one for BGK, two for TRT), whose sums over the
    cells are the rates' cotangents (:func:`_relax_equilibrium_bwd`)."""
    rho = 1.0 + drho
    usq = sum(u[a] * u[a] for a in range(lattice.d))
    if two_rates:
        lam_even, lam_odd = _even_odd(lam, lattice)
        mu = omega_plus * lam_even + omega_minus * lam_odd
    else:
        lam_even, lam_odd, mu = lam, None, omega_plus * lam
    with jax.named_scope("equilibrium"):  # the equilibrium adjoint's sums (and the rates', from them)
        even_w = even_p = odd_p = lam_f_even = lam_f_odd = 0.0
        total, flux = 0.0, [0.0] * lattice.d
        for i in range(lattice.q):
            w = float(lattice.w[i])
            cu = _dot(lattice.c[i], u)
            p_even, p_odd = cu * cu * 4.5 - 1.5 * usq, 3.0 * cu
            g = w * lam_even[i]
            even_w, lam_f_even = even_w + g, lam_f_even + lam_even[i] * f[i]
            even_p = even_p + g * (p_even + p_odd if lam_odd is None else p_even)
            if lam_odd is not None and lattice.c[i].any():
                odd_p, lam_f_odd = odd_p + w * lam_odd[i] * p_odd, lam_f_odd + lam_odd[i] * f[i]
            m = w * mu[i]
            total = total + m
            if lattice.c[i].any():
                k = m * (3.0 + 9.0 * cu)
                flux = [fa + k if ca > 0 else fa - k if ca < 0 else fa for fa, ca in zip(flux, lattice.c[i], strict=True)]
        # sum_i w_i mu_i (1 + P_i) = omega+ (sum g + sum g P) + omega- sum g- P (parity: the other terms vanish)
        drho_bar = omega_plus * (even_w + even_p) + (omega_minus * odd_p if two_rates else 0.0)
        u_bar = [rho * (flux[a] - 3.0 * u[a] * total) for a in range(lattice.d)]
        rates = [lam_f_even - drho * even_w - rho * even_p, *([lam_f_odd - rho * odd_p] if two_rates else [])]
    return lam - mu, drho_bar, u_bar, rates


def _rate_cotangents(terms: Any, omega_plus: Any, omega_minus: Any, two_rates: bool) -> tuple[Any, Any]:
    """The rates' cotangents, -(sums over the cells of their per-cell ``terms``), shaped and typed as the rates."""
    bar_plus = -jnp.sum(terms[0])
    bar_minus = -jnp.sum(terms[1]) if two_rates else jnp.zeros_like(bar_plus)
    return tuple(jnp.asarray(b).astype(jnp.result_type(w)).reshape(jnp.shape(w))
                 for b, w in ((bar_plus, omega_plus), (bar_minus, omega_minus)))


def _relax_equilibrium_bwd(lattice: Lattice, two_rates: bool, res: Any, lam: jnp.ndarray) -> tuple[Any, ...]:
    """f_bar = lam - mu and the equilibrium's adjoint of feq_bar = mu, mu = (omega+ P+ + omega- P-) lam (BGK: omega
    lam), in one pass over the directions. The rates' cotangents -sum lam.P+-(f - feq) take sum lam.P+- feq from
    the same per-cell sums: with g_i = w_i lam_i (even or odd part), sum_i lam_i (feq_i - w_i) = drho sum g_i +
    rho sum g_i P_i, and the odd part's sum g_i vanishes."""
    f, drho, u, omega_plus, omega_minus = res
    f_bar, drho_bar, u_bar, rates = _relaxation_sums(f, drho, u, omega_plus, omega_minus, lam, lattice, two_rates)
    # the per-cell sums in one array, kept whole: one kernel computes them all, reading lam once; the rates' sums
    # over the cells then read one field each
    bars = jax.lax.optimization_barrier(jnp.stack([drho_bar, *u_bar, *rates]))
    d = lattice.d
    return (f_bar, bars[0], bars[1:d + 1], *_rate_cotangents(bars[d + 1:], omega_plus, omega_minus, two_rates))


relax_equilibrium.defvjp(_relax_equilibrium_fwd, _relax_equilibrium_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def collide_cell(f: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool,
             force: tuple[float, ...] | None) -> jnp.ndarray:
    """The cell-local core of a step, moments, equilibrium and BGK/TRT relaxation of ``f`` (each under its stage's
    scope; ``force``: the Setup's static body force in the moments), with one adjoint for the three."""
    return _cell_values(f, omega_plus, omega_minus, lattice, two_rates, force)


def _cell_values(f: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool,
                 force: tuple[float, ...] | None) -> jnp.ndarray:
    """The collided populations of :func:`collide_cell` (its forms' forward values, the kernels' own)."""
    with jax.named_scope("macroscopic"):
        drho, u = moments_of(f, lattice, force)
    return relax_equilibrium(f, drho, u, omega_plus, omega_minus, lattice, two_rates)


def _collide_cell_fwd(f: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool,
                  force: tuple[float, ...] | None) -> tuple[jnp.ndarray, Any]:
    return collide_cell(f, omega_plus, omega_minus, lattice, two_rates, force), (f, omega_plus, omega_minus)


def _collide_cell_bwd(lattice: Lattice, two_rates: bool, force: tuple[float, ...] | None, res: Any, lam: jnp.ndarray
                  ) -> tuple[Any, ...]:
    """:func:`_relaxation_sums` at the moments of ``f``, then the moments' adjoint (:func:`moments_of`): f_bar_j +=
    base + c_j . m_bar, base = drho_bar - u . m_bar, m_bar = u_bar / rho. One array holds base, m_bar and the rates'
    per-cell terms, kept whole: one kernel reads f and lam for all of them, and the per-direction results then read
    D + 1 fields and lam, not f."""
    f, omega_plus, omega_minus = res
    with jax.named_scope("macroscopic"):
        drho, u = moments_of(f, lattice, force)
    f_bar, drho_bar, u_bar, rates = _relaxation_sums(f, drho, u, omega_plus, omega_minus, lam, lattice, two_rates)
    with jax.named_scope("macroscopic"):  # the moments' adjoint
        m_bar = [b / (1.0 + drho) for b in u_bar]
        base = drho_bar - sum(m_bar[a] * u[a] for a in range(lattice.d))
        cell = jax.lax.optimization_barrier((base, *m_bar, *rates))
        d = lattice.d
        m_bar = list(cell[1:d + 1])
        f_bar = jnp.stack([f_bar[j] + cell[0] + _dot(lattice.c[j], m_bar) for j in range(lattice.q)])
    return (f_bar, *_rate_cotangents(cell[d + 1:], omega_plus, omega_minus, two_rates))


collide_cell.defvjp(_collide_cell_fwd, _collide_cell_bwd)


def _weighted_moments(lam: jnp.ndarray, lattice: Lattice) -> tuple[Any, list[Any], dict[tuple[int, int], Any]]:
    """Sum_i w_i lam_i, sum_i w_i c_ia lam_i (D) and sum_i w_i c_ia c_ib lam_i (a <= b) of a per-direction ``lam``:
    sums of the planes with constant coefficients, each weight multiplied once."""
    def combination(coef: np.ndarray) -> Any:
        groups: dict[float, list[tuple[int, int]]] = {}
        for i, k in enumerate(coef):
            if k != 0:
                groups.setdefault(abs(float(k)), []).append((i, 1 if k > 0 else -1))
        total = None
        for k, members in groups.items():
            part = None
            for i, sign in members:
                part = (lam[i] if sign > 0 else -lam[i]) if part is None else (part + lam[i] if sign > 0 else part - lam[i])
            total = k * part if total is None else total + k * part
        return total

    w, c = lattice.w, lattice.c
    d = lattice.d
    return (combination(w), [combination(w * c[:, a]) for a in range(d)],
            {(a, b): combination(w * c[:, a] * c[:, b]) for a in range(d) for b in range(a, d)})


def _cell_adjoint(f: jnp.ndarray, lam: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice,
                  two_rates: bool, force: tuple[float, ...] | None) -> tuple[jnp.ndarray, list[Any]]:
    """f_bar and the rates' per-cell terms of :func:`collide_cell` at ``f`` from the cotangent ``lam``, through the
    weighted moments of lam (:func:`_weighted_moments`: L0, L1, L2). With mu = (omega+ P+ + omega- P-) lam, the
    equilibrium's and the moments' adjoints reduce to f_bar_j = lam_j - mu_j + A + c_j . B, A = omega+ (L0 (1 + 3/2 u.u)
    - 9/2 u.L2.u), B = 3 omega- L1 + omega+ (9 L2.u - 3 u L0) (B = u_bar / rho: the density cancels), and the rates'
    terms sum_i lam+-_i (f - feq)_i to sums of lam.f, L0, L1.u and u.L2.u."""
    d = lattice.d
    with jax.named_scope("macroscopic"):
        drho, u = moments_of(f, lattice, force)
    with jax.named_scope("equilibrium"):
        lam0, lam1, lam2 = _weighted_moments(lam, lattice)
        rho = 1.0 + drho
        usq = sum(u[a] * u[a] for a in range(d))
        l2u = [sum(lam2[min(a, b), max(a, b)] * u[b] for b in range(d)) for a in range(d)]
        ul2u = sum(u[a] * l2u[a] for a in range(d))
        l1u = sum(lam1[a] * u[a] for a in range(d))
        odd_rate = omega_minus if two_rates else omega_plus
        base = omega_plus * (lam0 * (1.0 + 1.5 * usq) - 4.5 * ul2u)
        flux = [3.0 * odd_rate * lam1[a] + omega_plus * (9.0 * l2u[a] - 3.0 * u[a] * lam0) for a in range(d)]
    with jax.named_scope("collide"):
        even_feq = drho * lam0 + rho * (4.5 * ul2u - 1.5 * usq * lam0)  # sum_i lam_i (feq_i - w_i), even part
        lam_f = sum(lam[i] * f[i] for i in range(lattice.q))
        if two_rates:
            opp = lattice.opposite
            lam_f_even = 0.5 * sum(lam[i] * (f[i] + f[int(opp[i])]) for i in range(lattice.q))
            rates = [lam_f_even - even_feq, lam_f - lam_f_even - 3.0 * rho * l1u]
            lam_even = 0.5 * (lam + lam[opp])
            direct = lam - omega_plus * lam_even - omega_minus * (lam - lam_even)
        else:
            rates = [lam_f - even_feq - 3.0 * rho * l1u]
            direct = (1.0 - omega_plus) * lam
    # the per-cell fields kept whole: XLA:CPU then computes each once, not once per direction
    base, *flux = jax.lax.optimization_barrier((base, *flux))
    rates = list(jax.lax.optimization_barrier(tuple(rates)))
    shape = (lattice.q,) + (1,) * d
    with jax.named_scope("macroscopic"):
        f_bar = direct + base[None] + sum(np.asarray(lattice.c[:, a], lam.dtype).reshape(shape) * flux[a][None]
                                          for a in range(d) if lattice.c[:, a].any())
    return f_bar, rates


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def collide_cell_cpu(f: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool,
                     force: tuple[float, ...] | None) -> jnp.ndarray:
    """:func:`collide_cell` with the adjoint XLA:CPU compiles to fewer passes (:func:`_cell_adjoint`)."""
    return _cell_values(f, omega_plus, omega_minus, lattice, two_rates, force)


def _collide_cell_cpu_fwd(f: jnp.ndarray, omega_plus: Any, omega_minus: Any, lattice: Lattice, two_rates: bool,
                          force: tuple[float, ...] | None) -> tuple[jnp.ndarray, Any]:
    return collide_cell_cpu(f, omega_plus, omega_minus, lattice, two_rates, force), (f, omega_plus, omega_minus)


def _collide_cell_cpu_bwd(lattice: Lattice, two_rates: bool, force: tuple[float, ...] | None, res: Any,
                          lam: jnp.ndarray) -> tuple[Any, ...]:
    f, omega_plus, omega_minus = res
    f = jax.lax.optimization_barrier(f)  # one copy of a stored state, read by every kernel of the adjoint
    f_bar, rates = _cell_adjoint(f, lam, omega_plus, omega_minus, lattice, two_rates, force)
    return (f_bar, *_rate_cotangents(rates, omega_plus, omega_minus, two_rates))


collide_cell_cpu.defvjp(_collide_cell_cpu_fwd, _collide_cell_cpu_bwd)


def _collision(s: StepState, setup: Setup) -> jnp.ndarray:
    rates = setup.collision
    if rates.spec is not None:  # the kinds beyond BGK and TRT: their kernel, differentiated by jax
        return rates(s.f, s.feq, s.u, setup.lattice)
    return _with_source(relax(s.f, s.feq, rates.omega_plus, rates.omega_minus, setup.lattice, rates.two_rates), s,
                        setup)


def _relaxed_equilibrium(s: StepState, setup: Setup) -> jnp.ndarray:
    rates = setup.collision
    return _with_source(relax_equilibrium(s.f, s.drho, s.u, rates.omega_plus, rates.omega_minus, setup.lattice,
                                          rates.two_rates), s, setup)


def _with_source(out: jnp.ndarray, s: StepState, setup: Setup) -> jnp.ndarray:
    """The collided populations ``out`` with Guo's term of the Relaxation's traced force, if any."""
    rates = setup.collision
    return out if rates.force is None else out + rates.source(s.u, setup.lattice).astype(out.dtype)


CELL_FORMS = {"cpu": collide_cell_cpu, "default": collide_cell}
"""The cell-local core of :data:`CELL` per platform (the keys of lbm.kernels.platforms.cell_form). A GPU computes
:func:`collide_cell`'s per-cell sums in one kernel that reads the state and the cotangent once. XLA:CPU gives each
field of such a tuple a kernel of its own that reads the populations again, and fuses the stored state's dynamic
slice into every kernel that reads it; :func:`collide_cell_cpu` reads the stored state once (one copy) and takes its
per-cell fields from the cotangent's weighted moments, a few operations each (docs/differentiable.md, "The adjoint step")."""


def _cell(form: str) -> Any:
    def cell(s: StepState, setup: Setup) -> jnp.ndarray:
        rates = setup.collision
        return CELL_FORMS[form](s.f, rates.omega_plus, rates.omega_minus, setup.lattice, rates.two_rates, setup.force)
    return cell


def with_adjoints(boundaries: tuple[BoundaryCondition, ...], lattice: Lattice, platform: str | None = None
                  ) -> tuple[BoundaryCondition, ...]:
    """``boundaries`` each in its form with hand-written adjoints for ``platform`` (default jax's backend; the
    condition's :meth:`~lbm.boundaries.base.BoundaryCondition.with_adjoint`), half-way walls applied while streaming
    where the xla engine does so (lbm.engines.timestep.fold_walls)."""
    return fold_walls(tuple(bc.with_adjoint(platform) for bc in boundaries), lattice)


def core_for(setup: Setup, boundaries: tuple[BoundaryCondition, ...], platform: str | None = None) -> Core:
    """The core stages with hand-written adjoints for ``setup`` and ``boundaries``, the collision BGK or TRT: where
    no condition acts from the moments to the collision and none reads them after it, and no traced force,
    :data:`CELL` of the ``platform``'s form (moments, equilibrium and collision under one adjoint); else where none
    acts between the equilibrium and the collision (an inlet rewrites the equilibrium there), :data:`RELAXED`; else
    :data:`CORE`."""
    if setup.collision.spec is not None:
        return CORE
    stages = {bc.stage for bc in boundaries}
    if stages.isdisjoint(STAGES[STAGES.index("macroscopic"):STAGES.index("stream")]) and setup.collision.force is None:
        return CELL[cell_form(platform)]
    if stages.isdisjoint(STAGES[STAGES.index("equilibrium"):STAGES.index("collide")]):
        return RELAXED
    return CORE


CORE = core_stages(lambda f, setup: moments_of(f, setup.lattice, setup.force), equilibrium_of, _collision, streamed)
"""The core stages (lbm.stages.CORE_STAGES) with hand-written adjoints, for a Setup whose collision is a
lbm.cases.traced.Relaxation (what lbm.engines.timestep.timestep takes as ``core``)."""


RELAXED = core_stages(lambda f, setup: moments_of(f, setup.lattice, setup.force), lambda drho, u, lattice: None,
                      _relaxed_equilibrium, streamed)
"""The core stages with :func:`relax_equilibrium` in ``collide`` (the equilibrium computed there, under its own
scope, and no ``feq`` set by the ``equilibrium`` stage): for a BGK or TRT Relaxation with no condition between
the equilibrium and the collision (:func:`core_for`)."""


CELL = {form: core_stages(lambda f, setup: (None, None), lambda drho, u, lattice: None, _cell(form), streamed)
        for form in CELL_FORMS}
"""Per form of :data:`CELL_FORMS`, the core stages with :func:`collide_cell` (or its CPU form) in ``collide`` (the
moments and the equilibrium computed there, under their own scopes; the ``macroscopic`` and ``equilibrium`` stages
set nothing): for a BGK or TRT Relaxation without a traced force where no condition acts from ``macroscopic`` to
``forces`` (:func:`core_for`)."""
