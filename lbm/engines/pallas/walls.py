"""Half-way walls (resting and moving) inside the in-place AA kernels of the TPU rows form: no boundary plan.

The walls' rule is the native engine's (lbm.engines.plan.wall_records) and the xla engine's (its streaming form,
lbm.boundaries.bounce_back.PulledHalfway); the kernels apply it from one int32 word of bits per cell, the pulled
form's bits (:func:`~lbm.boundaries.bounce_back.pull_bits`): bit k where x - c_k is solid (population k of x came
out of a wall), bit Q where x is solid, bits Q + 1 + m where link ``carried[m]`` carries the wall term (a moving wall:
one value per direction, ``wall_term[k]``); where those do not fit in 32 bits (a D3Q27 lid: 27 + 1 + 6), bits m of
a second word.

Each memory location of the AA pair is read and written by one cell in each step (lbm.engines.pallas.aa): in the
even step cell x owns the slots (k, x), in the odd step the slots (k, x + c_k). Here solid cells write back what
they read (a select in VMEM), so that what a solid cell owns does not change in a step, and a fluid cell x with
bit k takes its population k from the other place the AA pair keeps it (plus the wall term):

- even step: from slot opp(k) of the solid cell x - c_k, where x's odd step put its post-collision f*_opp(k)
  (instead of slot k of x: the native rule's copy of the odd step, F[k, a] <- F[opp(k), s]);
- odd step: from slot k of x itself, where x's even step put its f*_opp(k) (instead of slot opp(k) of the solid
  cell: the native rule's copy of the even step, F[opp(k), s] <- F[k, a]).

The other place is the row x - c_x(k) (even) or x (odd) of slot opp(k) or k: each slot's window spans the rows of
both offsets, 0 and c_x (R + 1 rows where c_x != 0; only its R written rows go back), and the even step runs on the
DMA ring too (lbm.engines.pallas.aa.ring_call). Where the kernels view the planes flat (2D, and 3D where that pads
less: planes.flat_plane) they run on the populations' view (planes.plane_view), the bits on the same view of the grid (its
pads with no bits: fluid, no wall; their reads and writes wrap at the grid's plane, planes.shifted_flat). Neither place
is written in the step that reads it (a solid cell owns it), so the blocks may fetch it at any time.

Between the kernels the populations at the walls are not those of a dense step: a fluid cell's slots k with bit k,
and the solid cells' slots, hold what the kernels left. A chunk therefore ends with one pass that makes them so, the
fix kernel (:func:`walls_fix_step`, in place: the slot k of a fluid cell x with bit k takes slot opp(k) of x - c_k plus
the wall term, a solid cell's slot k with bit k the rest state). It follows an odd step, or in an odd chunk the even
step and the swap pass (lbm.engines.pallas.aa.aa_swap_step), which leaves a fluid cell's f*_opp(k) in slot opp(k) of
the solid cell x - c_k just as the odd step does: the fix then gives the streaming form's populations
(lbm.boundaries.bounce_back.bounce_back_halfway_pulled) bitwise. A chunk's first step reads
every population from its own slot (``reflect=False``): its input is dense, and may not come from a step at all
(the initial state), so the other place need not hold the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from lbm.boundaries.base import pytree_dataclass
from lbm.boundaries.bounce_back import PulledHalfway, foldable_solid
from lbm.boundaries.moving_wall import MovingWall
from lbm.cases.base import Setup
from lbm.engines.pallas import aa, planes
from lbm.engines.pallas.kernels import vmem_bytes
from lbm.engines.plan import wall_rule
from lbm.kernels.collisions import Collision
from lbm.lattice import Lattice
from lbm.stages import BULK_PREFIX

WALLED_SCOPE = aa.BULK_SCOPE + "+bounce_back"
"""Name of the in-place kernels that apply the walls too (the profiler splits it into the stages it names)."""
FIX_SCOPE = BULK_PREFIX + "+bounce_back"
"""Name of the fix kernel that ends a chunk (the walls' populations as a dense step leaves them): a pass over every
cell that does the walls' bounce-back only."""


def kernel_form(setup: Setup) -> tuple[PulledHalfway | None, str]:
    """The wall's streaming form the in-place kernels apply on a TPU, and ''; or None and why they cannot take
    ``setup``'s boundaries (the grid too: the kernels' blocks with walls must fit)."""
    lattice, bcs = setup.lattice, setup.boundaries
    rules = [wall_rule(bc) for bc in bcs]
    if len(bcs) != 1 or rules[0] is None or rules[0][1] is None:
        return None, "the kernel walls take one half-way wall (resting or moving) and no other condition"
    why = pair_unfit(setup)
    if why:
        return None, why
    solid, links, term = rules[0]
    if foldable_solid(solid, links, lattice) is None:
        return None, "the wall's links are not the half-way links of its solid cells"
    form = MovingWall(solid=solid, links=links, wall_term=term).streaming_form(solid, lattice)  # the xla engine's
    if form.wall_term is not None and np.ndim(form.wall_term) != 1:
        return None, "the moving wall's term is not one value per direction"
    return form, ""


def pair_unfit(setup: Setup) -> str:
    """Why the in-place pair cannot run ``setup``'s grid with its boundaries in or beside its kernels (the kernel
    walls, the faces; '' where it can): on the engine's view (2D: planes of k rows of x, planes.row_group), the kernels
    must take the grid, the pair be chosen (aa.aa2d_not_chosen), and R + 1 rows fit the VMEM."""
    lattice, shape = setup.lattice, setup.shape
    group = planes.row_group(shape)
    grid = planes.kernel_grid(shape, group)
    return (aa.aa_unsupported(lattice, grid, setup.dtype)
            or aa.aa2d_not_chosen(lattice, shape, setup.dtype, group=group) or rows_unfit(lattice, grid))


def rows_unfit(lattice: Lattice, shape: tuple[int, ...]) -> str:
    """Why the blocks of the in-place kernels with walls do not fit in VMEM on ``shape`` ('' where they do)."""
    held = (walls_rows(lattice, shape) + 1) * vmem_bytes(lattice.q, (1, *planes.view_shape(shape)[1:]), 4)
    if held > aa.AA_BLOCK_MAX:
        return (f"grid {'x'.join(map(str, shape))}: two rows of the in-place kernels with walls "
                f"({held / 2**20:.0f} MiB) do not fit their VMEM budget ({aa.AA_BLOCK_MAX // 2**20} MiB)")
    return ""


def walls_rows(lattice: Lattice, shape: tuple[int, ...]) -> int:
    """Rows per block of the kernels with walls: R + 1 rows of a window fit the in-place kernels' budget; where that
    leaves one row, two or more where R + 1 of them fit the largest block (:data:`~lbm.engines.pallas.aa.AA_BLOCK_MAX`).

    A block of R rows reads R + 1 rows of every window that moves along x, so one row per block reads those slots
    twice: the D3Q19 cavity at 258^3 (rows of 7.3 MiB, R = 1 in 16 MiB) ran at 1.29x the box's time per cell, the
    windows' model; R = 2 (22 MiB) models 1.16x, as the 256^3 cavity's R = 2 measured 1.18x."""
    rows = aa.aa_rows(lattice, shape, 4, extra=1)
    if rows > 1:
        return rows
    wider = [b for b in aa.block_heights(lattice, shape, 4, aa.AA_BLOCK_MAX, extra=1) if b > 1]
    return min(wider) if wider else rows


def walls_unsupported(setup: Setup) -> str:
    """Why the in-place kernels cannot apply ``setup``'s boundaries on a TPU ('' when they can)."""
    return kernel_form(setup)[1]


@pytree_dataclass
class WallParams:
    """The params of a chunk with kernel walls: the dense conditions, and the walls' words as the kernels read them,
    int32 in the engine's view (:func:`wall_params`; held so, not converted in every chunk: a temporary of 4 B per cell
    of the view, the D2Q9 cavity 4098^2 planned 1.307x the populations with it)."""

    dense: Any
    words: tuple[Any, ...] = ()


def wall_params(form: PulledHalfway, dense: Any, grid: tuple[int, ...], group: int = 1) -> WallParams:
    """The chunk's params for ``form`` on ``grid``: its words (:func:`kernel_bits`) in the kernels' view (numpy, the
    pads without bits)."""
    return WallParams(dense=dense, words=tuple(planes.to_view(np.asarray(w), grid, group) for w in kernel_bits(form)))


class Walls:
    """The kernels' view of one wall (:func:`kernel_form`): per direction k the wall term and its bit, if any."""

    def __init__(self, form: PulledHalfway, lattice: Lattice) -> None:
        self.q = lattice.q
        term = None if form.wall_term is None else np.asarray(form.wall_term)
        self.dtype = jnp.float32 if term is None else term.dtype
        split = form.wall_term_bits is not None  # the wall term's flags in a second word (more than 32 bits)
        self.term = {k: (float(term[k]), int(split), m if split else self.q + 1 + m)
                     for m, k in enumerate(form.carried)}

    @classmethod
    def solid_only(cls, lattice: Lattice) -> Walls:
        """Solid cells and no links (a full-way obstacle, lbm.engines.pallas.faces): no wall term."""
        walls = cls.__new__(cls)
        walls.q, walls.dtype, walls.term = lattice.q, jnp.float32, {}
        return walls

    def read(self, k: int, raw: Any, alt: Any, words: list[Any]) -> Any:
        """Population k of a cell: ``alt`` (plus the wall term) where bit k says it came out of a wall, else ``raw``."""
        return jnp.where(_bit(words[0], k), self.reflected(k, alt, words), raw)

    def reflected(self, k: int, alt: Any, words: list[Any]) -> Any:
        """``alt`` plus the wall term of link k where its bit is set (as bounce_back_halfway_pulled adds it)."""
        if k not in self.term:
            return alt
        value, w, b = self.term[k]
        return alt + jnp.where(_bit(words[w], b), jnp.asarray(value, alt.dtype), jnp.zeros((), alt.dtype))


def _bit(word: Any, b: int) -> Any:
    """Whether bit ``b`` of the int32 ``word`` is set."""
    return (word >> b) & 1 == 1


def _even_row(lattice: Lattice, collide: Callable[[list[Any]], list[Any]], walls: Walls, base: list[int],
              reflect: bool, shift: Callable[..., Any]) -> Callable[..., None]:
    """Row r of the even step with walls (module doc), on windows whose first VMEM row is grid row x0 + base[j];
    ``reflect`` False: every population from its own slot (after a dense step, not an odd one)."""
    opp, cx = [int(k) for k in lattice.opposite], [int(c) for c in lattice.c[:, 0]]

    def row(src: Any, dst: Any, r: Any, *bits: Any) -> None:
        words = [b[pl.ds(r, 1)] for b in bits]
        raw = [src[k, pl.ds(r - base[k], 1)] for k in range(lattice.q)]
        pre = []
        for k in range(lattice.q):
            if not lattice.c[k].any() or not reflect:
                pre.append(raw[k])
                continue
            j = opp[k]  # slot opp(k) of the solid cell x - c_k: row x + c_x(j), the plane shifted by c_k
            alt = shift(src[j, pl.ds(r + cx[j] - base[j], 1)], lattice.c[k], _roll())
            pre.append(walls.read(k, raw[k], alt, words))
        post = collide(pre)
        solid = _bit(words[0], lattice.q)
        for k in range(lattice.q):
            dst[opp[k], pl.ds(r - base[opp[k]], 1)] = jnp.where(solid, raw[opp[k]], post[k]).astype(dst.dtype)

    return row


def _odd_row(lattice: Lattice, collide: Callable[[list[Any]], list[Any]], walls: Walls, base: list[int],
             shift: Callable[..., Any]) -> Callable[..., None]:
    """Row r of the odd step with walls (module doc): a solid cell writes back the slots it read."""
    opp, cx = [int(k) for k in lattice.opposite], [int(c) for c in lattice.c[:, 0]]

    def row(src: Any, dst: Any, r: Any, *bits: Any) -> None:
        words = [b[pl.ds(r, 1)] for b in bits]
        raw = [shift(src[opp[i], pl.ds(r + cx[opp[i]] - base[opp[i]], 1)], lattice.c[i], _roll())
               for i in range(lattice.q)]
        pre = [raw[i] if not lattice.c[i].any() else walls.read(i, raw[i], src[i, pl.ds(r - base[i], 1)], words)
               for i in range(lattice.q)]
        post = collide(pre)
        solid = _bit(words[0], lattice.q)
        for i in range(lattice.q):
            out = jnp.where(solid, raw[opp[i]], post[i])  # a solid cell: slot i at x + c_i as it read it
            dst[i, pl.ds(r + cx[i] - base[i], 1)] = shift(out, lattice.c[i], _roll()).astype(dst.dtype)

    return row


def _fix_row(lattice: Lattice, walls: Walls, base: list[int], shift: Callable[..., Any]) -> Callable[..., None]:
    """Row r of the fix after an odd step (module doc): slot k of a cell with bit k, the others as they are (the
    rest population's bit is the solid bit: a solid cell's rest slot takes the rest state)."""
    opp, cx = [int(k) for k in lattice.opposite], [int(c) for c in lattice.c[:, 0]]

    def row(src: Any, dst: Any, r: Any, *bits: Any) -> None:
        words = [b[pl.ds(r, 1)] for b in bits]
        solid = _bit(words[0], lattice.q)
        raw = [src[k, pl.ds(r - base[k], 1)] for k in range(lattice.q)]
        alt = [shift(src[opp[k], pl.ds(r + cx[opp[k]] - base[opp[k]], 1)], lattice.c[k], _roll())
               for k in range(lattice.q)]
        for k in range(lattice.q):
            bounced = jnp.where(solid, jnp.zeros((), raw[k].dtype), walls.reflected(k, alt[k], words))
            dst[k, pl.ds(r - base[k], 1)] = jnp.where(_bit(words[0], k), bounced, raw[k]).astype(dst.dtype)

    return row


def _roll() -> Any:
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.roll


def _call(f: jnp.ndarray, bits: tuple[jnp.ndarray, ...], lattice: Lattice, scheme: str, rows: int, interpret: bool,
          make_row: Callable[[list[int]], Callable[..., None]], name: str = WALLED_SCOPE,
          plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The DMA-ring kernel over ``f`` in place with the windows of the walls (both offsets; written at the ``scheme``'s,
    aa_even or aa_odd) and their bits (a flat view's ``plane``: the edge planes' roll of a 2D view of several rows of x
    per plane, planes.edge_rows)."""
    cx = [int(c) for c in lattice.c[:, 0]]
    _, _, base = aa.ring_regions(cx, rows, scheme, True)
    return aa.ring_call(f, cx, scheme, rows, aa.BUFFERS, make_row(base), interpret, bits=bits, name=name,
                        wrap=planes.edge_rows(lattice, tuple(f.shape), plane))


def walls_even_step(f: jnp.ndarray, bits: tuple[jnp.ndarray, ...], lattice: Lattice, walls: Walls, omega_plus: float,
                    omega_minus: float, force: np.ndarray | None, rows: int, interpret: bool = False,
                    collision: Collision | None = None, reflect: bool = True,
                    plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The AA even step of ``f`` ``(Q, nx, ny, nz)`` (or the kernels' flat view, periodic at the grid's ``plane``) in
    place, with the walls' words ``bits`` (:func:`kernel_bits`, in the same view); ``reflect`` False for the first
    step of a chunk (populations as a dense step, or the initial state, leave them)."""
    collide = aa._collider(lattice, omega_plus, omega_minus, force, collision)
    return _call(f, bits, lattice, "aa_even", rows, interpret,
                 lambda base: _even_row(lattice, collide, walls, base, reflect, planes.plane_shift(lattice, plane)),
                 plane=plane)


def walls_odd_step(f: jnp.ndarray, bits: tuple[jnp.ndarray, ...], lattice: Lattice, walls: Walls, omega_plus: float,
                   omega_minus: float, force: np.ndarray | None, rows: int, interpret: bool = False,
                   collision: Collision | None = None, plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """The AA odd step of ``f`` in place, with the walls of ``bits`` (a flat view: periodic at ``plane``)."""
    collide = aa._collider(lattice, omega_plus, omega_minus, force, collision)
    return _call(f, bits, lattice, "aa_odd", rows, interpret,
                 lambda base: _odd_row(lattice, collide, walls, base, planes.plane_shift(lattice, plane)), plane=plane)


def walls_fix_step(f: jnp.ndarray, bits: tuple[jnp.ndarray, ...], lattice: Lattice, walls: Walls, rows: int,
                   interpret: bool = False, plane: tuple[int, ...] | None = None) -> jnp.ndarray:
    """After an odd step with kernel walls: ``f`` in place as a dense step leaves it (module doc; a flat view: periodic
    at ``plane``)."""
    return _call(f, bits, lattice, "aa_even", rows, interpret,
                 lambda base: _fix_row(lattice, walls, base, planes.plane_shift(lattice, plane)), name=FIX_SCOPE,
                 plane=plane)


def kernel_bits(form: PulledHalfway) -> tuple[jnp.ndarray, ...]:
    """The walls' words as the kernels read them, int32 (the same bits): the links' word, and the wall term's flags
    where they did not fit in it."""
    out = []
    for word in (form.bits, form.wall_term_bits):
        if word is not None:
            word = jnp.asarray(word)
            out.append(jax.lax.bitcast_convert_type(word, jnp.int32) if word.dtype == jnp.uint32
                       else word.astype(jnp.int32))
    return tuple(out)
