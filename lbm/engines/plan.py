"""The boundary-cell plan of a bulk-kernel engine: which cells leave the bulk kernel's answer, and where they live.

A bulk kernel (native, Pallas) updates every cell as if it were periodic bulk fluid. The
cells where a boundary condition acts, and the cells it reads, form a *block*: their
pre-collision populations are gathered from the slots the kernel reads, the case's own stage
functions run on the gathered ``(Q, n)`` arrays (each boundary condition's ``on_block``
form), and the results are stored into the slots the kernel wrote for those cells, replacing
its bulk answer. Every cell owns fixed read and write slots in each streaming scheme, so this
reproduces the dense timestep (up to rounding) at a cost that scales with the number of
boundary cells.

Block order: the face cells of each boundary condition that needs a face (inlet, outlet),
in face order; then the other written cells, sorted; then the ghosts (cells only read).
Slot maps are flat indices into the population array viewed as ``(Q * N,)``.

An obstacle's interior stays out of the block (:func:`held_at_rest`): a wall rule holds its solid cells at the rest
state but for the populations its links send, so a solid cell that sends none, receives only from solid cells that
send it none, and touches no other condition (nor do its neighbours) needs no gather. The bulk kernel steps it with
the bulk; what it holds then reaches only other such cells and the wall's solid cells, whose post-collision
populations the block overwrites; and the chunk ends by setting the populations these cells sent back to rest
(:attr:`Slots.rest`, the engine's ``at_rest``), so that every cell ends the chunk as in the dense step. The half-way
cylinder at 1680 x 720 gathers 4,056 cells a step instead of 22,869.

Conditions in the kernel (:func:`plan_kernel`, native only): a condition whose
:meth:`~lbm.boundaries.base.BoundaryCondition.bulk_rule` names a wall (resting and moving half-way,
full-way bounce-back) is a link rule the kernel applies itself, from link records (:func:`wall_records`)
after its bulk pass, so that wall-bounded flows need no block at all. So are the faces of a velocity
inlet (x = 0) and a zero-gradient outflow (x = nx - 1): whole rows of the kernel, whose cells load or
collide by the face's rule (:func:`kernel_faces`). The momentum exchange on an obstacle (forces) needs
only the post-step populations at both ends of its links, which the kernel reads for it after the step
(:func:`force_slots`). The other boundary conditions
keep the general path above; those acting after ``bounce_back`` only observe the step, and read
the post-step populations of their cells from the kernel (the ``observed`` cells of the block),
walls included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from lbm.boundaries.base import BoundaryCondition, neighbour, pytree_dataclass
from lbm.engines.base import EngineUnavailable
from lbm.lattice import Lattice
from lbm.stages import STAGES

SCHEMES = ("push", "aa_even", "aa_odd")
"""Streaming schemes whose slot maps a block provides: two-buffer push, and the in-place AA pair."""


def slot_maps(lattice: Lattice, shape: tuple[int, ...], cells: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(read, write) flat slot indices, each ``(Q, n)``, of the pre- and post-collision populations of ``cells``.

    push:    pre f_i(x) at i*N + x;              post f*_i(x) goes to i*N + (x + c_i)  (other buffer)
    aa_even: pre at i*N + x;                     post at opp(i)*N + x                 (in place)
    aa_odd:  pre at opp(i)*N + (x - c_i);        post at i*N + (x + c_i)              (in place)
    """
    n_cells = int(np.prod(shape))
    q = lattice.q
    cells = np.asarray(cells, dtype=np.int64)
    read = np.empty((q, cells.size), np.int64)
    write = np.empty((q, cells.size), np.int64)
    for i in range(q):
        c = lattice.c[i]
        fwd = neighbour(cells, shape, c)
        if scheme == "push":
            read[i] = i * n_cells + cells
            write[i] = i * n_cells + fwd
        elif scheme == "aa_even":
            read[i] = i * n_cells + cells
            write[i] = int(lattice.opposite[i]) * n_cells + cells
        elif scheme == "aa_odd":
            read[i] = int(lattice.opposite[i]) * n_cells + neighbour(cells, shape, -c)
            write[i] = i * n_cells + fwd
        else:
            raise ValueError(f"unknown scheme {scheme!r}: choose one of {', '.join(SCHEMES)}")
    dtype = np.int32 if q * n_cells < 2**31 else np.int64
    return read.astype(dtype), write.astype(dtype)


@pytree_dataclass
class Slots:
    """int32 slots ``(Q, n)`` of a block's cells in one streaming scheme: to gather before the kernel runs (every
    block cell), to write after it (the written cells), and to read after it (``observe``: the observed cells); and
    the populations the cells held at rest (``rest``, :attr:`Block.rest`) send, set to rest at a chunk's end."""

    gather: Any
    observe: Any
    write: Any
    rest: Any


@pytree_dataclass
class BlockArrays:
    """What a jitted step reads of the boundary-cell block: its slots per scheme and the conditions' block forms."""

    boundaries: tuple[BoundaryCondition, ...]
    slots: dict[str, Slots]


@dataclass(frozen=True)
class Block:
    """Gathered cells in block order: ``size`` written cells first, then the ghosts (read only).

    The last ``observed`` of the written cells are read by observing conditions only: the kernel
    computes them, and the block takes their post-step populations from it (slots ``observe``).
    ``rest``: cells outside the block that its conditions hold at the rest state (an obstacle's interior,
    :attr:`lbm.boundaries.base.Footprint.rest`): the kernel steps them with the bulk in a chunk, where nothing they
    hold reaches a cell the block does not overwrite, and the chunk ends by setting what they sent to rest.
    """

    lattice: Lattice
    shape: tuple[int, ...]
    cells: np.ndarray
    size: int
    observed: int = 0
    rest: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    def index_of(self, flat: np.ndarray) -> np.ndarray:
        """Block positions of lattice cells ``flat`` (all must be in the block)."""
        flat = np.asarray(flat, np.int64)
        order = np.argsort(self.cells, kind="stable")
        pos = np.clip(np.searchsorted(self.cells, flat, sorter=order), 0, self.cells.size - 1)
        found = order[pos]
        if not np.array_equal(self.cells[found], flat):
            raise ValueError("cell not in block")
        return found.astype(np.int32)

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """A per-cell lattice array ``(..., *grid)`` restricted to the block: ``(..., n, 1[, 1])``."""
        values = np.asarray(values)
        lead = values.shape[: values.ndim - len(self.shape)]
        flat = values.reshape(lead + (-1,))[..., self.cells]
        return flat.reshape(lead + (self.cells.size,) + (1,) * (len(self.shape) - 1))

    def slots(self, scheme: str) -> Slots:
        """The block's slots in ``scheme`` (:class:`Slots`)."""
        read, _ = slot_maps(self.lattice, self.shape, self.cells, scheme)
        _, write = slot_maps(self.lattice, self.shape, self.cells[: self.size], scheme)
        # where the held cells' populations land, i * N + (x + c_i) as a chunk leaves them: the held cells' own, and
        # those of the block's solid cells received from them (the block overwrites what they send, not what they hold)
        _, rest = slot_maps(self.lattice, self.shape, self.rest, "push")
        return Slots(gather=read.astype(np.int32), write=write.astype(np.int32),
                     observe=write[:, self.size - self.observed:].astype(np.int32), rest=rest.astype(np.int32))


def plan_block(lattice: Lattice, shape: tuple[int, ...], boundaries: tuple[BoundaryCondition, ...],
               hold_at_rest: bool = True, beside: tuple[BoundaryCondition, ...] = ()) -> Block | None:
    """The block of a setup's boundary conditions (None when there are none); EngineUnavailable if unsupported.

    With ``hold_at_rest``, the cells a condition holds at rest (:func:`held_at_rest`) leave the block for
    :attr:`Block.rest`, unless they or a neighbour meet a cell of another condition, ``beside`` ones (applied
    elsewhere: in the kernel) included: an engine that takes them sets them to rest at each chunk's end."""
    prints = [bc.footprint(shape, lattice) for bc in boundaries]
    face = np.concatenate([fp.face for fp in prints]) if prints else np.zeros(0, np.int64)
    if face.size != np.unique(face).size:
        raise EngineUnavailable("inlet and outflow faces overlap (grid too small along x)")
    besides = [dataclasses.replace(bc.footprint(shape, lattice), rest=np.zeros(0, np.int64)) for bc in beside]
    held = held_at_rest(lattice, shape, prints + besides) if hold_at_rest else np.zeros(0, np.int64)
    others = np.unique(np.concatenate([fp.cells for fp in prints])) if prints else np.zeros(0, np.int64)
    others = np.setdiff1d(np.setdiff1d(others, face), held)  # a wall cell on an inlet or outlet face: once, in the face
    written = np.concatenate([face, others]).astype(np.int64)
    if written.size == 0:
        return None
    ghost = np.setdiff1d(np.unique(np.concatenate([fp.ghosts for fp in prints])), written)
    return Block(lattice=lattice, shape=shape, cells=np.concatenate([written, ghost]).astype(np.int64),
                 size=int(written.size), rest=held)


def held_at_rest(lattice: Lattice, shape: tuple[int, ...], prints: list[Any]) -> np.ndarray:
    """The cells of the conditions' footprints ``prints`` held at rest (``Footprint.rest``) that no other condition
    touches, nor any of their neighbours: what they hold reaches no other condition's cells, and nothing of another
    condition reaches them."""
    held = []
    n = int(np.prod(shape))
    for k, fp in enumerate(prints):
        if fp.rest.size == 0:
            continue
        touched = np.zeros(n, bool)
        for j, other in enumerate(prints):
            if j != k:
                touched[np.concatenate([other.face, other.cells, other.ghosts]).astype(np.int64)] = True
        ok = ~touched[fp.rest]
        for c in lattice.c:
            ok &= ~touched[neighbour(fp.rest, shape, c)]
        held.append(fp.rest[ok])
    return np.unique(np.concatenate(held)).astype(np.int64) if held else np.zeros(0, np.int64)


def plan_arrays(block: Block | None, boundaries: tuple[BoundaryCondition, ...]) -> BlockArrays | None:
    """What the jitted step reads of the block (None without one); ValueError where a block form needs a layout this
    block does not have."""
    if block is None:
        return None
    return BlockArrays(slots={s: block.slots(s) for s in SCHEMES},
                       boundaries=tuple(bc.on_block(block) for bc in boundaries))


OBSERVING = STAGES[STAGES.index("bounce_back") + 1:STAGES.index("stream")]
"""Stages whose conditions read the step's populations and write none (forces)."""


def wall_rule(bc: BoundaryCondition) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None] | None:
    """(solid, half-way links or None for full-way, wall term or None) of a wall a kernel applies, else None."""
    rule = bc.bulk_rule()
    return None if rule is None else rule.wall


def face_rule(bc: BoundaryCondition, which: str) -> bool:
    """Whether the kernel applies ``bc`` as its velocity inlet (``which`` "inflow") or zero-gradient outflow."""
    rule = bc.bulk_rule()
    return rule is not None and (rule.inflow if which == "inflow" else rule.outflow)


def _by_row(rows: list[np.ndarray], columns: dict[str, list[np.ndarray]], n_outer: int, dtypes: dict[str, Any]
            ) -> dict[str, np.ndarray]:
    """Records sorted by outer row (stable), with row offsets ``off`` (n_outer + 1)."""
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    order = np.argsort(row, kind="stable")
    out = {"off": np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n_outer))]).astype(np.int32)}
    for k, v in columns.items():
        out[k] = (np.concatenate(v) if v else np.zeros(0))[order].astype(dtypes.get(k, np.int32))
    return out


def wall_records(lattice: Lattice, shape: tuple[int, ...], walls: tuple[BoundaryCondition, ...],
                 scheme: str) -> dict[str, np.ndarray] | None:
    """Link records with which a bulk step of ``scheme`` applies ``walls`` row by row (kernels.cc, RowWalls).

    Rows are the lines along the last grid axis. ``skip``: runs ``[k0, k1)`` of solid cells per row (the
    bulk pass leaves them alone); ``rest``: write slots of solid cells' unreflected populations, set to
    the rest state (0: the kernels store deviations f - w), in the solid cell's row, ascending within a row;
    ``copy_dst``/``copy_src``/``copy_add``: per half-way link, the solid cell's write slot, the write slot of the
    opposite population of the fluid cell across the link, and the wall term, in the fluid cell's row;
    ``keep_src``/``keep_dst``
    (push only; in place a skipped cell keeps them already): a full-way solid cell's pre-step
    population f_opp(i) (read slot) as its post-step population i (write slot). Each group comes with
    row offsets ``*_off``. None when the walls overlap, or a link is flagged on a fluid cell.
    """
    q, n_cells, n_inner = lattice.q, int(np.prod(shape)), shape[-1]
    n_outer = n_cells // n_inner
    opp = lattice.opposite
    solids: list[np.ndarray] = []
    rest_row, rest = [], []
    copy_row, copy_dst, copy_src, copy_add, acrosses = [], [], [], [], []
    keep_row, keep_src, keep_dst = [], [], []
    for bc in walls:
        solid, links, wall_term = wall_rule(bc)
        solid = solid.reshape(-1)
        cells = np.flatnonzero(solid)
        solids.append(cells)
        read, write = slot_maps(lattice, shape, cells, scheme)
        if links is None:
            if scheme == "push":
                keep_row.append(np.repeat(cells[None] // n_inner, q, axis=0).reshape(-1))
                keep_src.append(read[opp].reshape(-1))
                keep_dst.append(write.reshape(-1))
            continue
        links = links.reshape(q, -1)
        if (links & ~solid).any():
            return None
        for j in range(q):
            flagged = links[j, cells]
            rest_row.append(cells[~flagged] // n_inner)
            rest.append(write[j, ~flagged])
            across = neighbour(cells[flagged], shape, lattice.c[j])
            _, w_across = slot_maps(lattice, shape, across, scheme)
            acrosses.append(across)
            copy_row.append(across // n_inner)
            copy_dst.append(write[j, flagged])
            copy_src.append(w_across[opp[j]])
            copy_add.append(np.zeros(across.size) if wall_term is None else wall_term.reshape(q, -1)[j, cells[flagged]])
    solid = np.concatenate(solids)
    if np.unique(solid).size != solid.size:
        return None  # two walls on one cell
    if acrosses and np.isin(np.concatenate(acrosses), solid).any():
        return None  # a link reads a cell another wall makes solid
    solid = np.sort(solid)
    row, k = solid // n_inner, solid % n_inner
    starts = np.flatnonzero(np.concatenate([[True], (row[1:] != row[:-1]) | (k[1:] != k[:-1] + 1)]))
    ends = np.concatenate([starts[1:], [solid.size]])
    out: dict[str, np.ndarray] = {}
    skip = _by_row([row[starts]], {"skip": [np.stack([k[starts], k[ends - 1] + 1], axis=1)]}, n_outer, {})
    out["skip_off"], out["skip"] = skip["off"], skip["skip"].reshape(-1)
    rest_rows, rest_slots = (np.concatenate(rest_row), np.concatenate(rest)) if rest else (np.zeros(0, np.int64),) * 2
    order = np.lexsort((rest_slots, rest_rows))  # by row, then slot
    out["rest_off"] = np.concatenate([[0], np.cumsum(np.bincount(rest_rows, minlength=n_outer))]).astype(np.int32)
    out["rest"] = rest_slots[order].astype(np.int32)
    c = _by_row(copy_row, {"copy_dst": copy_dst, "copy_src": copy_src, "copy_add": copy_add}, n_outer,
                {"copy_add": np.float64})
    out.update(copy_off=c["off"], copy_dst=c["copy_dst"], copy_src=c["copy_src"], copy_add=c["copy_add"])
    kp = _by_row(keep_row, {"keep_src": keep_src, "keep_dst": keep_dst}, n_outer, {})
    out.update(keep_off=kp["off"], keep_src=kp["keep_src"], keep_dst=kp["keep_dst"])
    return out


def touched(bcs: Any, shape: tuple[int, ...], lattice: Lattice) -> np.ndarray:
    """Every cell the conditions ``bcs`` write or read (their footprints' faces, cells and ghosts)."""
    cells = [np.zeros(0, np.int64)]
    for bc in bcs:
        fp = bc.footprint(shape, lattice)
        cells += [fp.face, fp.cells, fp.ghosts]
    return np.unique(np.concatenate(cells)).astype(np.int64)


def kernel_faces(lattice: Lattice, shape: tuple[int, ...], boundaries: tuple[BoundaryCondition, ...]
                 ) -> tuple[BoundaryCondition, ...]:
    """The velocity inlet and the zero-gradient outflow a bulk kernel applies itself (kernels.cc, RowFaces).

    An inlet or an outflow (its :meth:`~lbm.boundaries.base.BoundaryCondition.bulk_rule`), the only one of its kind, whose
    cells (face, and the outflow's upstream column) no other condition writes or reads, on a grid with
    nx >= 3 and D >= 2 (its face is then whole rows of the kernel). Its rule, as dense: the outflow's cells
    load their populations with c_x < 0 from the column upstream (the pre-step values); the inlet's cells
    take rho from their known populations, u from the inflow, rebuild the unknowns, and collide with them.
    """
    if lattice.d < 2 or shape[0] < 3:
        return ()
    faces = []
    for which in ("inflow", "outflow"):
        same = [bc for bc in boundaries if face_rule(bc, which)]
        if len(same) == 1:
            faces.append(same[0])
    out = []
    for bc in faces:
        others = [o for o in boundaries if o is not bc]
        if np.intersect1d(touched([bc], shape, lattice), touched(others, shape, lattice)).size == 0:
            out.append(bc)
    return tuple(out)


def force_slots(lattice: Lattice, shape: tuple[int, ...], forces: Any, scheme: str) -> np.ndarray:
    """int32 ``(2, L)``: per link of ``forces``, the write slots of f*_i at its fluid cell and of f_opp(i) at its solid cell.

    The momentum exchange (lbm.kernels.forces.momentum_exchange) is the sum over links of c_i times the sum of
    the two: the collided population of the fluid cell (walls leave fluid cells alone) and the bounced one.
    """
    dirs = np.asarray(forces.link_dir, np.int64)
    src, dst = np.asarray(forces.link_src, np.int64), np.asarray(forces.link_dst, np.int64)
    out = np.empty((2, dirs.size), np.int64)
    for i in np.unique(dirs):
        sel = dirs == i
        out[0, sel] = slot_maps(lattice, shape, src[sel], scheme)[1][i]
        out[1, sel] = slot_maps(lattice, shape, dst[sel], scheme)[1][lattice.opposite[i]]
    return out.astype(np.int32)


@dataclass(frozen=True)
class KernelPlan:
    """Which boundary conditions a bulk kernel applies itself (``walls``, ``faces``, ``forces``), which run on the ``block``."""

    walls: tuple[BoundaryCondition, ...]
    general: tuple[BoundaryCondition, ...]
    block: Block | None
    records: dict[str, dict[str, np.ndarray]]  # scheme -> wall records (empty without walls)
    faces: tuple[BoundaryCondition, ...] = ()  # a velocity inlet and/or a zero-gradient outflow (kernel_faces)
    forces: BoundaryCondition | None = None  # momentum exchange from the kernel's post-step populations (force_slots)
    force_slots: dict[str, np.ndarray] | None = None  # scheme -> (2, L) slots

    @property
    def inlet(self) -> Any:
        """The velocity inlet the kernel applies, if any."""
        return next((bc for bc in self.faces if face_rule(bc, "inflow")), None)

    @property
    def outflow(self) -> bool:
        """Whether the kernel applies a zero-gradient outflow."""
        return any(face_rule(bc, "outflow") for bc in self.faces)


def plan_kernel(lattice: Lattice, shape: tuple[int, ...], boundaries: tuple[BoundaryCondition, ...]) -> KernelPlan:
    """Walls, faces and forces into the kernel where they do not meet the cells other conditions write; the rest on a block.

    Falls back to :func:`plan_block` for every condition (nothing in the kernel) when a wall's cells
    are written by a non-observing condition, or when the walls interfere (:func:`wall_records`).
    Forces go to the kernel when they are the only observing condition, no writer of the block touches
    their links and no wall makes a link's fluid end solid.
    """
    walls = tuple(bc for bc in boundaries if wall_rule(bc) is not None)
    faces = kernel_faces(lattice, shape, boundaries)
    general = tuple(bc for bc in boundaries if wall_rule(bc) is None and not any(bc is f for f in faces))
    fallback = KernelPlan(walls=(), general=boundaries, block=plan_block(lattice, shape, boundaries), records={})
    if not walls and not faces:
        return fallback
    writers = [bc for bc in general if bc.stage not in OBSERVING]
    observers = [bc for bc in general if bc.stage in OBSERVING]
    kernel = tuple(bc for bc in boundaries if not any(bc is w for w in writers))  # walls, faces, observers
    block = plan_block(lattice, shape, tuple(writers), beside=kernel)
    written = np.zeros(0, np.int64) if block is None else block.cells[: block.size]
    if np.intersect1d(written, touched(walls, shape, lattice)).size:
        return fallback
    records = {}
    for scheme in SCHEMES:
        rec = wall_records(lattice, shape, walls, scheme) if walls else {}
        if rec is None:
            return fallback
        records[scheme] = rec
    if not walls:
        records = {}
    forces, slots = None, None
    rule = observers[0].bulk_rule() if len(observers) == 1 else None
    if rule is not None and rule.links:
        solid = np.concatenate([np.flatnonzero(np.asarray(wall_rule(w)[0])) for w in walls] + [np.zeros(0, np.int64)])
        fc = observers[0]
        if (not np.intersect1d(written, touched([fc], shape, lattice)).size
                and not np.isin(np.asarray(fc.link_src, np.int64), solid).any()):
            forces, observers = fc, []
            slots = {scheme: force_slots(lattice, shape, fc, scheme) for scheme in SCHEMES}
    general = tuple(bc for bc in general if bc is not forces)
    observed = np.setdiff1d(touched(observers, shape, lattice), written)
    ghosts = np.zeros(0, np.int64) if block is None else block.cells[block.size:]
    if np.intersect1d(observed, ghosts).size:
        return fallback  # a cell both observed after the step and read before it by a writer: not supported
    plan = KernelPlan(walls=walls, general=general, block=None, records=records, faces=faces, forces=forces,
                      force_slots=slots)
    if block is None and observed.size == 0:
        return plan
    cells = np.concatenate([written, observed.astype(np.int64), ghosts])
    rest = np.zeros(0, np.int64) if block is None else block.rest
    return dataclasses.replace(plan, block=Block(lattice=lattice, shape=shape, cells=cells, rest=rest,
                                                 size=int(written.size + observed.size), observed=int(observed.size)))
