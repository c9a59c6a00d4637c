"""The ``native`` engine: a generated C++ collide-and-stream kernel for the bulk, the case's stages on its boundary cells.

The bulk kernel (lbm.engines.native.build, under ``jax.named_scope`` of lbm.stages.BULK_SCOPE) updates
every cell as periodic fluid, in place with the AA pattern (two steps per loop iteration;
an odd chunk starts with one two-buffer push step). Walls (half-way, moving and full-way
bounce-back) it applies itself, row by row from link records, where no other condition writes
their cells, and so the faces of a velocity inlet and a zero-gradient outflow
(lbm.engines.plan.plan_kernel; its scope then names those stages too). The momentum
exchange on an obstacle reads the post-step populations at its links from the kernel.
The cells of the other boundary conditions are gathered by the kernel before it writes, run
through the same stage functions as every other engine (lbm.engines.timestep, with each
boundary condition's block form), and stored back into the slots the kernel wrote; conditions
that only observe the step (forces) read the kernel's post-step populations of their cells.
CPU only; ``auto`` picks it where it builds.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import StepState, pytree_dataclass
from lbm.cases.base import Setup
from lbm.config.sections import Native
from lbm.engines.base import EngineUnavailable, decode, encode
from lbm.engines.bulk import BulkKernelEngine
from lbm.engines.native import build
from lbm.engines.native.codegen import KernelSpec
from lbm.engines.native.collisions import collision_rates
from lbm.engines.native.threads import threads_used
from lbm.engines.plan import OBSERVING, BlockArrays, plan_kernel
from lbm.engines.timestep import outputs, run_stages
from lbm.kernels.forces import link_force
from lbm.stages import BULK_PREFIX, CORE_STAGES, STAGES


@pytree_dataclass
class NativeParams:
    """The params of the native step: the boundary-cell block's arrays, the dense conditions, and what the kernel
    applies itself (per scheme: wall records ``walls`` and force slots ``forces``; the velocity ``inlet``; per
    link: ``force_c`` = c_i and ``force_w`` = w_i, the rest weight the stored deviations f - w leave out)."""

    block: BlockArrays | None
    dense: Any
    force_c: Any
    force_w: Any
    forces: dict[str, Any] | None
    inlet: Any
    walls: dict[str, dict[str, Any]]


class NativeEngine(BulkKernelEngine):
    """Bulk cells by the generated kernel, boundary cells by the case's stage functions (see the module doc)."""

    name = "native"

    def __init__(self, setup: Setup, storage: str = "compute", native: Native | None = None) -> None:
        super().__init__(setup, storage)
        self.threading = native  # threads per step and pinning (the run config's native section; None: defaults)
        self.threads = threads_used(native.threads if native else 0, int(np.prod(setup.shape)))
        dtype = jnp.dtype(setup.dtype)
        collision = setup.collision
        if collision is not None and collision.smagorinsky:
            raise EngineUnavailable("the native kernel has no Smagorinsky model (collision.smagorinsky): "
                                    "use engine=xla, or collision.smagorinsky=0")
        if dtype not in (jnp.float32, jnp.float64):
            raise EngineUnavailable(f"no native kernel for dtype {dtype}")
        store = storage if storage != "compute" else ("float32" if dtype == jnp.float32 else "float64")
        self.plan = plan_kernel(setup.lattice, setup.shape, setup.boundaries)
        inlet = self.plan.inlet
        self.spec = KernelSpec(setup.lattice, store, setup.omega_plus != setup.omega_minus, setup.force is not None,
                               inlet.kind if inlet is not None else "", collision.kind if collision else "")
        self.rates = collision_rates(collision) if collision else ()
        if not build.available():
            raise EngineUnavailable("native kernels need the CPU backend and a C++ compiler")
        if setup.lattice.q * int(np.prod(setup.shape)) >= 2**31:
            raise EngineUnavailable("more than 2**31 populations: the native engine indexes slots with int32")
        t0 = time.perf_counter()
        try:
            build.register(self.spec)
        except Exception as exc:
            raise EngineUnavailable(f"native kernel build failed: {str(exc).splitlines()[0]}") from None
        self.build_time_s = time.perf_counter() - t0
        real = np.float64 if store == "float64" else np.float32
        walls = {scheme: dict(rec, copy_add=rec["copy_add"].astype(real)) for scheme, rec in self.plan.records.items()}
        block_arrays = self.block_arrays(self.plan.block, self.plan.general)
        dirs = None if self.plan.forces is None else np.asarray(self.plan.forces.link_dir, np.int64)
        self.params = jax.tree_util.tree_map(jnp.asarray, NativeParams(
            block=block_arrays, dense=self.params, walls=walls, inlet=inlet, forces=self.plan.force_slots,
            force_c=None if dirs is None else setup.lattice.c[dirs].astype(dtype),
            force_w=None if dirs is None else setup.lattice.w[dirs].astype(dtype)))
        # the kernel's scope names the stages it does: bounce-back and the faces' stages too where it applies them
        done = set(CORE_STAGES) | {bc.stage for bc in self.plan.walls + self.plan.faces}
        self.bulk_scope = "+".join((BULK_PREFIX, *(st for st in STAGES if st in done)))
        acting = set(CORE_STAGES) | {bc.stage for bc in self.plan.general}
        names = [st for st in setup.stages if st != "stream" and st in acting]
        self._stages = tuple(st for st in names if st not in OBSERVING)
        self._observing = tuple(st for st in names if st in OBSERVING)

    def step(self, a: jnp.ndarray, t: jnp.ndarray, params: Any, scheme: str) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t`` of ``scheme`` (push | aa_even | aa_odd) on stored populations ``a``."""
        setup, spec, block, plan = self.setup, self.spec, self.block, self.plan
        slots = params.block.slots[scheme] if block is not None else None
        observe = slots.observe if slots is not None else None
        links = 0
        if plan.forces is not None:  # the links' populations after the kernel's observe slots of the block
            fslots = params.forces[scheme]
            links = fslots.shape[1]
            observe = jnp.concatenate([fslots.reshape(-1)] if observe is None else
                                      [observe.reshape(-1), fslots.reshape(-1)])
        u_in = None
        if plan.inlet is not None:
            with jax.named_scope("inlet"):
                u_in = params.inlet.velocity(t)
        gather = slots.gather if slots is not None else None
        args = (setup.omega_plus, setup.omega_minus, setup.force_array, gather, params.walls.get(scheme),
                observe, u_in, plan.outflow, self.rates, self.threading)
        with jax.named_scope(self.bulk_scope):  # names the stages the kernel does, for traces and the profiler
            if scheme == "push":
                out, old, seen = build.push(spec, a, jnp.zeros_like(a), *args)
            else:
                out, old, seen = build.aa_step(spec, a, 0 if scheme == "aa_even" else 1, *args)
        aux = {}
        if links:
            with jax.named_scope("forces"):  # the momentum exchange on the kernel's link populations
                pair = seen.reshape(-1)[seen.size - 2 * links:].reshape(2, links).astype(setup.dtype)
                aux["force"] = link_force(params.force_c, params.force_w, pair[0], pair[1])
            seen = seen.reshape(-1)[: seen.size - 2 * links]
        if block is None:
            return out, aux
        lat = setup.lattice
        bcs = params.block.boundaries
        f = decode(old, self.storage, setup.dtype).reshape((lat.q, -1) + (1,) * (lat.d - 1))
        s = run_stages(self._stages, StepState(f=f, t=t), bcs, setup)
        if block.observed:  # observing conditions see the kernel's post-step populations (walls applied) of their cells
            with jax.named_scope("bounce_back"):
                post = s.post.reshape(lat.q, -1).at[:, block.size - block.observed:block.size].set(
                    decode(seen.reshape(lat.q, block.observed), self.storage, setup.dtype))
                s = s.replace(post=post.reshape(s.post.shape))
        s = run_stages(self._observing, s, bcs, setup)
        post = s.post.reshape(lat.q, -1)[:, : block.size]
        with jax.named_scope("stream"):
            out = build.scatter(spec, out, slots.write, encode(post, self.storage))
        return out, {**outputs(s), **aux}

    def chunk_function(self, n: int) -> Any:
        """n steps: one push step if n is odd, then AA pairs under ``lax.scan`` (in place, standard layout after)."""

        def scheme(name: str) -> Any:
            return lambda a, t, params: self.step(a, t, params, name)

        return jax.jit(self.paired_chunk(n, scheme("push"), scheme("aa_even"), scheme("aa_odd")), donate_argnums=0)
