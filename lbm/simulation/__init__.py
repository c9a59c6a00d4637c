"""The run loop, one way: :func:`simulate` calls start, then the chunks, then finish, each taking what the one before
returned; none of them calls back up, or imports another.

:mod:`~lbm.simulation.start` (case, engine, resume, profiler, compilation) returns a
:class:`~lbm.simulation.state.Started`; :mod:`~lbm.simulation.chunks` advances its
:class:`~lbm.simulation.state.Position` (health check, observation, outputs, checkpoints, progress, signals);
:mod:`~lbm.simulation.finish` writes fields, plots and metrics.json from both. Beneath them: ``state`` (the data
handed on, the chunking), ``health`` (the device reduction, divergence), ``outputs`` (per-chunk files, checkpoints),
``signals`` (SIGINT/SIGTERM) and ``progress`` (the bar or log lines).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from lbm.config import RunConfig
from lbm.environment import precision_scope
from lbm.errors import DivergenceError
from lbm.io.fields import write_json
from lbm.simulation.chunks import (
    LAST_GOOD_MAX_BYTES,
    advance_chunk,
    interrupted_by,
    run_chunks,
    stop_early,
)
from lbm.simulation.finish import (
    build_metrics,
    device_description,
    finish,
    finish_diverged,
    finish_interrupted,
    finish_run,
    latest_good_state,
    parallel_description,
    run_extent,
    summary_keys,
    summary_line,
    write_diverged,
    write_metrics,
    write_monitor,
)
from lbm.simulation.health import RHO_BOUNDS, chunk_stats, diverged, first_bad_cell, likely_cause
from lbm.simulation.outputs import Outputs, identity, write_checkpoint
from lbm.simulation.progress import Progress
from lbm.simulation.signals import StopSignals
from lbm.simulation.start import (
    RESULT_FILES,
    check_float64_supported,
    check_resume,
    check_run_dir,
    compile_ahead,
    engine_for,
    float64_refusal,
    log_engine_choice,
    log_parameters,
    make_case,
    prepare,
    resolve_parallel,
    resume,
    sharded_placement,
    start,
    start_profiler,
)
from lbm.simulation.state import Position, Started, chunk_lengths, chunk_size

log = logging.getLogger("lbm")

__all__ = [
    "LAST_GOOD_MAX_BYTES", "RESULT_FILES", "RHO_BOUNDS", "Outputs", "Position", "Started", "advance_chunk",
    "build_metrics", "check_float64_supported", "float64_refusal", "check_resume", "check_run_dir", "chunk_lengths",
    "chunk_size", "chunk_stats", "compile_ahead", "device_description", "diverged", "engine_for", "finish",
    "finish_diverged", "finish_interrupted", "finish_run", "first_bad_cell", "identity", "interrupted_by",
    "latest_good_state", "likely_cause", "log_engine_choice", "log_parameters", "make_case", "parallel_description",
    "prepare", "resolve_parallel", "resume", "run_chunks", "run_extent", "sharded_placement", "simulate", "start",
    "start_profiler", "stop_early", "summary_keys", "summary_line", "write_checkpoint", "write_diverged",
    "write_metrics", "write_monitor",
]


def simulate(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """Run a validated configuration and write metrics.json, fields.npz, case files and plots into ``run_dir``."""
    with precision_scope(run.precision):  # a float64 run leaves JAX's float64 switch as it found it
        return _simulate(run, run_dir)


def _simulate(run: RunConfig, run_dir: Path) -> dict[str, Any]:
    """start, then the chunks, then finish: each takes what the one before returned."""
    s = start(run, run_dir)
    at = Position(step=s.start, f=s.f)
    progress = Progress(s.run.steps, s.start, math.prod(s.setup.shape), s.run.output.progress)
    interrupted = build_metrics(s.run, s.setup, s.engine, 0, 0.0, "interrupted")

    def record_hard_exit() -> None:  # from the signal watcher thread: no device access, one small file
        write_json(run_dir / "metrics.json", interrupted | {
            "steps_timed": at.step - s.start, "wall_time_s": at.t_run, "step_reached": at.step,
            "error": "stopped at once by a second signal; the last checkpoint (if any) is in checkpoints/"})

    try:
        with StopSignals(on_hard_exit=record_hard_exit) as signals:
            run_chunks(s, at, signals, progress)
    except DivergenceError as exc:
        progress.close()
        finish_diverged(s, at, exc)
        raise
    except BaseException:
        progress.close()
        finish_interrupted(s, at)
        raise
    progress.close()
    metrics = finish_run(s, at)
    if at.error is not None:
        raise at.error
    return metrics
