"""Shared helpers: compose and validate configs, run cases in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from lbm.cases.base import Snapshot
from lbm.cli import compose
from lbm.config import RunConfig, validate
from lbm.engines import make_engine
from lbm.simulation import make_case, simulate

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _x64_scoped_to_the_test():
    """A test (or a float64 run inside it) may switch float64 on; the next test starts as the command line does."""
    before = bool(jax.config.jax_enable_x64)
    yield
    jax.config.update("jax_enable_x64", before)


def run_config(*overrides: str) -> RunConfig:
    """A validated RunConfig from Hydra overrides (as on the command line)."""
    return validate(compose(list(overrides)))


def advance(run: RunConfig, steps: int | None = None, mode: str | None = None) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """Build the case and run it in-process; returns (case, setup, fields) without writing files."""
    if run.precision == "float64":
        jax.config.update("jax_enable_x64", True)
    case = make_case(run)
    run = case.run
    setup = case.setup()
    engine = make_engine(setup, mode or run.mode)
    f = setup.initial_populations()
    n = steps or run.steps
    chunk = run.output_every or n
    done = 0
    while done < n:
        k = min(chunk, n - done)
        f, aux = engine.advance(f, k, first_step=done)
        done += k
        case.observe(Snapshot(done, aux, lambda f=f: engine.fields(f)))
    return case, setup, engine.fields(f) | {"f": np.asarray(f)}


@pytest.fixture
def simulate_in(tmp_path: Path):
    """Run a full simulation (all outputs) into a temporary run directory; returns (metrics, run_dir)."""

    def _run(*overrides: str) -> tuple[dict[str, Any], Path]:
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        metrics = simulate(run_config(*overrides), run_dir)
        return metrics, run_dir

    return _run
