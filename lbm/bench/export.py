"""Reproduction bundle: each stage and the fused step exported with ``jax.export``, with their input shapes.

The bundle runs without lbm (``scripts/rerun_export.py``), under another JAX version, or
attached to a bug report: a slow stage can be re-timed in isolation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
from jax import export

from lbm.cases.base import Setup
from lbm.engines.base import spec_of
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.timestep import step_index
from lbm.engines.xla import XlaEngine

PLATFORMS = ("cpu", "cuda")


def flat(fn: Any, args: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """``fn`` as a function of the leaves of ``args`` returning leaves: exported modules then need no lbm types."""
    leaves, tree = jax.tree_util.tree_flatten(args)

    def call(*xs: Any) -> Any:
        return jax.tree_util.tree_leaves(fn(*jax.tree_util.tree_unflatten(tree, xs)))

    return call, leaves


def _export(fn: Any, args: list[Any]) -> tuple[Any, list[str]]:
    """Export for CPU and CUDA when both lower, else for the current platform alone."""
    try:
        return export.export(jax.jit(fn), platforms=PLATFORMS)(*args), list(PLATFORMS)
    except Exception:  # some lowerings exist only for the local platform
        exp = export.export(jax.jit(fn))(*args)
        return exp, list(exp.platforms)


def write_bundle(setup: Setup, out_dir: Path, fused_steps: int = 10, context: dict[str, Any] | None = None) -> Path:
    """Export every stage and an n-step fused chunk into ``out_dir``; returns the manifest path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    stages = InstrumentedEngine(setup)
    inputs, params = stages.stage_inputs(), spec_of(stages.params)
    for name in setup.stages:
        exp, platforms = _export(*flat(stages.stage_function(name), (inputs[name], params)))
        path = out_dir / f"stage_{name}.jaxexport"
        path.write_bytes(exp.serialize())
        entries.append({"name": name, "kind": "stage", "file": path.name, "platforms": platforms,
                        "inputs": [[list(a.shape), str(a.dtype)] for a in exp.in_avals]})
    fused = XlaEngine(setup)  # the portable pure-JAX step (no native custom calls)
    f = jax.ShapeDtypeStruct((setup.lattice.q, *setup.shape), setup.dtype)
    exp, platforms = _export(*flat(fused.chunk_function(fused_steps), (f, spec_of(fused.params), spec_of(step_index(0)))))
    path = out_dir / f"fused_{fused_steps}steps.jaxexport"
    path.write_bytes(exp.serialize())
    entries.append({"name": f"fused[{fused_steps}]", "kind": "fused", "steps": fused_steps, "file": path.name,
                    "platforms": platforms, "inputs": [[list(a.shape), str(a.dtype)] for a in exp.in_avals]})
    manifest = {
        "format": "lbm-export-1", "jax": jax.__version__, "lattice": setup.lattice.name, "grid": list(setup.shape),
        "dtype": str(setup.dtype), "cells": int(setup.solid.size), "context": context or {}, "entries": entries,
        "rerun": "python scripts/rerun_export.py DIR  (needs only jax, numpy and flatbuffers)",
    }
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def main(args: list[str]) -> int:
    """``python -m lbm study export [hydra overrides] [--out DIR]``: write the reproduction bundle of a case."""
    from lbm.bench.study_args import export_parser
    from lbm.config.command_line import split_hydra_args
    from lbm.errors import LbmError
    from lbm.simulation import prepare

    parser = export_parser()
    ns, rest = parser.parse_known_args(args)
    out = ns.out
    overrides, multirun, _ = split_hydra_args(rest, "study export", parser.option_names())
    if multirun:
        raise LbmError("study export takes one configuration, not a sweep")
    case, setup = prepare(overrides)
    run = case.run
    target = Path(out) if out else Path("outputs") / "export" / f"{run.case}_{'x'.join(map(str, setup.shape))}"
    if (target / "manifest.json").exists():
        raise LbmError(f"{target} already holds a bundle (manifest.json); choose another --out")
    manifest = write_bundle(setup, target, context={"case": run.case, "overrides": overrides})
    print(f"wrote {manifest.parent}: " + ", ".join(e["file"] for e in json.loads(manifest.read_text())["entries"]))
    print(f"re-run it anywhere: python scripts/rerun_export.py {manifest.parent}")
    return 0
