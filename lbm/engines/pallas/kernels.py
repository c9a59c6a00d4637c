"""The Pallas bulk kernels: one collide-and-stream step over every cell, periodic on every axis.

Two formulations of the same push step (pre-collision f_i(x) in one buffer, post-collision
f*_i(x) written to f_i(x + c_i) in a second one; the boundary plan's ``push`` slots):

``flat`` (GPU, Triton; any lattice, any grid): populations viewed as ``(Q * N,)``; each program
takes a block of consecutive cells, loads its Q contiguous rows, collides, and stores each
direction at the cells' flat neighbour index (periodic wrap from the cell's coordinates).
Reads and writes each population once.

``rows`` (TPU, Mosaic): blocks of whole rows along the first axis with every other axis whole;
each program also reads the row before and after its block (3D: as blocks of one row of the
populations themselves; 2D: from halo blocks XLA gathers, a row being no TPU tile there),
collides its rows and those two, and writes each direction as its block shifted by c_i: a roll
along every axis plus the halo row where the shift along x leaves the block. Needs a block
height that divides the first axis (multiple of 8 in 2D, the TPU sublane tile).

Both run in interpret mode on a CPU (slow, for checking; ``rows`` in Pallas's TPU interpret mode,
lbm.engines.pallas.tpu_interpret). On a TPU the pallas engine's loop runs the in-place AA pair of
lbm.engines.pallas.aa instead (one buffer, no halo rows); ``rows`` runs every step where the pair does not (2D grids
it does not take: lbm.engines.pallas.aa.aa2d_not_chosen). The kernel is named
``BULK_SCOPE`` (``fused_bulk+macroscopic+equilibrium+collide+stream``), the stages it does, so
traces and ``inspect`` map it.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from lbm.engines.pallas import tpu_interpret
from lbm.engines.pallas.cell import collide_cell
from lbm.kernels.collisions import Collision
from lbm.lattice import Lattice
from lbm.stages import BULK_SCOPE

FORMS = ("flat", "rows")
"""Kernel formulations (see the module doc)."""
FLAT_BLOCK = 512
"""Cells per program of the flat kernel (a power of two, as Triton needs)."""
ROW_TILE = 8
"""Rows of a halo block of the rows kernel in 2D (the TPU sublane tile)."""
ROWS_BYTES = 2 * 2**20
"""Target bytes of one input block of the rows kernel (VMEM holds input and output, double-buffered)."""


def _flat_kernel(lattice: Lattice, shape: tuple[int, ...], omega_plus: float, omega_minus: float,
                 force: np.ndarray | None, block: int, collision: Collision | None) -> Any:
    n = math.prod(shape)
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]

    def kernel(f_ref: Any, o_ref: Any) -> None:
        start = pl.program_id(0) * block
        cell = start + jax.lax.iota(jnp.int32, block)
        valid = cell < n
        fs = [plgpu.load(f_ref.at[pl.ds(i * n + start, block)], mask=valid, other=1.0) for i in range(lattice.q)]
        post = collide_cell(fs, lattice, omega_plus, omega_minus, force, collision)
        # flat index of the neighbour x + c_i, periodic: one correction per axis where the cell is on a face
        lo, hi = [], []
        for a, (size, stride) in enumerate(zip(shape, strides, strict=True)):
            coord = (cell // stride) % size if a else cell // stride
            lo.append(jnp.where(coord == 0, size * stride, 0))
            hi.append(jnp.where(coord == size - 1, size * stride, 0))
        for i in range(lattice.q):
            dest = cell
            for a, stride in enumerate(strides):
                ca = int(lattice.c[i, a])
                if ca > 0:
                    dest = dest + stride - hi[a]
                elif ca < 0:
                    dest = dest - stride + lo[a]
            # masked lanes point past the array (no lane aliases a valid one, which interpret mode needs)
            dest = jnp.where(valid, dest + i * n, lattice.q * n)
            plgpu.store(o_ref.at[dest], post[i].astype(o_ref.dtype), mask=valid)

    return kernel


def flat_step(f: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float,
              force: np.ndarray | None, interpret: bool = False, block: int = FLAT_BLOCK,
              collision: Collision | None = None) -> jnp.ndarray:
    """One push step of populations ``(Q, *grid)`` by the flat kernel; a new array (``collision``: see collide_cell)."""
    shape = tuple(f.shape[1:])
    n = math.prod(shape)
    flat = f.reshape(lattice.q * n)
    out = pl.pallas_call(
        _flat_kernel(lattice, shape, omega_plus, omega_minus, force, block, collision),
        out_shape=jax.ShapeDtypeStruct(flat.shape, flat.dtype),
        grid=(pl.cdiv(n, block),),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=interpret,
        name=BULK_SCOPE,
    )(flat)
    return out.reshape(f.shape)


def rows_block(lattice: Lattice, shape: tuple[int, ...], itemsize: int, budget: int = ROWS_BYTES) -> int:
    """Rows per block of the rows kernel: the largest divisor of the first axis that fits ``budget`` bytes
    (a multiple of 8 in 2D, or the whole axis), else the smallest such divisor."""
    nx, row = shape[0], lattice.q * math.prod(shape[1:]) * itemsize
    ok = [b for b in range(1, nx + 1) if nx % b == 0 and (len(shape) > 2 or b % ROW_TILE == 0 or b == nx)]
    fitting = [b for b in ok if b * row <= budget]
    return max(fitting) if fitting else min(ok)


def vmem_bytes(q: int, block: tuple[int, ...], itemsize: int) -> int:
    """Bytes of Q arrays of shape ``block`` in TPU VMEM: the last axis padded to 128 lanes, the one before to 8
    sublanes (the (8, 128) tile of 32-bit values)."""
    *major, sub, lane = block
    return q * math.prod(major) * -(-sub // 8) * 8 * -(-lane // 128) * 128 * itemsize


ROWS_UNROLLED = 1
"""3D blocks of at most this many rows are written out row by row; taller ones loop over their rows."""

VMEM_BLOCK_MAX = 12 * 2**20
"""Largest input block of the rows kernel (TPU VMEM holds about five such: input, output, temporaries)."""


def rows_unsupported(lattice: Lattice, shape: tuple[int, ...], dtype: Any) -> str:
    """Why the rows kernel cannot run this grid on a TPU ('' when it can)."""
    if jnp.dtype(dtype) != jnp.float32:
        return f"the TPU Pallas kernel computes in float32, not {jnp.dtype(dtype)}"
    b = rows_block(lattice, shape, 4)
    size = b * lattice.q * math.prod(shape[1:]) * 4
    if size > VMEM_BLOCK_MAX:
        return (f"grid {'x'.join(map(str, shape))}: the smallest row block the TPU kernel can take ({b} rows, "
                f"{size / 2**20:.0f} MiB) does not fit its VMEM budget ({VMEM_BLOCK_MAX // 2**20} MiB)")
    return ""


def _rows_kernel(lattice: Lattice, rows: int, omega_plus: float, omega_minus: float,
                 force: np.ndarray | None, roll: Any, collision: Collision | None) -> Any:
    d = lattice.d

    def shifted(v: Any, c: np.ndarray, lo: int) -> Any:
        """v rolled by c along every axis but the first (periodic: the block holds those axes whole)."""
        for a in range(1, d):
            if c[a]:
                v = roll(v, int(c[a]) % v.shape[a], a)
        return v

    def body(fs: list[Any], prev: list[Any], nxt: list[Any], o_ref: Any) -> None:
        post, post_prev, post_next = (collide_cell(x, lattice, omega_plus, omega_minus, force, collision)
                                      for x in (fs, prev, nxt))
        row = jax.lax.broadcasted_iota(jnp.int32, fs[0].shape, 0)
        for i in range(lattice.q):
            c = lattice.c[i]
            v = shifted(post[i], c, 0)
            if c[0] > 0:  # row r takes row r - 1; row 0 the row before the block
                v = jnp.where(row == 0, jnp.broadcast_to(shifted(post_prev[i], c, 0), v.shape), roll(v, 1, 0))
            elif c[0] < 0:  # row r takes row r + 1; the last row the row after the block
                v = jnp.where(row == rows - 1, jnp.broadcast_to(shifted(post_next[i], c, 0), v.shape),
                              roll(v, rows - 1, 0))
            o_ref[i] = v.astype(o_ref.dtype)

    if d == 2:
        def kernel(f_ref: Any, h_ref: Any, o_ref: Any) -> None:
            q = range(lattice.q)
            body([f_ref[i] for i in q], [h_ref[0, i, 0:1] for i in q], [h_ref[0, i, 1:2] for i in q], o_ref)

        return kernel

    def emit(post: list[Any], r: Any, o_ref: Any) -> None:
        """Push row r's post-collision populations to rows r + c_x of the block (those inside it), rolled by c
        along y and z; r is a Python int (the halo rows -1 and ``rows``, unrolled rows) or traced (the loop)."""
        for i in range(lattice.q):
            c = lattice.c[i]
            t = r + int(c[0])
            v = shifted(post[i], c, 0).astype(o_ref.dtype)
            if isinstance(r, int):
                if 0 <= t < rows:
                    o_ref[i, t:t + 1] = v
            elif c[0] == 0:
                o_ref[i, pl.ds(t, 1)] = v
            else:
                def store(i: int = i, t: Any = t, v: Any = v) -> None:
                    o_ref[i, pl.ds(t, 1)] = v

                pl.when(t < rows if c[0] > 0 else t >= 0)(store)

    def collide_row(ref: Any, r: Any) -> list[Any]:
        return collide_cell([ref[i, pl.ds(r, 1)] for i in range(lattice.q)], lattice, omega_plus, omega_minus,
                            force, collision)

    def kernel3(f_ref: Any, prev_ref: Any, next_ref: Any, o_ref: Any) -> None:
        # 3D, one row (a (y, z) plane) at a time: the code Mosaic compiles is one row's whatever the block's
        # height (compile time grew with it: D3Q27 cumulant 32^3, 16 rows as one array, 45 s), and each row is
        # collided once, the two halo rows besides
        emit(collide_row(prev_ref, 0), -1, o_ref)  # the row before the block: into row 0 (c_x > 0)
        emit(collide_row(next_ref, 0), rows, o_ref)  # the row after it: into row rows - 1 (c_x < 0)
        if rows <= ROWS_UNROLLED:
            for r in range(rows):
                emit(collide_row(f_ref, r), r, o_ref)
        else:
            def row(r: Any, carry: Any) -> Any:
                emit(collide_row(f_ref, r), r, o_ref)
                return carry

            jax.lax.fori_loop(0, rows, row, 0)

    return kernel3


def halo_rows(f: jnp.ndarray, rows: int) -> jnp.ndarray:
    """For each block of ``rows`` rows along the first grid axis, the row before it and the row after it
    (periodic): ``(blocks, Q, 2, *rest)``. Strided slices: XLA reads those rows only."""
    last = f[:, rows - 1::rows]  # the last row of every block
    first = f[:, ::rows]  # the first row of every block
    prev = jnp.roll(last, 1, axis=1)  # block p: the last row of block p - 1
    nxt = jnp.roll(first, -1, axis=1)  # block p: the first row of block p + 1
    return jnp.moveaxis(jnp.stack([prev, nxt], axis=2), 1, 0)


def rows_step(f: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float,
              force: np.ndarray | None, interpret: bool = False, rows: int | None = None,
              collision: Collision | None = None) -> jnp.ndarray:
    """One push step of populations ``(Q, *grid)`` by the rows kernel; a new array (``collision``: see collide_cell)."""
    from jax.experimental.pallas import tpu as pltpu

    q, shape = lattice.q, tuple(f.shape[1:])
    nx = shape[0]
    rows = rows or rows_block(lattice, shape, f.dtype.itemsize)
    rest = shape[1:]
    zeros = (0,) * len(rest)
    block_bytes = vmem_bytes(q, (rows, *rest), f.dtype.itemsize)
    params = None if interpret else pltpu.CompilerParams(
        dimension_semantics=("parallel",), vmem_limit_bytes=int(min(100 * 2**20, 8 * block_bytes + 16 * 2**20)))
    main = pl.BlockSpec((q, rows, *rest), lambda p: (0, p, *zeros))
    if len(shape) == 2:
        # a block of one row is no TPU tile in 2D (the row axis is the sublane axis: blocks of 8 rows or the whole
        # axis), so XLA gathers the two halo rows of every block beforehand (halo_rows)
        halo = halo_rows(f, rows)
        in_specs, args = [main, pl.BlockSpec((1, q, 2, *rest), lambda p: (p, 0, 0, *zeros))], (f, halo)
    else:
        # 3D: the kernel reads the row before and the row after its block straight from f, as blocks of one row
        # (a row there is whole (y, z) planes: any row is a legal block). Not halo_rows: XLA's TPU compiler aborts
        # the process on it (issue 37, item 5: "fusion_util.cc: TransformWindow: Loop will not make progress",
        # jax 0.10.2; "fusion_emitter.cc: Cannot find a valid window", jax 0.12). On a 4D (Q, nx, ny, nz) array,
        # the strided row slices f[:, r::rows] (rows > 1) moved in front of Q (the halo's (blocks, Q, 2, ...)
        # layout) are fused into one multi-output loop fusion: a copy transposing the two major axes (layout
        # {3,2,1,0} -> {3,2,0,1}) and two slices of stride ``rows`` along the now-major x axis; the TPU emitter
        # finds no window for it. rows_block gives rows > 1 wherever two (Q, y, z) planes fit its 2 MiB budget
        # and nx is even: D3Q27 and D3Q19 up to 96^3 (at 128^3 rows = 1: no stride, and it compiled). 2D arrays
        # (Q, nx, ny) compile (x is a tiled axis there). Reading the rows here also spares the halo's copies: at
        # 128^3 D3Q27 they were 1188 of 1620 B/cell/step, 5.5 of the 7.5x minimum traffic (lbm inspect target=v5e).
        # The kernel reads (rows + 2) / rows of f (a traffic the HLO does not show: f is one operand).
        def wrap(i: Any) -> Any:  # i mod nx, in i's integer type (int64 under jax_enable_x64)
            return jax.lax.rem(i, jnp.asarray(nx, i.dtype))

        prev = pl.BlockSpec((q, 1, *rest), lambda p: (0, wrap(p * rows + nx - 1), *zeros))
        nxt = pl.BlockSpec((q, 1, *rest), lambda p: (0, wrap((p + 1) * rows), *zeros))
        in_specs, args = [main, prev, nxt], (f, f, f)
    return pl.pallas_call(
        _rows_kernel(lattice, rows, omega_plus, omega_minus, force, pltpu.roll, collision),
        out_shape=jax.ShapeDtypeStruct(f.shape, f.dtype),
        grid=(nx // rows,),
        in_specs=in_specs,
        out_specs=main,
        compiler_params=params,
        interpret=tpu_interpret(interpret),
        name=BULK_SCOPE,
    )(*args)
