"""The ``pallas`` engine: one Pallas collide-and-stream kernel per step for the bulk, the case's stages on its boundary cells.

The bulk kernel (lbm.engines.pallas.kernels, named ``BULK_SCOPE``) updates every cell as
periodic fluid in the push scheme: it reads one buffer and writes a second, fresh one. The
chunk runs two steps per loop iteration, so the loop carries one buffer and XLA needs no
copy of it: the first step's result is a new buffer, the second's goes back into the loop's
own (checked by tests/engines/pallas/test_engines_pallas.py on the compiled HLO). An odd chunk starts with
one step before the loop. The boundary cells come from the plan the native engine uses
(lbm.engines.plan): their pre-step populations are gathered from the input buffer, run
through the same stage functions as every other engine (lbm.engines.timestep, each boundary
condition's block form), and scattered into the ``push`` slots the kernel wrote.

On a TPU the loop runs in place instead (lbm.engines.pallas.aa): each iteration is an AA
pair, the even step and the odd step, each aliasing the one population array, and an odd chunk's lone first step
is the even step and the swap pass (aa.aa_swap_step: the streaming of its opposite slots, in place), so the compiled
chunk holds the populations once. In 2D, and in 3D where the (8, 128) tiles of (ny, nz) would pad more (planes.flat_plane), the
engine's state is the kernels' flat view of the populations (planes.plane_view, not free in HBM: its tiles are not those
of the grid), held for the whole run: ``place`` copies the populations into it once, ``canonical`` gives them back as
(Q, *grid) where something outside the engine reads them (fields, checkpoints, the health check's first bad
cell), and a chunk holds the populations once. Where ny is no multiple of 1024 the view
pads y to the next one, P (planes.padded_ny; the pads at rest, invisible to ``canonical`` and the fluid mask,
the boundary plan's slots mapped into the view), up to P / ny = aa.MAX_PAD; beyond it the push kernel
runs every step; the engine's note says which. A 2D view holds k rows of x per plane where that pads less, each row
padded only to a multiple of 128 cells (planes.row_group: 3360 x 1440 1.07x, not 1.42x; the engine's ``group``; the
kernel walls, the faces and the boundary plan all take it). The boundary cells
are gathered from the ``aa_even`` / ``aa_odd`` slots before the kernel overwrites them, and
scattered into the slots it wrote. Where the pair runs, a setup whose one condition is a half-way wall (resting or
moving) needs no boundary cells: the in-place kernels apply the wall themselves from per-cell link bits
(lbm.engines.pallas.walls), and a chunk ends with one pass that leaves the walls' populations as a dense step does
(after an odd chunk's swap pass too).
An inflow at x = 0, a zero-gradient outflow at x = nx - 1, a full-way obstacle and its force need none either
(lbm.engines.pallas.faces: the obstacle is the kernels' solid bit, the two face rows' (3D: planes') step and the force
run on the xla side from whole rows of the view).

Kernel formulation by platform: ``flat`` on GPUs (Triton), ``rows`` on TPUs (Mosaic; it needs
a first axis the row blocks divide). On a CPU the kernel runs in Pallas interpret mode:
correct, slow, for checking; the log says so. ``auto`` picks this engine on GPUs and TPUs.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import StepState
from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable
from lbm.engines.bulk import BulkKernelEngine
from lbm.engines.pallas import ACCELERATORS, aa, faces, kernels, planes, walls
from lbm.engines.timestep import moment_stages, moments, outputs, run_stages
from lbm.stages import TIMESTEP

log = logging.getLogger("lbm")


INTERPRET_OPTIONS = {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"}
"""XLA's options for a chunk whose kernels run in Pallas interpret mode on the CPU (a check, slow whatever the
compiler does): the CPU backend's fast-compile preset. Interpret mode turns each kernel's DMAs and rows into large
programs: the D3Q27 cumulant cavity 16 x 6 x 7 with its walls in the kernels (2 steps, three kernels) compiled in 30.0
CPU-s, 19.9 with the preset (jax 0.12.1, XLA's level 0 as in the suite), its populations bitwise the same."""


def platform_of(platform: str | None) -> str:
    """``platform`` or, when None, the platform of JAX's default backend."""
    return platform or jax.default_backend()


class PallasKernel:
    """The bulk kernel for a grid (a whole one, or one device's shard) on a platform: its form and interpret mode.

    ``inplace``: where the form is ``rows``, also the in-place AA pair (:attr:`inplace` True where it runs; in 2D
    a grid it does not fit runs the push kernel, and :attr:`inplace_note` says why, or where it pads y, by how much).
    Where the pair runs, the push step is not used (an odd chunk's lone step is the even kernel and the swap pass), so
    it need not fit.
    """

    def __init__(self, setup: Setup, shape: tuple[int, ...], storage: str = "compute", platform: str | None = None,
                 interpret: bool | None = None, inplace: bool = False) -> None:
        dtype = jnp.dtype(setup.dtype)
        if dtype not in (jnp.float32, jnp.float64):
            raise EngineUnavailable(f"no Pallas kernel for dtype {dtype}")
        if storage != "compute":
            raise EngineUnavailable(f"the Pallas kernel keeps populations in the compute dtype, not {storage}")
        self.setup, self.shape = setup, tuple(shape)
        self.platform = platform_of(platform)
        self.interpret = self.platform not in ACCELERATORS if interpret is None else interpret
        self.form = "rows" if self.platform == "tpu" else "flat"
        self.inplace = inplace and self.form == "rows"
        self.inplace_note = ""
        self.group = planes.row_group(self.shape) if self.inplace else 1
        """Rows of x per plane of the pair's 2D view (planes.row_group; 1 in 3D), else 1."""
        kernel_grid = planes.kernel_grid(self.shape, self.group)
        if self.inplace:  # the AA kernels index rows, not populations: no int32 limit (the engine's slots have one)
            why = aa.aa_unsupported(setup.lattice, kernel_grid, dtype) or aa.aa2d_not_chosen(
                setup.lattice, shape, dtype, self.group)
            if why and len(shape) == 3:
                raise EngineUnavailable(why)
            if why:  # 2D: the push rows kernel runs every step instead
                self.inplace, self.inplace_note, self.group = False, f"{why}: the push rows kernel runs every step", 1
                log.info("engine=pallas: %s", self.inplace_note)
        self.plane = planes.plane_of(self.shape, self.group) if self.inplace else None
        """Where the pair views its planes flat (planes.flat_plane), the plane its shifts wrap in (planes.plane_of:
        the axes after x, or (k, ny) for k rows of x per 2D plane), else None."""
        if self.inplace:
            self.rows = aa.aa_rows(setup.lattice, kernel_grid, dtype.itemsize)
            pad = planes.pad_factor(shape, self.group)
            if self.plane is not None and self.group > 1:
                self.inplace_note = (f"the in-place pair on flat planes of {self.group} rows of x, each padded from "
                                     f"{shape[1]} to {planes.row_cells(shape[1], self.group)} cells ({pad:.3f}x the "
                                     "populations)")
            elif self.plane is not None and pad > 1:
                self.inplace_note = (f"the in-place pair on flat planes padded from {int(np.prod(shape[1:]))} to "
                                     f"{planes.padded_plane(shape)} cells ({pad:.3f}x the populations)")
            if self.inplace_note:
                log.info("engine=pallas: %s", self.inplace_note)
        else:
            if setup.lattice.q * int(np.prod(shape)) >= 2**31:
                raise EngineUnavailable("more than 2**31 populations: the Pallas kernel indexes them with int32")
            if self.form == "rows":
                why = kernels.rows_unsupported(setup.lattice, shape, dtype)
                if why:
                    raise EngineUnavailable(why)
        notes = [f"{self.form} Pallas kernel in interpret mode: slow, for checking" if self.interpret else "",
                 self.inplace_note]
        self.note = "; ".join(n for n in notes if n)
        if self.interpret:
            log.warning("engine=pallas on %s runs its %s kernel in Pallas interpret mode: slow, for checking only",
                        jax.default_backend(), self.form)
        self.compiler_options = INTERPRET_OPTIONS if self.interpret and jax.default_backend() == "cpu" else None
        """XLA's options for a program holding the kernel (INTERPRET_OPTIONS in interpret mode on the CPU)."""

    def __call__(self, f: jnp.ndarray) -> jnp.ndarray:
        """One periodic push step of every cell of ``f`` ``(Q, *shape)``; a new array (where the pair runs, its chunks
        use :meth:`aa` only)."""
        s = self.setup
        step = kernels.flat_step if self.form == "flat" else kernels.rows_step
        return step(f, s.lattice, s.omega_plus, s.omega_minus, s.force_array, interpret=self.interpret,
                    collision=s.collision)

    def aa(self, f: jnp.ndarray, scheme: str) -> jnp.ndarray:
        """The ``scheme`` (aa_even | aa_odd | aa_swap, aa.SCHEMES) step or pass of every cell of ``f``, in place
        (aliased: donate ``f``)."""
        s = self.setup
        viewed = self.plane is not None and tuple(f.shape[1:]) == planes.view_shape(self.shape, self.group)
        plane = self.plane if viewed else None
        if scheme == "aa_swap":
            return aa.aa_swap_step(f, s.lattice, interpret=self.interpret, rows=self.rows, plane=plane)
        step = aa.aa_even_step if scheme == "aa_even" else aa.aa_odd_step
        return step(f, s.lattice, s.omega_plus, s.omega_minus, s.force_array, interpret=self.interpret,
                    rows=self.rows, collision=s.collision, plane=plane)


class PallasEngine(BulkKernelEngine):
    """Bulk cells by one Pallas kernel per step, boundary cells by the case's stage functions (see the module doc)."""

    name = "pallas"

    def __init__(self, setup: Setup, storage: str = "compute", platform: str | None = None,
                 interpret: bool | None = None) -> None:
        super().__init__(setup, storage)
        # 2D: k rows of x per plane of the pair's view pad y less (planes.row_group), with any boundaries (the kernel
        # walls, the faces and the boundary plan each map rows of x to the view's planes)
        self.bulk = PallasKernel(setup, setup.shape, storage, platform, interpret, inplace=True)
        self.group = self.bulk.group
        self.platform, self.interpret, self.form = self.bulk.platform, self.bulk.interpret, self.bulk.form
        self.compiler_options = self.bulk.compiler_options
        self.note = self.bulk.note
        self.viewed = self.bulk.plane is not None
        """Whether the engine's state is the kernels' flat view of the populations (the pair in 2D, and in 3D where it
        pads less: planes.flat_plane, planes.plane_view), held from chunk to chunk (:meth:`place`, :meth:`canonical`)."""
        if self.viewed and set(moment_stages(setup)) <= {"macroscopic", "equilibrium"}:
            # the moments cell by cell on the view, then the grid's shape (a copy of rho and u, not of the populations)
            grid, group = setup.shape, self.group
            self._moments = jax.jit(lambda f, t, bcs: tuple(planes.from_view(a, grid, group)
                                                            for a in moments(f, t, bcs, setup)))
        self.faces: faces.Faces | None = None
        """The pair's inflow, outflow and full-way obstacle as face rows (3D: planes) and a solid bit
        (lbm.engines.pallas.faces; None: the plan's)."""
        self.walls: walls.Walls | None = None
        """The half-way wall the in-place kernels apply themselves (lbm.engines.pallas.walls; None: the plan's)."""
        form = walls.kernel_form(setup)[0] if self.bulk.inplace and setup.boundaries else None
        if form is not None:
            self.walls = walls.Walls(form, setup.lattice)
            self.walls_rows = walls.walls_rows(setup.lattice, planes.kernel_grid(setup.shape, self.group))
            self.params = jax.tree_util.tree_map(jnp.asarray,
                                                 walls.wall_params(form, self.params, setup.shape, self.group))
            self._stages = ()
            return
        if self.bulk.inplace and setup.boundaries:
            self.faces = faces.faces_form(setup)[0]
        if self.faces is not None:
            assert self.faces.group == self.group, (self.faces.group, self.group)  # both planes.row_group's
            self.walls_rows = walls.walls_rows(setup.lattice, planes.kernel_grid(setup.shape, self.group))
            self.params = jax.tree_util.tree_map(jnp.asarray, self.faces.params(self.params))
            self._stages = ()
            return
        self.plan_boundaries()
        cells = int(np.prod(planes.view_shape(setup.shape, self.group))) if self.viewed else int(np.prod(setup.shape))
        if self.block is not None and setup.lattice.q * cells >= 2**31:
            raise EngineUnavailable("more than 2**31 populations: the boundary cells' slots are int32")
        if self.block is not None and self.viewed and planes.pad_factor(setup.shape, self.group) > 1:
            self.params = dataclasses.replace(self.params, block=self._viewed_slots(self.params.block))

    def _viewed_slots(self, block: Any) -> Any:
        """The boundary plan's arrays with the AA schemes' slots (the pair's steps, on the engine's state) as flat
        indices into the padded view (planes.view_index); the push slots (an odd chunk's step, on the grid) as they are."""
        grid, slots = self.setup.shape, dict(block.slots)
        for scheme in ("aa_even", "aa_odd"):
            slots[scheme] = jax.tree_util.tree_map(
                lambda i: jnp.asarray(planes.view_index(np.asarray(i), grid, self.group), jnp.int32), slots[scheme])
        return dataclasses.replace(block, slots=slots)

    @property
    def rest_scheme(self) -> str:  # type: ignore[override]
        """The in-place kernels' scheme (its slots on the engine's state, the view) where they run, else push."""
        return "aa_even" if self.bulk.inplace else "push"

    @property
    def state_shape(self) -> tuple[int, ...]:
        """The populations' shape between chunks: the pair's flat view (Q, nx, P / 128, 128), else (Q, *grid)."""
        return ((self.setup.lattice.q, *planes.view_shape(self.setup.shape, self.group)) if self.viewed
                else super().state_shape)

    def place(self, f: Any) -> Any:
        """Populations (Q, *grid) as the engine holds them: the pair's flat view (the same elements in the same order,
        a plane padded to P with the rest state where its cells are no multiple of 1024: a host array is laid out on
        the host, then sent once; on a TPU a device array is copied into the view's tiled layout), else as they are."""
        return jnp.asarray(planes.plane_view(f, self.group)) if self.viewed else super().place(f)

    def place_cells(self, a: Any) -> jnp.ndarray:
        """A per-cell array ``(*grid)`` (a mask) laid out as the state's cells (the flat view: (nx, P / 128, 128), the
        pads zero: no fluid)."""
        return jnp.asarray(planes.to_view(np.asarray(a), self.setup.shape, self.group)) if self.viewed else jnp.asarray(a)

    def outside_cells(self) -> jnp.ndarray | None:
        """The pads of the pair's flat view (beyond a plane's cells), where it pads; else None."""
        if not (self.viewed and planes.pad_factor(self.setup.shape, self.group) > 1):
            return None
        return ~self.place_cells(np.ones(self.setup.shape, bool))

    def canonical(self, f: Any) -> Any:
        """The populations (Q, *grid) of the engine's state ``f`` (on the device: a copy out of the pair's flat view;
        a host copy: free where y is not padded, the same order)."""
        return planes.from_view(f, self.setup.shape, self.group) if self.viewed else f

    def compile(self, f: Any, n: int) -> Any:
        """The compiled n-step chunk on the engine's state (:meth:`place`), for populations like ``f`` in either
        layout (timed, once)."""
        if self.viewed and tuple(f.shape) != self.state_shape:
            f = jax.ShapeDtypeStruct(self.state_shape, f.dtype)
        return super().compile(f, n)

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps on the engine's state (:meth:`place`, as the run loop holds it: no layout copy), or on
        populations (Q, *grid), placed before and given back after (a copy each way, outside the chunk)."""
        if not self.viewed or tuple(f.shape) == self.state_shape:
            return super().advance(f, n, first_step)
        out, aux = super().advance(self.place(f), n, first_step)
        return self.canonical(out), aux

    def on_state(self, chunk: Any) -> Any:
        """``chunk`` refusing populations that are not in the engine's state layout (a ValueError when traced); its
        name stays the chunk's (the program is ``jit_chunk`` in traces, as on every engine)."""
        @functools.wraps(chunk)
        def checked(f: jnp.ndarray, params: Any, t0: jnp.ndarray) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            if tuple(f.shape) != self.state_shape:
                raise ValueError(f"the pallas engine's chunk steps its state {self.state_shape} (engine.place), "
                                 f"not populations {tuple(f.shape)}")
            return chunk(f, params, t0)

        return checked

    def step(self, f: jnp.ndarray, t: jnp.ndarray, params: Any, scheme: str = "push"
             ) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t`` of ``scheme`` (push | aa_even | aa_odd): the bulk kernel, then the boundary cells' stages into
        the slots it wrote (with the walls in the kernels, only whole chunks: :meth:`walls_chunk`)."""
        if self.walls is not None or self.faces is not None:
            raise EngineUnavailable("the in-place kernels apply the walls over whole chunks, not one step")
        if self.block is None:
            return (self.bulk(f) if scheme == "push" else self.bulk.aa(f, scheme)), {}
        lat, setup = self.setup.lattice, self.setup
        slots = params.block.slots[scheme]
        pre = f.reshape(-1)[slots.gather].reshape((lat.q, -1) + (1,) * (lat.d - 1))
        if scheme == "push":
            out = self.bulk(f)
        else:  # in place: the gather reads f before the kernel overwrites it (the barrier orders them)
            pre, f = jax.lax.optimization_barrier((pre, f))
            out = self.bulk.aa(f, scheme)
        s = run_stages(self._stages, StepState(f=pre, t=t), params.block.boundaries, setup)
        post = s.post.reshape(lat.q, -1)[:, : self.block.size]
        with jax.named_scope("stream"):
            out = out.reshape(-1).at[slots.write].set(post, unique_indices=True, indices_are_sorted=False)
        return out.reshape(f.shape), outputs(s)

    def chunk_function(self, n: int) -> Any:
        """n steps, two per ``lax.scan`` iteration: the loop's buffer is handed back without a copy (an AA pair in
        place where the kernel has one, after one push step if n is odd), on the engine's state (:meth:`place`)."""
        if not self.bulk.inplace:
            return jax.jit(self.paired_chunk(n, self.step), donate_argnums=0)
        if self.walls is not None:
            return self.walls_chunk(n)
        if self.faces is not None:
            return self.faces_chunk(n)

        def scheme(name: str) -> Any:
            return lambda f, t, params: self.step(f, t, params, name)

        def single(f: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            # an odd chunk's lone step: the even step (the boundary cells' stages into its slots, where the odd step
            # would read them), then the swap pass makes the state dense, in place
            a, aux = self.step(f, t, params, "aa_even")
            return self.bulk.aa(a, "aa_swap"), aux

        # the chunk steps the engine's state (in 2D the kernels' view of the populations, planes.plane_view) with no copy
        return jax.jit(self.on_state(self.paired_chunk(n, single, scheme("aa_even"), scheme("aa_odd"))),
                       donate_argnums=0)

    def _walls_kw(self) -> dict[str, Any]:
        """The arguments every kernel with walls or a solid bit takes but the populations, the bits and the walls (in
        2D the view's y periodic at the grid's ny)."""
        s = self.setup
        return dict(omega_plus=s.omega_plus, omega_minus=s.omega_minus, force=s.force_array, rows=self.walls_rows,
                    interpret=self.bulk.interpret, collision=s.collision, plane=self.bulk.plane)

    def walls_chunk(self, n: int) -> Any:
        """n steps with the walls in the in-place kernels (lbm.engines.pallas.walls): n // 2 AA pairs, an even step and
        the swap pass if n is odd, and the walls' populations as a dense step leaves them (all in place)."""
        lat, wall = self.setup.lattice, self.walls
        kw = self._walls_kw()

        def chunk(f: jnp.ndarray, params: Any, t0: jnp.ndarray) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            # f is the engine's state: in 2D the kernels' view of the populations (planes.plane_view), the words alike
            bits = params.words  # walls.wall_params: int32, in the view (pads: no bits)

            def even(a: jnp.ndarray, reflect: bool = True) -> jnp.ndarray:
                with jax.named_scope(TIMESTEP):
                    return walls.walls_even_step(a, bits, lat, wall, reflect=reflect, **kw)

            def odd(a: jnp.ndarray) -> jnp.ndarray:
                with jax.named_scope(TIMESTEP):
                    return walls.walls_odd_step(a, bits, lat, wall, **kw)

            f = even(f, reflect=False)  # the chunk's input is dense (module doc of lbm.engines.pallas.walls)
            if n >= 2:
                f = odd(f)
            if n >= 4:
                f, _ = jax.lax.scan(lambda a, _: (odd(even(a)), None), f, None, length=(n - 2) // 2)
            if n % 2:  # the swap pass leaves each wall's reflected population where the fix takes it after a pair
                f = self.bulk.aa(even(f) if n > 1 else f, "aa_swap")
            return walls.walls_fix_step(f, bits, lat, wall, self.walls_rows, self.bulk.interpret, plane=kw["plane"]), {}

        return jax.jit(self.on_state(chunk), donate_argnums=0)

    def faces_chunk(self, n: int) -> Any:
        """n steps of the pair with an inflow, an outflow and a full-way obstacle (lbm.engines.pallas.faces): each
        AA step's kernel with the solid bit, then its face rows; an odd chunk's first step the even one and the
        swap pass."""
        lat, fc = self.setup.lattice, self.faces
        assert fc is not None
        kw = self._walls_kw()
        solid_only = walls.Walls.solid_only(lat)

        def outputs_of(a: jnp.ndarray, params: Any) -> dict[str, jnp.ndarray]:
            force = fc.force(a, params.mask)
            return {} if force is None else {"force": force}

        def even(a: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            pre = fc.even_pre(a)
            pre, a = jax.lax.optimization_barrier((pre, a))  # read before the kernel overwrites the rows in place
            a = walls.walls_even_step(a, (params.bits,), lat, solid_only, reflect=False, **kw)
            a = fc.even_put(a, pre, t, params.rows)
            return a, outputs_of(a, params)

        def odd(a: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            around = fc.odd_pre(a)
            around, a = jax.lax.optimization_barrier((around, a))
            a = walls.walls_odd_step(a, (params.bits,), lat, solid_only, **kw)
            a = fc.odd_put(a, around, t, params.rows)
            return a, outputs_of(a, params)

        def single(a: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            a = self.bulk.aa(even(a, t, params)[0], "aa_swap")
            return a, outputs_of(a, params)

        return jax.jit(self.on_state(self.paired_chunk(n, single, even, odd)), donate_argnums=0)
