"""The chunks of a run: advance, check health, observe, write the per-chunk outputs and checkpoints, show progress;
stop early at a steady state or after a signal."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from lbm.cases.base import Snapshot
from lbm.config import RunConfig
from lbm.simulation.health import chunk_stats, diverged
from lbm.simulation.progress import Progress
from lbm.simulation.signals import Interrupted, StopSignals
from lbm.simulation.state import Position, Started

log = logging.getLogger("lbm")


LAST_GOOD_MAX_BYTES = 256 * 2**20
"""Without checkpoints, a host copy of the populations is kept (for divergence) up to this size."""
HOST_COPY_EVERY_CHUNK_BYTES = 16 * 2**20
"""Populations up to this size are copied to the host before every chunk (the copy costs next to nothing)."""
HOST_COPY_SHARE = 0.05
"""Larger ones are copied once the stepping since the last copy is at least 1 / HOST_COPY_SHARE times the copy's own
(fastest measured) time: the copies take at most about 5% of the stepping, and the state kept is a recent one."""


def host_copy_due(nbytes: int, stepped_s: float, copy_s: float) -> bool:
    """Whether the loop copies the populations to the host before this chunk (``stepped_s`` since the last copy)."""
    return nbytes <= HOST_COPY_EVERY_CHUNK_BYTES or stepped_s * HOST_COPY_SHARE >= copy_s



def interrupted_by(signum: int, step: int, run: RunConfig, run_dir: Path, path: Path) -> Interrupted:
    """The error a run stopped by ``signum`` after writing checkpoint ``path`` ends with."""
    return Interrupted(f"stopped by {signal.Signals(signum).name} at step {step}/{run.steps}; results and checkpoint "
                       f"in {run_dir}; resume with the same overrides plus checkpoint.resume={path}", signum)




def run_chunks(s: Started, at: Position, signals: StopSignals, progress: Progress) -> None:
    """Advance ``at`` chunk by chunk to the run's last step: check health, observe, write outputs and checkpoints;
    stop early at a steady state (``steps=auto``) or after a signal (with a checkpoint).

    Raises DivergenceError on the first unhealthy chunk.
    """
    run = s.run
    keep_host_copy = not run.checkpoint.every and at.f.nbytes <= LAST_GOOD_MAX_BYTES
    copy_s, copied_at = 0.0, at.t_run
    log.info("stepping from step %d to %d (Ctrl-C or SIGTERM: stop after this chunk with a checkpoint; "
             "twice: stop at once)", at.step, run.steps)
    while at.step < run.steps:
        n = min(s.chunk - at.step % s.chunk, run.steps - at.step)
        if s.profiler is not None:
            n = s.profiler.chunk_limit(at.step, n, at.t_run)
        if keep_host_copy and host_copy_due(at.f.nbytes, at.t_run - copied_at, copy_s):
            t0 = time.perf_counter()
            at.last_good = (at.step, np.array(s.engine.host_populations(at.f), copy=True))
            took = time.perf_counter() - t0
            copy_s, copied_at = (took if copy_s == 0 else min(copy_s, took)), at.t_run
        mass, energy, aux = advance_chunk(s, at, n)
        f, step = at.f, at.step
        snapshot = Snapshot(step, aux, lambda f=f, step=step: s.engine.fields(f, step),
                            populations=lambda f=f: s.engine.canonical(f))
        s.case.observe(snapshot)
        s.outputs.chunk_done(snapshot, mass, energy, s.chunk)
        del snapshot  # populations it made in the grid's layout (out of the engine's own) are not held into the next chunk
        if s.profiler is not None:
            s.profiler.after_chunk(step, f, at.t_run)
        progress.update(step, at.t_run)
        if run.checkpoint.every and step % run.checkpoint.every == 0:
            s.checkpoint(step, f)
        if stop_early(s, at, signals.signum):
            break


def advance_chunk(s: Started, at: Position, n: int) -> tuple[float, float, dict[str, Any]]:
    """Advance ``at`` by ``n`` steps (timed, with the health reduction); (fluid mass, kinetic energy, per-step outputs).

    Raises DivergenceError when the populations left the healthy range.
    """
    t0 = time.perf_counter()
    at.f, aux = s.engine.advance(at.f, n, first_step=at.step)
    healthy, mass, energy = chunk_stats(at.f, s.fluid, s.setup.lattice, s.outside)
    at.t_run += time.perf_counter() - t0
    at.step += n
    if not healthy:
        raise diverged(s.engine.host_populations(at.f), at.step, s.setup)
    return mass, energy, aux


def stop_early(s: Started, at: Position, signum: int | None) -> bool:
    """Whether the loop stops before the run's last step: a steady state under ``steps=auto``, or a signal (which
    writes a checkpoint and records the error the run ends with)."""
    if at.step >= s.run.steps:
        return False
    if s.run.steps_auto and s.case.converged(at.step):
        log.info("steady state reached after %d steps (steps=auto): stopping", at.step)
        at.stopped_early = at.step
        return True
    if signum is not None:
        at.status = "interrupted"
        at.error = interrupted_by(signum, at.step, s.run, s.run_dir, s.checkpoint(at.step, at.f))
        return True
    return False
