"""The Python API for notebooks and scripts: ``lbm.run([...overrides])`` -> :class:`Result`.

The overrides are those of ``python -m lbm run`` and go through the same validation
(:func:`lbm.config.load`); the run directory gets the same files as a command-line run
(metrics.json, fields.npz, plots, ``.hydra/`` with the config and overrides, ``lbm.log``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lbm.errors import LbmError
from lbm.progress import shown_log

if TYPE_CHECKING:
    from lbm.cases import Case
    from lbm.config import RunConfig


@dataclasses.dataclass(frozen=True)
class Result:
    """A finished run: its metrics, its final fields (lattice units) and where it wrote them."""

    metrics: dict[str, Any]
    rho: np.ndarray = dataclasses.field(repr=False)
    """Density, shape = grid."""
    u: np.ndarray = dataclasses.field(repr=False)
    """Velocity, shape = (D, *grid)."""
    solid: np.ndarray = dataclasses.field(repr=False)
    """Solid cells (bool), shape = grid."""
    run_dir: Path
    """Absolute path of the run directory."""


def preflight(run: RunConfig, here: bool = True) -> Case:
    """Everything about ``run`` that can be refused before its directory exists: the case and its parameters, and
    (``here``: the run starts in this process) the devices, float64 support, the checkpoint it resumes and, on a
    TPU, whether its chunks compile (a compile probe in a child process: lbm.bench.probe).

    A multi-process run (jax.distributed) checks its devices and checkpoint where it starts: no backend may start
    before jax.distributed.
    """
    from lbm import parallel
    from lbm.simulation import check_resume, make_case, resolve_parallel

    p = run.parallel
    single = p.coordinator is None and (p.num_processes or 1) == 1 and parallel.cluster_processes() == 1
    here = here and single
    if here:
        run = resolve_parallel(run)
    case = make_case(run)
    header = None
    if here and run.checkpoint.resume:
        if run.precision == "float64":
            import jax

            jax.config.update("jax_enable_x64", True)
        header = check_resume(case.run, case.setup())
    if here:  # a grid that cannot fit in memory: refused before anything is allocated (lbm.simulation.memory)
        from lbm.simulation.memory import check_fits

        check_fits(case.run)
    if here:  # a compile the compiler would abort on (XLA's TPU compiler): refused in one line (lbm.bench.probe)
        from lbm.bench.probe import guard

        guard(case.run, header["step"] if header else 0)
    return case


def run(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """Validate and simulate one configuration (``python -m lbm run`` overrides); returns its Result."""
    from omegaconf import OmegaConf

    from lbm.config import load
    from lbm.config.command_line import fresh_run_dir
    from lbm.simulation import check_run_dir, simulate

    if isinstance(overrides, str):
        raise LbmError(f"lbm.run takes a list of overrides, e.g. [{overrides!r}], not one string")
    overrides = list(overrides)
    hydra_keys = [o for o in overrides if o.lstrip("+~").startswith("hydra.")]
    if hydra_keys:
        raise LbmError(f"{hydra_keys[0]}: Hydra settings do not apply to lbm.run; pass run_dir= for the directory")
    config = load(overrides)
    preflight(config)
    if run_dir is not None:
        path = Path(run_dir).expanduser().absolute()
        check_run_dir(path, "run_dir")
    else:
        path = fresh_run_dir(Path("outputs")).absolute()
    record = path / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(dataclasses.asdict(config.source)), record / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), record / "overrides.yaml")
    handler = logging.FileHandler(path / "lbm.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    try:
        with shown_log(handler):
            metrics = simulate(config, path)
    finally:
        handler.close()
    with np.load(path / "fields.npz") as fields:
        return Result(metrics=metrics, rho=fields["rho"], u=fields["u"], solid=fields["solid"], run_dir=path)
