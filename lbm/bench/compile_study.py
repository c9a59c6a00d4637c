"""Compile against run: how compilation cost scales and when ahead-of-time work pays off.

Measures, for the fused step: lower and compile seconds against grid size and steps per
dispatch; the first call of ``jax.jit`` (trace + compile + run) against an AOT-compiled
call; loading a serialized executable; and the persistent compilation cache
(``jax_compilation_cache_dir``) cold and warm, each in a fresh process. Per-stage compile
seconds come from the instrumented stepper.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

from lbm.errors import LbmError


def _setup(overrides: list[str]) -> Any:
    from lbm.simulation import prepare

    return prepare(overrides)[1]


def fused_compile(overrides: list[str], steps: int, repeats: int = 3) -> dict[str, Any]:
    """Lower/compile seconds of an n-step fused chunk, its first jit call and steady run time."""
    from lbm.engines import make_engine
    from lbm.engines.timestep import step_index

    setup = _setup(overrides)
    stepper = make_engine(setup)
    f = setup.initial_populations()
    fn = stepper.chunk_function(steps)
    t0 = time.perf_counter()
    lowered = fn.lower(f, stepper.params, step_index(0))
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        x = setup.initial_populations()
        jax.block_until_ready(x)
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(x, stepper.params, step_index(0)))
        runs.append(time.perf_counter() - t0)
    fresh = stepper.chunk_function(steps)  # a new jit object: the first call traces and compiles again
    x = setup.initial_populations()
    t0 = time.perf_counter()
    jax.block_until_ready(fresh(x, stepper.params, step_index(0)))
    t_first = time.perf_counter() - t0
    from jax.experimental import serialize_executable

    blob = serialize_executable.serialize(compiled)
    t0 = time.perf_counter()
    serialize_executable.deserialize_and_load(*blob)
    t_load = time.perf_counter() - t0
    return {"grid": list(setup.shape), "steps_per_dispatch": steps, "lower_s": t_lower, "compile_s": t_compile,
            "first_jit_call_s": t_first, "run_s_median": statistics.median(runs),
            "load_serialized_s": t_load, "serialized_bytes": len(blob[0])}


def stage_compiles(overrides: list[str]) -> dict[str, float]:
    """Compile seconds of each instrumented stage (one throw-away step)."""
    from lbm.engines.instrumented import InstrumentedEngine

    setup = _setup(overrides)
    stepper = InstrumentedEngine(setup)
    stepper.compile(setup.initial_populations(), 1)
    return dict(stepper.compile_times)


def cache_probe(overrides: list[str], steps: int, cache_dir: str | None) -> dict[str, float]:
    """In this process: compile the fused chunk with the persistent cache in ``cache_dir`` (None = off)."""
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    rec = fused_compile(overrides, steps, repeats=1)
    return {"lower_s": rec["lower_s"], "compile_s": rec["compile_s"]}


def persistent_cache(overrides: list[str], steps: int) -> dict[str, Any]:
    """Compile seconds in fresh processes: cache off, cache cold (empty dir), cache warm (second process), and the
    cache files each wrote (the warm process writes none: every executable came from the cache)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache:
        files = 0
        for label, directory in (("off", None), ("cold", cache), ("warm", cache)):
            code = ("import json,sys; from lbm.bench.compile_study import cache_probe; "
                    f"print(json.dumps(cache_probe({overrides!r}, {steps}, {directory!r})))")
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # "off" is off
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                                  env={**env, "PYTHONWARNINGS": "ignore"})
            if proc.returncode != 0:
                raise LbmError(f"persistent-cache probe failed: {proc.stderr.strip().splitlines()[-1:]}")
            out[label] = json.loads(proc.stdout.strip().splitlines()[-1])
            now = sum(1 for _ in Path(cache).rglob("*") if _.is_file())
            out[label]["new_cache_files"], files = now - files, now
        out["cache_files"] = sum(1 for _ in Path(cache).rglob("*") if _.is_file())
    return out


def main(args: list[str]) -> int:
    """``python -m lbm study compile [--grids 64,128,256,512] [--steps 1,10,100,1000] [--out DIR] [overrides]``."""
    import datetime

    from lbm.bench.study_args import compile_parser

    parser = compile_parser()
    try:
        ns = parser.parse_args(args)
        grids = [int(v) for v in ns.grids.split(",") if v]
        steps = [int(v) for v in ns.steps.split(",") if v]
    except (SystemExit, ValueError) as exc:
        if isinstance(exc, SystemExit) and exc.code == 0:
            return 0
        raise LbmError("bad arguments for 'study compile' (see python -m lbm study compile --help)") from None
    if not grids or min(grids) < 4 or not steps or min(steps) < 1:
        raise LbmError("--grids values must be >= 4 and --steps values >= 1")
    out = Path(ns.out) if ns.out else Path("outputs/studies/compile") / datetime.datetime.now().strftime(
        "%Y-%m-%d/%H-%M-%S")
    if (out / "compile.json").exists():
        raise LbmError(f"{out} already holds a study (compile.json); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    base = ["case=taylor_green", *ns.overrides]
    mid = grids[len(grids) // 2]
    result: dict[str, Any] = {"study": "compile", "jax": jax.__version__, "device": str(jax.devices()[0])}
    print("compile study: grid sizes ...")
    result["vs_grid"] = [fused_compile([*base, f"grid.nx={n}", f"grid.ny={n}"], 10) for n in grids]
    print("compile study: steps per dispatch ...")
    result["vs_steps"] = [fused_compile([*base, f"grid.nx={mid}", f"grid.ny={mid}"], s) for s in steps]
    print("compile study: stages (instrumented) ...")
    result["stages_taylor_green"] = stage_compiles([*base, f"grid.nx={mid}", f"grid.ny={mid}"])
    result["stages_cylinder"] = stage_compiles(["case=cylinder", *ns.overrides])
    print("compile study: persistent compilation cache (3 fresh processes) ...")
    result["persistent_cache"] = persistent_cache([*base, f"grid.nx={mid}", f"grid.ny={mid}"], 10)
    (out / "compile.json").write_text(json.dumps(result, indent=2) + "\n")
    md = report(result)
    (out / "compile.md").write_text(md)
    plot(result, out)
    print(md)
    print(f"wrote {out}/compile.json, compile.md, compile_vs_grid.png, compile_vs_steps.png")
    return 0


def report(r: dict[str, Any]) -> str:
    """Markdown tables and the break-even of AOT compilation, from the measurements."""
    lines = [f"# Compile vs run ({r['device']}, jax {r['jax']})", "",
             "## Fused step against grid size (10 steps per dispatch)", "",
             "| grid | lower s | compile s | first jit call s | run s (10 steps) | load serialized s |",
             "|---|---|---|---|---|---|"]
    for x in r["vs_grid"]:
        lines.append(f"| {'x'.join(map(str, x['grid']))} | {x['lower_s']:.3f} | {x['compile_s']:.3f} | "
                     f"{x['first_jit_call_s']:.3f} | {x['run_s_median']:.4f} | {x['load_serialized_s']:.4f} |")
    lines += ["", "## Fused step against steps per dispatch", "",
              "| grid | steps | lower s | compile s | run s | run ms per step |", "|---|---|---|---|---|---|"]
    for x in r["vs_steps"]:
        lines.append(f"| {'x'.join(map(str, x['grid']))} | {x['steps_per_dispatch']} | {x['lower_s']:.3f} | "
                     f"{x['compile_s']:.3f} | {x['run_s_median']:.4f} | "
                     f"{x['run_s_median'] / x['steps_per_dispatch'] * 1e3:.3f} |")
    lines += ["", "## Stage compile seconds (instrumented mode)", "", "| stage | taylor_green s | cylinder s |",
              "|---|---|---|"]
    for stage in r["stages_cylinder"]:
        tg = r["stages_taylor_green"].get(stage)
        lines.append(f"| {stage} | {'skipped' if tg is None else f'{tg:.3f}'} | {r['stages_cylinder'][stage]:.3f} |")
    pc = r["persistent_cache"]
    lines += ["", "## Persistent compilation cache (fresh process each)", "",
              f"- off: compile {pc['off']['compile_s']:.3f} s; cold: {pc['cold']['compile_s']:.3f} s; "
              f"warm: {pc['warm']['compile_s']:.3f} s ({pc['cache_files']} cache files)"]
    g = r["vs_grid"]
    lines.append(f"- compile time from the smallest to the largest grid: x{g[-1]['compile_s'] / g[0]['compile_s']:.2f} "
                 f"(the program does not depend on the grid size beyond shapes)")
    for x in (g[0], g[-1]):
        steps_equal = x["compile_s"] / x["run_s_median"] * x["steps_per_dispatch"]
        lines.append(f"- on {'x'.join(map(str, x['grid']))} compiling costs as much as {steps_equal:.0f} steps: "
                     f"shorter runs are dominated by compilation, and there the persistent cache (warm "
                     f"{pc['warm']['compile_s']:.3f} s) or a serialized executable (load {x['load_serialized_s']:.4f} s) "
                     "pays off")
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], out: Path) -> None:
    """compile_vs_grid.png and compile_vs_steps.png."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    for key, xkey, xlabel, name in (("vs_grid", "grid", "cells", "compile_vs_grid.png"),
                                    ("vs_steps", "steps_per_dispatch", "steps per dispatch", "compile_vs_steps.png")):
        rows = r[key]
        xs = [x["grid"][0] * x["grid"][1] if xkey == "grid" else x[xkey] for x in rows]
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        ax.plot(xs, [x["compile_s"] for x in rows], "o-", label="compile (XLA)")
        ax.plot(xs, [x["lower_s"] for x in rows], "s-", label="trace + lower")
        ax.plot(xs, [x["first_jit_call_s"] for x in rows], "^-", label="first jit call")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
