"""Run-directory files: fields.npz and metrics.json."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

COMPRESS_FIELDS_BYTES = 64 * 2**20
"""fields.npz is compressed up to this many bytes of arrays, stored plainly above: a smooth flow's float32 fields
shrink by about a quarter, but zlib writes them some 30x slower (a synthetic 128^3 Taylor-Green field, rho, u, a
vorticity and solid, 76 MiB: 1.62 s for 44 MiB against 0.05 s for 58 MiB on this project's CPU), and a 512^3 run's
fields hold 64 times as much."""


def write_fields(path: Path, fields: dict[str, np.ndarray]) -> None:
    """Write rho, u, solid, vorticity (and any other arrays) to an .npz file atomically (compressed where small)."""
    tmp = path.with_name(path.name + ".tmp.npz")
    small = sum(np.asarray(a).nbytes for a in fields.values()) <= COMPRESS_FIELDS_BYTES
    (np.savez_compressed if small else np.savez)(tmp, **fields)
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


def with_wall_velocity(fields: dict[str, np.ndarray], wall_velocity: np.ndarray | None,
                       periodic: Sequence[bool] | None = None) -> dict[str, np.ndarray]:
    """The fields as a run writes them: in solid cells the wall's own velocity (zero where None), plus vorticity."""
    solid = np.asarray(fields["solid"], dtype=bool)
    u = np.array(fields["u"], copy=True)
    if wall_velocity is None:
        u[:, solid] = 0.0
    else:
        u[:, solid] = np.asarray(wall_velocity, dtype=u.dtype)[:, solid]
    return {**fields, "u": u, "vorticity": vorticity(u, solid, periodic).astype(u.dtype)}


def wall_derivative(a: np.ndarray, solid: np.ndarray, axis: int, periodic: bool = False) -> np.ndarray:
    """d a / d x_axis in fluid cells, wall-aware: a solid neighbour is the wall, half a cell away, moving with a there.

    A fluid neighbour sits one cell away. The derivative is the one of the parabola through the node and
    its two neighbours (the central difference between two fluid neighbours, one-sided at a wall);
    at the domain's edges of a non-periodic axis, the one-sided difference to the inner neighbour.
    Solid cells get 0.
    """
    a = np.asarray(a, dtype=np.float64)
    n = a.shape[axis]
    if n < 2:
        return np.zeros_like(a)
    left, right = np.roll(a, 1, axis), np.roll(a, -1, axis)
    ha = np.where(np.roll(solid, 1, axis), 0.5, 1.0)  # distance to the left sample: a wall or a node
    hb = np.where(np.roll(solid, -1, axis), 0.5, 1.0)
    out = (-hb / (ha * (ha + hb))) * left + ((hb - ha) / (ha * hb)) * a + (ha / (hb * (ha + hb))) * right
    if not periodic:
        first, last = [slice(None)] * a.ndim, [slice(None)] * a.ndim
        first[axis], last[axis] = 0, n - 1
        lo, hi = tuple(first), tuple(last)
        out[lo] = (right[lo] - a[lo]) / hb[lo]
        out[hi] = (a[hi] - left[hi]) / ha[hi]
    return np.where(solid, 0.0, out)


def vorticity(u: np.ndarray, solid: np.ndarray | None = None, periodic: Sequence[bool] | None = None) -> np.ndarray:
    """Vorticity of a velocity field (D, *grid): 2D the scalar dv/dx - du/dy, 3D the magnitude; 0 in solid cells.

    Differences are wall-aware (:func:`wall_derivative`): the velocity ``u`` holds in solid cells is
    taken as the wall's, half a cell from the neighbouring fluid node. ``periodic``: per axis (default none).
    """
    solid = np.zeros(u.shape[1:], bool) if solid is None else np.asarray(solid, dtype=bool)
    wrap = tuple(periodic) if periodic is not None else (False,) * (u.ndim - 1)
    if u.shape[0] == 2:
        return wall_derivative(u[1], solid, 0, wrap[0]) - wall_derivative(u[0], solid, 1, wrap[1])
    return np.linalg.norm(vorticity_vector(u, solid, wrap), axis=0)


def vorticity_vector(u: np.ndarray, solid: np.ndarray, periodic: Sequence[bool] = (False, False, False)) -> np.ndarray:
    """The 3D vorticity vector (3, *grid), wall-aware differences as :func:`vorticity`."""
    g = [[wall_derivative(u[i], solid, j, periodic[j]) for j in range(3)] for i in range(3)]
    return np.stack([g[2][1] - g[1][2], g[0][2] - g[2][0], g[1][0] - g[0][1]])
