"""Configurations and in-process runs for the tests: a RunConfig from overrides, a case advanced on an engine."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

from lbm.cases.base import Snapshot
from lbm.config import RunConfig, load
from lbm.engines import make_engine
from lbm.simulation import prepare


def run_config(*overrides: str) -> RunConfig:
    """A validated RunConfig from Hydra overrides (as on the command line)."""
    return load(list(overrides))


def advance(run: RunConfig, steps: int | None = None, mode: str | None = None,
            engine: str = "auto") -> tuple[Any, Any, dict[str, np.ndarray]]:
    """Build the case and run it in-process on ``engine``; returns (case, setup, fields) without writing files."""
    case, setup = prepare(run)
    run = case.run
    stepper = make_engine(setup, mode or run.mode, engine=engine)
    f = setup.initial_populations()
    n = steps or run.steps
    chunk = run.output.every or n
    done = 0
    while done < n:
        k = min(chunk, n - done)
        f, aux = stepper.advance(f, k, first_step=done)
        done += k
        case.observe(Snapshot(done, aux, lambda f=f, done=done: stepper.fields(f, done), populations=f))
    return case, setup, stepper.fields(f, n) | {"f": np.asarray(f), "engine": stepper.name}


ENGINES = ("xla", pytest.param("native", marks=pytest.mark.native))
"""Parametrise a physics test over both fused engines: the pure-JAX reference and the native C++ engine."""


def setup_for(overrides: Any, precision: str) -> Any:
    """The Setup of a case from ``overrides`` in ``precision`` (float64 switched on for the test when asked)."""
    from lbm.simulation import make_case

    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    return make_case(run_config(*overrides, f"precision={precision}")).setup()


def noisy_populations(setup: Any, seed: int) -> np.ndarray:
    """The setup's initial populations with 1 % relative and 1e-3 w absolute noise on every cell (solid ones too):
    a step must leave there what a dense step leaves, whatever the input held."""
    f0 = np.asarray(setup.initial_populations())
    rng = np.random.default_rng(seed)
    w = setup.lattice.w.reshape((-1,) + (1,) * setup.lattice.d)
    return (f0 * (1 + 0.01 * rng.standard_normal(f0.shape)) + 1e-3 * w * rng.standard_normal(f0.shape)).astype(f0.dtype)


def pair_2d_at_every_size(monkeypatch: Any) -> None:
    """The 2D in-place pair (and so its walls and faces) on the tests' small grids: on a TPU it is chosen from
    lbm.engines.pallas.aa.AA2D_MIN_BYTES of populations only."""
    from lbm.engines.pallas import aa

    monkeypatch.setattr(aa, "AA2D_MIN_BYTES", 0)
