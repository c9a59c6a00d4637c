"""The finish of a run: fields, the case's files, plots, the monitor and metrics.json."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.cases import Case, Setup
from lbm.config import RunConfig
from lbm.engines import Engine
from lbm.errors import DivergenceError
from lbm.io.checkpoint import GLOB as CHECKPOINT_GLOB
from lbm.io.checkpoint import load_checkpoint
from lbm.io.fields import write_fields, write_json
from lbm.simulation.health import chunk_stats
from lbm.simulation.state import Position, Started, chunk_size

log = logging.getLogger("lbm")


def write_diverged(s: Started, metrics: dict[str, Any], last_good: tuple[int, np.ndarray] | None) -> None:
    """A diverged run's results: the fields of the last good state where one is kept, else metrics.json alone."""
    if last_good is not None:
        metrics["fields_from_step"] = last_good[0]
        finish(s, s.place(last_good[1]), metrics)  # from the host: the device holds one copy beside the diverged one
    else:
        write_metrics(s.run_dir, metrics)


def finish_diverged(s: Started, at: Position, exc: DivergenceError) -> None:
    """What a diverged run leaves: metrics.json with the error, and the fields of the newest healthy state."""
    metrics = build_metrics(s.run, s.setup, s.engine, at.step - s.start, at.t_run, "diverged") | {
        "diverged_at_step": at.step, "error": str(exc)}
    write_diverged(s, metrics, latest_good_state(s.run_dir, at.last_good))


def finish_interrupted(s: Started, at: Position) -> None:
    """What a run stopped by an exception leaves: metrics.json with the step it reached."""
    write_metrics(s.run_dir, build_metrics(s.run, s.setup, s.engine, at.step - s.start, at.t_run, "interrupted") | {
        "step_reached": at.step})


def finish_run(s: Started, at: Position) -> dict[str, Any]:
    """The results of a run that stepped to its end (or stopped early, or after a signal): its metrics, written."""
    profiled = s.profiler.window if s.profiler is not None else None
    metrics = build_metrics(s.run, s.setup, s.engine, at.step - s.start, at.t_run, at.status, profiled=profiled)
    metrics |= run_extent(s.run, s.start, at.step, at.stopped_early)
    finish(s, at.f, metrics)
    return metrics

def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json, written by the writing process alone."""
    if parallel.is_writer():
        write_json(run_dir / "metrics.json", metrics)


def run_extent(run: RunConfig, start: int, step: int, stopped_early: int | None) -> dict[str, Any]:
    """Where the run started and stopped: ``step_reached``, and why it stopped early or where it resumed."""
    out: dict[str, Any] = {"step_reached": step}
    if stopped_early is not None:
        out["steps"] = step
        out["stopped_early"] = f"steady after {step} steps (case tolerance reached; steps=auto allowed {run.steps})"
    if start:
        out["resumed_from_step"] = start
    return out


def latest_good_state(run_dir: Path, in_memory: tuple[int, np.ndarray] | None) -> tuple[int, np.ndarray] | None:
    """The newest healthy state: the in-memory copy of the last chunk, else the newest checkpoint."""
    if in_memory is not None:
        return in_memory
    found = sorted((run_dir / "checkpoints").glob(CHECKPOINT_GLOB))
    if not found:
        return None
    ckpt = load_checkpoint(found[-1])
    return ckpt["step"], ckpt["f"]


def finish(s: Started, f: jnp.ndarray, metrics: dict[str, Any]) -> None:
    """Write fields, the case's files, plots, the monitor and metrics.json (last, with the list of outputs)."""
    from lbm.cases.base import published_phrase, result_checks

    run, case, setup, engine, outputs, run_dir = s.run, s.case, s.setup, s.engine, s.outputs, s.run_dir
    if s.profiler is not None:
        metrics["profile"] = s.profiler.finish()
    reached = int(metrics.get("step_reached", run.steps))
    at = int(metrics.get("fields_from_step", reached))  # the step of the populations f
    fields = setup.written_fields(engine.fields(f, at))
    mass = float(chunk_stats(f, s.fluid, setup.lattice)[1])
    metrics["mass_rel_drift"] = mass / s.mass0 - 1.0
    own_metrics = case.metrics(setup, fields, reached)
    metrics.update(own_metrics)
    own = [k for k in case.summary_keys() if k in metrics]
    metrics.update(result_checks(case, setup, metrics, at, own))
    # a case's notes say why a result is missing or partial (e.g. no stationary window): the user sees them as warnings
    metrics["warnings"] += [f"{case.name}: {v}" for k, v in own_metrics.items() if k.endswith("_note") and v]
    if not parallel.is_writer():  # the shared files of the run directory come from process 0
        return
    write_fields(run_dir / "fields.npz", fields)
    written = ["fields.npz"] + case.write_outputs(run_dir, setup, fields, metrics)
    written.append(write_monitor(run_dir, outputs.monitor, s.mass0))
    written += outputs.files
    if run.output.plots:
        from lbm.io.plots import field_plots, monitor_plot

        written += field_plots(run_dir, fields, f"{run.case} Re={setup.reynolds:g}")
        if len(outputs.monitor) >= 2:
            written.append(monitor_plot(run_dir, outputs.monitor, s.mass0, case.monitor_series(), case.monitor_label,
                                        metrics.get("stationary_window_steps")))
    if run.output.frames and run.output.animation and len(outputs.frames) >= 2:
        from lbm.io.plots import animation

        written += animation(run_dir, outputs.frames)
    metrics["outputs"] = written + ["metrics.json"]
    write_json(run_dir / "metrics.json", metrics)
    log.info("wrote %s: %s", run_dir, ", ".join(metrics["outputs"]))
    log.info("result (%s): %s", metrics["status"], summary_line(case, metrics))
    if metrics.get("inside_published"):  # outside (or unmeasured) is a warning, below
        log.info(published_phrase(case.name, metrics))
    for warning in metrics["warnings"]:
        log.warning(warning)

def write_monitor(run_dir: Path, rows: list[tuple[int, float, float]], mass0: float) -> str:
    """monitor.csv: step, fluid mass, relative mass drift, kinetic energy (lattice units) per chunk."""
    with (run_dir / "monitor.csv").open("w") as fh:
        fh.write("step,mass,mass_rel_drift,kinetic_energy\n")
        for s, m, e in rows:
            fh.write(f"{s},{m:.12e},{m / mass0 - 1.0:.6e},{e:.9e}\n")
    return "monitor.csv"


def build_metrics(run: RunConfig, setup: Setup, engine: Engine, steps_timed: int, t_run: float,
                  status: str, profiled: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract fields of metrics.json common to all cases; ``profiled``: the profile window (its steps and
    loop seconds), which ``mlups`` leaves out."""
    cells = math.prod(setup.shape)
    n_prof, t_prof = (profiled["steps"], profiled["loop_seconds"]) if profiled else (0, 0.0)
    unprofiled_s = t_run - t_prof
    return {
        "status": status,
        "case": run.case,
        "lattice": run.lattice,
        "collision": run.collision,
        "mode": run.mode,
        "engine": engine.name,
        "engine_note": engine.note,
        "native_threads": engine.threads,  # the native kernel's threads sharing a step (lbm.engines.native.threads)
        "precision": run.precision,
        "grid": list(setup.shape),
        "cells": cells,
        "fluid_cells": int(setup.fluid.sum()),
        "steps": run.steps,
        "chunk_steps": chunk_size(run),
        **device_description(),
        "compile_time_s": engine.compile_time_s,
        "compile_times_s": dict(engine.compile_times),
        "wall_time_s": t_run,
        "mlups": cells * (steps_timed - n_prof) / unprofiled_s / 1e6 if unprofiled_s > 0 and steps_timed > n_prof
        else None,
        "mlups_clock": "host wall clock over the stepping loop, compilation excluded, one device sync per chunk"
        + (", the profiled steps left out" if profiled else ""),
        **({"profiled_steps": profiled} if profiled else {}),
        "parallel": parallel_description(run, engine),
        "tau": setup.tau,
        "nu": setup.nu,
        "u_lattice": run.flow.u_lattice,
        "reynolds": setup.reynolds,
        "mach": setup.derived["mach"],
        "derived": dict(setup.derived),
    }


def device_description() -> dict[str, Any]:
    """The default device and the software that drives it."""
    from lbm.environment import device_label, environment

    env = environment()
    return {"device": device_label(), "device_count": env["device_count"], "jax": env["jax"], "jaxlib": env["jaxlib"],
            "python": env["python"], "host": env["host_machine"]}




def parallel_description(run: RunConfig, engine: Engine) -> dict[str, Any]:
    """Devices, mesh, shard (cells per device along each grid axis), partitioner (the engine's: None on one device,
    else shard_map or gspmd) and processes of the run."""
    layout = engine.layout
    return {"devices": run.devices, "mesh": list(layout.shape) if layout is not None else None,
            "shard": list(layout.shard) if layout is not None else None,
            "partitioner": engine.partitioner,
            "processes": jax.process_count()}


RUN_SUMMARY_KEYS = ("mlups", "compile_time_s", "mass_rel_drift", "converged", "inside_published")
"""What the last log line shows of every run, before the case's own keys (:meth:`lbm.cases.Case.summary_keys`)."""


def summary_keys(case: Case, metrics: Mapping[str, Any]) -> list[str]:
    """The keys of ``metrics`` worth one log line at the end of a run: the run's, then the case's own."""
    return [k for k in (*RUN_SUMMARY_KEYS, *case.summary_keys()) if k in metrics]


def summary_line(case: Case, metrics: Mapping[str, Any]) -> str:
    """``key=value, ...`` of :func:`summary_keys` (floats to 6 significant digits)."""
    summary = {key: metrics[key] for key in summary_keys(case, metrics)}
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())
