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

``aa_swap_step``: after an even step, the state a dense step leaves, in place (an odd chunk's lone step is the even
step and this pass). The even step left f*_i of x in slot opp(i) of x, where slot i of x + c_i belongs, and f*_opp(i)
of x + c_i in slot i of x + c_i, where slot opp(i) of x belongs: the two locations are exchanged, each pair by one
block. Slot j's window sits at offset min(0, c_x(j)), so that row r of every window holds the two ends of one pair,
and slot i = roll(slot opp(i), c_i) row by row.

2D, and 3D where it pads a plane less: the kernels run on the flat view of the planes (the axes after x), whose
layout and shifts lbm.engines.pallas.planes holds: (Q, nx, P / 128, 128), x the major, untiled axis, along which the
DMA windows shift.

Both run in Pallas's TPU interpret mode on a CPU (lbm.engines.pallas.tpu_interpret: slow, for checking;
tests/engines/pallas/test_pallas_inplace.py). They are
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

from lbm.engines.pallas import tpu_interpret
from lbm.engines.pallas.cell import collide_cell
from lbm.engines.pallas.kernels import vmem_bytes
from lbm.engines.pallas.planes import (
    edge_rows,
    flat_plane,
    from_view,
    pad_factor,
    plane_shift,
    plane_view,
    row_cells,
    view_shape,
)
from lbm.kernels.collisions import Collision
from lbm.kernels.streaming import stream
from lbm.lattice import Lattice
from lbm.stages import BULK_PREFIX, BULK_SCOPE

SWAP_SCOPE = BULK_PREFIX + "+stream"
"""Name of the swap pass (:func:`aa_swap_step`): a pass over every cell that streams only."""
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


MAX_PAD = 2.0
"""Largest padding P / ny for which the 2D pair is chosen (:func:`aa2d_not_chosen`): the pair moves P / ny times the
populations' bytes per step, at 98 % of the bandwidth on the chip (4096^2: 9064 MLUPS); the push rows kernel measured
36 % at 4096^2 and the xla engine 14 % at 4098^2 (docs/performance.md), so the pair wins up to P / ny = 2.7 against
the push kernel and 7 against xla; 2.0 keeps every ny from 512 up (any ny above 1024 pads by less than 2.0)."""


def streamed_after_even(post: jnp.ndarray, lattice: Lattice) -> jnp.ndarray:
    """The populations ``(Q, *grid)`` a dense step leaves, from those an even step left (slot opp(k) holds f*_k): its
    opposite slots streamed (a new array)."""
    return stream(post[np.asarray(lattice.opposite)], lattice)


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


AA2D_MIN_BYTES = 40 * 2**20
"""Populations from which the 2D in-place pair runs on a TPU (on planes of k rows of x, planes.row_group). Below it
the push rows kernel runs a wall-free box, and the xla engine's whole step stays in the VMEM where there are
boundaries. Measured on the chip: the wall-free box below it on the push kernel 1024^2 (36 MiB) 8695 MLUPS against
the pair's 5871, 1024x1100 (39 MiB) 10087 against 8407; the cavity 1024^2 on xla 5361 against the pair's 5187
(docs/tpu-v5e/2026-12-07/pair-small/). Above it the pair is as fast or faster and plans 1.0-1.18x the populations,
where the push kernel plans up to 2.13x: 1200^2 8250 against the push kernel's 7822, 1000x1300 8239 against 7464,
1600^2 8544 against 7759, 2000x1200 8238 against 7252, 2400x1100 8485 against 7766, 1800^2 8387 against 4153; the
one grid measured where the push kernel was faster is 1024x1200 (42 MiB), 10028 against 8151
(docs/tpu-v5e/2026-12-07/push-pair/); and with boundaries the cavity 1500^2 5516 against xla's 2151, the cylinder
1680x720 3328 against 2716."""


def aa2d_not_chosen(lattice: Lattice, shape: tuple[int, ...], dtype: Any, group: int = 1) -> str:
    """Why a 2D grid the pair could run keeps the push rows kernel or the xla engine ('' for 3D, and where y pads by at
    most MAX_PAD from AA2D_MIN_BYTES up; ``group`` rows of x per plane of its view, planes.row_group)."""
    if len(shape) != 2:
        return ""
    size = lattice.q * int(np.prod(shape)) * jnp.dtype(dtype).itemsize
    if size < AA2D_MIN_BYTES:
        return (f"{size / 2**20:.0f} MiB of populations, under the {AA2D_MIN_BYTES // 2**20} MiB from which the 2D "
                "in-place pair runs (below it the push rows kernel runs a wall-free box faster, and the xla engine's "
                "step stays in the VMEM)")
    if pad_factor(shape, group) > MAX_PAD:
        return (f"grid {'x'.join(map(str, shape))}: the 2D in-place pair would pad y from {shape[1]} to "
                f"{row_cells(shape[1], group)} cells ({pad_factor(shape, group):.2f}x), more than its {MAX_PAD}x")
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


def _even_row(lattice: Lattice, collide: Callable[[list[Any]], list[Any]]) -> Callable[[Any, Any, Any], None]:
    """Row r of the even step, from ``src`` (Q, R, y, z) into ``dst`` (may be ``src``): f*_i into slot opp(i)."""
    opp = [int(k) for k in lattice.opposite]

    def row(src: Any, dst: Any, r: Any) -> None:
        post = collide([src[i, pl.ds(r, 1)] for i in range(lattice.q)])
        for i in range(lattice.q):
            dst[opp[i], pl.ds(r, 1)] = post[i].astype(dst.dtype)

    return row


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


def _swap_row(lattice: Lattice, roll: Any, plane: tuple[int, ...] | None = None) -> Callable[[Any, Any, Any], None]:
    """Row r of the swap pass on a block of windows (at offsets min(0, c_x(i)), :func:`window_offsets`), in place: slot
    i = roll(slot opp(i), c_i), each pair of slots (i at x, opp(i) at x - c_i) exchanged (a flat view's planes periodic
    at ``plane``)."""
    opp = [int(k) for k in lattice.opposite]
    shift = plane_shift(lattice, plane)

    def row(src: Any, dst: Any, r: Any) -> None:
        moved = [shift(src[opp[i], pl.ds(r, 1)], lattice.c[i], roll) for i in range(lattice.q)]
        for i in range(lattice.q):
            dst[i, pl.ds(r, 1)] = moved[i].astype(dst.dtype)

    return row


Region = tuple[int, int, int]
"""A slot's window of a block: (first grid row relative to the block's x0, rows, first VMEM row)."""

SCHEMES = ("aa_even", "aa_odd", "aa_swap")
"""The in-place kernels' window schemes: the even step (every window at its block), the odd step (slot j's window
moved by c_x(j)) and the swap pass (by min(0, c_x(j)): slot i at x and slot opp(i) at x - c_i in one block)."""


def window_offsets(cx: list[int], scheme: str) -> list[int]:
    """Per slot j the row offset of a block's window in ``scheme`` (:data:`SCHEMES`), from the slots' c_x."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown in-place scheme {scheme!r}: choose one of {', '.join(SCHEMES)}")
    return [{"aa_even": 0, "aa_odd": c, "aa_swap": min(0, c)}[scheme] for c in cx]


def ring_regions(cx: list[int], rows: int, scheme: str, extended: bool) -> tuple[list[Region], list[Region], list[int]]:
    """Per slot j the DMA read and write windows of a block (:data:`Region`) and the grid row offset of its first VMEM
    row (``base``). The write window is R rows at the ``scheme``'s offset (:func:`window_offsets`); ``extended``: the
    read window covers the rows at both offsets, 0 and c_x(j) (R + 1 rows where c_x(j) != 0: the kernel walls of
    lbm.engines.pallas.walls read the other offset), and only the R written rows go back."""
    reads, writes, base = [], [], []
    for c, o in zip(cx, window_offsets(cx, scheme), strict=True):
        if extended and o not in (0, c):
            raise ValueError(f"the extended windows span the offsets 0 and c_x = {c}, not {o}")
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


def _edge_roll(block: Any, reads_at: list[Region], rows: int, p: Any, blocks: int, wrap: int, back: bool) -> None:
    """In a block's VMEM windows, the plane that wrapped around the grid's x edge moved by one row of x (``wrap``
    sublanes; ``back``: the other way, before the write-back): a 2D view of k rows of x per plane
    (lbm.engines.pallas.planes.row_group) holds x = p + m N at row m of plane p, so the plane before plane 0 is plane
    N - 1 with each row moved down one, the plane after N - 1 plane 0 moved up one."""
    from jax.experimental.pallas import tpu as pltpu

    for j, (g, n, v) in enumerate(reads_at):
        for first, at, down in ((True, v, True), (False, v + rows - g, False)):
            if (g >= 0) if first else (g + n <= rows):
                continue

            @pl.when(p == (0 if first else blocks - 1))
            def _roll(j: int = j, at: int = at, down: bool = down) -> None:
                plane = block[j, pl.ds(at, 1)]
                shift = wrap if down != back else -wrap
                block[j, pl.ds(at, 1)] = pltpu.roll(plane, shift % plane.shape[1], 1)


def _ring_kernel(reads_at: list[Region], writes_at: list[Region], nx: int, rows: int, buffers: int,
                 row: Callable[..., None], wrap: int = 0) -> Callable[..., None]:
    """The in-place DMA-ring kernel (module doc): program p fetches block p + 1, computes block p, writes it back.
    Inputs after the populations (the kernel walls' link bits) come as Pallas blocks of ``rows`` rows, and ``row``
    receives them after the row index. ``wrap``: sublanes by which a window's plane across the grid's x edge is
    rolled (:func:`_edge_roll`; 0: none)."""
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
        if wrap:
            _edge_roll(block, reads_at, rows, p, blocks, wrap, back=False)
        _rows(rows, lambda r: row(block, block, r, *extra))
        if wrap:
            _edge_roll(block, reads_at, rows, p, blocks, wrap, back=True)
        for c in writes(p, slot):
            c.start()

        @pl.when(p == blocks - 1)
        def _drain() -> None:  # the write-backs no later program waited on
            for b in range(max(0, blocks - buffers), blocks):
                for c in writes(b, b % buffers):
                    c.wait()

    return kernel


def ring_call(f: jnp.ndarray, cx: list[int], scheme: str, rows: int, buffers: int, row: Callable[..., None],
              interpret: bool, bits: tuple[jnp.ndarray, ...] = (), name: str = BULK_SCOPE, wrap: int = 0
              ) -> jnp.ndarray:
    """``f`` (Q, nx, ny, nz) updated in place by the DMA-ring kernel: per slot j windows at the ``scheme``'s offset
    (:func:`window_offsets`, :func:`ring_regions`); with ``bits`` (int32 arrays (nx, ny, nz)) the read windows extended to
    both offsets and ``row(src, dst, r, *bits_blocks)`` given the block's rows of each; ``wrap``: the edge planes'
    roll of a 2D view of several rows of x per plane (lbm.engines.pallas.planes.edge_rows)."""
    from jax.experimental.pallas import tpu as pltpu

    q, shape = f.shape[0], tuple(f.shape[1:])
    nx = shape[0]
    if nx % rows:
        raise ValueError(f"{rows} rows per block do not divide nx = {nx}")
    extended = bool(bits)
    reads_at, writes_at, _ = ring_regions(cx, rows, scheme, extended)
    held = rows + int(extended)
    block = vmem_bytes(q, (held, *shape[1:]), f.dtype.itemsize)
    in_specs = [pl.BlockSpec(memory_space=pl.ANY)] + [pl.BlockSpec((rows, *shape[1:]), lambda p: (p, 0, 0))] * len(bits)
    resident = buffers * block + 2 * len(bits) * vmem_bytes(1, (rows, *shape[1:]), 4)
    return pl.pallas_call(
        _ring_kernel(reads_at, writes_at, nx, rows, buffers, row, wrap),
        out_shape=jax.ShapeDtypeStruct(f.shape, f.dtype),
        grid=(nx // rows,),
        in_specs=in_specs,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((buffers, q, held, *shape[1:]), f.dtype),
                        pltpu.SemaphoreType.DMA((buffers,)), pltpu.SemaphoreType.DMA((buffers,))],
        input_output_aliases={0: 0},
        compiler_params=_compiler_params(interpret, "arbitrary", resident, block // held),
        interpret=tpu_interpret(interpret),
        name=name,
        cost_estimate=pl.CostEstimate(flops=0, transcendentals=0,
                                      bytes_accessed=ring_bytes(f, reads_at, writes_at, rows, bits)),
    )(f, *bits)


def ring_bytes(f: Any, reads_at: list[Region], writes_at: list[Region], rows: int, bits: tuple[Any, ...] = ()) -> int:
    """HBM bytes one DMA-ring kernel (:func:`ring_call`) moves over ``f`` (Q, nx, ...): each block's read and write
    windows of every slot (the kernel walls' read windows one row longer than the written ones), and its link bits
    read once; what the kernel declares to XLA (``pl.CostEstimate``), and what ``lbm inspect`` counts for it instead
    of its operands whole (lbm.hlo.traffic)."""
    row = vmem_bytes(1, (1, *f.shape[2:]), f.dtype.itemsize)
    windows = sum(n for _, n, _ in reads_at) + sum(n for _, n, _ in writes_at)
    return (f.shape[1] // rows) * windows * row + sum(vmem_bytes(1, tuple(b.shape), 4) for b in bits)


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
        return ring_call(f, [int(c) for c in lattice.c[:, 0]], "aa_even", rows, BUFFERS, row, interpret)
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
        interpret=tpu_interpret(interpret),
        name=BULK_SCOPE,
    )(f)


@_viewed
def aa_odd_step(f: jnp.ndarray, lattice: Lattice, omega_plus: float, omega_minus: float,
                force: np.ndarray | None, interpret: bool = False, rows: int | None = None,
                collision: Collision | None = None, buffers: int = BUFFERS,
                plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The AA odd step of populations ``(Q, *grid)`` (or their :func:`plane_view`, periodic at the grid's ``plane``;
    a 2D view without it: at its own P; :func:`shifted_flat`) in place (``f`` aliased to the result; donate it)."""
    from jax.experimental.pallas import tpu as pltpu

    rows = rows or aa_rows(lattice, _grid_of(f, lattice, plane), f.dtype.itemsize)
    row = _odd_row(lattice, _collider(lattice, omega_plus, omega_minus, force, collision), pltpu.roll, plane)
    return ring_call(f, [int(c) for c in lattice.c[:, 0]], "aa_odd", rows, buffers, row, interpret,
                     wrap=edge_rows(lattice, tuple(f.shape), plane))


@_viewed
def aa_swap_step(f: jnp.ndarray, lattice: Lattice, interpret: bool = False, rows: int | None = None,
                 buffers: int = BUFFERS, plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """After an even step (slot opp(i) of x holds f*_i): ``f`` in place as a dense step leaves it, the streaming of the
    opposite slots (:func:`streamed_after_even`) with no second array: each pair (slot opp(i) of x, slot i of x + c_i)
    exchanged (a view: periodic at the grid's ``plane``; donate ``f``)."""
    from jax.experimental.pallas import tpu as pltpu

    rows = rows or aa_rows(lattice, _grid_of(f, lattice, plane), f.dtype.itemsize)
    return ring_call(f, [int(c) for c in lattice.c[:, 0]], "aa_swap", rows, buffers,
                     _swap_row(lattice, pltpu.roll, plane), interpret, name=SWAP_SCOPE,
                     wrap=edge_rows(lattice, tuple(f.shape), plane))
