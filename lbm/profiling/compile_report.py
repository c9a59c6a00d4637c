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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from lbm.cases.base import Setup
from lbm.hlo import count_ops, kernel_stages, parse_hlo, to_dot
from lbm.stepper import STAGES, FusedStepper, stage_functions, timestep

FUSED = "fused_step"
"""Name of the fused one-step executable in the report."""


def _spec(x: Any) -> Any:
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def stage_arg_specs(setup: Setup) -> dict[str, tuple[Any, ...]]:
    """The argument shapes/dtypes each active stage receives inside one timestep (traced abstractly)."""
    fns = stage_functions(setup)
    seen: dict[str, tuple[Any, ...]] = {}

    def recording(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            seen.setdefault(name, jax.tree_util.tree_map(_spec, args))
            return fn(*args)
        return wrapper

    rec = {name: recording(name, fn) for name, fn in fns.items()}
    f = setup.initial_populations()
    arrays = jax.tree_util.tree_map(jax.numpy.asarray, setup.arrays)
    jax.eval_shape(lambda f, a: timestep(rec, f, a), _spec(f), jax.tree_util.tree_map(_spec, arrays))
    return seen


def _cost(compiled: Any) -> dict[str, float | None]:
    try:
        ca = compiled.cost_analysis()
    except Exception:  # some backends do not implement it
        ca = None
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else None
    ca = ca or {}
    return {"flops": ca.get("flops"), "bytes_accessed": ca.get("bytes accessed"),
            "transcendentals": ca.get("transcendentals")}


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


def compile_one(name: str, jitted: Any, specs: tuple[Any, ...], out_dir: Path, stages: list[str],
                own_stage: str | None = None, make_jaxpr: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Lower and compile one executable (timed), write its texts, return its summary."""
    t0 = time.perf_counter()
    lowered = jitted.lower(*specs)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    files: dict[str, str] = {}

    def write(suffix: str, text: str) -> None:
        p = out_dir / f"{name}{suffix}"
        p.write_text(text)
        files[suffix.lstrip(".")] = p.name

    if make_jaxpr is not None:
        write(".jaxpr.txt", str(make_jaxpr(*specs)))
    write(".stablehlo.mlir", lowered.as_text())
    try:
        write(".hlo.txt", lowered.as_text(dialect="hlo"))
    except Exception:  # older jax: no dialect argument
        write(".hlo.txt", lowered.compiler_ir(dialect="hlo").as_hlo_text())
    opt = compiled.as_text() or ""
    write(".opt.hlo.txt", opt)
    module = parse_hlo(opt)
    kst = kernel_stages(module, stages)
    if own_stage is not None:  # a single stage's executable: every kernel is that stage's
        kst = {k: [own_stage] for k in kst}
    write(".dot", to_dot(module, stages, title=f"{name} ({module.name}) after optimisation"))
    png = render_dot(out_dir / f"{name}.dot")
    if png is not None:
        files["png"] = png.name
    return {"name": name, "module": module.name, "lower_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3,
            **_cost(compiled), **count_ops(module), "kernels": kst, "files": files}


def compile_report(setup: Setup, out_dir: Path, fused_steps: int = 1) -> dict[str, Any]:
    """Compile every active stage alone and the fused ``fused_steps``-step chunk; write files and compile.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = stage_arg_specs(setup)
    fns = stage_functions(setup)
    stages = [s for s in STAGES if s in fns]
    executables = []
    for stage in stages:
        # Jitted exactly as the instrumented stepper does (same module and kernel names as in the trace).
        fn = fns[stage]
        executables.append(compile_one(stage, jax.jit(fn), specs[stage], out_dir, stages, own_stage=stage,
                                       make_jaxpr=jax.make_jaxpr(fn)))
    fused = FusedStepper(setup)
    f_spec = _spec(setup.initial_populations())
    a_spec = jax.tree_util.tree_map(_spec, fused.arrays)
    chunk = fused._chunk_fn(fused_steps)
    executables.append(compile_one(FUSED, chunk, (f_spec, a_spec), out_dir, stages,
                                   make_jaxpr=jax.make_jaxpr(lambda f, a: chunk(f, a))))
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
