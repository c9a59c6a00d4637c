"""Flow past your own obstacle: an image (dark = solid), a boolean array or a surface mesh, in the cylinder's channel.

``case.mask`` names a PNG (or any image matplotlib reads) whose dark pixels (luminance < 0.5)
are solid, or a ``.npy`` boolean array (2D; a 3D voxel mask on 3D lattices). One pixel or voxel
is one cell; image rows run from the top, so the picture appears upright in the x-y plane. On 3D
lattices it may also name a closed triangle surface (STL, OBJ, PLY, OFF, glTF; lbm.cases.surface):
scaled by ``case.scale`` cells per mesh unit, its nodes inside are solid and its walls are
interpolated (Bouzidi) at the exact distances to the surface (``case.bounce_back=interpolated``,
the default for surfaces). The obstacle is placed with its centre (a surface's bounding-box
centre) at ``case.center`` (default: nx/4, ny/2[, nz/2]) in the channel of the cylinder case
(velocity inlet at x = 0, zero-gradient outlet, periodic across) and must fit with a margin. Drag
and lift are reported like the cylinder's, normalised by the frontal height D (the obstacle's
extent along y, on which the Reynolds number is based) times the depth in 2D and for obstacles that
span the channel's depth, and by the frontal area (solid nodes projected on the inlet plane, in
cells) in 3D otherwise.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lbm.boundaries import InterpolatedBounceBack
from lbm.boundaries.bounce_back import BOUNCE_BACK_KINDS
from lbm.cases.base import Setup, without_differentiable_form
from lbm.cases.cylinder import OUTLETS, Cylinder
from lbm.cases.surface import MESH_SUFFIXES, placed, read_surface, solid_nodes, surface_intersect
from lbm.errors import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")
BLOCKAGE_WARN = 0.2
"""Above this blockage (the obstacle's extent over the channel's, across the flow) the forces are a confined body's:
the walls' (2D: periodic images') constraint raises the drag above an isolated body's."""
CELLS_ACROSS_WARN = 10
"""Below this many cells across the frontal height the obstacle's boundary layer is under-resolved."""


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
        if array.dtype.kind != "b" and not np.isin(array, (0, 1)).all():
            finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
            held = f"[{finite.min():g}, {finite.max():g}]" if finite.size else "no finite values"
            raise ConfigError("case.mask", str(path), f"a boolean .npy array, or one of 0 and 1 only (this {array.dtype} "
                              f"array holds values in {held}): threshold it, e.g. numpy.save(path, a > 0.5)")
        return np.asarray(array, dtype=bool)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise ConfigError("case.mask", str(path), f"an image ({', '.join(IMAGE_SUFFIXES)}), a .npy array or, "
                          f"on 3D lattices, a surface mesh ({', '.join(MESH_SUFFIXES)})")
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


@without_differentiable_form  # the cylinder's moves its circle or ellipse; a mask read from a file has none
class Obstacle(Cylinder):
    """Vortex shedding behind an obstacle read from a file; forces as the cylinder's, on its frontal height."""

    name = "obstacle"
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {}  # not measured (not Cylinder's): the default

    @cached_property
    def mask_path(self) -> Path:
        """The existing file ``case.mask`` names."""
        value = self.params.mask
        if not isinstance(value, str) or not value:
            raise ConfigError("case.mask", value, "the path of an image (dark = solid), a .npy boolean array or a "
                              "surface mesh (3D)")
        path = Path(value).expanduser()
        if not path.is_file():
            raise ConfigError("case.mask", value, "an existing image, .npy or surface mesh file")
        return path

    @property
    def is_surface(self) -> bool:
        """Whether ``case.mask`` names a surface mesh."""
        return self.mask_path.suffix.lower() in MESH_SUFFIXES

    @cached_property
    def surface(self) -> Any:
        """The surface mesh scaled by ``case.scale`` and placed at ``case.center`` (node coordinates)."""
        if self.lattice.d != 3:
            raise ConfigError("case.mask", str(self.mask_path), "an image or a .npy array on 2D lattices (a surface "
                              "mesh needs lattice=d3q19 or d3q27)")
        return placed(read_surface(self.mask_path), float(self.params.scale), self.center())

    def center(self) -> list[float]:
        """``case.center`` checked, or the default placement (nx/4, ny/2[, nz/2])."""
        grid = self.run.grid
        center = self.params.center
        if center is None:
            return [grid[0] // 4, grid[1] // 2] + [grid[a] // 2 for a in range(2, len(grid))]
        if not isinstance(center, (list, tuple)) or len(center) != len(grid) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in center):
            raise ConfigError("case.center", center, f"{len(grid)} cell coordinates, or null for the default placement")
        return [float(v) for v in center]

    @cached_property
    def shape_mask(self) -> np.ndarray:
        """The obstacle as read from an image or array ``case.mask`` (its own extent, not yet placed)."""
        value = self.params.mask
        mask = read_mask(self.mask_path, self.lattice.d)
        if not mask.any():
            raise ConfigError("case.mask", value, "a mask with at least one solid cell (dark pixel / true value)")
        coords = np.argwhere(mask)
        lo, hi = coords.min(0), coords.max(0) + 1
        return mask[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]

    @property
    def diameter(self) -> float:
        """Frontal height D: the obstacle's extent along y, in cells (a surface's own, not its nodes')."""
        if self.is_surface:
            lo, hi = self.surface.bounds
            return float(hi[1] - lo[1])
        return float(self.shape_mask.shape[1])

    @property
    def reference_area(self) -> float:
        """The area forces are normalised by: D x depth, or in 3D the frontal area where the obstacle has no full span."""
        placed_mask = self.obstacle()[0]
        columns = placed_mask.any(axis=0)
        if columns.ndim == 2 and not columns.all(axis=1)[columns.any(axis=1)].all():
            return float(columns.sum())
        return super().reference_area

    def confinement(self) -> dict[str, Any]:
        """The area the forces are divided by, the blockage across the flow, and notes where either limits the forces.

        ``blockage_ratio``: the largest of the obstacle's extents over the channel's, along each axis across the flow
        that the obstacle does not span (a surface's own extents); ``blockage_area_ratio``: its projection on the
        inlet plane over that plane.
        """
        mask = self.obstacle()[0]
        grid = self.run.grid
        shadow = mask.any(axis=0)  # the projection on the inlet plane
        extents = [float(shadow.any(axis=tuple(b for b in range(shadow.ndim) if b != a)).sum())
                   for a in range(shadow.ndim)]
        if self.is_surface:  # the surface's own extents, not its nodes' (as the frontal height)
            lo, hi = self.surface.bounds
            extents = [float(hi[a] - lo[a]) for a in range(1, len(grid))]
        ratios = [e / n for e, n in zip(extents, grid[1:], strict=True) if e < n]
        out: dict[str, Any] = {"frontal_area": self.reference_area, "blockage_ratio": max(ratios, default=1.0),
                               "blockage_area_ratio": float(shadow.sum()) / float(np.prod(grid[1:]))}
        if out["blockage_ratio"] > BLOCKAGE_WARN:
            out["blockage_note"] = (
                f"the obstacle spans {out['blockage_ratio']:.0%} of the channel across the flow (blockage ratio "
                f"{out['blockage_ratio']:.3f}, area ratio {out['blockage_area_ratio']:.3f}; above {BLOCKAGE_WARN:g} "
                "the channel's confinement raises cd above an isolated body's): widen the channel (grid.ny"
                + (", grid.nz" if len(grid) == 3 else "") + ") to compare with a free-stream drag")
        if self.diameter < CELLS_ACROSS_WARN:
            out["resolution_note"] = (
                f"{self.diameter:g} cells across the obstacle's frontal height (fewer than {CELLS_ACROSS_WARN}): its "
                "boundary layer is under-resolved and the forces carry a large discretisation error; raise "
                "case.scale (surfaces) or the mask's resolution")
        return out

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """The cylinder's force statistics, the frontal area they are divided by, and the blockage (with notes)."""
        return {**super().metrics(setup, fields, steps), **self.confinement()}

    def walls(self, obstacle: np.ndarray, kind: str) -> Any:
        """The obstacle's walls: interpolated at a surface's exact distances, else the cylinder's rule of ``kind``."""
        if kind == "interpolated":
            return InterpolatedBounceBack.from_shape(obstacle, surface_intersect(self.surface), self.lattice)
        return super().walls(obstacle, kind)

    def outlet_kind(self) -> str:
        """The zero-gradient outflow (the obstacle's channel offers no other outlet)."""
        return OUTLETS[0]

    def bounce_back_kind(self) -> str:
        """``case.bounce_back``: interpolated for surfaces (the default), halfway or fullway for masks."""
        kinds = (*BOUNCE_BACK_KINDS, "interpolated") if self.is_surface else BOUNCE_BACK_KINDS
        value = self.params.bounce_back or ("interpolated" if self.is_surface else "halfway")
        if value not in kinds:
            raise ConfigError("case.bounce_back", value, f"one of {', '.join(kinds)}"
                              + ("" if self.is_surface else " (interpolated walls need a surface mesh)"))
        return value

    def obstacle(self) -> tuple[np.ndarray, float, dict[str, Any]]:
        """The mask placed in the channel, the frontal height (the Reynolds length) and the placement."""
        return self.placement

    @cached_property
    def placement(self) -> tuple[np.ndarray, float, dict[str, Any]]:
        """:meth:`obstacle`, computed once."""
        if self.is_surface:
            return self.placed_surface()
        grid = self.run.grid
        center = self.center()
        shape = self.shape_mask.shape
        lo = [int(round(c - n / 2)) for c, n in zip(center, shape, strict=True)]
        margins = [(2, grid[0] - 4)] + [(1, grid[a] - 2) for a in range(1, len(grid))]
        for a, (first, last) in enumerate(margins):
            if lo[a] < first or lo[a] + shape[a] - 1 > last:
                raise ConfigError("case.mask", self.params.mask,
                                  f"an obstacle that fits the {'x'.join(map(str, grid))} grid with a margin "
                                  f"(it spans {shape[a]} cells along axis {a} from cell {lo[a]}): "
                                  "enlarge the grid, move case.center or use a smaller mask")
        mask = np.zeros(grid, bool)
        mask[tuple(slice(a, a + n) for a, n in zip(lo, shape, strict=True))] = self.shape_mask
        geometry = {"mask": str(self.params.mask), "center": [float(c) for c in center],
                    "frontal_height": self.diameter, "solid_cells": int(mask.sum()), "diameter": self.diameter}
        return mask, self.diameter, geometry

    def placed_surface(self) -> tuple[np.ndarray, float, dict[str, Any]]:
        """A surface's solid nodes in the channel (it must fit with a margin), its frontal height and placement."""
        grid = self.run.grid
        lo, hi = self.surface.bounds
        center = self.center()
        margins = [(2, grid[0] - 4)] + [(1, grid[a] - 2) for a in range(1, len(grid))]
        for a, (first, last) in enumerate(margins):
            if lo[a] < first or hi[a] > last:
                raise ConfigError("case.mask", str(self.mask_path),
                                  f"a surface that fits the {'x'.join(map(str, grid))} grid with a margin (scaled by "
                                  f"case.scale it spans [{lo[a]:.2f}, {hi[a]:.2f}] along axis {a}, the room is "
                                  f"[{first}, {last}]): enlarge the grid, move case.center or lower case.scale")
        mask = solid_nodes(self.surface, grid)
        geometry = {"mask": str(self.mask_path), "center": [float(c) for c in center],
                    "scale": float(self.params.scale), "surface_triangles": int(len(self.surface.faces)),
                    "frontal_height": self.diameter, "solid_cells": int(mask.sum()), "diameter": self.diameter}
        if not mask.any():
            raise ConfigError("case.mask", str(self.mask_path), "a surface that holds at least one lattice node "
                              "(this one falls between the nodes): raise case.scale")
        return mask, self.diameter, geometry

    def check(self) -> None:
        """The mask reads, fits the grid, and the options are valid."""
        self.obstacle()
        self.options()
        self.bounce_back_kind()
