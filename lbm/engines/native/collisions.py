"""The native kernel's side of the collision kinds: which kinds have a cell body, their rates array, the per-call
table of constants they derive from it, and their cell bodies (each kind's own: its NativeBody,
lbm.kernels.collisions.operator). BGK and TRT are the kernel's own path of the rate pair (codegen.collide_body).

The kernel receives a kind's rates as an array (:func:`collision_rates`) and derives once per call the constants the
cell reads (:func:`rate_table`, stored in the per-call table after Guo's force constants). The formulas are
rearranged for fewer operations per cell, with the same value up to rounding (each kind's module says how).
"""

from __future__ import annotations

from lbm.kernels.collisions import COLLISION_KINDS, Collision
from lbm.kernels.collisions.native import Cell, pairwise_sum
from lbm.kernels.collisions.operator import NativeBody

KINDS = tuple(sorted(name for name, op in COLLISION_KINDS.items() if op.native is not None))
"""The collision kinds with a cell body of their own in the native kernel (beyond bgk and trt, which it computes from
the rate pair omega+, omega-); any other kind's spec makes the native engine unavailable (EngineUnavailable)."""


def collision_rates(collision: Collision) -> tuple[float, ...]:
    """The rates array a kernel of ``collision.kind`` takes (its NativeBody.rates): unset rates are omega."""
    classes = collision.rates()
    named = {"omega": collision.omega, "bulk": classes["bulk"], "shear": classes["shear"], "odd": classes["odd"],
             "even": classes["even"]}
    body = collision.operator.native
    if body is None:
        raise ValueError(f"no native collision {collision.kind!r}")
    return tuple(float(named[name]) for name in body.rates)


def native_body(spec: Cell) -> NativeBody | None:
    """The cell body of ``spec``'s kind (None: bgk or trt, the kernel's own path of the rate pair)."""
    return COLLISION_KINDS[spec.collision].native if spec.collision else None


def _rate_exprs(spec: Cell) -> list[tuple[str, str]]:
    """(name, C expression of the rates R[..]) of each per-call constant the cell of ``spec``'s kind reads."""
    body = native_body(spec)
    return body.constants(spec) if body is not None else []


def rate_table(spec: Cell, offset: int) -> list[str]:
    """C statements storing the per-call constants of ``spec``'s rates R[..] at G[offset..] (none for bgk/trt)."""
    return [f"G[{offset + j}] = {expr};" for j, (_, expr) in enumerate(_rate_exprs(spec))]


def rate_constants(spec: Cell, offset: int) -> list[str]:
    """C declarations of the per-call constants from the table F[offset..] (:func:`rate_table`), for the cell loops."""
    names = [name for name, _ in _rate_exprs(spec)]
    return [f"const real {name} = F[{offset + j}];" for j, name in enumerate(names)] + [f"(void){n};" for n in names]


def collision_lines(spec: Cell) -> list[str]:
    """C statements computing o0.. for ``spec.collision`` (one of :data:`KINDS`)."""
    body = native_body(spec)
    if body is None:
        raise ValueError(f"no native collision {spec.collision!r}")
    return body.lines(spec)


__all__ = ["KINDS", "collision_lines", "native_body", "collision_rates", "pairwise_sum", "rate_constants", "rate_table"]
