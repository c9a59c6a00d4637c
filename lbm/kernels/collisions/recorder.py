"""C code from a Python kernel: run it on :class:`CValue` numbers, whose +, -, *, / and abs() write C.

lbm.kernels.collisions.cumulant.relax_cell computes one cell on any numbers with arithmetic; given CValues named after the
generated body's variables (``f0``, ``u0``, ``drho``, the rates) it returns CValues whose text is the C of its
results, and the :class:`Recorder` holds one operation per statement (``real c_12 = c_3 * u0;``): the native
kernel computes the operator the xla engine runs, term by term, and the two cannot diverge. Constant operands
fold where the result is exact (x * 1, x + 0, 0 * x), so the static structure (the Maxwellian's constants, the bulk
rate 1) costs no operation. :meth:`Recorder.program` writes the statements with every product that one sum alone
uses fused into it (``LBM_FMA``: one rounding instead of two, an explicit fused multiply-add, so the result is the
same at every optimisation level and vector width). A Recorder with ``emit=False`` nests the expressions instead
(for the per-call rates).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def literal(v: float) -> str:
    """A C literal of the compute type ``real``."""
    return f"(real){float(v)!r}"


def _negated(text: str) -> str:
    return text[1:] if text.startswith("-") else f"-{text}"


def _c(op: str, args: tuple[str, ...]) -> str:
    """The C expression of one recorded operation."""
    if op == "neg":
        return _negated(args[0])
    if op == "abs":
        return f"LBM_ABS({args[0]})"
    if op == "fma":
        return f"LBM_FMA({', '.join(args)})"
    return f"{args[0]} {op} {args[1]}"


class Recorder:
    """The C statements of one recorded computation: ``real <prefix>N = ...;``, in order."""

    def __init__(self, prefix: str = "c_", emit: bool = True) -> None:
        self.prefix, self.emit = prefix, emit
        self.ops: list[tuple[str, str, tuple[str, ...]]] = []  # (name, operation, operand texts)

    @property
    def lines(self) -> list[str]:
        """One statement per recorded operation, as recorded (no fusion)."""
        return [f"real {name} = {_c(op, args)};" for name, op, args in self.ops]

    def name(self, text: str) -> CValue:
        """A value the C code already holds (a variable or an expression)."""
        return CValue(self, text)

    def record(self, op: str, *args: str) -> CValue:
        """A new value ``op(args)`` (+ - * / on two operands, neg, abs): a statement with a fresh name (``emit``),
        else the parenthesised expression itself."""
        if not self.emit:
            return CValue(self, f"({_c(op, args)})")
        name = f"{self.prefix}{len(self.ops)}"
        self.ops.append((name, op, args))
        return CValue(self, name)

    def program(self, outputs: dict[str, CValue]) -> list[str]:
        """The statements computing ``outputs`` (C name -> value): a product that one sum or difference alone uses
        is fused into it, ``a * b + c`` -> ``LBM_FMA(a, b, c)`` (``c - a * b`` -> ``LBM_FMA(-a, b, c)``)."""
        live = {v.text for v in outputs.values()}
        for name, _, args in reversed(self.ops):  # only what the outputs need (no dead statement to compile)
            if name in live:
                live.update(args)
        uses = Counter(arg for name, _, args in self.ops if name in live for arg in args)
        uses.update(v.text for v in outputs.values())
        single = {name: args for name, op, args in self.ops if op == "*" and uses[name] == 1}
        fused: set[str] = set()
        ops = []
        for name, op, args in self.ops:
            if name not in live:
                continue
            if op in "+-" and len(args) == 2:
                a, b = args
                if b in single:  # a +- p q (the later product first: it is the one the sum waits for)
                    p, q = single[b]
                    ops.append((name, "fma", (p if op == "+" else _negated(p), q, a)))
                    fused.add(b)
                    continue
                if a in single:  # p q +- b
                    p, q = single[a]
                    ops.append((name, "fma", (p, q, b if op == "+" else _negated(b))))
                    fused.add(a)
                    continue
            ops.append((name, op, args))
        body = [f"real {name} = {_c(op, args)};" for name, op, args in ops if name not in fused]
        return body + [f"real {name} = {v.text};" for name, v in outputs.items()]


def _binary(op: str) -> tuple[Any, Any]:
    """The forward and reflected methods of a binary operator on CValues."""

    def forward(self: CValue, other: Any) -> CValue:
        return self._op(other, op)

    def reflected(self: CValue, other: Any) -> CValue:
        return self._op(other, op, swap=True)

    return forward, reflected


class CValue:
    """A number in the generated C: its text (a name, an expression) or a static constant (``const``)."""

    __slots__ = ("rec", "text", "const")

    def __init__(self, rec: Recorder, text: str, const: float | None = None) -> None:
        self.rec, self.text, self.const = rec, text, const

    def _lift(self, other: Any) -> CValue:
        if isinstance(other, CValue):
            return other
        return CValue(self.rec, literal(other), float(other))

    def _op(self, other: Any, op: str, swap: bool = False) -> CValue:
        a, b = self, self._lift(other)
        if swap:
            a, b = b, a
        if a.const is not None and b.const is not None:
            value = {"+": a.const + b.const, "-": a.const - b.const, "*": a.const * b.const}.get(op)
            if value is not None:
                return CValue(self.rec, literal(value), value)
        if op == "*" and 0.0 in (a.const, b.const):
            return CValue(self.rec, literal(0.0), 0.0)
        if (op == "*" and a.const == 1.0) or (op == "+" and a.const == 0.0):
            return b
        if (op in "*/" and b.const == 1.0) or (op in "+-" and b.const == 0.0):
            return a
        if op == "-" and a.const == 0.0:
            return -b
        return self.rec.record(op, a.text, b.text)

    __add__, __radd__ = _binary("+")
    __sub__, __rsub__ = _binary("-")
    __mul__, __rmul__ = _binary("*")
    __truediv__, __rtruediv__ = _binary("/")

    def __neg__(self) -> CValue:
        if self.const is not None:
            return CValue(self.rec, literal(-self.const), -self.const)
        return self.rec.record("neg", self.text)

    def __abs__(self) -> CValue:
        return self.rec.record("abs", self.text)
