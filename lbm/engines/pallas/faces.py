"""An inflow, an outflow and a full-way obstacle with the in-place pair on a TPU: face rows, a solid bit, a dense box.

The boundary plan gathers and scatters its cells by flat index, which on a TPU serialises (the cylinder 3360x1440 ran
the pair at 236 MLUPS with it). Here no cell list is gathered in the step:

- **the obstacle** (:class:`~lbm.boundaries.bounce_back.FullwayBounceBack`) is the kernels' solid bit
  (lbm.engines.pallas.walls, without link bits): in the AA pair a solid cell that writes back what it read *is* the
  full-way rule. In the even step cell x reads slot k and writes its post-collision f*_k to slot opp(k); a solid
  cell's f*_k is its f_opp(k), read from slot opp(k): the same value. In the odd step it reads f_k from slot opp(k) of
  x - c_k and writes f*_k to slot k of x + c_k, where it read f_opp(k): again the same value. After an odd step the
  populations are those of a dense step (no fix pass);
- **the faces** x = 0 (:class:`~lbm.boundaries.inlet.Inlet`) and x = nx - 1 (:class:`~lbm.boundaries.outflow.Outflow`):
  the kernels step every cell as periodic fluid; the step of the two face rows is then redone on the xla side from a
  few whole rows of the view read before the kernel (their pre-step populations: own slots in the even step; slot
  opp(k) of x - c_k, over rows nx - 3 .. 1, in the odd one), by the setup's own stages on a three-row grid
  (rows 0, nx - 2, nx - 1, so that the face rules find their faces), and written over the slots those cells own:
  slot opp(k) of their own row (even), slot k of x + c_k (odd; for x = nx - 1 and c_x > 0 across the wrap into
  row 0, which only the face cells read). The populations leaving through a face land in slots that only the
  other face reads, and that face's rule replaces them;
- **the force** (:class:`~lbm.boundaries.forces.Forces`) is the momentum exchange as a dense masked sum over the box
  of its links: after any step (even, odd, or dense) population k of a fluid cell x towards the wall sits in slot
  opp(k) of x or slot k of x + c_k, and the solid cell's reflected one in the other: their sum is the same expression.

The arithmetic of the face rows and the force is that of the xla engine (the same stage functions); the sum of the
force runs in another order (float32 rounding, about 1e-7 relative).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, BulkRule, StepState, pytree_dataclass
from lbm.cases.base import Setup
from lbm.engines.pallas import planes
from lbm.engines.pallas.walls import pair_unfit
from lbm.engines.timestep import active_stages, run_stages
from lbm.lattice import Lattice

MINI_ROWS = (0, -2, -1)
"""The grid rows of the three-row grid the face rows' step runs on (as offsets: -1 is nx - 1)."""
TAKES = ("an inlet at x = 0, a zero-gradient outflow at x = nx - 1, a full-way obstacle and its force, each at most "
         "once, and no other condition")


def face_role(rule: BulkRule | None) -> str | None:
    """What a condition with the bulk rule ``rule`` is to the pair's faces (inflow, outflow, a full-way wall, force), or
    None where they cannot take it."""
    if rule is None:
        return None
    if rule.wall is not None:
        return "wall" if rule.wall[1] is None and not (rule.inflow or rule.outflow or rule.links) else None
    roles = [name for name, on in (("inflow", rule.inflow), ("outflow", rule.outflow), ("force", rule.links)) if on]
    return roles[0] if len(roles) == 1 else None


def faces_form(setup: Setup) -> tuple[Faces | None, str]:
    """The faces' plan of ``setup`` for the in-place pair, and ''; or None and why the pair cannot take them so."""
    why = faces_unsupported(setup)
    if why:
        return None, why
    roles = {face_role(bc.bulk_rule()): bc for bc in setup.boundaries}
    box = ForceBox.of(roles["force"], setup.shape, setup.lattice) if "force" in roles else None
    return Faces(setup, roles, box, planes.row_group(setup.shape)), ""


def faces_unsupported(setup: Setup) -> str:
    """Why the in-place pair cannot take ``setup``'s conditions as faces ('' when it can; nothing is built)."""
    bcs, shape = setup.boundaries, setup.shape
    roles = [face_role(bc.bulk_rule()) for bc in bcs]
    if not bcs or None in roles or len(set(roles)) != len(roles):
        return f"the pair's faces take {TAKES}"
    if "force" in roles and "wall" not in roles:
        return "the pair's force needs the full-way obstacle"
    if "force" in roles and np.size(bcs[roles.index("force")].link_dir) == 0:
        return "the obstacle's force has no link"
    if shape[0] < 6:
        return f"grid {'x'.join(map(str, shape))}: the pair's faces need nx >= 6"
    why = pair_unfit(setup)
    if why:
        return why
    if setup.force_array is not None and np.ndim(setup.force_array) != 1:
        return "the pair's faces take a uniform body force only"
    return ""


@dataclasses.dataclass(frozen=True)
class ForceBox:
    """The links of a :class:`Forces` as one dense weight per slot and cell of the box that holds both their ends."""

    lo: tuple[int, ...]
    shape: tuple[int, ...]
    links: np.ndarray
    """(Q, *shape), int8, each -1, 0 or 1: component a of the force is sum over slots j of c_ja sum(links_j *
    populations_j of the box), plus :attr:`offset` (:attr:`weights`). The chunk's params hold these, in the shape
    :meth:`Faces._box` cuts the box (on flat planes rows of y and z flat), and form the weights inside the force's
    sum: D times as many int8 planes, their two minor axes (the box's y and z = 32) padded to (32, 128) on a TPU,
    planned 0.07x the populations more (deviceless v5e, jax 0.10.2, the D3Q19 cylinder 128x60x32: 1.352x against
    1.281x; 96x40x24 1.584x against 1.490x; 420x180x32 1.195x against 1.180x)."""
    c: np.ndarray
    """(Q, D): the lattice's velocities."""
    offset: np.ndarray
    """(D,): the links' sum of 2 w_k c_k (populations are deviations f - w)."""

    @classmethod
    def of(cls, forces: BoundaryCondition, grid: tuple[int, ...], lattice: Lattice) -> ForceBox | None:
        """The box of the links (``link_dir``, ``link_src``, ``link_dst``: lbm.boundaries.base.BulkRule) of a
        momentum exchange ``forces`` on ``grid`` (the smallest that holds both ends of each; where links wrap
        around an axis, as those of a cylinder spanning a periodic z, the whole axis); None without a link.

        A link (k, fluid x, solid x + c_k) adds c_k (f*_k(x) + f*_opp(k)(x + c_k)); after a step those two sit in
        slot opp(k) of x and slot k of x + c_k, in either order (module doc), so slot j at cell y weighs
        c_j ([y - c_j is a link's fluid end of direction j] - [y is one of direction opp(j)]).
        """
        k = np.asarray(forces.link_dir, np.int64)
        src = np.stack(np.unravel_index(np.asarray(forces.link_src, np.int64), grid))
        dst = np.stack(np.unravel_index(np.asarray(forces.link_dst, np.int64), grid))
        c = np.asarray(lattice.c, np.int64)
        if k.size == 0:
            return None
        ends = np.concatenate([src, dst], axis=1)
        lo, hi = ends.min(axis=1), ends.max(axis=1) + 1
        fluid_end = np.zeros((lattice.q, *(hi - lo)), np.int8)
        fluid_end[(k, *(src - lo[:, None]))] = 1
        solid_end = np.zeros_like(fluid_end)
        solid_end[(k, *(dst - lo[:, None]))] = 1  # [y - c_k is a link's fluid end of direction k]
        opp = np.asarray(lattice.opposite)
        offset = 2.0 * (np.asarray(lattice.w)[k, None] * c[k]).sum(axis=0)
        return cls(lo=tuple(int(a) for a in lo), shape=tuple(int(a) for a in hi - lo),
                   links=solid_end - fluid_end[opp], c=c, offset=offset)

    @property
    def weights(self) -> np.ndarray:
        """(D, Q, *shape), int8, each -1, 0 or 1: the force is sum(weights * populations of the box) + :attr:`offset`."""
        d = self.c.shape[1]
        return self.c.T.astype(np.int8).reshape(d, -1, *[1] * d) * self.links[None]


@pytree_dataclass
class FacesParams:
    """The params of a chunk with the pair's faces: the kernels' solid words (view), the face rows' conditions, the
    force's masks, and the dense conditions."""

    bits: Any
    rows: Any
    mask: Any
    dense: Any


@dataclasses.dataclass(frozen=True)
class RowsBlock:
    """The three-row grid's cells (rows, in 3D planes, :data:`MINI_ROWS` of the grid, in that order) as a cell block
    (lbm.boundaries.base.CellBlock): the face rules' block forms run on it."""

    lattice: Lattice
    shape: tuple[int, ...]

    @property
    def rows(self) -> tuple[int, ...]:
        """The grid rows, in block order."""
        return tuple(r % self.shape[0] for r in MINI_ROWS)

    @property
    def cells(self) -> np.ndarray:
        """The flat lattice indices of the block's cells, in block order."""
        face = int(np.prod(self.shape[1:]))
        return (np.asarray(self.rows)[:, None] * face + np.arange(face)).reshape(-1)

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of lattice cells ``flat`` (all must be in the three rows)."""
        where = np.full(int(np.prod(self.shape)), -1, np.int64)
        where[self.cells] = np.arange(self.cells.size)
        out = where[np.asarray(flat, np.int64)]
        if np.any(out < 0):
            raise ValueError("a cell outside the face rows")
        return out.astype(np.int32)

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell lattice array ``(..., *grid)`` on the block: ``(..., 3 ny [nz], 1[, 1])``."""
        d = len(self.shape)
        v = np.moveaxis(np.moveaxis(np.asarray(values), -d, 0)[list(self.rows)], 0, -d)
        return v.reshape(*v.shape[:-d], -1, *[1] * (d - 1))


class Faces:
    """The face rows' step and the force for :func:`faces_form` (the module doc)."""

    def __init__(self, setup: Setup, roles: dict[str, BoundaryCondition], box: ForceBox | None, group: int = 1
                 ) -> None:
        self.setup, self.roles, self.box = setup, roles, box
        self.lattice = setup.lattice
        self.grid = tuple(setup.shape)
        self.group = group
        """Rows of x per plane of the engine's 2D view (planes.row_group): row x = p + m N sits in plane p, its cells
        from sublane m Y / 128 on (N = nx / k planes, Y = planes.row_cells(ny, k))."""
        view = planes.view_shape(self.grid, group)
        self.planes, self.sublanes = view[0], (view[1] // group if planes.flat_plane(self.grid) else 0)
        """Planes N of the view, and the sublanes of 128 cells one row of x (3D: one plane) takes in it (0: 3D tiles)."""
        self.block = RowsBlock(setup.lattice, self.grid)
        self.mini = self.block.rows
        self.stages = tuple(s for s in active_stages(setup) if s not in ("forces", "stream"))
        full_way = roles.get("wall")
        wall = None if full_way is None else full_way.bulk_rule()
        self.solid = np.zeros(self.grid, bool) if wall is None or wall.wall is None else np.asarray(wall.wall[0], bool)

    def params(self, dense: Any) -> FacesParams:
        """The chunk's params (numpy; the engine puts them on the device): the face rows' conditions are the block
        forms of those acting in :attr:`stages`."""
        rows = tuple(bc.on_block(self.block) for bc in self.setup.boundaries if bc.stage in self.stages)
        bits = np.where(self.solid, np.int32(1 << self.lattice.q), np.int32(0))
        dtype = np.dtype(self.setup.dtype)
        mask = None if self.box is None else (self.box.links.reshape(self.lattice.q, *self._box_shape()),
                                              self.box.offset.astype(dtype))
        return FacesParams(bits=planes.to_view(bits, self.grid, self.group), rows=rows, mask=mask, dense=dense)

    # --- rows of the view as the grid's cells ------------------------------------------------------------------
    def _runs(self, x0: int, n: int) -> list[tuple[int, int, int, int]]:
        """Rows x0 .. x0 + n - 1 of the grid (3D: planes) as runs of consecutive planes of the view: (first plane, first
        sublane, first and end row of the run, counted from x0); one run but where k rows of x share a plane."""
        runs, i = [], 0
        while i < n:
            m, p = divmod(x0 + i, self.planes)
            j = min(n, i + self.planes - p)
            runs.append((p, m * self.sublanes, i, j))
            i = j
        return runs

    def _rows(self, a: jnp.ndarray, rows: tuple[int, ...]) -> jnp.ndarray:
        """Rows (3D: planes) ``rows`` of the view ``a`` as ``(Q, len(rows), *grid[1:])``."""
        if not self.sublanes:
            return jnp.concatenate([a[:, r:r + 1] for r in rows], axis=1)
        picked = jnp.concatenate([a[:, p:p + 1, at:at + self.sublanes]
                                  for p, at, _, _ in (self._runs(r, 1)[0] for r in rows)], axis=1)
        cells = int(np.prod(self.grid[1:]))
        return picked.reshape(a.shape[0], len(rows), -1)[:, :, :cells].reshape(a.shape[0], len(rows), *self.grid[1:])

    def _put(self, a: jnp.ndarray, r: int, values: jnp.ndarray) -> jnp.ndarray:
        """The view ``a`` with the cells (y < ny) of rows r, r + 1, ... set to ``values`` ``(Q, rows, *grid[1:])`` (the
        pads as they were)."""
        q, n, new = a.shape[0], values.shape[1], values.astype(a.dtype)
        if not self.sublanes:
            return jax.lax.dynamic_update_slice_in_dim(a, new, r, axis=1)
        cells, s = int(np.prod(self.grid[1:])), self.sublanes
        new = new.reshape(q, n, cells)
        for p, at, i, j in self._runs(r, n):
            run = new[:, i:j]
            if s * planes.LANES != cells:
                run = jnp.concatenate([run, a[:, p:p + j - i, at:at + s].reshape(q, j - i, -1)[:, :, cells:]], axis=2)
            a = jax.lax.dynamic_update_slice(a, run.reshape(q, j - i, s, planes.LANES), (0, p, at, 0))
        return a

    def _step(self, pre: jnp.ndarray, t: jnp.ndarray, rows: Any) -> jnp.ndarray:
        """The post-collision populations ``(Q, 3, *grid[1:])`` of the three-row grid from its pre-step ones (as a
        block of cells, :class:`RowsBlock`)."""
        q, d = pre.shape[0], len(self.grid)
        block = pre.reshape(q, -1, *[1] * (d - 1))
        s = run_stages(self.stages, StepState(f=block, t=t), rows, self.setup)
        return s.post.reshape(pre.shape)

    # --- the even step: each cell's own slots ------------------------------------------------------------------
    def even_pre(self, a: jnp.ndarray) -> jnp.ndarray:
        """The three rows' pre-step populations before the even kernel (their own slots)."""
        return self._rows(a, self.mini)

    def even_put(self, a: jnp.ndarray, pre: jnp.ndarray, t: jnp.ndarray, rows: Any) -> jnp.ndarray:
        """After the even kernel: the face rows' f*_k in their slots opp(k)."""
        opp = np.asarray(self.lattice.opposite)
        post = self._step(pre, t, rows)
        with jax.named_scope("stream"):
            a = self._put(a, self.mini[0], post[opp, 0:1])
            return self._put(a, self.mini[2], post[opp, 2:3])

    # --- the odd step: slot opp(k) of x - c_k in, slot k of x + c_k out -----------------------------------------
    def _around(self) -> tuple[int, ...]:
        nx = self.grid[0]
        return tuple(r % nx for r in (-3, -2, -1, 0, 1))

    def _across(self, face: jnp.ndarray, k: int) -> jnp.ndarray:
        """A face ``(*grid[1:])`` moved by c_k along the axes after x (periodic)."""
        shift = tuple(int(v) for v in self.lattice.c[k, 1:])
        return jnp.roll(face, shift, axis=tuple(range(len(shift)))) if any(shift) else face

    def odd_pre(self, a: jnp.ndarray) -> jnp.ndarray:
        """Rows nx - 3 .. 1 of the view before the odd kernel (where the three rows' cells read)."""
        return self._rows(a, self._around())

    def odd_put(self, a: jnp.ndarray, around: jnp.ndarray, t: jnp.ndarray, rows: Any) -> jnp.ndarray:
        """After the odd kernel: the face rows' f*_k in slot k of x + c_k (from their pre-step populations, streamed
        from ``around``)."""
        lat, nx = self.lattice, self.grid[0]
        at = {r: i for i, r in enumerate(self._around())}
        pre = jnp.stack([jnp.stack([self._across(around[int(lat.opposite[k]), at[(x - int(lat.c[k, 0])) % nx]], k)
                                    for x in self.mini]) for k in range(lat.q)])
        post = self._step(pre, t, rows)
        with jax.named_scope("stream"):
            out_rows = tuple(r % nx for r in (-2, -1, 0, 1))
            block = self._rows(a, out_rows)
            written = {}  # (slot, row of out_rows) -> f*_k of the face cell that owns it
            for m in (0, 2):
                for k in range(lat.q):
                    r = out_rows.index((self.mini[m] + int(lat.c[k, 0])) % nx)
                    written[k, r] = self._across(post[k, m], k)
            block = jnp.stack([jnp.stack([written.get((k, r), block[k, r]) for r in range(len(out_rows))])
                               for k in range(lat.q)])
            a = self._put(a, out_rows[0], block[:, :2])
            return self._put(a, out_rows[2], block[:, 2:])

    # --- the force -----------------------------------------------------------------------------------------------
    def _box(self, a: jnp.ndarray) -> jnp.ndarray:
        """The force's box of the state ``a``, ``(Q, *box.shape)``: on flat planes cut from the view's rows of 128 cells
        that hold its rows of y (not from whole planes: a copy of those planned 0.10x the populations at 6720x2880 in
        2D, and 1.78x in all of the D3Q19 cylinder 128x60x32), then its z range (3D)."""
        lo, shape = self.box.lo, self.box.shape
        if not self.sublanes:
            return a[(slice(None), *(slice(o, o + n) for o, n in zip(lo, shape, strict=True)))]
        row = int(np.prod(self.grid[2:]))  # cells per y of a plane: nz in 3D, 1 in 2D
        (x0, y0), (bx, by) = lo[:2], shape[:2]
        t0, t1 = y0 * row // planes.LANES, -(-(y0 + by) * row // planes.LANES)
        tiles = jnp.concatenate([a[:, p:p + j - i, at + t0:at + t1] for p, at, i, j in self._runs(x0, bx)], axis=1)
        tiles = tiles.reshape(a.shape[0], bx, (t1 - t0) * planes.LANES)
        first = y0 * row - t0 * planes.LANES
        box = tiles[:, :, first:first + by * row]
        if len(self._box_shape()) == 2:  # 2D, or 3D with z whole: the rows of y and z flat, as in the view
            return box
        return box.reshape(a.shape[0], bx, by, *self.grid[2:])[..., lo[2]:lo[2] + shape[2]]

    def _box_shape(self) -> tuple[int, ...]:
        """The shape of the force's box as :meth:`_box` cuts it, less Q: ``(bx, by nz)`` on flat planes where it
        spans z whole (3D) or in 2D, else the box's."""
        shape = self.box.shape
        if self.sublanes and (len(shape) == 2 or shape[2] == self.grid[2]):
            return (shape[0], int(np.prod(shape[1:])))
        return shape

    def force(self, a: jnp.ndarray, mask: Any) -> jnp.ndarray | None:
        """The momentum exchange ``(D,)`` from the populations after a step (view ``a``), None without a force."""
        if self.box is None:
            return None
        links, offset = mask
        with jax.named_scope("forces"):
            box = self._box(a)
            # the weights c_ja links_j formed in the sum's fusion; a sum of products, not a dot: on a TPU a float32
            # dot runs in bfloat16 passes by default. (A sum per slot first, then over the slots, made XLA copy the
            # whole state: deviceless v5e, the D3Q19 cylinder 256x128x128 planned 2.09x the populations, not 1.09x.)
            ct = self.box.c.T  # (D, Q)
            c = jnp.asarray(ct.reshape(*ct.shape, *[1] * (box.ndim - 1)), box.dtype)
            weights = c * links.astype(box.dtype)[None]
            return jnp.sum(weights * box[None], axis=tuple(range(1, box.ndim + 1))) + offset
