"""Compile report: per stage and for the fused step, jaxpr, HLO before/after optimisation, kernels, cost.

Each executable is lowered and compiled again here with ``jax.jit(fn).lower(*specs).compile()``
(timed), on the argument shapes the stage sees inside a timestep. Written to
``profile/compile/``: ``<name>.jaxpr.txt``, ``<name>.stablehlo.mlir``, ``<name>.hlo.txt``
(before optimisation), ``<name>.opt.hlo.txt`` (after), ``<name>.dot`` and, when Graphviz's
``dot`` is installed, ``<name>.png``; ``compile.json`` sums it up (XLA's ``cost_analysis()``:
flops and bytes accessed; numbers of fusions and kernels; kernel → stages).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jax

from lbm.hlo import count_ops, kernel_stages, parse_hlo, to_dot
from lbm.stages import STAGES


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


def report_program(prog: dict[str, Any], out_dir: Path, stages: list[str]) -> dict[str, Any]:
    """Write one program's texts (as an engine describes it) and return its summary."""
    name = prog["name"]
    files: dict[str, str] = {}

    def write(suffix: str, text: str) -> None:
        p = out_dir / f"{name}{suffix}"
        p.write_text(text)
        files[suffix.lstrip(".")] = p.name

    write(".jaxpr.txt", prog["jaxpr"])
    write(".stablehlo.mlir", prog["stablehlo"])
    write(".hlo.txt", prog["hlo"])
    opt = prog["optimized_hlo"]
    write(".opt.hlo.txt", opt)
    module = parse_hlo(opt)
    kst = kernel_stages(module, stages)
    if prog.get("stage") is not None:  # a single stage's executable: every kernel is that stage's
        kst = {k: [prog["stage"]] for k in kst}
    write(".dot", to_dot(module, stages, title=f"{name} ({module.name}) after optimisation"))
    png = render_dot(out_dir / f"{name}.dot")
    if png is not None:
        files["png"] = png.name
    cost = prog.get("cost") or {}
    return {"name": name, "module": module.name, "lower_ms": prog["lower_ms"], "compile_ms": prog["compile_ms"],
            "flops": cost.get("flops"), "bytes_accessed": cost.get("bytes_accessed"),
            "transcendentals": cost.get("transcendentals"), **count_ops(module), "kernels": kst, "files": files}


def compile_report(programs: list[dict[str, Any]], stages: list[str], out_dir: Path, fused_steps: int = 1
                   ) -> dict[str, Any]:
    """Write the programs an engine runs (its ``describe()``) and compile.json; return the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stages = [s for s in STAGES if s in stages]
    executables = [report_program(p, out_dir, stages) for p in programs]
    graphviz = shutil.which("dot")
    report = {
        "stages": stages,
        "fused_steps": fused_steps,
        "backend": jax.default_backend(),
        "graphviz": graphviz is not None,
        "graphviz_note": (f"HLO graphs rendered with {graphviz}" if graphviz else
                          "Graphviz 'dot' is not installed: HLO graphs written as .dot only "
                          "(install graphviz, e.g. apt install graphviz, to get .png)"),
        "clock": "host wall clock around jit(...).lower(...) and .compile() in this report (a second compile)",
        "executables": executables,
    }
    (out_dir / "compile.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
