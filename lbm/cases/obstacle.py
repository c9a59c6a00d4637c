"""Flow past your own obstacle: a shape from an image (dark = solid) or a boolean array, in the cylinder's channel.

``case.mask`` names a PNG (or any image matplotlib reads) whose dark pixels (luminance < 0.5)
are solid, or a ``.npy`` boolean array (2D; a 3D voxel mask on 3D lattices). One pixel or voxel
is one cell; image rows run from the top, so the picture appears upright in the x-y plane. The
mask is placed with its centre at ``case.center`` (default: nx/4, ny/2) in the channel of the
cylinder case (velocity inlet at x = 0, zero-gradient outlet, periodic across) and must fit with
a margin. Drag and lift are reported like the cylinder's, normalised by the frontal height D
(the obstacle's extent along y), on which the Reynolds number is based.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from lbm.cases.cylinder import Cylinder
from lbm.errors import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")


def read_mask(path: Path, dims: int) -> np.ndarray:
    """The solid mask of a file: dark pixels of an image (2D), or a boolean ``.npy`` array of ``dims`` axes."""
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError):  # not .npy, truncated, or pickled objects
            raise ConfigError("case.mask", str(path), "a .npy array as numpy.save writes it (this file is not one, "
                              "or it is damaged)") from None
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            raise ConfigError("case.mask", str(path), "a .npy array of booleans or numbers")
        if array.ndim != dims:
            raise ConfigError("case.mask", str(path), f"a {dims}D array for this lattice (the file holds {array.ndim}D)")
        return np.asarray(array, dtype=bool)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise ConfigError("case.mask", str(path), f"an image ({', '.join(IMAGE_SUFFIXES)}) or a .npy array")
    if dims != 2:
        raise ConfigError("case.mask", str(path), "a .npy voxel array on 3D lattices (an image is 2D)")
    from matplotlib import image

    try:
        img = np.asarray(image.imread(path), dtype=np.float64)
    except (OSError, ValueError, SyntaxError):  # PIL: UnidentifiedImageError (an OSError); SyntaxError: a bad PNG
        raise ConfigError("case.mask", str(path), "an image file Pillow can read (this file is not one, "
                          "or it is damaged)") from None
    if img.ndim not in (2, 3) or img.size == 0:
        raise ConfigError("case.mask", str(path), "an image with rows and columns of pixels")
    if img.max() > 1.0:  # 8-bit images read as integers
        img = img / 255.0
    lum = img[..., :3].mean(axis=-1) if img.ndim == 3 else img
    if img.ndim == 3 and img.shape[-1] == 4:  # transparent pixels are fluid
        lum = np.where(img[..., 3] < 0.5, 1.0, lum)
    return np.ascontiguousarray((lum < 0.5)[::-1].T)  # rows from the top -> cells (x, y) with y up


class Obstacle(Cylinder):
    """Vortex shedding behind an obstacle read from a file; forces as the cylinder's, on its frontal height."""

    name = "obstacle"

    @cached_property
    def shape_mask(self) -> np.ndarray:
        """The obstacle as read from ``case.mask`` (its own extent, not yet placed)."""
        value = self.params.get("mask")
        if not isinstance(value, str) or not value:
            raise ConfigError("case.mask", value, "the path of an image (dark = solid) or a .npy boolean array")
        path = Path(value).expanduser()
        if not path.is_file():
            raise ConfigError("case.mask", value, "an existing image or .npy file")
        mask = read_mask(path, self.lattice.d)
        if not mask.any():
            raise ConfigError("case.mask", value, "a mask with at least one solid cell (dark pixel / true value)")
        coords = np.argwhere(mask)
        lo, hi = coords.min(0), coords.max(0) + 1
        return mask[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]

    @property
    def diameter(self) -> float:
        """Frontal height D: the obstacle's extent along y, in cells."""
        return float(self.shape_mask.shape[1])

    def obstacle(self) -> tuple[np.ndarray, float, dict[str, Any]]:
        """The mask placed in the channel, the frontal height (the Reynolds length) and the placement."""
        grid = self.run.grid
        shape = self.shape_mask.shape
        center = self.params.get("center")
        if center is None:
            center = [grid[0] // 4, grid[1] // 2] + [grid[a] // 2 for a in range(2, len(grid))]
        elif not isinstance(center, (list, tuple)) or len(center) != len(grid) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in center):
            raise ConfigError("case.center", center, f"{len(grid)} cell coordinates, or null for the default placement")
        lo = [int(round(c - n / 2)) for c, n in zip(center, shape, strict=True)]
        margins = [(2, grid[0] - 4)] + [(1, grid[a] - 2) for a in range(1, len(grid))]
        for a, (first, last) in enumerate(margins):
            if lo[a] < first or lo[a] + shape[a] - 1 > last:
                raise ConfigError("case.mask", self.params.get("mask"),
                                  f"an obstacle that fits the {'x'.join(map(str, grid))} grid with a margin "
                                  f"(it spans {shape[a]} cells along axis {a} from cell {lo[a]}): "
                                  "enlarge the grid, move case.center or use a smaller mask")
        mask = np.zeros(grid, bool)
        mask[tuple(slice(a, a + n) for a, n in zip(lo, shape, strict=True))] = self.shape_mask
        geometry = {"mask": str(self.params.get("mask")), "center": [float(c) for c in center],
                    "frontal_height": self.diameter, "solid_cells": int(mask.sum()), "diameter": self.diameter}
        return mask, self.diameter, geometry

    def check(self) -> None:
        """The mask reads, fits the grid, and the options are valid."""
        self.obstacle()
        self.options()
