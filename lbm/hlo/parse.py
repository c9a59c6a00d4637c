"""Reading optimised HLO text: which stages each kernel contains, how many fusions, a DOT graph.

Stage names reach the HLO as ``jax.named_scope`` components of each instruction's
``metadata={op_name="jit(chunk)/.../timestep/collide/mul"}``. A kernel (a top-level
instruction: what a CPU thunk or a GPU kernel executes, named by the trace's ``hlo_op``)
contains the stages named in its own op_name and in those of the instructions of the
computation it calls (a fusion's fused computation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lbm.stages import scope_names

_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$|^(ENTRY\s+)?%?([\w.\-]+)\s*\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?<![\w.\-%])([a-z][a-z0-9\-]*)\(")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_CALLED = re.compile(r"\b(calls|body|condition|to_apply|branch_computations)=\{?([^,}]*(?:,\s*%[\w.\-]+)*)\}?")
_OPERAND = re.compile(r"%([\w.\-]+)")
_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)")
_ARRAY = re.compile(r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f8\w*|bf16|f16|f32|f64|c64|c128)\[([\d,]*)\]"
                    r"(?:\{([^}]*)\})?")
"""An array in a shape text: dtype, dimensions, layout (with tiling ``T(..)`` and memory space ``S(..)``)."""
_TILE = re.compile(r"T\(([\d,]+)\)")
_SPACE = re.compile(r"S\((\d+)\)")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')

ITEMSIZE = {"pred": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8, "u4": 1, "u8": 1, "u16": 2, "u32": 4,
            "u64": 8, "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}
TRIVIAL = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
           "replica-id", "iota", "opt-barrier"}
"""Opcodes that launch no kernel (no thunk does work for them)."""


@dataclass
class Instruction:
    """One HLO instruction: name, opcode, result bytes, operands, op_name metadata, called computations."""

    name: str
    opcode: str
    result_bytes: int
    operands: list[str]
    op_name: str
    called: list[str]
    attrs: str = ""
    """The instruction's text after its operands (kind, backend_config, custom_call_target, metadata, ...)."""
    shape: str = ""
    """The result's shape text (layout included)."""
    root: bool = False
    literal: str = ""
    """A parameter's number or a constant's literal (they have no operands)."""


@dataclass
class HloModule:
    """A parsed HLO module: its name, computations (name → instructions) and entry computation."""

    name: str
    computations: dict[str, list[Instruction]] = field(default_factory=dict)
    entry: str = ""

    def top_level(self) -> list[str]:
        """Computations whose instructions run as kernels (entry, loop bodies, branches, calls), not fused ones."""
        seen = [self.entry] if self.entry else []
        i = 0
        while i < len(seen):
            for ins in self.computations.get(seen[i], []):
                if ins.opcode in ("while", "conditional", "call", "async-start"):
                    for c in ins.called:
                        if c in self.computations and c not in seen:
                            seen.append(c)
            i += 1
        return seen

    def kernels(self) -> list[Instruction]:
        """Instructions of the top-level computations that do work (fusions, copies, custom calls, ...)."""
        out = []
        for comp in self.top_level():
            for ins in self.computations.get(comp, []):
                if ins.opcode not in TRIVIAL and ins.opcode not in ("while", "conditional", "call"):
                    out.append(ins)
        return out


def array_bytes(shape_text: str, space: int | None = 0, tiled: bool = True) -> int:
    """Bytes of the arrays of an HLO shape text (tuples summed) in memory space ``space`` (None: all), the layout's
    tiling included where ``tiled`` (the one byte counter of HLO shapes in lbm)."""
    total = 0
    for dtype, dims_text, layout in _ARRAY.findall(shape_text):
        dims = [int(d) for d in dims_text.split(",") if d]
        found = _SPACE.search(layout or "")
        if space is not None and (int(found.group(1)) if found else 0) != space:
            continue
        if layout and tiled:
            tile = _TILE.search(layout)
            order = [int(d) for d in layout.split(":")[0].split(",") if d.strip().isdigit()]
            if tile and len(order) == len(dims):
                sizes = [int(t) for t in tile.group(1).split(",")]
                physical = [dims[d] for d in reversed(order)]  # major to minor
                physical = [1] * max(0, len(sizes) - len(physical)) + physical
                for k, t in enumerate(sizes, start=len(physical) - len(sizes)):
                    physical[k] = -(-physical[k] // t) * t
                dims = physical
        n = 1
        for d in dims:
            n *= d
        total += n * ITEMSIZE.get(dtype, 1)
    return total



@dataclass(frozen=True)
class _Raw:
    """One instruction line split apart: computation, ROOT or not, name, shape text, opcode, arguments, attributes."""

    computation: str
    entry: bool
    root: bool
    name: str
    shape: str
    opcode: str
    args: str
    attrs: str


def _scan(text: str) -> Iterator[_Raw]:
    """Every instruction of HLO text, with its computation (the one scanner of HLO lines in lbm)."""
    current: str | None = None
    entry = False
    for line in text.splitlines():
        if current is None:
            h = _HEADER.match(line)
            if h and not line.lstrip().startswith("HloModule"):
                entry = bool(h.group(1) or h.group(4))
                current = h.group(2) or h.group(5)
                yield _Raw(current, entry, False, "", "", "", "", "")  # announces the computation
            continue
        if line.strip() == "}":
            current = None
            continue
        im = _INSTR.match(line)
        om = _OPCODE.search(im.group(3)) if im else None
        if not im or not om:
            continue
        rhs = im.group(3)
        args = rhs[om.end():]
        depth, end = 1, len(args)
        for i, ch in enumerate(args):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = i
                break
        yield _Raw(current, entry, bool(im.group(1)), im.group(2), rhs[: om.start()], om.group(1), args[:end],
                   args[end:])


def parse_hlo(text: str) -> HloModule:
    """Parse HLO text (``compiled.as_text()`` or ``lowered.as_text(dialect='hlo')``)."""
    m = _MODULE.search(text)
    module = HloModule(name=m.group(1) if m else "")
    for raw in _scan(text):
        if not raw.name:
            module.computations[raw.computation] = []
            if raw.entry:
                module.entry = raw.computation
            continue
        called: list[str] = []
        for _, group in _CALLED.findall(raw.attrs):
            called += _OPERAND.findall(group) or [g.strip() for g in group.split(",") if g.strip()]
        opn = _OP_NAME.search(raw.attrs)
        plain = raw.opcode in ("parameter", "constant")  # their "operand" is a number or literal
        module.computations[raw.computation].append(
            Instruction(raw.name, raw.opcode, array_bytes(raw.shape, None, tiled=False), _OPERAND.findall(raw.args),
                        opn.group(1) if opn else "", called, raw.attrs, raw.shape, raw.root,
                        raw.args.strip() if plain else ""))
    return module


def by_name(module: HloModule) -> dict[str, dict[str, Instruction]]:
    """Computation name -> instruction name -> instruction, in text order."""
    return {comp: {ins.name: ins for ins in body} for comp, body in module.computations.items()}


def stages_in(op_name: str, stages: Iterable[str]) -> list[str]:
    """The stage names that appear as scope components of an op_name path, in path order.

    A component may join several names with ``+`` (a kernel that does several stages at once,
    e.g. the native bulk kernel's ``fused_bulk+macroscopic+equilibrium+collide+stream``).
    """
    wanted = set(stages)
    return [name for part in op_name.split("/") for name in scope_names(part) if name in wanted]


def kernel_stages(module: HloModule, stages: Iterable[str]) -> dict[str, list[str]]:
    """For each kernel (top-level instruction name): the stages its own and its fused instructions belong to."""
    stages = list(stages)
    order = {s: i for i, s in enumerate(stages)}
    memo: dict[str, set[str]] = {}

    def comp_stages(comp: str, trail: tuple[str, ...] = ()) -> set[str]:
        if comp in memo:
            return memo[comp]
        found: set[str] = set()
        for ins in module.computations.get(comp, []):
            found.update(stages_in(ins.op_name, stages))
            for c in ins.called:
                if c not in trail:
                    found |= comp_stages(c, (*trail, comp))
        memo[comp] = found
        return found

    out: dict[str, list[str]] = {}
    for ins in module.kernels():
        found = set(stages_in(ins.op_name, stages))
        if ins.opcode == "fusion" or ins.opcode == "custom-call":
            for c in ins.called:
                found |= comp_stages(c)
        out[ins.name] = sorted(found, key=lambda s: order[s])
    return out


def kernel_bytes(module: HloModule) -> dict[str, int]:
    """For each kernel: bytes of its operands plus its result (an upper bound on what it moves)."""
    out: dict[str, int] = {}
    for comp in module.top_level():
        sizes = {ins.name: ins.result_bytes for ins in module.computations.get(comp, [])}
        for ins in module.computations.get(comp, []):
            if ins.opcode in TRIVIAL:
                continue
            out[ins.name] = ins.result_bytes + sum(sizes.get(o, 0) for o in ins.operands)
    return out


def count_ops(module: HloModule) -> dict[str, int]:
    """Numbers of kernels, fusions and all instructions of the top-level computations."""
    kernels = module.kernels()
    return {
        "kernels": len(kernels),
        "fusions": sum(1 for k in kernels if k.opcode == "fusion"),
        "instructions": sum(len(v) for v in module.computations.values()),
        "computations": len(module.computations),
    }


_BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')
_XLA_KIND = re.compile(r"\bkind=(k\w+)")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")


def fusion_kind(ins: Instruction) -> str:
    """A fusion's kind: the backend's own (``__ynn_fusion``, ...) over XLA's ``kLoop``/``kInput``/...; ``?`` if none."""
    m = _BACKEND_KIND.search(ins.attrs) or _XLA_KIND.search(ins.attrs)
    return m.group(1) if m else "?"


def loop_body(module: HloModule) -> str | None:
    """The body computation of the first while loop reached from the entry (a scanned chunk's step), if any."""
    for comp in module.top_level():
        for ins in module.computations.get(comp, []):
            body = _BODY.search(ins.attrs) if ins.opcode == "while" else None
            if body:
                return body.group(1)
    return None


def fusion_inventory(module: HloModule, special_max: int = 20) -> dict[str, Any]:
    """Kernel-level fusions by kind, custom-call targets, and the fusions that are not loop/input/output fusions."""
    kinds: dict[str, int] = {}
    targets: dict[str, int] = {}
    special: list[dict[str, str]] = []
    for ins in module.kernels():
        if ins.opcode == "fusion":
            kind = fusion_kind(ins)
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind not in ("kLoop", "kInput", "kOutput") and len(special) < special_max:
                special.append({"fusion": ins.name, "kind": kind, "op_name": ins.op_name})
        elif ins.opcode == "custom-call":
            t = _TARGET.search(ins.attrs)
            target = t.group(1) if t else "?"
            targets[target] = targets.get(target, 0) + 1
    return {"fusion_kinds": kinds, "custom_call_targets": targets, "special_fusions": special}


def program_facts(module: HloModule) -> dict[str, Any]:
    """Fusions and custom calls of the program (and of its loop body, one step of a scanned chunk), by kind."""
    kernels = module.kernels()
    body = loop_body(module)
    return {
        "fusions": sum(1 for k in kernels if k.opcode == "fusion"),
        "fusions_in_loop_body": (sum(1 for k in module.computations.get(body, []) if k.opcode == "fusion")
                                 if body else None),
        "custom_calls": sum(1 for k in kernels if k.opcode == "custom-call"),
        **fusion_inventory(module),
    }


def count_fusions(text: str) -> int:
    """Fusion instructions in HLO text, in every computation (nested fusions included)."""
    return sum(1 for comp in parse_hlo(text).computations.values() for ins in comp if ins.opcode == "fusion")


def planned_bytes(compiled: Any) -> tuple[int, int] | None:
    """XLA's planned peak memory of a compiled executable (memory_analysis: arguments + outputs - aliased +
    temporaries) and its temporaries, in bytes; None where the backend does not say."""
    try:
        m = compiled.memory_analysis()
        peak = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
        return int(peak), int(m.temp_size_in_bytes)
    except Exception:  # memory analysis is optional per backend
        return None


def compiled_cost(compiled: Any) -> dict[str, float | None]:
    """XLA's cost analysis of a compiled executable: flops, bytes accessed, transcendentals (None where unknown)."""
    try:
        ca = compiled.cost_analysis()
    except Exception:  # some backends do not implement it
        ca = None
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else None
    ca = ca or {}
    return {"flops": ca.get("flops"), "bytes_accessed": ca.get("bytes accessed"),
            "transcendentals": ca.get("transcendentals")}
