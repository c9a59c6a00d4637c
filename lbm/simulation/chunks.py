"""The chunks of a run: the health check after each, the per-chunk outputs, checkpoints, and what a divergence says."""

from __future__ import annotations

import functools
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.boundaries.inlet import INLET_KINDS
from lbm.cases import Case, Setup
from lbm.cases.base import Snapshot
from lbm.config import RunConfig
from lbm.config.sections import mapping_of
from lbm.engines import Engine
from lbm.errors import DivergenceError
from lbm.io.checkpoint import save_checkpoint
from lbm.kernels.macroscopic import macroscopic
from lbm.lattice import Lattice
from lbm.stopping import Interrupted

if TYPE_CHECKING:
    from lbm.progress import Progress
    from lbm.simulation.start import Started
    from lbm.stopping import StopSignals

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


RHO_BOUNDS = (0.0, 5.0)
"""Densities outside this open interval count as diverged."""


@functools.partial(jax.jit, static_argnums=2)
def _reductions(f: jnp.ndarray, fluid: jnp.ndarray, lattice: Lattice) -> tuple[jnp.ndarray, ...]:
    """(healthy, fluid cells, their summed density deviation, fluid kinetic energy), reduced on the device."""
    drho, u = macroscopic(f, lattice)
    rho = 1.0 + drho
    usq = jnp.sum(u * u, axis=0)
    healthy = jnp.all(jnp.isfinite(rho) & (rho > RHO_BOUNDS[0]) & (rho < RHO_BOUNDS[1]) & (usq < 1.0))
    cells = jnp.sum(fluid, dtype=jnp.int32)
    excess = jnp.sum(jnp.where(fluid, drho, 0.0))
    energy = jnp.sum(jnp.where(fluid, 0.5 * rho * usq, 0.0))
    return healthy, cells, excess, energy


def chunk_stats(f: jnp.ndarray, fluid: jnp.ndarray, lattice: Lattice) -> tuple[bool, float, float]:
    """(healthy, fluid mass, fluid kinetic energy) of populations ``f`` (deviations f - w) in one device reduction.

    The mass is the number of fluid cells plus the sum of their density deviations, added in float64 on the
    host: a float32 sum of the densities themselves would round away the drift it measures.
    """
    healthy, cells, excess, energy = (np.asarray(v).item() for v in _reductions(f, fluid, lattice))
    return bool(healthy), float(cells) + float(excess), float(energy)


def first_bad_cell(f: np.ndarray, lattice: Lattice) -> tuple[int, ...]:
    """Index of the first cell with a non-finite or out-of-bounds density or velocity."""
    drho, u = (np.asarray(a) for a in macroscopic(jnp.asarray(f), lattice))
    rho = 1.0 + drho
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(rho) | (rho <= RHO_BOUNDS[0]) | (rho >= RHO_BOUNDS[1]) | ~((u * u).sum(0) < 1.0)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()


def likely_cause(setup: Setup, cell: tuple[int, ...] = ()) -> str:
    """The most probable reason a run diverged, with the fix to try; names the boundary conditions on ``cell``.

    Fixes are offered only where they change something: collision=trt only for BGK, another inlet kind than the
    run's own."""
    tau, mach = setup.tau, setup.derived["mach"]
    bgk = setup.collision is None and setup.omega_minus == setup.omega_plus
    if tau < 0.52:
        cause = (f"tau={tau:.4f} is too close to 0.5 for this resolution: raise the grid resolution, lower "
                 f"flow.reynolds{', or use collision=trt' if bgk else ''}")
    elif mach > 0.2:
        cause = f"Mach {mach:.2f} is too high: lower flow.u_lattice (<= 0.1)"
    else:
        cause = (f"the resolution is probably too low for Re={setup.reynolds:g} (tau={tau:.4f}, Mach={mach:.3f}): "
                 "raise the grid resolution or lower flow.reynolds")
    flat = int(np.ravel_multi_index(cell, setup.shape)) if len(cell) == len(setup.shape) else -1
    names, fixes = [], ["collision=trt"] if bgk else []
    for bc in setup.boundaries:
        fp = bc.footprint(setup.shape, setup.lattice)
        if flat in fp.face or flat in fp.cells:
            names.append(f"{bc.stage} ({bc.label()})")
            kind = bc.__dict__.get("kind")
            if bc.stage == "inlet" and kind in INLET_KINDS:
                fixes.append("another inlet kind (" + " or ".join(f"case.inlet={k}" for k in INLET_KINDS
                                                                  if k != kind) + ")")
    if not names:
        return cause
    tried = f": try {' or '.join(fixes)}" if fixes else ""
    return f"the cell lies on the boundary condition {' and '.join(names)}, the likely cause{tried}; or {cause}"


def identity(run: RunConfig, setup: Setup) -> dict[str, Any]:
    """What a checkpoint records about its run, to refuse resuming an incompatible one."""
    return {
        "case": run.case, "lattice": run.lattice, "grid": list(setup.shape), "precision": run.precision,
        "collision": run.collision, "trt_magic": run.collision_params.magic if run.collision == "trt" else None,
        "tau": setup.tau, "u_lattice": run.flow.u_lattice, "case_params": mapping_of(run.case_params),
    }


class Outputs:
    """Per-chunk outputs: monitor rows, VTK files and PNG frames at output intervals."""

    def __init__(self, run: RunConfig, run_dir: Path, engine: Engine) -> None:
        self.run, self.run_dir, self.engine = run, run_dir, engine
        self.monitor: list[tuple[int, float, float]] = []
        self.files: list[str] = []
        self.frames: list[Path] = []
        self.frame_limit: float | None = run.output.frame_limit
        """The colour limit of every vorticity frame: output.frame_limit, else the first frame's (set by it)."""

    def chunk_done(self, snapshot: Snapshot, mass: float, energy: float, every: int) -> None:
        """Record the monitored quantities; write VTK and frames when the chunk ends on the output interval."""
        step = snapshot.step
        self.monitor.append((step, mass, energy))
        on_interval = step % every == 0 or step == self.run.steps
        if not (self.run.output.vtk or self.run.output.frames) or not on_interval:
            return
        if not parallel.is_writer():
            snapshot.fields  # noqa: B018 (gathered on every process; process 0 writes)
            return
        fields = self.engine.setup.written_fields(snapshot.fields)
        if self.run.output.vtk:
            from lbm.io.vtk import write_vti

            path = write_vti(self.run_dir / "vtk" / f"fields_{step:010d}.vti", fields)
            self.files.append(str(path.relative_to(self.run_dir)))
        if self.run.output.frames:
            from lbm.io.plots import frame

            path = self.run_dir / "frames" / f"vorticity_{step:010d}.png"
            self.frame_limit = frame(path, fields, step, self.frame_limit)
            self.frames.append(path)


def diverged(f: jnp.ndarray, step: int, setup: Setup) -> DivergenceError:
    """The error of a run whose populations left the healthy range by ``step``, naming the first bad cell."""
    loc = first_bad_cell(parallel.to_host(f), setup.lattice)
    return DivergenceError(f"simulation diverged by step {step} (first bad cell {loc}): {likely_cause(setup, loc)}")


def write_checkpoint(run: RunConfig, run_dir: Path, case: Case, setup: Setup, outputs: Outputs, mass0: float,
                     at: int, pops: Any) -> Path:
    """Write the checkpoint of step ``at`` (populations, identity, the case's series), keeping the newest ones."""
    state = {**case.state(), "run/mass0": np.float64(mass0),
             "run/monitor": np.array(outputs.monitor, dtype=np.float64).reshape(-1, 3)}
    host = parallel.to_host(pops)  # every process takes part in the gather; process 0 writes
    if not parallel.is_writer():
        return run_dir / "checkpoints"
    path = save_checkpoint(run_dir / "checkpoints", at, host, identity(run, setup), state, run.checkpoint.keep)
    log.info("checkpoint %s", path.relative_to(run_dir))
    return path


def interrupted_by(signum: int, step: int, run: RunConfig, run_dir: Path, path: Path) -> Interrupted:
    """The error a run stopped by ``signum`` after writing checkpoint ``path`` ends with."""
    return Interrupted(f"stopped by {signal.Signals(signum).name} at step {step}/{run.steps}; results and checkpoint "
                       f"in {run_dir}; resume with the same overrides plus checkpoint.resume={path}", signum)


@dataclass
class Position:
    """Where the stepping loop stands (it changes after every chunk): what its end and its errors are written from."""

    step: int
    f: jnp.ndarray
    t_run: float = 0.0
    """Seconds in the stepping loop so far (compilation excluded)."""
    last_good: tuple[int, np.ndarray] | None = None
    """A host copy of recent healthy populations and its step (kept without checkpoints, for divergence)."""
    stopped_early: int | None = None
    """The step a ``steps=auto`` run found its steady state at (None: it did not stop early)."""
    status: str = "completed"
    error: Interrupted | None = None
    """The error an interrupted run ends with, once its results are written."""


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
            at.last_good = (at.step, np.array(parallel.to_host(at.f), copy=True))
            took = time.perf_counter() - t0
            copy_s, copied_at = (took if copy_s == 0 else min(copy_s, took)), at.t_run
        mass, energy, aux = advance_chunk(s, at, n)
        f, step = at.f, at.step
        snapshot = Snapshot(step, aux, lambda f=f, step=step: s.engine.fields(f, step), populations=f)
        s.case.observe(snapshot)
        s.outputs.chunk_done(snapshot, mass, energy, s.chunk)
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
    healthy, mass, energy = chunk_stats(at.f, s.fluid, s.setup.lattice)
    at.t_run += time.perf_counter() - t0
    at.step += n
    if not healthy:
        raise diverged(at.f, at.step, s.setup)
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
