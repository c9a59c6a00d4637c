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
"""Steps per chunk with output.every=0 (automatic): a constant, not a share of ``steps``, so that a run resumed to a
larger ``steps`` samples its monitored series at the same steps as an uninterrupted one (same metrics)."""


def chunk_size(run: RunConfig) -> int:
    """Steps per chunk: output.every, else steps_per_dispatch, else AUTO_CHUNK_STEPS (at most the run's steps); a
    profiled run's automatic chunk is a tenth of the run (at most 1000, at least 1), so that a short run holds the
    profile's warm-up and steady chunks (docs/profiling.md; a profiled run is a measurement, not one to resume).

    With checkpoints the chunk also divides checkpoint.every, so chunks end on checkpoint steps.
    """
    if run.output.every:
        k = run.output.every
    elif run.steps_per_dispatch:
        k = min(run.steps_per_dispatch, run.steps)
    elif run.profile.enabled:
        k = max(1, min(1000, run.steps // 10))
    else:
        k = max(1, min(AUTO_CHUNK_STEPS, run.steps))
    every = run.checkpoint.every
    return math.gcd(k, every) if every else k


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
    """Populations onto the engine's devices (sharded over its mesh, or as they are)."""
    fluid: jnp.ndarray
    """The fluid mask, placed as the populations are."""
    f: jnp.ndarray
    """The populations at step ``start``."""
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
        """Write the checkpoint of ``step`` (populations ``f``, the case's and the monitor's series)."""
        return write_checkpoint(self.run, self.run_dir, self.case, self.setup, self.outputs, self.mass0, step, f)



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


