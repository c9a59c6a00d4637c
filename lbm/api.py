"""The Python API for notebooks and scripts: ``lbm.run([...overrides])`` -> :class:`Result`.

The overrides are those of ``python -m lbm run`` and go through the same validation
(:func:`lbm.config.load`); the run directory gets the same files as a command-line run
(metrics.json, fields.npz, plots, ``.hydra/`` with the config and overrides, ``lbm.log``).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lbm.errors import LbmError


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


def default_run_dir(root: Path = Path("outputs")) -> Path:
    """A fresh run directory named as Hydra names it (``outputs/<date>/<time>``; ``-1``, ``-2``... if taken)."""
    base = root / datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    path, k = base, 0
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def run(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """Validate and simulate one configuration (``python -m lbm run`` overrides); returns its Result."""
    from omegaconf import OmegaConf

    from lbm.config import load
    from lbm.simulation import check_run_dir, simulate

    if isinstance(overrides, str):
        raise LbmError(f"lbm.run takes a list of overrides, e.g. [{overrides!r}], not one string")
    overrides = list(overrides)
    hydra_keys = [o for o in overrides if o.lstrip("+~").startswith("hydra.")]
    if hydra_keys:
        raise LbmError(f"{hydra_keys[0]}: Hydra settings do not apply to lbm.run; pass run_dir= for the directory")
    config = load(overrides)
    path = Path(run_dir) if run_dir is not None else default_run_dir()
    check_run_dir(path)
    record = path / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(config.raw), record / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), record / "overrides.yaml")
    handler = logging.FileHandler(path / "lbm.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logger = logging.getLogger("lbm")
    logger.addHandler(handler)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        metrics = simulate(config, path)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
    with np.load(path / "fields.npz") as fields:
        return Result(metrics=metrics, rho=fields["rho"], u=fields["u"], solid=fields["solid"], run_dir=path)
