"""The flat view of a grid's planes that the in-place TPU kernels (lbm.engines.pallas.aa) index, and its shifts.

2D (D2Q9): the kernels index the populations (Q, nx, ny) as (Q, nx, P / 128, 128) (``plane_view``; P = ny rounded
up to a multiple of 1024, so that a row of y fills whole (8, 128) tiles), so x is the major, untiled axis exactly as in
3D and the DMA windows shift along it. A DMA window on (Q, nx, ny) itself would not do: x is the sublane axis there, and
Mosaic slices it only at offsets and sizes that are multiples of 8 (jax 0.10.2, deviceless v5e). The y shift of a row
(P / 128, 128) is a lane roll by c_y, with the c_y lanes that wrap taken from the neighbouring sublane row (a sublane
roll, periodic: :func:`shifted_flat`). Where ny is no multiple of 1024 the view pads y: the real cells at y < ny, pads at
ny <= y < P (the rest state when placed), and the shift wraps at ny, not P: the |c_y| cells whose source lies across
the wrap take a second flat shift, by c_y + sign(c_y) (P - ny), in a select (a lane and a sublane roll more per shift;
none where P == ny). The pads then receive real or pad populations only (finite) and no real cell reads them; the
even step is local. The view is not free in HBM (the (8, 128) tiles of (x, y) are not those of (y / 128, 128)), so the
pallas engine holds its populations in the view for the whole run (its state: ``PallasEngine.place`` copies them in
once, ``canonical`` gives them back as (Q, nx, ny) where fields, checkpoints and the health check read them): a chunk
copies nothing and plans 1.00x the populations (v5e, deviceless, D2Q9 2048^2 and 4096^2; a copy into the view and back
in every chunk planned 2.00x), P / ny where y is padded (4098^2: 1.25x, 90.0 B per cell and step).

3D grids whose (y, z) planes the (8, 128) tiles would pad (nz no multiple of 128: 64^3 fills half the lanes, 258^3
pads 1.49x) take the same flat view where it pads less (:func:`flat_plane`): a plane's ny nz cells as rows of 128, P
the plane's cells rounded up to 1024 (64^3: 4096, none; 258^3: 67584 for 66564). The shift by (c_y, c_z) is the flat
shift by c_y nz + c_z, and where a coordinate wraps (z from the flat index mod nz, y by a comparison) the flat shift
that undoes the wrap, in a select (:func:`shifted_flat`, given the grid's ``plane``). Grids of whole tiles (128^3,
256^3) keep (ny, nz).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice

LANES = 128
"""Lanes of a TPU vector register: a 2D grid's y axis is viewed as rows of this many cells (:func:`plane_view`)."""
ROW_CELLS = 8 * LANES
"""Cells of y in one (8, 128) tile: the 2D view pads y to a multiple of this (:func:`padded_ny`)."""


def padded_ny(ny: int) -> int:
    """The y extent P of the 2D view: ny rounded up to a multiple of :data:`ROW_CELLS` (the pads lie at ny <= y < P)."""
    return -(-ny // ROW_CELLS) * ROW_CELLS


def tiled_plane(shape: tuple[int, ...]) -> int:
    """Cells one plane (the axes after x) of a 3D grid takes in the TPU's (8, 128) tiles as it is: ny rounded up to a
    multiple of 8, nz to one of 128."""
    return -(-shape[1] // 8) * 8 * -(-shape[2] // LANES) * LANES


def flat_plane(shape: tuple[int, ...]) -> bool:
    """Whether the in-place kernels view the grid's planes (the axes after x) flat, as rows of 128 cells: always in
    2D; in 3D where that pads a plane less than the tiles of (ny, nz) do (64^3: 4096 cells, not 8192; 258^3: 67584,
    not 101376; 256^3 and 128^3 keep (ny, nz))."""
    if len(shape) == 2:
        return True
    return len(shape) == 3 and padded_ny(shape[1] * shape[2]) < tiled_plane(shape)


def plane_of(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The plane (the axes after x) of a grid the kernels view flat (:func:`flat_plane`), else None."""
    return tuple(shape[1:]) if flat_plane(shape) else None


def padded_plane(shape: tuple[int, ...]) -> int:
    """Cells P of one plane of the flat view: the plane's cells rounded up to a multiple of :data:`ROW_CELLS`."""
    return padded_ny(int(np.prod(shape[1:])))


def pad_factor(shape: tuple[int, ...]) -> float:
    """Cells of the kernels' view over the grid's cells: P over the plane's cells where the planes are flat (2D: P /
    ny), else 1."""
    return padded_plane(shape) / int(np.prod(shape[1:])) if flat_plane(shape) else 1.0


def view_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The grid shape the in-place kernels index: (nx, P / 128, 128) where the planes are flat (:func:`flat_plane`,
    P = :func:`padded_plane`), so that x stays the major, untiled axis (the DMA windows shift along it) and a plane
    fills whole (8, 128) tiles (the real cells first, pads after them); else (3D) the grid as it is."""
    return (shape[0], padded_plane(shape) // LANES, LANES) if flat_plane(shape) else tuple(shape)


def to_view(a: Any, grid: tuple[int, ...]) -> Any:
    """A per-cell array ``(*lead, *grid)`` (numpy or jax) as the kernels' view ``(*lead, *view_shape(grid))``: a flat
    plane padded with zeros to P (for populations, deviations f - w: the rest state), the same elements in order."""
    grid = tuple(grid)
    if not flat_plane(grid):
        return a
    lead = tuple(a.shape[: a.ndim - len(grid)])
    cells, p = int(np.prod(grid[1:])), padded_plane(grid)
    a = a.reshape(*lead, grid[0], cells)
    if p != cells:
        xp = np if isinstance(a, np.ndarray) else jnp
        a = xp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, p - cells)])
    return a.reshape(*lead, *view_shape(grid))


def from_view(v: Any, grid: tuple[int, ...]) -> Any:
    """The grid's cells ``(*lead, *grid)`` of a per-cell array in the kernels' view (numpy or jax): the pads dropped."""
    grid = tuple(grid)
    if not flat_plane(grid):
        return v
    lead = tuple(v.shape[: v.ndim - 3])
    cells, p = int(np.prod(grid[1:])), padded_plane(grid)
    v = v.reshape(*lead, grid[0], p)
    return (v[..., :cells] if p != cells else v).reshape(*lead, *grid)


def view_index(i: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """Flat indices into ``(*lead, *grid)`` (the boundary plan's slots) as flat indices into the kernels' view."""
    cells = int(np.prod(grid[1:]))
    if not flat_plane(grid) or padded_plane(grid) == cells:
        return i
    i = np.asarray(i, np.int64)
    return (i // cells) * padded_plane(grid) + i % cells


def plane_view(f: Any) -> Any:
    """Populations ``(Q, *grid)`` as the in-place kernels take them (:func:`view_shape`, :func:`to_view`; in 2D XLA
    copies them into the view's tiled layout)."""
    return to_view(f, tuple(f.shape[1:]))


def shifted(v: Any, c: np.ndarray, roll: Any) -> Any:
    """Plane(s) ``v`` (.., y, z) rolled by c along y and z: v'[y, z] = v[y - c_y, z - c_z] (periodic)."""
    for a in (1, 2):
        if c[a]:
            v = roll(v, int(c[a]) % v.shape[a], a)
    return v


def shifted_flat(v: Any, c: np.ndarray, roll: Any, plane: tuple[int, ...] | None = None) -> Any:
    """A flat plane's row(s) ``v`` (.., P / 128, 128) (:func:`view_shape`) shifted by c along the plane's axes, each
    periodic: v'[k] = v[k - d] at the plane's cells k, d = sum c_a stride_a (2D: c_y; 3D: c_y nz + c_z), where each
    axis whose coordinate wraps (y < c_y, or y >= ny + c_y; z alike) adds sign(c_a) n_a stride_a back. ``plane`` is
    the grid's plane, (ny,) or (ny, nz) (None: 2D, periodic at P). Each shift is a flat one, periodic at P
    (:func:`_flat_at`: a lane roll, and sublane rolls for the lanes it wraps); the cells where axes wrap take theirs in
    a select (none for y where the plane fills P: the flat shift wraps there already). The pads (k >= the plane's
    cells) take finite values (real or pad populations), and no plane cell reads them."""
    lanes = v.shape[-1]
    p = lanes * v.shape[-2]
    if plane is None and len(c) != 2:
        raise ValueError("a 3D flat plane shifts with its plane (ny, nz) given")
    dims = (p,) if plane is None else tuple(int(n) for n in plane)
    strides = [int(np.prod(dims[a + 1:])) for a in range(len(dims))]
    cs = [int(x) for x in c[len(c) - len(dims):]]
    if not any(cs):
        return v
    d = sum(ca * st for ca, st in zip(cs, strides, strict=True))
    cells = int(np.prod(dims))
    lane = jax.lax.broadcasted_iota(jnp.int32, v.shape, v.ndim - 1)
    out = _flat_at(v, d, range(p), roll, lane)
    axes = [a for a in range(len(dims)) if cs[a] and not (a == 0 and cells == p)]  # the axes that wrap short of P
    if not axes:
        return out
    k = np.arange(cells)
    flat = jax.lax.broadcasted_iota(jnp.int32, v.shape, v.ndim - 2) * lanes + lane
    wraps_here = [_wraps(k, a, dims, strides, cs[a]) for a in axes]
    wraps_there = [_wraps(flat, a, dims, strides, cs[a]) for a in axes]
    for n in range(1, 2 ** len(axes)):
        wrapped = [n >> i & 1 for i in range(len(axes))]
        at = np.logical_and.reduce([w if on else ~w for w, on in zip(wraps_here, wrapped, strict=True)])
        if not at.any():
            continue
        back = sum(int(np.sign(cs[a])) * dims[a] * strides[a] for a, on in zip(axes, wrapped, strict=True) if on)
        moved = _flat_at(v, d - back, k[at], roll, lane)
        sel = functools.reduce(jnp.logical_and, [w if on else ~w for w, on in zip(wraps_there, wrapped, strict=True)])
        out = jnp.where(sel, moved, out)
    return out


def _wraps(flat: Any, a: int, dims: tuple[int, ...], strides: list[int], c: int) -> Any:
    """Where axis ``a``'s coordinate of the flat plane index (numpy, or a kernel's int32 iota) wraps under a shift by
    c: the first axis by comparisons (no division), the others by a remainder (3D: z = k mod nz)."""
    if a == 0:
        return flat < c * strides[0] if c > 0 else flat >= (dims[0] + c) * strides[0]
    coord = flat % dims[a] if isinstance(flat, np.ndarray) else jax.lax.rem(flat, jnp.int32(dims[a]))
    return coord < c if c > 0 else coord >= dims[a] + c


def _flat_at(v: Any, k: int, cells: Any, roll: Any, lane: Any) -> Any:
    """Row(s) ``v`` (.., S, 128) shifted by ``k`` cells along the flat index 128 s + l, periodic at 128 S, correct at
    the flat positions ``cells`` (elsewhere, where they need another sublane roll, not): a lane roll by k mod 128, then
    a sublane roll by k // 128 at the lanes l >= k mod 128 and by k // 128 + 1 at the others (a second roll and a
    select on the lane index ``lane`` only where ``cells`` hold lanes of both)."""
    lanes, rows = v.shape[-1], v.shape[-2]
    a, b = divmod(k % (lanes * rows), lanes)
    r = roll(v, b, v.ndim - 1) if b else v
    low = np.asarray(cells) % lanes < b
    need = ({a + 1} if low.any() else set()) | ({a} if not low.all() else set())

    def sub(n: int) -> Any:
        return roll(r, n % rows, v.ndim - 2) if n % rows else r

    if len(need) == 1:
        return sub(need.pop())
    return jnp.where(lane < b, sub(a + 1), sub(a))


def plane_shift(lattice: Lattice, plane: tuple[int, ...] | None) -> Callable[..., Any]:
    """How a row of the kernels' view shifts along the axes after x: a 3D grid's (ny, nz) planes as they are
    (:func:`shifted`, ``plane`` None), else flat planes periodic at the grid's ``plane`` (:func:`shifted_flat`; 2D
    with None: at the view's P)."""
    return shifted if lattice.d == 3 and plane is None else functools.partial(shifted_flat, plane=plane)
