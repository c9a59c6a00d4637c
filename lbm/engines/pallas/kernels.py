"""The Pallas bulk kernels: one collide-and-stream step over every cell, periodic on every axis.

Two formulations of the same push step (pre-collision f_i(x) in one buffer, post-collision
f*_i(x) written to f_i(x + c_i) in a second one; the boundary plan's ``push`` slots):

``flat`` (GPU, Triton; any lattice, any grid): populations viewed as ``(Q * N,)``; each program
takes a block of consecutive cells, loads its Q contiguous rows, collides, and stores each
direction at the cells' flat neighbour index (periodic wrap from the cell's coordinates).
Reads and writes each population once.

``rows`` (TPU, Mosaic): blocks of whole rows along the first axis with every other axis whole;
each program also reads the row before and after its block (from halo blocks), collides its
rows and those two, and writes each direction as its block shifted by c_i: a roll along every
axis plus the halo row where the shift along x leaves the block. Needs a block height that
divides the first axis (multiple of 8 in 2D, the TPU sublane tile).

Both run in interpret mode on a CPU (slow, for checking). The kernel is named
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

from lbm.engines.pallas.cell import collide_cell
from lbm.kernels.collision import Collision
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

    def kernel(f_ref: Any, h_ref: Any, o_ref: Any) -> None:
        fs = [f_ref[i] for i in range(lattice.q)]
        prev = [h_ref[0, i, 0:1] for i in range(lattice.q)]
        nxt = [h_ref[0, i, 1:2] for i in range(lattice.q)]
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

    return kernel


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
    rows = rows or rows_block(lattice, shape, f.dtype.itemsize)
    rest = shape[1:]
    zeros = (0,) * len(rest)
    halo = halo_rows(f, rows)
    block_bytes = q * rows * math.prod(rest) * f.dtype.itemsize
    params = None if interpret else pltpu.CompilerParams(
        dimension_semantics=("parallel",), vmem_limit_bytes=int(min(100 * 2**20, 8 * block_bytes + 16 * 2**20)))
    return pl.pallas_call(
        _rows_kernel(lattice, rows, omega_plus, omega_minus, force, pltpu.roll, collision),
        out_shape=jax.ShapeDtypeStruct(f.shape, f.dtype),
        grid=(shape[0] // rows,),
        in_specs=[pl.BlockSpec((q, rows, *rest), lambda p: (0, p, *zeros)),
                  pl.BlockSpec((1, q, 2, *rest), lambda p: (p, 0, 0, *zeros))],
        out_specs=pl.BlockSpec((q, rows, *rest), lambda p: (0, p, *zeros)),
        compiler_params=params,
        interpret=interpret,
        name=BULK_SCOPE,
    )(f, halo)
