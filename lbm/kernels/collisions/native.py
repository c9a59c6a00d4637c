"""C-writing helpers the collision kinds' native bodies share (lbm.engines.native.codegen runs the bodies).

A native body is C statements that turn the populations ``f0..`` of one cell, their equilibrium ``feq0..`` (both as
deviations f - w), the density ``rho`` (and ``drho`` = rho - 1) and the velocity ``u0..`` (in scope from
lbm.engines.native.codegen.collide_body) into the post-collision populations ``o0..``. The static matrices are
the kind's own, built from the lattice; the rates are run-time values: the kernel receives them as an array and
derives once per call the constants the cell reads (stored in the per-call table after Guo's force constants).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from lbm.lattice import Lattice


class Cell(Protocol):
    """What a native body reads of the kernel it is generated for (lbm.engines.native.codegen.KernelSpec)."""

    lattice: Lattice
    storage: str
    forced: bool
    inlet: str
    collision: str

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


def _guo(spec: Cell, i: int) -> str:
    """C expression of Guo's forcing population i from the force table (prefactors as the table holds them)."""
    d, q = spec.lattice.d, spec.lattice.q
    return f"((F[{d + 1 + i}] - (real){_fmt(spec.lattice.w[i])} * sf) + F[{d + 1 + q + i}] * cu{i})"


def _guo_sf(spec: Cell) -> str:
    return "real sf = (" + " + ".join(f"F{a}_ * u{a}" for a in range(spec.lattice.d)) + ") * gs_;"

