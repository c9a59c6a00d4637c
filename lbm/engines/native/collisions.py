"""The native kernel's side of the collision kinds beyond BGK and TRT: their rates array, the per-call table of
constants they derive from it, and their cell bodies (each kind's own, lbm.kernels.collisions).

The kernel receives a kind's rates as an array (:func:`collision_rates`) and derives once per call the constants the
cell reads (:func:`rate_table`, stored in the per-call table after Guo's force constants). The formulas are
rearranged for fewer operations per cell, with the same value up to rounding (each kind's module says how).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lbm.kernels.collisions import Collision, moment_basis
from lbm.kernels.collisions.cumulant import _CUMULANT_RATES, OMEGA_PARAMETRISED, cumulant_lines, cumulant_rates
from lbm.kernels.collisions.kbc import kbc_lines
from lbm.kernels.collisions.mrt import _MRT_PROJECTED, mrt_lines
from lbm.kernels.collisions.native import _fmt, pairwise_sum
from lbm.kernels.collisions.recorder import Recorder, literal
from lbm.kernels.collisions.regularized import regularized_lines

if TYPE_CHECKING:
    from lbm.engines.native.codegen import KernelSpec

KINDS = ("mrt", "regularized", "recursive_regularized", "kbc", "cumulant")
"""The collision kinds of lbm.kernels.collisions.COLLISION_KINDS beyond bgk and trt that the native kernel computes."""
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
    if kind == "cumulant":  # R = omega: the rates of lbm.kernels.collisions.cumulant.cumulant_rates, as nested C expressions
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


__all__ = ["FUSED", "KINDS", "RATES", "collision_lines", "collision_rates", "pairwise_sum", "rate_constants",
           "rate_table"]
