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

2D grids whose ny pads that view (1440: 2048, 1.42x; 4098: 5120) may group k rows of x into one plane instead
(:func:`row_group`; the engine's choice): a row of y
padded only to Y, a multiple of 128 cells (1440: 1536; 4098: 4608 with k = 2), and the k rows x = p + m N (m < k, N =
nx / k) as plane p, (N, k Y / 128, 128). Rows of x spaced N apart make the x shift a shift of the plane (the DMA
windows' offsets, as before), except at the grid's edge: the plane before plane 0 is plane N - 1 with its rows moved
by one (row m holds x = N - 1 + (m - 1) N), the plane after N - 1 is plane 0 moved the other way; the ring kernel rolls
such a window row by Y / 128 sublanes after its DMA and back before its write-back (:func:`edge_rows`). The y shift
is the flat shift by c_y within each row of Y cells, wrapping at ny (:func:`shifted_flat` with the plane (k, ny)).

3D grids whose (y, z) planes the (8, 128) tiles would pad (nz no multiple of 128: 64^3 fills half the lanes, 258^3
pads 1.49x) take the same flat view where it pads less (:func:`flat_plane`): a plane's ny nz cells as rows of 128, P
the plane's cells rounded up to 1024 (64^3: 4096, none; 258^3: 67584 for 66564). The shift by (c_y, c_z) is the flat
shift by c_y nz + c_z, and where a coordinate wraps (z from the flat index mod nz, y by a comparison) the flat shift
that undoes the wrap, in a select (:func:`shifted_flat`, given the grid's ``plane``). Grids of whole tiles (128^3,
256^3) keep (ny, nz).
"""

from __future__ import annotations

import functools
import math
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
    return row_cells(ny, 1)


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


def plane_of(shape: tuple[int, ...], group: int = 1) -> tuple[int, ...] | None:
    """The plane the kernels' shifts wrap in, where they view the grid's planes flat (:func:`flat_plane`), else None:
    the axes after x, or (k, ny) for a 2D view of k rows of x per plane (:func:`row_group`)."""
    if group > 1:
        return (group, int(shape[1]))
    return tuple(shape[1:]) if flat_plane(shape) else None


def padded_plane(shape: tuple[int, ...]) -> int:
    """Cells P of one plane of the flat view: the plane's cells rounded up to a multiple of :data:`ROW_CELLS`."""
    return padded_ny(int(np.prod(shape[1:])))


def pad_factor(shape: tuple[int, ...], group: int = 1) -> float:
    """Cells of the kernels' view over the grid's cells: P over the plane's cells where the planes are flat (2D: P /
    ny; Y / ny with ``group`` rows of x per plane), else 1."""
    if group > 1:
        return row_cells(shape[1], group) / shape[1]
    return padded_plane(shape) / int(np.prod(shape[1:])) if flat_plane(shape) else 1.0


GROUPS = (2, 4, 8)
"""Rows of x a 2D plane may group (:func:`row_group`): k Y / 128 sublanes must be a multiple of 8."""


def row_cells(ny: int, group: int) -> int:
    """Cells Y of one row of y in a 2D plane of ``group`` rows: ny rounded up to 128 times the least sublanes whose
    ``group`` rows fill whole (8, 128) tiles (group 1: :func:`padded_ny`)."""
    step = 8 // math.gcd(group, 8)
    return -(-ny // (LANES * step)) * LANES * step


def row_group(shape: tuple[int, ...], min_planes: int = 8) -> int:
    """Rows of x per plane of a 2D grid's view that pad y least: the k of :data:`GROUPS` (or 1) whose rows of
    :func:`row_cells` are shortest, k dividing nx with at least ``min_planes`` planes left (the kernels' blocks), the
    smaller k on a tie; 1 where no k pads less than the view of one row per plane (ny a multiple of 1024), and in 3D."""
    if len(shape) != 2:
        return 1
    nx, ny = shape
    best, cells = 1, padded_ny(ny)
    for k in GROUPS:
        if nx % k == 0 and nx // k >= min_planes and row_cells(ny, k) < cells:
            best, cells = k, row_cells(ny, k)
    return best


def kernel_grid(shape: tuple[int, ...], group: int = 1) -> tuple[int, ...]:
    """The grid the in-place kernels block and size as they would a grid of one row of x per plane: (nx / k, k Y) for
    a 2D view of k rows per plane, else the grid."""
    if group == 1:
        return tuple(shape)
    return (shape[0] // group, group * row_cells(shape[1], group))


def view_shape(shape: tuple[int, ...], group: int = 1) -> tuple[int, ...]:
    """The grid shape the in-place kernels index: (nx, P / 128, 128) where the planes are flat (:func:`flat_plane`,
    P = :func:`padded_plane`), so that x stays the major, untiled axis (the DMA windows shift along it) and a plane
    fills whole (8, 128) tiles (the real cells first, pads after them); (nx / k, k Y / 128, 128) with ``group`` k rows
    of x per 2D plane (:func:`row_group`); else (3D) the grid as it is."""
    if group > 1:
        n, cells = kernel_grid(shape, group)
        return (n, cells // LANES, LANES)
    return (shape[0], padded_plane(shape) // LANES, LANES) if flat_plane(shape) else tuple(shape)


def to_view(a: Any, grid: tuple[int, ...], group: int = 1) -> Any:
    """A per-cell array ``(*lead, *grid)`` (numpy or jax) as the kernels' view ``(*lead, *view_shape(grid))``: a flat
    plane padded with zeros to P (for populations, deviations f - w: the rest state), the same elements in order;
    with ``group`` rows of x per 2D plane, row x = p + m N at row m of plane p, each padded with zeros to Y."""
    grid = tuple(grid)
    if group > 1:
        xp = np if isinstance(a, np.ndarray) else jnp
        lead, (nx, ny), y = tuple(a.shape[: a.ndim - 2]), grid, row_cells(grid[1], group)
        a = a.reshape(*lead, group, nx // group, ny)
        if y != ny:
            a = xp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, y - ny)])
        return xp.swapaxes(a, -3, -2).reshape(*lead, *view_shape(grid, group))
    if not flat_plane(grid):
        return a
    lead = tuple(a.shape[: a.ndim - len(grid)])
    cells, p = int(np.prod(grid[1:])), padded_plane(grid)
    a = a.reshape(*lead, grid[0], cells)
    if p != cells:
        xp = np if isinstance(a, np.ndarray) else jnp
        a = xp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, p - cells)])
    return a.reshape(*lead, *view_shape(grid))


def from_view(v: Any, grid: tuple[int, ...], group: int = 1) -> Any:
    """The grid's cells ``(*lead, *grid)`` of a per-cell array in the kernels' view (numpy or jax; ``group`` rows of
    x per 2D plane, :func:`to_view`): the pads dropped."""
    grid = tuple(grid)
    if group > 1:
        xp = np if isinstance(v, np.ndarray) else jnp
        lead, (nx, ny), y = tuple(v.shape[: v.ndim - 3]), grid, row_cells(grid[1], group)
        v = xp.swapaxes(v.reshape(*lead, nx // group, group, y), -3, -2)
        return v[..., :ny].reshape(*lead, nx, ny)
    if not flat_plane(grid):
        return v
    lead = tuple(v.shape[: v.ndim - 3])
    cells, p = int(np.prod(grid[1:])), padded_plane(grid)
    v = v.reshape(*lead, grid[0], p)
    return (v[..., :cells] if p != cells else v).reshape(*lead, *grid)


def view_index(i: np.ndarray, grid: tuple[int, ...], group: int = 1) -> np.ndarray:
    """Flat indices into ``(*lead, *grid)`` (the boundary plan's slots) as flat indices into the kernels' view."""
    if group > 1:
        i = np.asarray(i, np.int64)
        (nx, ny), y = grid, row_cells(grid[1], group)
        lead, x, j = i // (nx * ny), i // ny % nx, i % ny
        n = nx // group
        return lead * nx * y + (x % n) * group * y + (x // n) * y + j
    cells = int(np.prod(grid[1:]))
    if not flat_plane(grid) or padded_plane(grid) == cells:
        return i
    i = np.asarray(i, np.int64)
    return (i // cells) * padded_plane(grid) + i % cells


def plane_view(f: Any, group: int = 1) -> Any:
    """Populations ``(Q, *grid)`` as the in-place kernels take them (:func:`view_shape`, :func:`to_view`; in 2D XLA
    copies them into the view's tiled layout)."""
    return to_view(f, tuple(f.shape[1:]), group)


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
    the grid's plane, (ny,) or (ny, nz) (None: 2D, periodic at P), or (k, ny) for a 2D view of k rows of x per plane
    (:func:`row_group`: rows of Y = P / k cells, y shifted and wrapped at ny within each, x left to the DMA). Each
    shift is a flat one, periodic at P (:func:`_flat_at`: a lane roll, and sublane rolls for the lanes it wraps); the
    cells where axes wrap take theirs in a select (none for y where the plane fills P: the flat shift wraps there
    already). The pads (beyond the plane's cells, or a row's) take finite values (real or pad populations), and no
    plane cell reads them."""
    lanes = v.shape[-1]
    p = lanes * v.shape[-2]
    if plane is None and len(c) != 2:
        raise ValueError("a 3D flat plane shifts with its plane (ny, nz) given")
    dims = (p,) if plane is None else tuple(int(n) for n in plane)
    strides = [int(np.prod(dims[a + 1:])) for a in range(len(dims))]
    cs = [int(x) for x in c[len(c) - len(dims):]]
    if len(c) == 2 and len(dims) == 2:  # 2D, k rows of x per plane: rows of p / k cells, no x shift in the plane
        strides, cs = [p // dims[0], 1], [0, int(c[1])]
    if not any(cs):
        return v
    d = sum(ca * st for ca, st in zip(cs, strides, strict=True))
    cells = int(np.prod(dims))
    lane = jax.lax.broadcasted_iota(jnp.int32, v.shape, v.ndim - 1)
    out = _flat_at(v, d, range(p), roll, lane)
    axes = [a for a in range(len(dims)) if cs[a] and not (a == 0 and cells == p)]  # the axes that wrap short of P
    if not axes:
        return out
    k = np.zeros(1, np.int64)  # the plane's cells' flat positions (rows of y may be padded: :func:`row_cells`)
    for n, st in zip(dims, strides, strict=True):
        k = (k[:, None] + np.arange(n) * st).ravel()
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
    c: the first axis by comparisons (no division), the last by a remainder (3D: z = k mod nz; 2D rows of Y cells:
    y = k mod Y, wrapping at ny)."""
    if a == 0:
        return flat < c * strides[0] if c > 0 else flat >= (dims[0] + c) * strides[0]
    period = strides[a - 1]
    coord = flat % period if isinstance(flat, np.ndarray) else jax.lax.rem(flat, jnp.int32(period))
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


def edge_rows(lattice: Lattice, view: tuple[int, ...], plane: tuple[int, ...] | None) -> int:
    """Sublanes by which the ring kernel rolls a window's plane that wraps around the grid's x edge: Y / 128 for a 2D
    view ``(Q, nx / k, k Y / 128, 128)`` of k rows of x per plane (plane (k, ny), :func:`row_group`), else 0."""
    if lattice.d == 2 and plane is not None and len(plane) == 2:
        return view[-2] // plane[0]
    return 0


def plane_shift(lattice: Lattice, plane: tuple[int, ...] | None) -> Callable[..., Any]:
    """How a row of the kernels' view shifts along the axes after x: a 3D grid's (ny, nz) planes as they are
    (:func:`shifted`, ``plane`` None), else flat planes periodic at the grid's ``plane`` (:func:`shifted_flat`; 2D
    with None: at the view's P)."""
    return shifted if lattice.d == 3 and plane is None else functools.partial(shifted_flat, plane=plane)
