"""Regularized BGK (Latt & Chopard 2006) and its recursive form (Malaspinas 2015); their native body.

Native: the stress relaxation with the trace at its own rate is ``(1 - omega) a2 + delta (omega - bulk) tr(a2) / D``;
``H_i : A2 = sum_ab c_ia c_ib A2_ab - cs2 tr(A2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lbm.kernels.collisions.moments import _project, hermite2, hermite3, smagorinsky_omega
from lbm.kernels.collisions.native import Cell, _fmt, _lin, _moment, _pairs, _parity_sums
from lbm.kernels.collisions.operator import Collision, CollisionOperator, NativeBody, rate, register
from lbm.kernels.directions import Pops, per_direction, qsum, stack
from lbm.lattice import CS2, Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


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


def regularized_lines(spec: Cell, recursive: bool = False) -> list[str]:
    """C statements of the (recursive) regularized collision (lbm.kernels.collisions.regularized)."""
    lat = spec.lattice
    q, d, c, w = lat.q, lat.d, lat.c, lat.w
    lines = [f"real g{i} = f{i} - feq{i};" for i in range(q)]
    lines += _parity_sums(lat, "g")
    pairs = [(a, b) for a in range(d) for b in range(a, d)]
    reps, rest = _pairs(lat)
    total = _lin([1.0] * (len(rest) + len(reps)), [f"g{i}" for i in rest] + [f"gs{i}" for i in reps])
    lines.append(f"real gsum = {total};")
    for a, b in pairs:  # a2_ab = sum_i (c_ia c_ib - cs2 delta_ab) g_i
        raw = _moment(lat, (c[:, a] * c[:, b]).astype(np.float64), "g")
        lines.append(f"real a2_{a}{b} = ({raw}){f' - (real){_fmt(CS2)} * gsum' if a == b else ''};")
    diag = " + ".join(f"a2_{a}{a}" for a in range(d))
    lines.append(f"real tra = c2_ * ({diag});")
    if spec.forced:  # Guo in Hermite space: b2 = u F + F u relaxed at 1 - omega/2 (trace at 1 - bulk/2)
        lines.append("real trb = c4_ * (" + " + ".join(f"(real)2 * (F{a}_ * u{a})" for a in range(d)) + ");")
    for a, b in pairs:
        expr = f"c1_ * a2_{a}{b}" + (" + tra" if a == b else "")
        if spec.forced:
            expr += f" + c3_ * (F{b}_ * u{a} + F{a}_ * u{b})" + (" + trb" if a == b else "")
        lines.append(f"real A2_{a}{b} = {expr};")
    lines.append(f"real trA = (real){_fmt(CS2)} * (" + " + ".join(f"A2_{a}{a}" for a in range(d)) + ");")
    lines += [f"real X_{a}{b} = (real)2 * A2_{a}{b};" for a, b in pairs if a < b]  # H_i : A2 counts them twice
    if spec.forced:  # A1 = (1 - omega) a1 + (1 - omega/2) F
        for a in range(d):
            lines.append(f"real A1_{a} = c1_ * ({_moment(lat, c[:, a].astype(np.float64), 'g')}) + c3_ * F{a}_;")
    if recursive:
        triples, _, rec3 = hermite3(lat)

        def a2(x: int, y: int) -> str:
            return f"A2_{min(x, y)}{max(x, y)}"

        for t, (a, b, g) in enumerate(triples):
            lines.append(f"real a3_{t} = rho * u{a} * u{b} * u{g} + u{a} * {a2(b, g)} + u{b} * {a2(a, g)}"
                         f" + u{g} * {a2(a, b)};")
        scale = np.abs(rec3).max()
        rec3 = np.where(np.abs(rec3) < 1e-12 * scale, 0.0, rec3)
    for i in range(q):
        hess = _lin([c[i, a] ** 2 for a in range(d)] + [c[i, a] * c[i, b] for a, b in pairs if a < b],
                    [f"A2_{a}{a}" for a in range(d)] + [f"X_{a}{b}" for a, b in pairs if a < b])
        expr = f"feq{i} + (real){_fmt(w[i] / (2 * CS2**2))} * ({hess + ' - ' if c[i].any() else '-'}trA)"
        if spec.forced and c[i].any():
            expr += f" + (real){_fmt(w[i] / CS2)} * ({_lin(c[i].astype(np.float64), [f'A1_{a}' for a in range(d)])})"
        if recursive and rec3[i].any():
            expr += f" + ({_lin(rec3[i], [f'a3_{t}' for t in range(len(triples))])})"
        lines.append(f"real o{i} = {expr};")
    return lines



def regularized_constants(spec: Cell) -> list[tuple[str, str]]:
    """The per-call constants of the regularized cell (R = omega, bulk)."""
    d = _fmt(spec.lattice.d)
    return [("c1_", "(real)1 - R[0]"), ("c2_", f"(R[0] - R[1]) / (real){d}"), ("c3_", "(real)1 - (real)0.5 * R[0]"),
            ("c4_", f"(R[0] - R[1]) / (real){_fmt(2 * spec.lattice.d)}")]


@dataclass(frozen=True)
class RegularizedRates:
    """``collision=regularized``: the bulk rate (null: 1/tau) and the Smagorinsky constant."""

    bulk: float | None = rate(1.0, 0.0, 2.0, optional=True)
    smagorinsky: float = rate(0.0, low_open=False)


class Regularized(CollisionOperator):
    """Regularized BGK: f* - feq keeps only the relaxed second-order Hermite component (:func:`regularized`)."""

    name = "regularized"
    Rates = RegularizedRates
    smagorinsky = True
    recursive = False
    native = NativeBody(rates=("omega", "bulk"), lines=regularized_lines, constants=regularized_constants)

    def relaxation(self, omega: float, params: Any) -> tuple[float, Collision | None]:
        """omega- = omega; the spec with the bulk rate and the Smagorinsky constant."""
        les = {} if params.smagorinsky is None else {"smagorinsky": params.smagorinsky}
        return omega, Collision(self.name, omega, bulk=params.bulk, **les)

    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """:func:`regularized`."""
        return regularized(f, feq, u, lattice, spec.omega, force, spec.smagorinsky, spec.bulk,
                           recursive=self.recursive)


register(Regularized())
