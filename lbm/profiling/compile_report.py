"""Compile report: the texts of the programs a run executes, their kernels and the stages in each, their cost.

The programs come as data (the engine's ``describe()``: one dict per program with its name,
its own stage or None, ``jaxpr``, ``stablehlo``, ``hlo`` before and ``optimized_hlo`` after
optimisation, XLA's ``cost``, and ``steps``: the chunk length it runs, where known);
nothing is compiled here. Written to ``profile/compile/``: ``<name>.jaxpr.txt``,
``<name>.stablehlo.mlir``, ``<name>.hlo.txt``, ``<name>.opt.hlo.txt``, ``<name>.dot`` and,
when Graphviz's ``dot`` is installed, ``<name>.png``; ``compile.json`` sums it up (cost,
numbers of fusions and kernels, kernel → stages, read from the optimised HLO by :mod:`lbm.hlo`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from lbm.hlo import HloModule, Instruction, count_ops, kernel_stages, loop_traffic, parse_hlo, to_dot

TEXTS = {"jaxpr": ".jaxpr.txt", "stablehlo": ".stablehlo.mlir", "hlo": ".hlo.txt", "optimized_hlo": ".opt.hlo.txt"}
"""Program text → file suffix in ``compile/``."""
COST_KEYS = ("flops", "bytes_accessed", "transcendentals")


def render_dot(dot_path: Path) -> Path | None:
    """Render a DOT file to PNG with Graphviz's ``dot`` if it is installed; None otherwise."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    png = dot_path.with_suffix(".png")
    try:
        subprocess.run([exe, "-Tpng", str(dot_path), "-o", str(png)], check=True, capture_output=True, timeout=60)
    except (subprocess.SubprocessError, OSError):
        return None
    return png


_INDEX = re.compile(r"\bindex=(\d+)")


def _scope(ins: Instruction | None, instrs: Mapping[str, Instruction] | None = None) -> str:
    """An instruction's named-scope path (op_name metadata) without the jit prefix, or its name; an element of the
    computation's argument tuple is named as such (a loop body's: the loop carry)."""
    if ins is None:
        return "?"
    if ins.opcode == "get-tuple-element" and instrs is not None:
        source = instrs.get(ins.operands[0]) if ins.operands else None
        index = _INDEX.search(ins.attrs)
        if source is not None and source.opcode == "parameter" and index:
            return f"%{ins.name} (element {index.group(1)} of the computation's argument)"
    path = ins.op_name.split("/", 1)[1] if "/" in ins.op_name else ins.op_name
    return f"%{ins.name} ({path})" if path else f"%{ins.name}"


def origins(module: HloModule, kernels: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """For each kernel without a stage: its HLO op, its own scope if any, and the scopes of the instructions it
    reads and of those that read it (an XLA-inserted copy has no metadata; its neighbours say what needs it)."""
    out: dict[str, str] = {}
    roles = {module.entry: "the entry computation"}
    for ins in (i for c in module.computations.values() for i in c if i.opcode == "while"):
        for role, key in (("the loop body", "body"), ("the loop condition", "condition")):
            found = re.search(rf"\b{key}=%?([\w.\-]+)", ins.attrs)
            if found:
                roles[found.group(1)] = role
    for comp in module.top_level():
        instrs = {ins.name: ins for ins in module.computations.get(comp, [])}
        users: dict[str, list[Instruction]] = {}
        for ins in instrs.values():
            for o in ins.operands:
                users.setdefault(o, []).append(ins)
        for name, ins in instrs.items():
            if name not in kernels or kernels[name]:
                continue
            own = ins.op_name.split("/", 1)[1] if "/" in ins.op_name else ins.op_name
            reads = ", ".join(_scope(instrs.get(o), instrs) for o in dict.fromkeys(ins.operands)) or "nothing"
            read_by = ", ".join(_scope(u, instrs) for u in users.get(name, [])[:3]) or "the computation's result"
            where = roles.get(comp, f"computation {comp}")
            out[name] = (f"HLO {ins.opcode} in {where}" + (f", scope {own}" if own else ", no scope (inserted by XLA)")
                         + f"; reads {reads}; read by {read_by}")
    return out


def loop_bytes(text: str, stages: Sequence[str], steps: int | None) -> dict[str, Any] | None:
    """Bytes per step of a chunk's scan loop (lbm.hlo's traffic model of the loop body over its steps per
    iteration), in total and per set of stages; None without a loop or without the chunk's length."""
    if not text or not steps:
        return None
    loop = loop_traffic(text, stages)
    if loop.trip_count <= 1 or not loop.kernels:
        return None
    per_iter = max(1, steps // loop.trip_count)
    units: dict[str, float] = {}
    for k in loop.kernels:
        unit = "+".join(k.stages) or "(unscoped)"
        units[unit] = units.get(unit, 0.0) + (k.bytes_read + k.bytes_written) / per_iter
    return {"steps_per_iteration": per_iter, "trip_count": loop.trip_count, "bytes_per_step": loop.bytes / per_iter,
            "bytes_per_step_by_unit": units}


def program_entry(program: Mapping[str, Any], stages: Sequence[str], out_dir: Path) -> dict[str, Any]:
    """Write one program's texts and graph into ``out_dir``; its compile.json entry."""
    name = str(program["name"])
    files: dict[str, str] = {}
    for key, suffix in TEXTS.items():
        if program.get(key):
            path = out_dir / f"{name}{suffix}"
            path.write_text(str(program[key]))
            files[suffix.lstrip(".")] = path.name
    module = parse_hlo(program.get("optimized_hlo") or "")
    kst = kernel_stages(module, stages)
    own = program.get("stage")
    if own is not None:  # a single stage's program: every kernel is that stage's
        kst = {k: [own] for k in kst}
    dot = out_dir / f"{name}.dot"
    dot.write_text(to_dot(module, stages, title=f"{name} ({module.name}) after optimisation"))
    files["dot"] = dot.name
    png = render_dot(dot)
    if png is not None:
        files["png"] = png.name
    cost = program.get("cost") or {}
    # lower_ms/compile_ms of ``program`` time the report's own compilation, not the run's: the run's compile is
    # reported once, in breakdown.json's "compile"
    return {"name": name, "stage": own, "module": module.name, "steps": program.get("steps"),
            **{k: cost.get(k) for k in COST_KEYS}, **count_ops(module), "kernels": kst,
            "unscoped": origins(module, kst),
            "loop": loop_bytes(program.get("optimized_hlo") or "", stages, program.get("steps")), "files": files}


def write_compile_report(programs: Sequence[Mapping[str, Any]], stages: Sequence[str], out_dir: Path) -> dict[str, Any]:
    """Write every program's files and ``compile.json`` into ``out_dir``; the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    graphviz = shutil.which("dot")
    report = {
        "stages": list(stages),
        "backend": jax.default_backend(),
        "graphviz": graphviz is not None,
        "graphviz_note": (f"HLO graphs rendered with {graphviz}" if graphviz else
                          "Graphviz 'dot' is not installed: HLO graphs written as .dot only "
                          "(install graphviz, e.g. apt install graphviz, to get .png)"),
        "executables": [program_entry(p, stages, out_dir) for p in programs],
    }
    (out_dir / "compile.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
