"""The run loop: build the case, compile, advance in chunks, check, observe, checkpoint, write the run directory.

:mod:`~lbm.simulation.start` (case, engine, resume, profiler, compilation), :mod:`~lbm.simulation.chunks` (the health
check, outputs and checkpoints of each chunk) and :mod:`~lbm.simulation.finish` (fields, plots, metrics.json).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from lbm import parallel
from lbm.cases.base import Snapshot
from lbm.config import RunConfig
from lbm.errors import DivergenceError
from lbm.io.fields import write_json
from lbm.progress import Progress
from lbm.simulation.chunks import (
    LAST_GOOD_MAX_BYTES,
    RHO_BOUNDS,
    Outputs,
    chunk_stats,
    diverged,
    first_bad_cell,
    interrupted_by,
    likely_cause,
    write_checkpoint,
)
from lbm.simulation.finish import (
    build_metrics,
    case_summary_keys,
    finish,
    latest_good_state,
    parallel_description,
    run_extent,
    write_diverged,
    write_metrics,
    write_monitor,
)
from lbm.simulation.start import (
    RESULT_FILES,
    check_float64_supported,
    check_resume,
    check_run_dir,
    chunk_lengths,
    chunk_size,
    compile_ahead,
    device_description,
    engine_for,
    identity,
    log_engine_choice,
    log_parameters,
    make_case,
    prepare,
    resolve_parallel,
    resume,
    sharded_placement,
    start_profiler,
)
from lbm.stopping import StopSignals

log = logging.getLogger("lbm")

__all__ = [
    "LAST_GOOD_MAX_BYTES", "RESULT_FILES", "RHO_BOUNDS", "Outputs", "build_metrics", "case_summary_keys",
    "check_float64_supported", "check_resume", "check_run_dir", "chunk_lengths", "chunk_size", "chunk_stats",
    "compile_ahead", "device_description", "diverged", "engine_for", "finish", "first_bad_cell", "identity",
    "interrupted_by", "latest_good_state", "likely_cause", "log_engine_choice", "log_parameters", "make_case",
    "parallel_description", "prepare", "resolve_parallel", "resume", "run_extent", "sharded_placement", "simulate",
    "start_profiler", "write_checkpoint", "write_diverged", "write_metrics", "write_monitor",
]


def simulate(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Run a validated configuration and write metrics.json, fields.npz, case files and plots into ``run_dir``."""
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    case, setup = prepare(run)
    parallel.own_log_file(run_dir)  # after prepare: jax.distributed knows this process's index
    run = case.run
    log_parameters(run, setup)
    engine = engine_for(run, setup)
    place, fluid = sharded_placement(engine, setup)
    f = place(setup.initial_populations())
    outputs = Outputs(run, run_dir, engine)
    mass0 = float(chunk_stats(f, fluid, setup.lattice)[1])
    step, f, mass0 = resume(run, case, setup, outputs, place, f, mass0)
    start, k, every_ckpt = step, chunk_size(run), run.checkpoint.every
    profiler = start_profiler(run, run_dir, engine, place)
    compile_ahead(engine, f, run, start, k)
    checkpoint = functools.partial(write_checkpoint, run, run_dir, case, setup, outputs, mass0)
    t_run, last_good, stopped_early = 0.0, None, None
    status, error = "completed", None
    keep_host_copy = not every_ckpt and f.nbytes <= LAST_GOOD_MAX_BYTES
    progress = Progress(run.steps, start, math.prod(setup.shape), run.output.progress)
    interrupted = build_metrics(run, setup, engine, 0, 0.0, "interrupted")

    def record_hard_exit() -> None:  # from the signal watcher thread: no device access, one small file
        write_json(run_dir / "metrics.json", interrupted | {
            "steps_timed": step - start, "wall_time_s": t_run, "step_reached": step,
            "error": "stopped at once by a second signal; the last checkpoint (if any) is in checkpoints/"})

    try:
        with StopSignals(on_hard_exit=record_hard_exit) as signals:
            log.info("stepping from step %d to %d (Ctrl-C or SIGTERM: stop after this chunk with a checkpoint; "
                     "twice: stop at once)", step, run.steps)
            while step < run.steps:
                n = min(k - step % k, run.steps - step)
                if profiler is not None:
                    n = profiler.chunk_limit(step, n, t_run)
                if keep_host_copy:
                    last_good = (step, np.array(parallel.to_host(f), copy=True))
                t0 = time.perf_counter()
                f, aux = engine.advance(f, n, first_step=step)
                healthy, mass, energy = (np.asarray(v).item() for v in chunk_stats(f, fluid, setup.lattice))
                t_run += time.perf_counter() - t0
                step += n
                if not healthy:
                    raise diverged(f, step, setup)
                snapshot = Snapshot(step, aux, lambda f=f, step=step: engine.fields(f, step), populations=f)
                case.observe(snapshot)
                outputs.chunk_done(snapshot, mass, energy, k)
                if profiler is not None:
                    profiler.after_chunk(step, f, t_run)
                progress.update(step, t_run)
                if every_ckpt and step % every_ckpt == 0:
                    checkpoint(step, f)
                if run.steps_auto and step < run.steps and case.converged(step):
                    log.info("steady state reached after %d steps (steps=auto): stopping", step)
                    stopped_early = step
                    break
                if signals.signum is not None and step < run.steps:
                    status, error = "interrupted", interrupted_by(signals.signum, step, run, run_dir, checkpoint(step, f))
                    break
    except DivergenceError as exc:
        progress.close()
        metrics = build_metrics(run, setup, engine, step - start, t_run, "diverged") | {
            "diverged_at_step": step, "error": str(exc)}
        write_diverged(run, run_dir, case, engine, place, metrics, outputs, mass0, profiler,
                       latest_good_state(run_dir, last_good))
        raise
    except BaseException:
        progress.close()
        write_metrics(run_dir, build_metrics(run, setup, engine, step - start, t_run, "interrupted") | {
            "step_reached": step})
        raise
    progress.close()
    metrics = build_metrics(run, setup, engine, step - start, t_run, status, profiled=profiler.window if profiler
                            is not None else None) | run_extent(run, start, step, stopped_early)
    finish(run, run_dir, case, engine, f, metrics, outputs, mass0, profiler)
    if error is not None:
        raise error
    return metrics
