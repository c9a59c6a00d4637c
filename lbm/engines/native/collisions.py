"""The collisions beyond BGK and TRT as generated C: mrt, regularized, recursive_regularized, kbc and cumulant.

Each generator returns the C statements that turn the populations ``f0..`` of one cell, their equilibrium
``feq0..`` (both as deviations f - w), the density ``rho`` (and ``drho`` = rho - 1) and the velocity ``u0..``
(in scope from lbm.engines.native.codegen.collide_body)
into the post-collision populations ``o0..``. The static matrices are lbm.kernels.collision's, built from the
lattice (the moment basis, the Hermite polynomials, KBC's split); the rates are run-time values: the kernel
receives them as an array (:func:`collision_rates`) and derives once per call the constants the cell reads
(:func:`rate_table`, stored in the per-call table after Guo's force constants). The formulas are rearranged for
fewer operations per cell, with the same value up to rounding:

- mrt: ``M^-1 S M x = sum_c s_c P_c x`` over the moment classes c (P_c the projection onto c's rows). The odd rows
  span the antisymmetric populations with the momentum rows, the even ones the symmetric with density, bulk and
  shear, so ``sum_c s_c P_c x = s_even sym(x) + s_odd anti(x) - s_even P_density x + (s_bulk - s_even) P_bulk x
  + (s_shear - s_even) P_shear x - s_odd P_momentum x``: only 2 + 2D + D(D-1)/2 moments are taken. Guo's term
  enters as ``f* = f - L(neq + F/2) + F`` (L the relaxation above, F the forcing populations), one relaxation.
- regularized: the stress relaxation with the trace at its own rate is ``(1 - omega) a2 + delta (omega - bulk)
  tr(a2) / D``; ``H_i : A2 = sum_ab c_ia c_ib A2_ab - cs2 tr(A2)``.
- cumulant: not rewritten: lbm.kernels.cumulant.relax_cell itself, run on recorded C values
  (lbm.engines.native.recorder), and its per-call rates from lbm.kernels.cumulant.cumulant_rates the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lbm.engines.native.recorder import Recorder, literal
from lbm.kernels.collision import Collision, hermite3, kbc_matrices, moment_basis
from lbm.kernels.cumulant import BULK_RATE, OMEGA_PARAMETRISED, CumulantRates, cumulant_rates, relax_cell
from lbm.lattice import CS2, Lattice

if TYPE_CHECKING:
    from lbm.engines.native.codegen import KernelSpec

KINDS = ("mrt", "regularized", "recursive_regularized", "kbc", "cumulant")
"""The collision kinds of lbm.kernels.collision.COLLISION_KINDS beyond bgk and trt that the native kernel computes."""
FUSED = ("kbc", "cumulant")
"""The long cell bodies: they use fused multiply-adds (LBM_FMA, lbm.engines.native.codegen.arithmetic_macros) and the
paired equilibrium (lbm.engines.native.codegen.paired_equilibrium), so they agree with the xla engine to rounding, not
bitwise (BGK, TRT and the other kinds keep one rounding per operation, as XLA computes them); and a row's wrapping edge
cells are lanes of one vector (LBM_GATHERED_EDGES, kernels.cc), as one scalar cell costs about a vector of cells, with
the row's first cells where its length is a multiple of the vector's (head_lanes, LBM_HEAD_LANES)."""
RATES = {"mrt": ("bulk", "shear", "odd", "even"), "regularized": ("omega", "bulk"),
         "recursive_regularized": ("omega", "bulk"), "kbc": ("omega",), "cumulant": ("omega",)}
"""The run-time rates each kind's kernel takes, in order (R[0], R[1], ...)."""


def collision_rates(collision: Collision) -> tuple[float, ...]:
    """The rates array a kernel of ``collision.kind`` takes (:data:`RATES`): unset rates are omega."""
    classes = collision.rates()
    named = {"omega": collision.omega, "bulk": classes["bulk"], "shear": classes["shear"], "odd": classes["odd"],
             "even": classes["even"]}
    return tuple(float(named[name]) for name in RATES[collision.kind])


def _fmt(v: float) -> str:
    return repr(float(v))


def _lin(coeffs: np.ndarray | list[float], names: list[str]) -> str:
    """C expression sum_j coeffs[j] names[j] (zero terms skipped, +-1 as add and subtract), "(real)0" if empty."""
    out = []
    for coef, name in zip(list(coeffs), names, strict=True):
        coef = float(coef)
        if abs(coef) < 1e-13:
            continue
        sign = "-" if coef < 0 else "+"
        term = name if abs(abs(coef) - 1.0) < 1e-15 else f"(real){_fmt(abs(coef))} * {name}"
        out.append(f"{sign} {term}")
    if not out:
        return "(real)0"
    text = " ".join(out)
    return text[2:] if text.startswith("+ ") else text


def pairwise_sum(terms: list[str]) -> str:
    """C expression summing ``terms`` as a balanced tree (log-depth rounding, independent adds)."""
    if len(terms) == 1:
        return terms[0]
    h = len(terms) // 2
    return f"({pairwise_sum(terms[:h])} + {pairwise_sum(terms[h:])})"


def fused_dot(products: list[tuple[str, str]], group: int = 4) -> str:
    """C expression sum_k a_k b_k of the (a_k, b_k): chains of ``group`` fused multiply-adds, summed pairwise."""
    chains = []
    for k in range(0, len(products), group):
        part = products[k:k + group]
        expr = f"{part[-1][0]} * {part[-1][1]}"
        for a, b in reversed(part[:-1]):
            expr = f"LBM_FMA({a}, {b}, {expr})"
        chains.append(expr)
    return pairwise_sum(chains)


RECIPROCAL_GROUP = 3
"""KBC's reciprocals 1/feq_i per division (:func:`batched_reciprocals`): 9 divisions on D3Q27 instead of 27 (groups of
2, 4, 6 and 9 measured slower: docs/physics.md, "Cost against BGK"). A product of 3 absolute equilibria (each about
its weight, >= 1/216) is far from float32's smallest normal number."""


def batched_reciprocals(values: list[str], names: list[str], group: int) -> list[str]:
    """C statements ``real names[k] = 1 / values[k]`` with one division per ``group`` values (Montgomery's trick).

    Each group's product is taken as a balanced tree; its inverse, times the sibling subtree's product, is the
    inverse of each subtree down to the leaves: 3 (m - 1) multiplications and one division for m values.
    """
    lines: list[str] = []

    def product(idx: list[int]) -> str:
        if len(idx) == 1:
            return values[idx[0]]
        h = len(idx) // 2
        left, right = product(idx[:h]), product(idx[h:])
        name = f"rp_{names[idx[0]]}_{names[idx[-1]]}"
        lines.append(f"real {name} = {left} * {right};")
        return name

    def spread(idx: list[int], inverse: str) -> None:
        if len(idx) == 1:
            lines.append(f"real {names[idx[0]]} = {inverse};")
            return
        h = len(idx) // 2
        for part, other in ((idx[:h], idx[h:]), (idx[h:], idx[:h])):
            sib = values[other[0]] if len(other) == 1 else f"rp_{names[other[0]]}_{names[other[-1]]}"
            if len(part) == 1:
                lines.append(f"real {names[part[0]]} = {inverse} * {sib};")
            else:
                name = f"ri_{names[part[0]]}_{names[part[-1]]}"
                lines.append(f"real {name} = {inverse} * {sib};")
                spread(part, name)

    idx = list(range(len(values)))
    for k in range(0, len(idx), group):
        part = idx[k:k + group]
        total = product(part)
        if len(part) == 1:
            lines.append(f"real {names[part[0]]} = (real)1 / {total};")
            continue
        inverse = f"ri_{names[part[0]]}_{names[part[-1]]}"
        lines.append(f"real {inverse} = (real)1 / {total};")
        spread(part, inverse)
    return lines


def _pairs(lat: Lattice) -> tuple[list[int], list[int]]:
    """Representatives i < opp(i) of the moving directions, and the rest directions."""
    opp = lat.opposite
    reps = [i for i in range(lat.q) if lat.c[i].any() and i < int(opp[i])]
    rest = [i for i in range(lat.q) if not lat.c[i].any()]
    return reps, rest


def _parity_sums(lat: Lattice, x: str) -> list[str]:
    """C statements ``xs{i} = x{i} + x{opp}``, ``xa{i} = x{i} - x{opp}`` for each representative direction i."""
    reps, _ = _pairs(lat)
    return [f"real {x}s{i} = {x}{i} + {x}{int(lat.opposite[i])}, {x}a{i} = {x}{i} - {x}{int(lat.opposite[i])};"
            for i in reps]


def _moment(lat: Lattice, row: np.ndarray, x: str) -> str:
    """C expression row . x from the parity sums of x: a symmetric row reads xs, an antisymmetric one xa."""
    reps, rest = _pairs(lat)
    opp = lat.opposite
    if np.allclose(row, row[opp]):
        return _lin([row[i] for i in rest] + [row[i] for i in reps], [f"{x}{i}" for i in rest] + [f"{x}s{i}" for i in reps])
    if not np.allclose(row, -row[opp]):
        raise AssertionError("moment rows are symmetric or antisymmetric under c -> -c")
    return _lin([row[i] for i in reps], [f"{x}a{i}" for i in reps])


_MRT_PROJECTED = {"density": "-R[3]", "momentum": "-R[2]", "bulk": "R[0] - R[3]", "shear": "R[1] - R[3]"}
"""MRT's classes taken as moments, and the rate (of R = bulk, shear, odd, even) their projection carries."""


def _rate_names(spec: KernelSpec) -> list[str]:
    """Names of the per-call rate constants of ``spec``'s kind, in table order (:func:`rate_table`)."""
    return [name for name, _ in _rate_exprs(spec)]


def _rate_exprs(spec: KernelSpec) -> list[tuple[str, str]]:
    """(name, C expression of the rates R[..]) of each per-call constant the cell of ``spec``'s kind reads."""
    lat = spec.lattice
    kind = spec.collision
    if kind == "mrt":  # R = bulk, shear, odd, even
        m, _, classes = moment_basis(lat)
        out = [("se_", "R[3]"), ("hse_", "(real)0.5 * R[3]"), ("hso_", "(real)0.5 * R[2]")]
        return out + [(f"sk{k}_", f"({_MRT_PROJECTED[cls]}) / (real){_fmt(float(m[k] @ m[k]))}")
                      for k, cls in enumerate(classes) if cls in _MRT_PROJECTED]
    if kind in ("regularized", "recursive_regularized"):  # R = omega, bulk
        d = _fmt(lat.d)
        return [("c1_", "(real)1 - R[0]"), ("c2_", f"(R[0] - R[1]) / (real){d}"), ("c3_", "(real)1 - (real)0.5 * R[0]"),
                ("c4_", f"(R[0] - R[1]) / (real){_fmt(2 * lat.d)}")]
    if kind == "kbc":  # R = omega
        return [("om_", "R[0]"), ("om1_", "R[0] - (real)1")]
    if kind == "cumulant":  # R = omega: the rates of lbm.kernels.cumulant.cumulant_rates, as nested C expressions
        rec = Recorder(emit=False)
        on = rec.name(f"(R[0] >= {literal(OMEGA_PARAMETRISED)} ? (real)1 : (real)0)")
        rates = cumulant_rates(rec.name("R[0]"), on)
        return [(f"{name}_", getattr(rates, name).text) for name in _CUMULANT_RATES]
    raise ValueError(f"no native collision {kind!r}")


def rate_table(spec: KernelSpec, offset: int) -> list[str]:
    """C statements storing the per-call constants of ``spec``'s rates R[..] at G[offset..] (none for bgk/trt)."""
    if not spec.collision:
        return []
    return [f"G[{offset + j}] = {expr};" for j, (_, expr) in enumerate(_rate_exprs(spec))]


def rate_constants(spec: KernelSpec, offset: int) -> list[str]:
    """C declarations of the per-call constants from the table F[offset..] (:func:`rate_table`), for the cell loops."""
    names = _rate_names(spec) if spec.collision else []
    return [f"const real {name} = F[{offset + j}];" for j, name in enumerate(names)] + [f"(void){n};" for n in names]


def _guo(spec: KernelSpec, i: int) -> str:
    """C expression of Guo's forcing population i from the force table (prefactors as the table holds them)."""
    d, q = spec.lattice.d, spec.lattice.q
    return f"((F[{d + 1 + i}] - (real){_fmt(spec.lattice.w[i])} * sf) + F[{d + 1 + q + i}] * cu{i})"


def _guo_sf(spec: KernelSpec) -> str:
    return "real sf = (" + " + ".join(f"F{a}_ * u{a}" for a in range(spec.lattice.d)) + ") * gs_;"


def mrt_lines(spec: KernelSpec) -> list[str]:
    """C statements of the MRT collision (lbm.kernels.collision.mrt; the rearrangement in the module doc)."""
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


def regularized_lines(spec: KernelSpec) -> list[str]:
    """C statements of the (recursive) regularized collision (lbm.kernels.collision.regularized)."""
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
    if spec.collision == "recursive_regularized":
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
        if spec.collision == "recursive_regularized" and rec3[i].any():
            expr += f" + ({_lin(rec3[i], [f'a3_{t}' for t in range(len(triples))])})"
        lines.append(f"real o{i} = {expr};")
    return lines


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


def kbc_lines(spec: KernelSpec) -> list[str]:
    """C statements of the KBC collision (lbm.kernels.collision.kbc): its split, the entropic stabiliser gamma.

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


_CUMULANT_RATES = ("omega", "w3", "w4", "w5", "a", "b")
"""The per-call rates of lbm.kernels.cumulant.CumulantRates the cumulant cell reads (bulk is the constant BULK_RATE)."""


def cumulant_lines(spec: KernelSpec) -> list[str]:
    """C statements of the cumulant collision: lbm.kernels.cumulant.relax_cell run on recorded C values."""
    lat = spec.lattice
    rec = Recorder("cu_")
    rates = CumulantRates(bulk=BULK_RATE, **{name: rec.name(f"{name}_") for name in _CUMULANT_RATES})
    force = [rec.name(f"F{a}_") for a in range(lat.d)] if spec.forced else None
    out = relax_cell([rec.name(f"f{i}") for i in range(lat.q)], rec.name("drho"),
                     [rec.name(f"u{a}") for a in range(lat.d)], lat, rates, force)
    return rec.program({f"o{i}": o for i, o in enumerate(out)})


def collision_lines(spec: KernelSpec) -> list[str]:
    """C statements computing o0.. for ``spec.collision`` (one of :data:`KINDS`)."""
    if spec.collision == "mrt":
        return mrt_lines(spec)
    if spec.collision in ("regularized", "recursive_regularized"):
        return regularized_lines(spec)
    if spec.collision == "kbc":
        return kbc_lines(spec)
    if spec.collision == "cumulant":
        return cumulant_lines(spec)
    raise ValueError(f"no native collision {spec.collision!r}")
