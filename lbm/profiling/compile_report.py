"""Compile report: the texts of the programs a run executes, their kernels and the stages in each, their cost.

The programs come as data (the engine's ``describe()``: one dict per program with its name,
its own stage or None, ``jaxpr``, ``stablehlo``, ``hlo`` before and ``optimized_hlo`` after
optimisation, XLA's ``cost`` and the ``lower_ms``/``compile_ms`` the engine measured);
nothing is compiled here. Written to ``profile/compile/``: ``<name>.jaxpr.txt``,
``<name>.stablehlo.mlir``, ``<name>.hlo.txt``, ``<name>.opt.hlo.txt``, ``<name>.dot`` and,
when Graphviz's ``dot`` is installed, ``<name>.png``; ``compile.json`` sums it up (cost,
numbers of fusions and kernels, kernel → stages, read from the optimised HLO by :mod:`lbm.hlo`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from lbm.hlo import count_ops, kernel_stages, parse_hlo, to_dot

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
    return {"name": name, "stage": own, "module": module.name, "lower_ms": program.get("lower_ms"),
            "compile_ms": program.get("compile_ms"), **{k: cost.get(k) for k in COST_KEYS}, **count_ops(module),
            "kernels": kst, "files": files}


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
        "clock": "lower_ms, compile_ms: host wall clock around lowering and compiling each program, as the engine "
                 "measured them",
        "executables": [program_entry(p, stages, out_dir) for p in programs],
    }
    (out_dir / "compile.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
