"""The plain data the run loop hands on: a started run (start → chunks → finish), where its stepping stands, and
how its steps fall into chunks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from lbm.cases import Case, Setup
from lbm.config import RunConfig
from lbm.engines import Engine
from lbm.simulation.outputs import Outputs, write_checkpoint
from lbm.simulation.signals import Interrupted

AUTO_CHUNK_STEPS = 100
"""Steps per chunk with output.every=0 (automatic) on a CPU: a constant, not a share of ``steps``, so that a run
resumed to a larger ``steps`` samples its monitored series at the same steps as an uninterrupted one (same metrics)."""
ACCELERATOR_CHUNK_CELL_UPDATES = 10**8
"""On a GPU or TPU the automatic chunk holds about this many cell updates (AUTO_CHUNK_STEPS to
ACCELERATOR_CHUNK_MAX_STEPS steps; still a constant of the grid, not of ``steps``): the host's work between two chunks
(the health check's read-back, the host copy of the populations, the case's observation) leaves the device idle for
about 2.7 ms on the lent TPU v5e (scripts/chunk_costs.py), which 100-step chunks of a small grid pay every 4 ms or
less: the default cylinder ran at 1190 MLUPS in 100-step chunks and 2098 in 1000-step chunks, the cavity 130^2 at 456
and 1528 (docs/tpu-v5e/2026-12-06/chunks/). 10^8 updates take about 50 ms at 2000 MLUPS."""
ACCELERATOR_CHUNK_MAX_STEPS = 1000
"""At most this many steps per automatic chunk on an accelerator (progress, a signal and the monitor's samples
come once a chunk)."""


def chunk_size(run: RunConfig, platform: str | None = None) -> int:
    """Steps per chunk on ``platform`` (default: JAX's default backend's): output.every, else steps_per_dispatch, else
    the automatic chunk (:func:`auto_chunk_steps`, at most the run's steps); a profiled run's automatic chunk is a
    tenth of the run (at most 1000, at least 1), so that a short run holds the profile's warm-up and steady chunks
    (docs/profiling.md; a profiled run is a measurement, not one to resume).

    With checkpoints the chunk also divides checkpoint.every, so chunks end on checkpoint steps.
    """
    if run.output.every:
        k = run.output.every
    elif run.steps_per_dispatch:
        k = min(run.steps_per_dispatch, run.steps)
    elif run.profile.enabled:
        k = max(1, min(1000, run.steps // 10))
    else:
        k = max(1, min(auto_chunk_steps(run, platform), run.steps))
    every = run.checkpoint.every
    return math.gcd(k, every) if every else k


def auto_chunk_steps(run: RunConfig, platform: str | None = None) -> int:
    """The automatic chunk's steps on ``platform``: AUTO_CHUNK_STEPS on a CPU; on a GPU or TPU about
    ACCELERATOR_CHUNK_CELL_UPDATES cell updates, from AUTO_CHUNK_STEPS to ACCELERATOR_CHUNK_MAX_STEPS steps, an even
    number (the in-place kernels run steps in pairs: an odd chunk adds a push step and a second copy of the
    populations; deviceless v5e, the D3Q19 duct 128^3 with its walls in the kernels: 2.06x the populations planned
    for an odd chunk, 1.05x for an even one)."""
    if platform is None:
        import jax

        platform = jax.default_backend()
    if platform == "cpu":
        return AUTO_CHUNK_STEPS
    cells = math.prod(run.grid)
    steps = max(AUTO_CHUNK_STEPS, min(ACCELERATOR_CHUNK_MAX_STEPS, ACCELERATOR_CHUNK_CELL_UPDATES // max(1, cells)))
    return steps - steps % 2


def chunk_lengths(start: int, steps: int, k: int) -> set[int]:
    """Distinct chunk lengths of a run from ``start`` to ``steps`` whose chunks end on multiples of k."""
    lengths, s = set(), start
    while s < steps:
        n = min(k - s % k, steps - s)
        lengths.add(n)
        s += n
    return lengths


@dataclass(frozen=True)
class Started:
    """A run ready to step: its final config, case, Setup and engine, the populations to start from and where."""

    run: RunConfig
    """As the case resolved it (``steps=auto`` final)."""
    run_dir: Path
    case: Case
    setup: Setup
    engine: Engine
    place: Callable[[Any], jnp.ndarray]
    """Populations (Q, *grid) onto the engine's devices and into its state layout (sharded over its mesh, the pallas
    2D pair's view, or as they are: lbm.engines.base.Engine.place)."""
    fluid: jnp.ndarray
    """The fluid mask, placed as the populations are."""
    outside: jnp.ndarray | None
    """The state's cells that are no grid cell (Engine.outside_cells: the pallas 2D pair's pads), None if none."""
    f: jnp.ndarray
    """The populations at step ``start``, as the engine holds them (``place``; ``engine.canonical`` gives (Q, *grid))."""
    start: int
    """The step the run starts from (a checkpoint's when resuming, else 0)."""
    mass0: float
    """The fluid mass at step 0 (the reference of the mass drift)."""
    chunk: int
    """Steps per chunk (:func:`chunk_size`)."""
    outputs: Outputs
    profiler: Any
    """The started lbm.profiling.capture.Profiler, None without ``profile.enabled``."""

    def checkpoint(self, step: int, f: Any) -> Path:
        """Write the checkpoint of ``step`` (the engine's state ``f`` as populations (Q, *grid), the case's and the
        monitor's series)."""
        return write_checkpoint(self.run, self.run_dir, self.case, self.setup, self.outputs, self.mass0, step,
                                self.engine.host_populations(f))



@dataclass
class Position:
    """Where the stepping loop stands (it changes after every chunk): what its end and its errors are written from."""

    step: int
    f: jnp.ndarray
    """The populations at ``step``, as the engine holds them (:attr:`Started.f`)."""
    t_run: float = 0.0
    """Seconds in the stepping loop so far (compilation excluded)."""
    last_good: tuple[int, np.ndarray] | None = None
    """A host copy of recent healthy populations (Q, *grid) and its step (kept without checkpoints, for divergence)."""
    stopped_early: int | None = None
    """The step a ``steps=auto`` run found its steady state at (None: it did not stop early)."""
    status: str = "completed"
    error: Interrupted | None = None
    """The error an interrupted run ends with, once its results are written."""


