"""Run-directory files: fields.npz and metrics.json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np


def write_fields(path: Path, fields: dict[str, np.ndarray]) -> None:
    """Write rho, u, solid (and any other arrays) to an .npz file atomically."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **fields)
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON atomically (NaN/inf become null)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def vorticity(u: np.ndarray) -> np.ndarray:
    """z-vorticity dv/dx - du/dy of a 2D velocity field (D, nx, ny), central differences."""
    return np.gradient(u[1], axis=0) - np.gradient(u[0], axis=1)
