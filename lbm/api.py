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

from lbm.environment import precision_scope
from lbm.errors import LbmError
from lbm.simulation.progress import shown_log

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
    (``here``: the run starts in this process) the devices, float64 support, native.threads against the cores, the
    trace_processor a profile names, the checkpoint it resumes, the case's geometry and the engine built for it
    (every refusal of lbm.simulation.start.start, made here first) and, on a TPU, whether its chunks compile (a compile
    probe in a child process: lbm.bench.probe).

    A multi-process run (jax.distributed) checks its devices and checkpoint where it starts: no backend may start
    before jax.distributed.
    """
    from lbm import parallel
    from lbm.engines.native.threads import check_threads
    from lbm.simulation import make_case, resolve_parallel

    p = run.parallel
    single = p.coordinator is None and (p.num_processes or 1) == 1 and parallel.cluster_processes() == 1
    here = here and single
    if here:
        run = resolve_parallel(run)
        check_threads(run.native.threads)
        check_trace_processor(run)
    case = make_case(run)
    if not here:
        return case
    with precision_scope(run.precision):  # built as the run builds them; the switch put back for the run to set
        check_built(run, case)
    return case


def check_built(run: RunConfig, case: Case) -> None:
    """preflight's checks that build: the memory the grid needs, the Setup, the checkpoint, the engine, the compile
    probe; the Setup is kept for the run of ``run`` (resolved)."""
    from lbm.bench.probe import guard
    from lbm.simulation import check_resume
    from lbm.simulation.memory import check_fits  # a grid that cannot fit: refused before anything is allocated
    from lbm.simulation.start import build_engine, keep_prepared

    check_fits(case.run)
    setup = case.setup()  # grid-sized arrays: a check of the memory a run needs comes before this line
    header = check_resume(case.run, setup)
    check_fits(case.run, build_engine(case.run, setup).name)  # on an accelerator: the device's part, engine known
    keep_prepared(run, case, setup)  # the run takes them (lbm.simulation.start.prepare): built once
    guard(case.run, header["step"] if header else 0)  # a compile the compiler would abort on (XLA's TPU compiler)


def check_trace_processor(run: RunConfig) -> None:
    """Refuse a trace_processor that is named (profile.trace_processor, or $LBM_TRACE_PROCESSOR for a profiled run)
    but not an executable file, and profile.backend=perfetto without one: the breakdown needs it after the run."""
    import os

    from lbm.profiling.tracedb import TRACE_PROCESSOR_ENV, resolve_trace_processor

    prof = run.profile
    wanted = prof.enabled and prof.backend != "sqlite"
    if not (prof.trace_processor or (wanted and (os.environ.get(TRACE_PROCESSOR_ENV) or prof.backend == "perfetto"))):
        return
    binary, why = resolve_trace_processor(prof.trace_processor)
    if binary is None:
        raise LbmError(f"{why}: give an executable trace_processor binary (profile.trace_processor or "
                       f"{TRACE_PROCESSOR_ENV}), or profile.trace_processor=null with profile.backend=sqlite or auto "
                       "(the embedded sqlite backend)")


def run(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """Validate and simulate one configuration (``python -m lbm run`` overrides); returns its Result."""
    from omegaconf import OmegaConf

    from lbm.config import load
    from lbm.config.command_line import fresh_run_dir
    from lbm.simulation import simulate

    if isinstance(overrides, str):
        raise LbmError(f"lbm.run takes a list of overrides, e.g. [{overrides!r}], not one string")
    overrides = list(overrides)
    hydra_keys = [o for o in overrides if o.lstrip("+~").startswith("hydra.")]
    if hydra_keys:
        raise LbmError(f"{hydra_keys[0]}: Hydra settings do not apply to lbm.run; pass run_dir= for the directory")
    config = load(overrides)
    path = checked_run_dir(run_dir) if run_dir is not None else None
    preflight(config)
    path = path or fresh_run_dir(Path("outputs")).absolute()
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


def checked_run_dir(run_dir: str | Path) -> Path:
    """The absolute directory ``run_dir`` names (``~`` expanded; ``${now:...}``, ``${oc.env:...}`` resolved by Hydra's
    and OmegaConf's resolvers, as in hydra.run.dir); LbmError when it cannot be created or holds an earlier run."""
    from lbm.config.command_line import check_fresh

    text = str(run_dir)
    if "${" in text:
        from hydra.core.utils import setup_globals
        from omegaconf import OmegaConf

        setup_globals()  # Hydra's resolvers: now, hydra, python_version
        try:
            text = str(OmegaConf.create({"run_dir": text}).run_dir)
        except Exception as exc:  # a resolver's own error (an unset variable, ${hydra:...} outside a Hydra job)
            raise LbmError(f"run_dir={run_dir}: cannot resolve it ({str(exc).splitlines()[0]})") from None
    path = Path(text).expanduser().absolute()
    check_fresh(path, "run_dir")
    return path
