"""``python -m lbm inspect target=NAME gradient=true ...``: the gradient program, compiled for a target without one.

Beside the forward chunk that ``inspect`` always compiles, ``gradient=true`` compiles the program of
``lbm.value_and_grad`` (lbm.diff) for the same run: ``gradient.wrt`` (config keys, comma-separated;
default the case's first key) and ``gradient.objective`` (default ``kinetic_energy``), over the run's
``steps``, checkpointed as the run's config says (``gradient.checkpoint``, ``.every``, ``.snapshots``: run
overrides like any other, default ``sqrt``). A gradient program has several
loops (the forward pass, and the backward pass with the recomputed segments inside it), so every kernel
of the whole program counts, times the iterations of the loops around it (lbm.hlo.program_traffic).
``gradient`` in inspect.json holds its kernels per step and bytes per cell and step (the traffic model
of lbm.hlo), their ratio to the forward chunk's, the bytes of each pass (forward, recompute, backward)
and one row per stage and pass (lbm.profiling.gradient); its HLO goes to ``gradient.hlo.txt``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lbm.errors import LbmError

GRADIENT_HLO_FILE = "gradient.hlo.txt"
OPTIONS = ("gradient", "gradient.wrt", "gradient.objective")
"""The command-line keys of the gradient program (not run overrides; the config's ``gradient`` section is one)."""


def gradient_options(args: list[str]) -> tuple[dict[str, str] | None, list[str]]:
    """(the gradient options, None without ``gradient=true``; the other arguments)."""
    options: dict[str, str] = {}
    rest = []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key in OPTIONS:
            options[key] = value
        else:
            rest.append(a)
    flag = options.pop("gradient", "false").lower()
    if flag not in ("true", "false"):
        raise LbmError(f"gradient={flag}: true (compile the gradient program too) or false")
    if flag == "false":
        if options:
            raise LbmError(f"{sorted(options)[0]} is given without gradient=true")
        return None, rest
    return options, rest


def gradient_program(overrides: list[str], options: dict[str, str], platform: str | None = None
                     ) -> tuple[Any, dict[str, Any], Any, list[str]]:
    """The jitted value-and-gradient function of the run for ``platform`` (default jax's backend), its example
    arguments, the Parameterisation and the keys."""
    import jax

    from lbm.diff.api import gradient_function, prepare_gradient
    from lbm.diff.parameters import case_keys
    from lbm.simulation import prepare

    wrt = [k for k in options.get("gradient.wrt", "").split(",") if k]
    if not wrt:
        wrt = [case_keys(prepare(overrides)[0])[0]]
    param = prepare_gradient(overrides, wrt)
    if param.case.run.mode != "fused":
        raise LbmError("gradient=true inspects the fused gradient program: set mode=fused")
    objective = options.get("gradient.objective", "kinetic_energy")
    fn = gradient_function(param, wrt, objective, platform=platform)
    values = {k: jax.ShapeDtypeStruct((), param.setup.dtype) for k in wrt}
    return fn, values, param, wrt


def gradient_record(text: str, param: Any, wrt: list[str], forward_bytes: float, options: dict[str, str]
                    ) -> dict[str, Any]:
    """The gradient part of inspect.json from the compiled program's HLO ``text``."""
    import numpy as np

    from lbm.engines.timestep import active_stages
    from lbm.hlo import program_traffic
    from lbm.profiling.gradient import BACKWARD, RECOMPUTE, UNKNOWN, UNKNOWN_PASS, kernel_rows, row_order, row_pass
    from lbm.stages import STAGES

    stages = active_stages(param.setup)
    labels = kernel_rows(text, stages)
    steps = param.case.run.steps
    per = float(np.prod(param.setup.shape)) * steps
    bytes_of: dict[str, float] = defaultdict(float)
    runs: dict[str, int] = defaultdict(int)
    for k, times in program_traffic(text, STAGES):
        row = labels.get(k.name, UNKNOWN)
        bytes_of[row] += (k.bytes_read + k.bytes_written) * times / per
        runs[row] += times
    total = sum(bytes_of.values())
    passes = {"forward": 0.0, RECOMPUTE: 0.0, BACKWARD: 0.0, UNKNOWN_PASS: 0.0}
    for row, b in bytes_of.items():
        kinds = row_pass(row).split("+")
        for kind in kinds:
            passes[kind] += b / len(kinds)
    return {
        "wrt": list(wrt), "objective": options.get("gradient.objective", "kinetic_energy"),
        "checkpoint": param.case.run.gradient.checkpoint, "steps": steps, "hlo_file": GRADIENT_HLO_FILE,
        "kernels_per_step": sum(runs.values()) / steps, "bytes_per_cell_step": total,
        "forward_bytes_per_cell_step": forward_bytes,
        "ratio_to_forward": total / forward_bytes if forward_bytes else None,
        "passes_bytes_per_cell_step": passes,
        "rows": [{"stage": row, "kernels_per_step": runs[row] / steps, "bytes_per_cell_step": bytes_of[row]}
                 for row in sorted(bytes_of, key=row_order(stages))],
        "traffic_model": "every kernel of the program, read and written bytes as lbm.hlo's loop model counts them, "
                         "times the iterations of the loops around it, per cell of the grid and simulated step",
    }


def format_gradient(g: dict[str, Any]) -> list[str]:
    """The gradient part of the inspect report."""
    lines = [f"gradient program ({g['objective']} by {', '.join(g['wrt'])}, checkpoint "
             f"{g['checkpoint']}, {g['steps']} steps): {g['kernels_per_step']:.1f} kernels per step, "
             f"{g['bytes_per_cell_step']:.1f} B per cell and step = {g['ratio_to_forward']:.2f} x the forward chunk's "
             f"{g['forward_bytes_per_cell_step']:.1f} B",
             "  " + ", ".join(f"{k} {v:.1f} B" for k, v in g["passes_bytes_per_cell_step"].items())]
    width = max(len(r["stage"]) for r in g["rows"])
    lines += [f"  {r['stage']:<{width}}  {r['kernels_per_step']:7.2f} kernels/step  {r['bytes_per_cell_step']:8.1f} B/cell/step"
              for r in g["rows"]]
    return lines


def inspect_gradient(overrides: list[str], options: dict[str, str], target: Any, forward: dict[str, Any]
                     ) -> tuple[dict[str, Any], str]:
    """Compile the gradient program of the run for ``target`` (one device); (its record, its HLO text)."""
    from lbm.bench.targets import compile_chunk, target_sharding

    if target.devices > 1:
        raise LbmError("gradient=true compiles for one device: a target of one chip (e.g. target=h100)")
    fn, values, param, wrt = gradient_program(overrides, options, target.platform)
    text, compile_s, _ = compile_chunk(fn, (values,), target_sharding(target), target)
    record = gradient_record(text, param, wrt, forward["bytes_per_cell_step"], options)
    record["compile_time_s"] = round(compile_s, 3)
    return record, text
