"""The in-place AA-pattern Pallas kernels of the TPU rows form, 3D and 2D: one population array, no second buffer.

The AA pattern (Bailey et al. 2009; the native engine's scheme, lbm.engines.plan.slot_maps) runs two steps
that each read and write every population once, in place, and leave the array canonical after the pair:

``aa_even``: cell x reads f_i from slot i of x, collides, writes f*_i to slot opp(i) of x. Purely local.
``aa_odd``:  cell x reads f_i from slot opp(i) of x - c_i (where the even step left f*_i of the cell
upstream), collides, writes f*_i to slot i of x + c_i: the canonical layout again.

Each memory location is read and written by one cell only, so any order of cells is in-place safe. With
blocks of R rows along x (whole (y, z) planes), the locations one block of the odd step touches in slot j
are the rows [x0 + c_x(j), x0 + c_x(j) + R) (mod nx): the cell x reads slot j = opp(i) at row x - c_x(i) =
x + c_x(j), and writes slot i at row x + c_x(i). So a block reads a window of R rows per slot, shifted by
that slot's c_x, and writes its results back into the same window: the x shift of streaming is all in the
DMA offsets. Inside the block, row r of every window belongs to the cell row x0 + r; the y and z shifts are
periodic rolls of whole planes (pltpu.roll, as the push kernel lbm.engines.pallas.kernels.rows_step does):
f_i(x) = roll(window_opp(i)[r], c_i) and window_i[r] = roll(f*_i(x), c_i).

Kernels:

``aa_odd_step``: the array stays in HBM (``memory_space=pl.ANY``, the input aliased to the output); each
program copies its block's windows into a VMEM buffer by DMA (per slot one copy of R rows, or two where the
window can wrap around x: the edge row mod nx and the R - 1 rows that never wrap), collides row by row in
that buffer in place, and copies the windows back. The grid runs in order ("arbitrary"): block p + 1's
windows are fetched while block p computes, into a ring of ``buffers`` VMEM buffers (block p's write-back
is waited on only when its buffer is needed again, or at the end).

``aa_even_step``: the same, with every window at offset 0 (``pipeline="dma"``), or (``"blocks"``, the
default) plain BlockSpec blocks of R rows, the input aliased to the output and pipelined by Pallas.

2D (D2Q9): the kernels index the populations (Q, nx, ny) as (Q, nx, P / 128, 128) (``plane_view``; P = ny rounded
up to a multiple of 1024, so that a row of y fills whole (8, 128) tiles), so x is the major, untiled axis exactly as in
3D and the DMA windows shift along it. A DMA window on (Q, nx, ny) itself would not do: x is the sublane axis there, and
Mosaic slices it only at offsets and sizes that are multiples of 8 (jax 0.10.2, deviceless v5e). The y shift of a row
(P / 128, 128) is a lane roll by c_y, with the c_y lanes that wrap taken from the neighbouring sublane row (a sublane
roll, periodic: ``_shifted_flat``). Where ny is no multiple of 1024 the view pads y: the real cells at y < ny, pads at
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
that undoes the wrap, in a select (:func:`_shifted_flat`, given the grid's ``plane``). Grids of whole tiles (128^3,
256^3) keep (ny, nz).

Both run in Pallas interpret mode on a CPU (slow, for checking; tests/engines/pallas/test_pallas_inplace.py). They are
named ``BULK_SCOPE``, as the push kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from lbm.cases.base import Setup
from lbm.engines.pallas.cell import collide_cell
from lbm.engines.pallas.kernels import rows_unsupported, vmem_bytes
from lbm.kernels.collisions import Collision
from lbm.kernels.streaming import stream
from lbm.lattice import Lattice
from lbm.stages import BULK_SCOPE

PIPELINES = ("blocks", "dma")
"""How the even kernel moves its blocks: Pallas' BlockSpec pipeline, or this module's DMA ring (see the module doc)."""
AA_BYTES = 16 * 2**20
"""Target bytes of one block of the in-place kernels in VMEM (the DMA ring holds ``buffers`` of them, the BlockSpec
pipeline four: input and output, double-buffered). v5e, deviceless: D3Q19 256^3 compiles with 8 rows (38 MiB)
in the ring and 4 in BlockSpec blocks, not 16 and 8 (VMEM: 128 MiB)."""
MIN_BLOCKS = 8
"""Fewest blocks along x the block height leaves where it can: the first fetch and the last write-back are not
overlapped with compute (each 1 / blocks of the step's traffic)."""
AA_BLOCK_MAX = 24 * 2**20
"""Largest block of one row the in-place kernels take (VMEM: 128 MiB on a v5e, the limit set below 100 MiB)."""
VMEM_CAP = 100 * 2**20
"""The scoped VMEM limit the kernels ask for at most."""
BUFFERS = 3
"""VMEM buffers of the DMA ring: block p computes in one while block p + 1 arrives in a second and block p - 1
goes back to HBM from the third (with two, program p first waits for block p - 1's write-back: the HBM then
idles while p computes, beyond the time block p + 1's fetch takes)."""


LANES = 128
"""Lanes of a TPU vector register: a 2D grid's y axis is viewed as rows of this many cells (:func:`plane_view`)."""
ROW_CELLS = 8 * LANES
"""Cells of y in one (8, 128) tile: the 2D view pads y to a multiple of this (:func:`padded_ny`)."""
MAX_PAD = 2.0
"""Largest padding P / ny for which the 2D pair is chosen (:func:`aa2d_not_chosen`): the pair moves P / ny times the
populations' bytes per step, at 98 % of the bandwidth on the chip (4096^2: 9064 MLUPS); the push rows kernel measured
36 % at 4096^2 and the xla engine 14 % at 4098^2 (docs/performance.md), so the pair wins up to P / ny = 2.7 against
the push kernel and 7 against xla; 2.0 keeps every ny from 512 up (any ny above 1024 pads by less than 2.0)."""


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
    lead = tuple(a.shape[: a.ndim - len(grid)])
    if not flat_plane(grid):
        return a
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


def streamed_after_even(post: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """The populations ``(Q, *grid)`` a dense step leaves, from those an even step left (slot opp(k) holds f*_k): its
    opposite slots streamed (a new array)."""
    return stream(post[np.asarray(lattice.opposite)], lattice)


def plane_view(f: Any) -> Any:
    """Populations ``(Q, *grid)`` as the in-place kernels take them (:func:`view_shape`, :func:`to_view`; in 2D XLA
    copies them into the view's tiled layout)."""
    return to_view(f, tuple(f.shape[1:]))


def aa_rows(lattice: Lattice, shape: tuple[int, ...], itemsize: int = 4, budget: int = AA_BYTES, extra: int = 0
            ) -> int:
    """Rows per block of the in-place kernels on grid ``shape``: the largest divisor R of nx whose block (R + ``extra``
    rows: the kernel walls read one more) fits ``budget`` bytes of VMEM and leaves at least MIN_BLOCKS blocks (so that
    DMAs overlap the compute), else 1."""
    fitting = block_heights(lattice, shape, itemsize, budget, extra)
    return max(fitting) if fitting else 1


def block_heights(lattice: Lattice, shape: tuple[int, ...], itemsize: int = 4, budget: int = AA_BYTES, extra: int = 0
                  ) -> list[int]:
    """The divisors R of nx whose block (R + ``extra`` rows) fits ``budget`` bytes of VMEM and leaves at least
    MIN_BLOCKS blocks, in increasing order."""
    nx, row = shape[0], vmem_bytes(lattice.q, (1, *view_shape(shape)[1:]), itemsize)
    return [b for b in range(1, nx + 1) if nx % b == 0 and (b + extra) * row <= budget and nx // b >= MIN_BLOCKS]


def aa_unsupported(lattice: Lattice, shape: tuple[int, ...], dtype: Any) -> str:
    """Why the in-place kernels cannot run this grid on a TPU ('' when they can)."""
    if len(shape) not in (2, 3):
        return "the in-place (AA) Pallas kernels are 2D and 3D only"
    if jnp.dtype(dtype) != jnp.float32:
        return f"the TPU Pallas kernel computes in float32, not {jnp.dtype(dtype)}"
    if np.abs(lattice.c[:, 0]).max() > 1:
        return "the in-place Pallas kernels stream at most one row along x"
    size = vmem_bytes(lattice.q, (1, *view_shape(shape)[1:]), 4)
    if size > AA_BLOCK_MAX:
        return (f"grid {'x'.join(map(str, shape))}: one row of the in-place TPU kernel ({size / 2**20:.0f} MiB) "
                f"does not fit its VMEM budget ({AA_BLOCK_MAX // 2**20} MiB)")
    return ""


AA2D_MIN_BYTES = 128 * 2**20
"""Populations from which the 2D in-place pair runs on a TPU instead of the push rows kernel: the VMEM's size.
Below it the push kernel was measured on the chip (D2Q9 1024^2, 37.7 MB: 8583 MLUPS, 92.8 % of the same-run probe,
docs/tpu-v5e/2026-12-06/device-check/); above it the push kernel's halo gathers cost 2.38x the traffic (4096^2:
3360 MLUPS, 36 % of the probe), where the pair measured 8912 MLUPS, 96.4 % of the same run's probe
(docs/tpu-v5e/2026-12-06/walls/bench-d2q9-4096.json)."""


AA2D_ALONE_MIN_BYTES = 40 * 2**20
"""Populations from which the 2D in-place pair runs on a TPU where the push rows kernel cannot run the setup alone
(boundary cells, which it would gather and scatter, or a grid it refuses: :func:`push_runs_alone`). Below it the
xla engine's whole step stays in the VMEM and ties the pair: the cavity 1024^2 (36 MiB) xla 5361 MLUPS against the
pair's 5187 (deviceless v5e: xla moves 66 B per cell and step from HBM). Above it the pair wins: the cavity 1500^2
(77 MiB) 5516 against 2151, the cylinder 1680x720 (42 MiB) 3328 against 2716, the wall-free box 1500^2 (the push
kernel refuses it) 5764 against 1960 (docs/tpu-v5e/2026-12-07/pair-small/)."""


def push_runs_alone(setup: Setup) -> bool:
    """Whether the push rows kernel runs ``setup`` on a TPU without gathering boundary cells: a wall-free grid it takes."""
    return setup.wall_free and not rows_unsupported(setup.lattice, setup.shape, setup.dtype)


def aa2d_not_chosen(lattice: Lattice, shape: tuple[int, ...], dtype: Any, push: bool = True) -> str:
    """Why a 2D grid the pair could run keeps the push rows kernel or the xla engine ('' for 3D, and where y pads by at
    most MAX_PAD from AA2D_MIN_BYTES up, or from AA2D_ALONE_MIN_BYTES up where the push kernel cannot run the setup
    alone: ``push`` False, :func:`push_runs_alone`)."""
    if len(shape) != 2:
        return ""
    size = lattice.q * int(np.prod(shape)) * jnp.dtype(dtype).itemsize
    if push and size < AA2D_MIN_BYTES:
        return (f"{size / 2**20:.0f} MiB of populations, under the {AA2D_MIN_BYTES // 2**20} MiB from which the 2D "
                "in-place pair runs (the push rows kernel was measured at 93 % of the probe at 1024^2)")
    if not push and size < AA2D_ALONE_MIN_BYTES:
        return (f"{size / 2**20:.0f} MiB of populations, under the {AA2D_ALONE_MIN_BYTES // 2**20} MiB from which the "
                "2D in-place pair runs with boundaries (below it the xla engine's step stays in the VMEM)")
    if pad_factor(shape) > MAX_PAD:
        return (f"grid {'x'.join(map(str, shape))}: the 2D in-place pair would pad y from {shape[1]} to "
                f"{padded_ny(shape[1])} cells ({pad_factor(shape):.2f}x), more than its {MAX_PAD}x")
    return ""


def _compiler_params(interpret: bool, semantics: str, resident: int, row: int) -> Any:
    """Mosaic's parameters: the grid's semantics and a VMEM limit of ``resident`` bytes (the blocks), one row's
    temporaries and a margin, at most VMEM_CAP; None in interpret mode."""
    if interpret:
        return None
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.CompilerParams(dimension_semantics=(semantics,),
                                vmem_limit_bytes=int(min(VMEM_CAP, resident + 6 * row + 16 * 2**20)))


def _rows(rows: int, row: Callable[[Any], None]) -> None:
    """``row(r)`` for r in range(rows): unrolled for one row, else a loop (Mosaic then compiles one row's code)."""
    if rows == 1:
        row(0)
        return

    def body(r: Any, carry: Any) -> Any:
        row(r)
        return carry

    jax.lax.fori_loop(0, rows, body, 0)


def _shifted(v: Any, c: np.ndarray, roll: Any) -> Any:
    """Plane(s) ``v`` (.., y, z) rolled by c along y and z: v'[y, z] = v[y - c_y, z - c_z] (periodic)."""
    for a in (1, 2):
        if c[a]:
            v = roll(v, int(c[a]) % v.shape[a], a)
    return v


def _shifted_flat(v: Any, c: np.ndarray, roll: Any, plane: tuple[int, ...] | None = None) -> Any:
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


def _even_row(lattice: Lattice, collide: Callable[[list[Any]], list[Any]]) -> Callable[[Any, Any, Any], None]:
    """Row r of the even step, from ``src`` (Q, R, y, z) into ``dst`` (may be ``src``): f*_i into slot opp(i)."""
    opp = [int(k) for k in lattice.opposite]

    def row(src: Any, dst: Any, r: Any) -> None:
        post = collide([src[i, pl.ds(r, 1)] for i in range(lattice.q)])
        for i in range(lattice.q):
            dst[opp[i], pl.ds(r, 1)] = post[i].astype(dst.dtype)

    return row


def plane_shift(lattice: Lattice, plane: tuple[int, ...] | None) -> Callable[..., Any]:
    """How a row of the kernels' view shifts along the axes after x: a 3D grid's (ny, nz) planes as they are
    (:func:`_shifted`, ``plane`` None), else flat planes periodic at the grid's ``plane`` (:func:`_shifted_flat`; 2D
    with None: at the view's P)."""
    return _shifted if lattice.d == 3 and plane is None else functools.partial(_shifted_flat, plane=plane)


def _odd_row(lattice: Lattice, collide: Callable[[list[Any]], list[Any]], roll: Any,
             plane: tuple[int, ...] | None = None) -> Callable[[Any, Any, Any], None]:
    """Row r of the odd step on a block of windows, in place: f_i = roll(slot opp(i), c_i), slot i = roll(f*_i, c_i)
    (a flat view's planes periodic at ``plane``, :func:`plane_shift`)."""
    opp = [int(k) for k in lattice.opposite]
    shift = plane_shift(lattice, plane)

    def row(src: Any, dst: Any, r: Any) -> None:
        pre = [shift(src[opp[i], pl.ds(r, 1)], lattice.c[i], roll) for i in range(lattice.q)]
        post = collide(pre)
        for i in range(lattice.q):
            dst[i, pl.ds(r, 1)] = shift(post[i], lattice.c[i], roll).astype(dst.dtype)

    return row


Region = tuple[int, int, int]
"""A slot's window of a block: (first grid row relative to the block's x0, rows, first VMEM row)."""


def ring_regions(cx: list[int], rows: int, moving: bool, extended: bool) -> tuple[list[Region], list[Region], list[int]]:
    """Per slot j the DMA read and write windows of a block (:data:`Region`) and the grid row offset of its first VMEM
    row (``base``). The write window is R rows at offset c_x(j) (``moving``: the odd step) or 0; ``extended``: the
    read window covers the rows at both offsets, 0 and c_x(j) (R + 1 rows where c_x(j) != 0: the kernel walls of
    lbm.engines.pallas.walls read the other offset), and only the R written rows go back."""
    reads, writes, base = [], [], []
    for c in cx:
        o = c if moving else 0
        g = min(0, c) if extended else o
        reads.append((g, rows + (abs(c) if extended else 0), 0))
        writes.append((o, rows, o - g))
        base.append(g)
    return reads, writes, base


def _windows(a_ref: Any, buf: Any, sem: Any, regions: list[Region], nx: int, rows: int, block: Any, slot: Any,
             to_hbm: bool) -> list[Any]:
    """The DMA descriptors between block ``block``'s windows in HBM and VMEM buffer ``slot``: per slot j the rows
    [x0 + g, x0 + g + n) mod nx of its region (g, n, v) (g in {-1, 0, 1}, n <= rows + 1), at VMEM rows [v, v + n);
    a window that can wrap as copies of static size (the edge row mod nx before x0 or from x0 + rows, and the rows
    between, which never wrap)."""
    from jax.experimental.pallas import tpu as pltpu

    x0 = block * rows
    out = []
    for j, (g, n, v) in enumerate(regions):
        lo, hi = max(g, 0), min(g + n, rows)  # the rows that never wrap, relative to x0
        parts = [(jax.lax.rem(x0 + nx - 1, nx), v, 1)] if g < 0 else []
        parts.append((x0 + lo, v + lo - g, hi - lo))
        if g + n > rows:  # the row x0 + rows: wraps to 0 for the last block
            parts.append((jax.lax.rem(x0 + rows, nx), v + rows - g, 1))
        for start, at, k in parts:
            if k == 0:
                continue
            hbm, vmem = a_ref.at[j, pl.ds(start, k)], buf.at[slot, j, pl.ds(at, k)]
            src, dst = (vmem, hbm) if to_hbm else (hbm, vmem)
            out.append(pltpu.make_async_copy(src, dst, sem.at[slot]))
    return out


def _ring_kernel(reads_at: list[Region], writes_at: list[Region], nx: int, rows: int, buffers: int,
                 row: Callable[..., None]) -> Callable[..., None]:
    """The in-place DMA-ring kernel (module doc): program p fetches block p + 1, computes block p, writes it back.
    Inputs after the populations (the kernel walls' link bits) come as Pallas blocks of ``rows`` rows, and ``row``
    receives them after the row index."""
    blocks = nx // rows

    def kernel(a_in: Any, *refs: Any) -> None:
        *extra, a_out, buf, rsem, wsem = refs
        p = pl.program_id(0)

        def reads(b: Any, s: Any) -> list[Any]:
            return _windows(a_in, buf, rsem, reads_at, nx, rows, b, s, False)

        def writes(b: Any, s: Any) -> list[Any]:
            return _windows(a_out, buf, wsem, writes_at, nx, rows, b, s, True)

        @pl.when(p == 0)
        def _first() -> None:
            for c in reads(0, 0):
                c.start()

        @pl.when(p + 1 < blocks)
        def _prefetch() -> None:
            nxt = jax.lax.rem(p + 1, buffers)

            @pl.when(p + 1 >= buffers)
            def _free() -> None:  # the buffer's last block (p + 1 - buffers) must be back in HBM
                for c in writes(p + 1 - buffers, nxt):
                    c.wait()

            for c in reads(p + 1, nxt):
                c.start()

        slot = jax.lax.rem(p, buffers)
        for c in reads(p, slot):
            c.wait()
        block = buf.at[slot]
        _rows(rows, lambda r: row(block, block, r, *extra))
        for c in writes(p, slot):
            c.start()

        @pl.when(p == blocks - 1)
        def _drain() -> None:  # the write-backs no later program waited on
            for b in range(max(0, blocks - buffers), blocks):
                for c in writes(b, b % buffers):
                    c.wait()

    return kernel


def ring_call(f: jnp.ndarray, cx: list[int], moving: bool, rows: int, buffers: int, row: Callable[..., None],
              interpret: bool, bits: tuple[jnp.ndarray, ...] = (), name: str = BULK_SCOPE) -> jnp.ndarray:
    """``f`` (Q, nx, ny, nz) updated in place by the DMA-ring kernel: per slot j windows at offset c_x(j) (``moving``,
    the odd step) or 0 (:func:`ring_regions`); with ``bits`` (int32 arrays (nx, ny, nz)) the read windows extended to
    both offsets and ``row(src, dst, r, *bits_blocks)`` given the block's rows of each."""
    from jax.experimental.pallas import tpu as pltpu

    q, shape = f.shape[0], tuple(f.shape[1:])
    nx = shape[0]
    if nx % rows:
        raise ValueError(f"{rows} rows per block do not divide nx = {nx}")
    extended = bool(bits)
    reads_at, writes_at, _ = ring_regions(cx, rows, moving, extended)
    held = rows + int(extended)
    block = vmem_bytes(q, (held, *shape[1:]), f.dtype.itemsize)
    in_specs = [pl.BlockSpec(memory_space=pl.ANY)] + [pl.BlockSpec((rows, *shape[1:]), lambda p: (p, 0, 0))] * len(bits)
    resident = buffers * block + 2 * len(bits) * vmem_bytes(1, (rows, *shape[1:]), 4)
    return pl.pallas_call(
        _ring_kernel(reads_at, writes_at, nx, rows, buffers, row),
        out_shape=jax.ShapeDtypeStruct(f.shape, f.dtype),
        grid=(nx // rows,),
        in_specs=in_specs,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((buffers, q, held, *shape[1:]), f.dtype),
                        pltpu.SemaphoreType.DMA((buffers,)), pltpu.SemaphoreType.DMA((buffers,))],
        input_output_aliases={0: 0},
        compiler_params=_compiler_params(interpret, "arbitrary", resident, block // held),
        interpret=interpret,
        name=name,
    )(f, *bits)


def _collider(lattice: Lattice, omega_plus: float, omega_minus: float, force: np.ndarray | None,
              collision: Collision | None) -> Callable[[list[Any]], list[Any]]:
    return lambda fs: collide_cell(fs, lattice, omega_plus, omega_minus, force, collision)


def _viewed(step: Callable[..., jnp.ndarray]) -> Callable[..., jnp.ndarray]:
    """``step`` on populations ``(Q, *grid)`` of a grid whose planes the kernels view flat (:func:`flat_plane`) through
    :func:`plane_view` and back (a copy each way on a TPU; the pallas engine holds its populations in the view and
    passes it as it is, with its ``plane``), told the grid's plane. A 2D array of view rank and no ``plane`` is a view
    periodic at its own P."""
    @functools.wraps(step)
    def on_grid(f: jnp.ndarray, lattice: Lattice, *args: Any, plane: tuple[int, ...] | None = None,
                **kw: Any) -> jnp.ndarray:
        grid = tuple(f.shape[1:])
        if plane is None and f.ndim == lattice.d + 1 and flat_plane(grid):
            return from_view(step(plane_view(f), lattice, *args, plane=grid[1:], **kw), grid)
        return step(f, lattice, *args, plane=plane, **kw)

    return on_grid


def _grid_of(view: jnp.ndarray, lattice: Lattice, plane: tuple[int, ...] | None) -> tuple[int, ...]:
    """The grid shape a step's block rows count on: a flat view's (nx, P) (with its pads), else the grid's."""
    shape = tuple(view.shape[1:])
    return shape if lattice.d == 3 and plane is None else (shape[0], shape[1] * shape[2])


@_viewed
def aa_even_step(f: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float,
                 force: np.ndarray | None, interpret: bool = False, rows: int | None = None,
                 collision: Collision | None = None, pipeline: str = "blocks",
                 plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The AA even step of populations ``(Q, *grid)`` (or their :func:`plane_view`, with the grid's ``plane``) in
    place (``f`` aliased to the result; donate it). Local: a view's pads collide as any cell."""
    q, shape = lattice.q, tuple(f.shape[1:])
    rows = rows or aa_rows(lattice, _grid_of(f, lattice, plane), f.dtype.itemsize)
    row = _even_row(lattice, _collider(lattice, omega_plus, omega_minus, force, collision))
    if pipeline == "dma":
        return ring_call(f, [int(c) for c in lattice.c[:, 0]], False, rows, BUFFERS, row, interpret)
    if pipeline != "blocks":
        raise ValueError(f"unknown pipeline {pipeline!r}: choose one of {', '.join(PIPELINES)}")
    if shape[0] % rows:
        raise ValueError(f"{rows} rows per block do not divide nx = {shape[0]}")
    spec = pl.BlockSpec((q, rows, *shape[1:]), lambda p: (0, p, 0, 0))  # 2D: the view is 4D too
    block = vmem_bytes(q, (rows, *shape[1:]), f.dtype.itemsize)

    def kernel(f_ref: Any, o_ref: Any) -> None:
        _rows(rows, lambda r: row(f_ref, o_ref, r))

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(f.shape, f.dtype),
        grid=(shape[0] // rows,),
        in_specs=[spec],
        out_specs=spec,
        input_output_aliases={0: 0},
        compiler_params=_compiler_params(interpret, "parallel", 4 * block, block // rows),
        interpret=interpret,
        name=BULK_SCOPE,
    )(f)


@_viewed
def aa_odd_step(f: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float,
                force: np.ndarray | None, interpret: bool = False, rows: int | None = None,
                collision: Collision | None = None, buffers: int = BUFFERS,
                plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The AA odd step of populations ``(Q, *grid)`` (or their :func:`plane_view`, periodic at the grid's ``plane``;
    a 2D view without it: at its own P; :func:`_shifted_flat`) in place (``f`` aliased to the result; donate it)."""
    from jax.experimental.pallas import tpu as pltpu

    rows = rows or aa_rows(lattice, _grid_of(f, lattice, plane), f.dtype.itemsize)
    row = _odd_row(lattice, _collider(lattice, omega_plus, omega_minus, force, collision), pltpu.roll, plane)
    return ring_call(f, [int(c) for c in lattice.c[:, 0]], True, rows, buffers, row, interpret)
