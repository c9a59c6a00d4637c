"""Runs sharded cases on forced CPU devices for tests/test_parallel.py (in a subprocess: XLA_FLAGS before jax starts).

python tests/helpers/parallel_worker.py TASK JSON_ARGS  ->  one JSON line on stdout.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

from lbm import parallel
from lbm.config import load
from lbm.engines import make_engine
from lbm.errors import LbmError
from lbm.simulation import prepare, resolve_parallel, simulate


def advance(overrides: list[str], mesh: tuple[int, ...] | None, steps: int, mode: str = "fused",
            partitioner: str = "shard_map", setup_change: Any = None, engine: str = "xla"
            ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
    """Populations and per-step outputs after ``steps`` steps of ``engine`` on ``mesh`` (None: one device);
    ``engine="plan"``: the xla step with the per-shard plan (the fallback for conditions without a dense mesh
    form), built directly."""
    case, setup = prepare(overrides)
    if setup_change is not None:
        setup = setup_change(setup)
    if engine == "plan" and mesh is not None:
        from lbm.engines.sharded import Layout, plan_engine

        engine = plan_engine(setup, Layout(setup, mesh))
    else:
        engine = make_engine(setup, mode, engine="xla" if engine == "plan" else engine, mesh=mesh,
                             partitioner=partitioner)
    f = setup.initial_populations()
    if mesh is not None:
        f = engine.place(f)
    engine.compile(f, steps)
    f, aux = engine.advance(f, steps, 0)
    return parallel.to_host(f), {k: np.asarray(v) for k, v in aux.items()}, engine


def pressure_outlet(setup: Any) -> Any:
    """The setup with its outlet (a condition of the outflow stage) replaced by a Zou-He pressure outlet at density 1."""
    from lbm.boundaries import PressureOutlet

    return dataclasses.replace(setup, boundaries=tuple(PressureOutlet(rho=1.0) if bc.stage == "outflow" else bc
                                                       for bc in setup.boundaries))


SETUP_CHANGES = {"pressure_outlet": pressure_outlet}
"""Setup changes a case of ``equality`` may name (payload ``changes``: label -> name), for conditions no case's
configuration puts where a test needs them (schafer_turek's pressure outlet is never on a mesh split along x:
its nx = 22 N + 1 is odd)."""


REFERENCES: dict[tuple[Any, ...], tuple[np.ndarray, dict[str, np.ndarray]]] = {}
"""The 1-device runs of this process, per (overrides, steps, setup change, engine): a batch of equality payloads
(``batch``) compares several meshes and engines with the same reference."""


def reference(overrides: list[str], steps: int, change: str | None, engine: str = "xla"
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Populations and per-step outputs of the 1-device run of ``engine`` (advance with mesh None), made once."""
    key = (tuple(overrides), steps, change, engine)
    if key not in REFERENCES:
        f, aux, _ = advance(overrides, None, steps, setup_change=SETUP_CHANGES[change] if change else None,
                            engine=engine)
        REFERENCES[key] = (f, aux)
    return REFERENCES[key]


def equality(args: dict[str, Any]) -> dict[str, Any]:
    """Max |difference| of populations and forces between each mesh and the 1-device xla run, per case; a case
    may name another engine (5th entry), then ``same`` is the difference from that engine on one device.
    ``precision`` (default float64) for every run, ``precisions``: label -> the precision of that case;
    ``changes``: label -> a SETUP_CHANGES name for that case."""
    out = {}
    for label, overrides, meshes, modes, *name in args["cases"]:
        precision = args.get("precisions", {}).get(label, args.get("precision", "float64"))
        jax.config.update("jax_enable_x64", precision == "float64")
        overrides = list(overrides) + [f"precision={precision}"]
        named = args.get("changes", {}).get(label)
        change = SETUP_CHANGES[named] if named else None
        ref, aux_ref = reference(overrides, args["steps"], named)
        same = reference(overrides, args["steps"], named, name[0])[0] if name and args.get("same") else None
        for mesh in meshes:
            for mode in modes:
                f, aux, engine = advance(overrides, tuple(mesh), args["steps"], mode, setup_change=change,
                                         engine=(name or ["xla"])[0])
                out[f"{label}|{'x'.join(map(str, mesh))}|{mode}"] = {
                    "f": float(np.abs(f - ref).max()),
                    "force": max((float(np.abs(aux[k] - aux_ref[k]).max()) for k in aux_ref), default=0.0),
                    "pieces": [p[0] for p in engine.pieces] if hasattr(engine, "pieces") else list(engine.stage_names),
                    "engine": type(engine).__name__,
                    "same": None if same is None else float(np.abs(f - same).max()),
                }
    return out


def vortex(args: dict[str, Any]) -> dict[str, Any]:
    """A Lamb-Oseen vortex carried by a uniform flow across the shard faces of a 4x1 mesh, against one device."""
    jax.config.update("jax_enable_x64", True)
    nx, ny, steps, drift = 64, 32, args["steps"], 0.05
    overrides = ["case=taylor_green", f"grid.nx={nx}", f"grid.ny={ny}", "precision=float64", "flow.reynolds=200"]

    def carried(setup: Any) -> Any:
        x, y = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5, indexing="ij")
        dx, dy = x - 12.0, y - ny / 2
        r2, core = dx * dx + dy * dy, 4.0
        swirl = 0.05 * np.exp(-r2 / (2 * core * core))
        u = np.stack([drift - swirl * dy / core, swirl * dx / core])
        return dataclasses.replace(setup, u0=u, rho0=np.ones((nx, ny)))

    ref, _, engine = advance(overrides, None, steps, setup_change=carried)
    f, _, sharded = advance(overrides, (4, 1), steps, setup_change=carried)
    fields_ref = engine.fields(jax.numpy.asarray(ref), steps)
    fields = sharded.fields(sharded.place(f), steps)
    u = fields["u"]
    vorticity = np.gradient(u[1], axis=0) - np.gradient(u[0], axis=1)
    centre = float(np.unravel_index(np.argmax(np.abs(vorticity)), vorticity.shape)[0])
    # the jump of vorticity between neighbouring columns, at the shard faces and elsewhere
    jumps = np.abs(np.diff(vorticity, axis=0)).max(axis=1)
    faces = [15, 31, 47]
    return {"f": float(np.abs(f - ref).max()), "u": float(np.abs(u - fields_ref["u"]).max()),
            "centre_x": centre, "face_jump": float(jumps[faces].max()),
            "interior_jump": float(np.delete(jumps, faces).max())}


def refusals(args: dict[str, Any]) -> dict[str, Any]:
    """The one-line messages of bad parallel settings."""
    out = {}
    for overrides in args["overrides"]:
        try:
            resolve_parallel(load(list(overrides)))
            out[" ".join(overrides)] = None
        except LbmError as exc:
            out[" ".join(overrides)] = str(exc)
    return out


def run_dirs(args: dict[str, Any]) -> dict[str, Any]:
    """Runs through simulate (fields, VTK, checkpoints, resume) into the given directories."""
    out = {}
    for name, overrides in args["runs"]:
        run = load(list(overrides))
        try:
            metrics = simulate(run, Path(args["root"]) / name)
            out[name] = {"status": metrics["status"], "parallel": metrics["parallel"], "engine": metrics["engine"]}
        except LbmError as exc:
            out[name] = {"error": str(exc)}
    return out


TASKS = {"equality": equality, "vortex": vortex, "refusals": refusals, "run_dirs": run_dirs}


def tasks(args: dict[str, Any]) -> dict[str, Any]:
    """Several tasks in this one process (one start of JAX and lbm): task name -> its payload, in order."""
    return {name: TASKS[name](payload) for name, payload in args.items()}


def batch(args: dict[str, Any]) -> dict[str, Any]:
    """Several payloads, of any tasks, in this one process: label -> [task name, payload], in order."""
    return {label: TASKS[task](payload) for label, (task, payload) in args.items()}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's settings, as in a test process
    from helpers.suite import compose_once, tune_gc

    compose_once()  # a batch loads each configuration for its 1-device reference and again for every mesh and mode
    tune_gc()
    task, payload = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps((TASKS | {"tasks": tasks, "batch": batch})[task](payload)))
