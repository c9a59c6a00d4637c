"""The memory traffic of a compiled loop body, kernel by kernel, and the collectives between devices (inspect)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lbm.hlo.parse import (
    _ARRAY,
    _SPACE,
    _TARGET,
    TRIVIAL,
    HloModule,
    Instruction,
    array_bytes,
    by_name,
    kernel_stages,
    parse_hlo,
)

# --- memory traffic of a compiled loop body (inspect) ------------------------------------------------------------
#
# A model of the memory (DRAM/HBM) traffic of each kernel, read off the optimised HLO; not a measurement.
# What it assumes:
# - every top-level instruction of the loop body that does work is one kernel (a ``call``, e.g. a GPU command
#   buffer, is looked into); nothing a fusion computes inside reaches memory;
# - a fusion reads, of each distinct operand, the part its outputs need, at most once: demand flows from the root
#   back to the parameters; elementwise and layout ops pass it on, ``slice``/``dynamic-slice``/``gather`` need only
#   the elements they output, ``broadcast`` needs its operand at most once, ``reduce`` its whole window, any other
#   op its operands whole; the demands of different users add up (disjoint slices), at most the whole operand;
#   it writes each output once;
# - a ``dynamic-update-slice`` or ``scatter`` whose target is a fusion parameter (or, unfused, its operand) updates
#   that buffer in place (XLA shares the buffer): it writes the update only and reads no other part of the target;
#   a scatter whose combiner does more than overwrite also reads the updated elements;
# - ``slice``/``dynamic-slice``/``gather`` outside a fusion read what they output; ``copy``/``copy-start`` read the
#   source and write the destination once (each in its own memory space); ``*-done`` moves nothing;
# - a custom call is opaque: it reads every operand and writes every result whole (an upper bound when it updates
#   an aliased buffer in part), unless it declares the bytes it accesses (a Pallas TPU kernel's ``pl.CostEstimate``
#   in its backend config: lbm's DMA-ring kernels, which read some rows twice): then it writes its results whole and
#   reads the rest of what it declares, of which its operands outside memory space 0 (on chip) whole;
# - sizes follow the layout: a TPU tiling ``T(8,128)`` pads the minor dimensions; a buffer in a memory space other
#   than 0 (``S(1)``: TPU VMEM, on chip) is not memory traffic; its bytes are counted apart as on-chip traffic.

_FUSION_KIND = re.compile(r"\bkind=(\w+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_IN_PLACE = ("dynamic-update-slice", "scatter")
_SELECT = ("slice", "dynamic-slice", "gather")
_DECLARED = re.compile(r'"cost_estimate":\{[^}]*"bytes_accessed":"?(\d+)')
_PASS = ("concatenate", "pad", "reverse", "transpose", "reshape", "bitcast", "copy", "dynamic-update-slice",
         "reduce", "reduce-window")


def _elements(shape_text: str) -> int:
    """Number of elements of the first array in a shape text (1 for a scalar or none)."""
    m = _ARRAY.search(shape_text)
    n = 1
    for d in (m.group(2).split(",") if m else []):
        n *= int(d) if d else 1
    return n


def tuple_elements(shape_text: str) -> list[str]:
    """The top-level element shapes of a tuple shape text; ``[shape_text]`` for an array."""
    text = shape_text.strip()
    if not text.startswith("("):
        return [text]
    parts, depth, start = [], 0, 1
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if (ch == "," and depth == 1) or (ch == ")" and depth == 0):
            parts.append(text[start:i].strip())
            start = i + 1
            if depth == 0:
                break
    return [p for p in parts if p]


@dataclass
class KernelTraffic:
    """One kernel of a loop body: name, kind (fusion kind, custom-call target or opcode), stages, bytes per iteration."""

    name: str
    kind: str
    opcode: str
    stages: list[str]
    bytes_read: int
    bytes_written: int
    on_chip_read: int = 0
    on_chip_written: int = 0
    upper_bound: int = 0
    """Bytes if every operand were read whole and every result written whole (no slicing, no in-place update)."""


@dataclass
class LoopTraffic:
    """The main loop body of a compiled program: its computation, trip count and the traffic of each kernel."""

    body: str
    trip_count: int
    kernels: list[KernelTraffic]

    @property
    def bytes(self) -> int:
        """Bytes read plus written in memory (space 0) by all kernels in one loop iteration."""
        return sum(k.bytes_read + k.bytes_written for k in self.kernels)

    @property
    def on_chip_bytes(self) -> int:
        """Bytes read plus written in other memory spaces (TPU VMEM) by all kernels in one loop iteration."""
        return sum(k.on_chip_read + k.on_chip_written for k in self.kernels)

    @property
    def upper_bound(self) -> int:
        """Bytes in memory per iteration if every kernel read its operands and wrote its results whole."""
        return sum(k.upper_bound for k in self.kernels)


def main_loop(text: str) -> tuple[str, int]:
    """Body computation and trip count of the outermost while loop (in the entry or a computation it calls) that holds
    the most: iterations times the bytes of its body's values (an odd chunk's loop of AA pairs runs 4 times beside
    XLA's own loops of 9 small gathers); (entry, 1) without one."""
    module = parse_hlo(text)
    lines = by_name(module)
    outer = [module.entry] if module.entry in lines else []
    for comp in outer:  # the entry and what it calls (the CPU backend may wrap the loop in a call)
        for ln in lines[comp].values():
            if ln.opcode == "call":
                outer += [c for c in re.findall(r"\b(?:to_apply|calls)=%?([\w.\-]+)", ln.attrs)
                          if c in lines and c not in outer]
    best: tuple[int, int, str] | None = None
    for ln in (x for comp in outer for x in lines[comp].values()):
        body = re.search(r"\bbody=%?([\w.\-]+)", ln.attrs)
        if ln.opcode != "while" or not body:
            continue
        n = trip_count(lines, ln)
        size = sum(array_bytes(x.shape, None) for x in lines.get(body.group(1), {}).values())
        if best is None or (n * size, n) > (best[0] * best[1], best[0]):
            best = (n, size, body.group(1))
    return (best[2], best[0]) if best else (module.entry, 1)


def trip_count(lines: dict[str, dict[str, Instruction]], loop: Instruction) -> int:
    """Iterations of a ``while`` instruction: its known trip count, else (a loop counted from 0) the largest integer
    constant its condition compares with."""
    trip = _TRIP.search(loop.attrs)
    if trip:
        return int(trip.group(1))
    cond = re.search(r"\bcondition=%?([\w.\-]+)", loop.attrs)
    consts = [int(c.literal) for comp in _reachable(lines, cond.group(1) if cond else "")
              for c in lines[comp].values() if c.opcode == "constant" and c.literal.isdigit()]
    return max(consts, default=1)


def _reachable(lines: dict[str, dict[str, Instruction]], comp: str) -> list[str]:
    """``comp`` and the computations its instructions call (fusions, calls), transitively."""
    seen = [comp] if comp in lines else []
    for c in seen:
        for ln in lines[c].values():
            for called in re.findall(r"\b(?:calls|to_apply)=%?([\w.\-]+)", ln.attrs):
                if called in lines and called not in seen:
                    seen.append(called)
    return seen


def _through_bitcasts(comp: dict[str, Instruction], name: str) -> str:
    """The instruction a chain of bitcasts ends at, walking towards the operand."""
    for _ in range(64):
        if name not in comp or comp[name].opcode != "bitcast":
            break
        name = comp[name].operands[0]
    return name


def _update_bytes(comp: dict[str, Instruction], ln: Instruction, target_shape: str, space: int | None) -> int:
    """Bytes an in-place dynamic-update-slice or scatter writes into a buffer of ``target_shape``: its update
    operand, if that buffer is in memory space ``space`` (None: any)."""
    found = _SPACE.search(_ARRAY.search(target_shape).group(3) or "") if _ARRAY.search(target_shape) else None
    if space is not None and (int(found.group(1)) if found else 0) != space:
        return 0
    update = ln.operands[1] if ln.opcode == "dynamic-update-slice" else ln.operands[-1]
    return array_bytes(comp[update].shape, None) if update in comp else 0


def _overwrites(lines: dict[str, dict[str, Instruction]], scatter: Instruction) -> bool:
    """Whether a scatter's combiner returns the update unchanged (a set, which reads nothing of the target)."""
    combiner = re.search(r"\bto_apply=%?([\w.\-]+)", scatter.attrs)
    body = lines.get(combiner.group(1), {}) if combiner else {}
    root = next((x for x in body.values() if x.root), None)
    return root is not None and root.opcode == "parameter"


def _fusion_traffic(lines: dict[str, dict[str, Instruction]], comp: dict[str, Instruction], ln: Instruction, output: str,
                    space: int | None) -> tuple[int, int]:
    """(bytes read, bytes written) of a fusion ``ln`` whose outputs have the shape text ``output``."""
    called = _CALLS.search(ln.attrs)
    fused = lines.get(called.group(1), {}) if called else {}
    root = next((x for x in fused.values() if x.root), None)
    if root is None:
        return sum(array_bytes(comp[o].shape, space) for o in dict.fromkeys(ln.operands) if o in comp), array_bytes(output, space)
    outputs = tuple_elements(output) if root.opcode == "tuple" else [output]
    results = [fused.get(o) for o in root.operands] if root.opcode == "tuple" else [root]
    written, extra_read = 0, 0
    in_place: set[str] = set()  # in-place update instructions: their target is not read
    for shape, res in zip(outputs, results, strict=False):
        res = fused.get(_through_bitcasts(fused, res.name)) if res is not None else None
        target = fused.get(_through_bitcasts(fused, res.operands[0])) if res is not None and res.operands else None
        if res is not None and res.opcode in _IN_PLACE and target is not None and target.opcode == "parameter":
            in_place.add(res.name)
            written += _update_bytes(fused, res, shape, space)
            if res.opcode == "scatter" and not _overwrites(lines, res):
                extra_read += _update_bytes(fused, res, shape, space)
        else:
            written += array_bytes(shape, space)
    demand: dict[str, float] = {root.name: 1.0}
    for x in reversed(list(fused.values())):
        f = min(1.0, demand.get(x.name, 0.0))
        if f == 0.0 or x.opcode == "parameter":
            continue
        out_n = _elements(x.shape)
        for k, o in enumerate(x.operands):
            if o not in fused or o in x.operands[:k] or (k == 0 and x.name in in_place):
                continue
            op_n = max(1, _elements(fused[o].shape))
            if x.opcode == "tuple":
                frac = f
            elif x.opcode in _SELECT and k == 0 or x.opcode == "broadcast":
                frac = min(1.0, f * out_n / op_n)
            elif x.opcode in _PASS or op_n == out_n:
                frac = f
            else:
                frac = 1.0
            demand[o] = demand.get(o, 0.0) + frac
    params = {int(p.literal): p.name for p in fused.values() if p.opcode == "parameter" and p.literal.isdigit()}
    read = extra_read
    for k, o in enumerate(ln.operands):
        if o in ln.operands[:k] or o not in comp:
            continue
        read += round(min(1.0, demand.get(params.get(k, ""), 0.0)) * array_bytes(comp[o].shape, space))
    return read, written


def _kernel_traffic(lines: dict[str, dict[str, Instruction]], comp: dict[str, Instruction], ln: Instruction, space: int | None = 0
                    ) -> tuple[int, int]:
    """(bytes read, bytes written) in memory space ``space`` (None: all) of one top-level instruction ``ln``."""
    size = {o: array_bytes(comp[o].shape, space) if o in comp else 0 for o in ln.operands}
    distinct = list(dict.fromkeys(ln.operands))
    if ln.opcode.endswith("-done"):
        return 0, 0
    if ln.opcode in ("copy", "copy-start"):  # copy-start: (destination, source, context)
        return size[ln.operands[0]], array_bytes(tuple_elements(ln.shape)[0], space)
    if ln.opcode == "fusion":
        return _fusion_traffic(lines, comp, ln, ln.shape, space)
    if ln.opcode == "fusion-start":  # async fusion: ((operands), output, context)
        parts = tuple_elements(ln.shape)
        return _fusion_traffic(lines, comp, ln, parts[1] if len(parts) > 1 else ln.shape, space)
    if ln.opcode in _IN_PLACE:
        update = _update_bytes(comp, ln, ln.shape, space)
        others = sum(size[o] for o in distinct[1:])
        reads_target = ln.opcode == "scatter" and not _overwrites(lines, ln)
        return others + (update if reads_target else 0), update
    if ln.opcode in _SELECT:
        return array_bytes(ln.shape, space) + sum(size[o] for o in distinct[1:]), array_bytes(ln.shape, space)
    declared = _DECLARED.search(ln.attrs) if ln.opcode == "custom-call" else None
    if declared:
        written = array_bytes(ln.shape, 0)
        on_chip = sum(array_bytes(comp[o].shape, None) - array_bytes(comp[o].shape, 0) for o in distinct if o in comp)
        in_memory = max(0, int(declared.group(1)) - written - on_chip)
        if space == 0:
            return in_memory, written
        if space is None:
            return in_memory + on_chip, array_bytes(ln.shape, None)
    return sum(size[o] for o in distinct), array_bytes(ln.shape, space)


def loop_traffic(text: str, stages: Iterable[str]) -> LoopTraffic:
    """Kernels of the main loop body of compiled HLO text, with their stages and the bytes each moves per iteration."""
    module = parse_hlo(text)
    lines = by_name(module)
    body, trip = main_loop(text)
    kstages = kernel_stages(module, list(stages))
    rows: list[KernelTraffic] = []

    def walk(comp_name: str, trail: tuple[str, ...]) -> None:
        comp = lines.get(comp_name, {})
        for ln in comp.values():
            if ln.opcode == "call":
                for c in re.findall(r"\b(?:to_apply|calls)=%?([\w.\-]+)", ln.attrs):
                    if c not in trail:
                        walk(c, (*trail, c))
                continue
            if ln.opcode in TRIVIAL or ln.opcode in ("while", "conditional") or ln.opcode.endswith("-done"):
                continue
            rows.append(_kernel_row(lines, comp, ln, kstages))

    walk(body, (body,))
    return LoopTraffic(body=body, trip_count=trip, kernels=rows)


def _kernel_row(lines: dict[str, dict[str, Instruction]], comp: dict[str, Instruction], ln: Instruction,
                kstages: dict[str, list[str]]) -> KernelTraffic:
    """The traffic of one kernel (a top-level instruction that does work)."""
    read, written = _kernel_traffic(lines, comp, ln)
    read_all, written_all = _kernel_traffic(lines, comp, ln, None)
    parts = tuple_elements(ln.shape)  # copy-start: (dest, source, context); fusion-start: (operands, output, context)
    output = parts[0] if ln.opcode == "copy-start" else parts[1] if ln.opcode.endswith("-start") else ln.shape
    upper = array_bytes(output) + sum(array_bytes(comp[o].shape) for o in dict.fromkeys(ln.operands) if o in comp)
    found = _FUSION_KIND.search(ln.attrs) if ln.opcode in ("fusion", "fusion-start") else (
        _TARGET.search(ln.attrs) if ln.opcode == "custom-call" else None)
    kind = found.group(1) if found else ln.opcode
    return KernelTraffic(ln.name, kind, ln.opcode, kstages.get(ln.name, []), read, written,
                         read_all - read, written_all - written, upper)


def program_traffic(text: str, stages: Iterable[str]) -> list[tuple[KernelTraffic, int]]:
    """Every kernel of a whole compiled program with the times one run executes it: the entry's kernels once, a
    loop body's its trip count times those of the loops around it (a program of several loops, such as a
    gradient's forward and backward passes); a ``call`` is looked into, each branch of a ``conditional`` counted
    once (an upper bound)."""
    module = parse_hlo(text)
    lines = by_name(module)
    kstages = kernel_stages(module, list(stages))
    rows: list[tuple[KernelTraffic, int]] = []

    def walk(comp_name: str, times: int, trail: tuple[str, ...]) -> None:
        comp = lines.get(comp_name, {})
        for ln in comp.values():
            if ln.opcode in ("call", "while", "conditional"):
                n = trip_count(lines, ln) if ln.opcode == "while" else 1
                body = re.findall(r"\bbody=%?([\w.\-]+)", ln.attrs) if ln.opcode == "while" else ln.called
                for c in body:
                    if c not in trail:
                        walk(c, times * n, (*trail, c))
                continue
            if ln.opcode in TRIVIAL or ln.opcode.endswith("-done"):
                continue
            rows.append((_kernel_row(lines, comp, ln, kstages), times))

    walk(module.entry, 1, (module.entry,))
    return rows


COLLECTIVES = ("collective-permute", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-broadcast", "ragged-all-to-all")
"""HLO opcodes that move data between devices (their ``-start`` forms count as the same collective)."""


@dataclass
class CollectiveTraffic:
    """Collectives of one kind and stages, in the main loop body or outside it: how many, and the bytes each device
    sends (per loop iteration in the body, per program outside)."""

    kind: str
    stages: list[str]
    in_loop: bool
    count: int
    bytes_per_device: int
    """Logical bytes of the operands (the data each device contributes or sends), summed over the collectives."""


def collective_kind(opcode: str) -> str | None:
    """The collective an opcode starts or is (``collective-permute-start`` -> ``collective-permute``); None if none."""
    base = opcode.removesuffix("-start")
    return base if base in COLLECTIVES else None


def collectives(text: str, stages: Iterable[str]) -> list[CollectiveTraffic]:
    """The collectives of compiled HLO text, grouped by kind, stages and whether they run in the main loop body.

    Counted: collectives of the computations that run as kernels (entry, loop bodies, calls, the
    computations ``async-start`` wraps), sync or ``-start`` (``-done`` ends the same one). XLA may move
    a collective out of the loop (e.g. one all-reduce of the forces of every step of a chunk).
    """
    module = parse_hlo(text)
    body, _ = main_loop(text)
    kstages = kernel_stages(module, list(stages))
    in_body = HloModule(module.name, module.computations, body).top_level()
    groups: dict[tuple[str, tuple[str, ...], bool], CollectiveTraffic] = {}
    for comp in module.top_level():
        sizes = {ins.name: ins.result_bytes for ins in module.computations.get(comp, [])}
        for ins in module.computations.get(comp, []):
            kind = collective_kind(ins.opcode)
            if kind is None:
                continue
            found = kstages.get(ins.name, [])
            key = (kind, tuple(found), comp in in_body)
            row = groups.setdefault(key, CollectiveTraffic(kind, list(found), comp in in_body, 0, 0))
            row.count += 1
            row.bytes_per_device += sum(sizes.get(o, 0) for o in dict.fromkeys(ins.operands))
    return list(groups.values())
