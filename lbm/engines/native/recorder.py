"""C code from a Python kernel: run it on :class:`CValue` numbers, whose +, -, *, / and abs() write C.

lbm.kernels.cumulant.relax_cell computes one cell on any numbers with arithmetic; given CValues named after the
generated body's variables (``f0``, ``u0``, ``drho``, the rates) it returns CValues whose text is the C of its
results, and the :class:`Recorder` holds one statement per operation (``real c_12 = c_3 * u0;``): the native
kernel computes the operator the xla engine runs, term by term, and the two cannot diverge. Constant operands
fold where the result is exact (x * 1, x + 0, 0 * x), so the static structure (the Maxwellian's constants, the bulk
rate 1) costs no operation. A Recorder with ``emit=False`` nests the expressions instead (for the per-call rates).
"""

from __future__ import annotations

from typing import Any


def literal(v: float) -> str:
    """A C literal of the compute type ``real``."""
    return f"(real){float(v)!r}"


class Recorder:
    """The C statements of one recorded computation: ``real <prefix>N = ...;``, in order."""

    def __init__(self, prefix: str = "c_", emit: bool = True) -> None:
        self.prefix, self.emit = prefix, emit
        self.lines: list[str] = []

    def name(self, text: str) -> CValue:
        """A value the C code already holds (a variable or an expression)."""
        return CValue(self, text)

    def record(self, expr: str) -> CValue:
        """A new value: a statement with a fresh name (``emit``), else the parenthesised expression itself."""
        if not self.emit:
            return CValue(self, f"({expr})")
        name = f"{self.prefix}{len(self.lines)}"
        self.lines.append(f"real {name} = {expr};")
        return CValue(self, name)


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
        return self.rec.record(f"{a.text} {op} {b.text}")

    __add__, __radd__ = _binary("+")
    __sub__, __rsub__ = _binary("-")
    __mul__, __rmul__ = _binary("*")
    __truediv__, __rtruediv__ = _binary("/")

    def __neg__(self) -> CValue:
        if self.const is not None:
            return CValue(self.rec, literal(-self.const), -self.const)
        return self.rec.record(f"-{self.text}")

    def __abs__(self) -> CValue:
        return self.rec.record(f"{self.text} < (real)0 ? -{self.text} : {self.text}")
