"""Composes the stages of one timestep, in one of two modes.

``fused``: the whole timestep is one jitted function, each stage under
``jax.named_scope(stage)``, K steps per dispatch with ``lax.scan``, the population
buffer donated. ``instrumented``: each stage is its own compiled ``jax.jit``
function wrapped in ``jax.profiler.annotate_function(name=stage)``, and every step
runs under ``jax.profiler.StepTraceAnnotation("timestep")``. Both call the same
stage functions through the same :func:`timestep`.

Fused mode has two engines (``FusedStepper(engine=...)``): ``xla`` composes the stage
functions in one jit (the reference, any device); ``native`` runs the bulk of the lattice
through a generated C++ kernel (lbm.kernels.native, under ``jax.named_scope(BULK_SCOPE)``)
and the stage functions on the boundary cells only (:class:`NativePlan`). ``auto`` (the
default) picks native where it builds. docs/performance.md has the measurements.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.cases.base import Setup
from lbm.kernels.boundaries import bounce_back_fullway, bounce_back_halfway, inlet, outflow
from lbm.kernels.collision import collide
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.forces import momentum_exchange
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.stages import BULK_SCOPE, STAGES

Stages = dict[str, Callable[..., Any]]


def stage_functions(setup: Setup) -> Stages:
    """The pure stage functions of a case, static parameters bound; arrays in, arrays out."""
    lat = setup.lattice
    fns: Stages = {
        "outflow": lambda f: outflow(f, lat),
        "macroscopic": lambda f: macroscopic(f, lat, setup.force),
        "equilibrium": lambda rho, u: equilibrium(rho, u, lat),
        "inlet": lambda f, rho, u, feq, u_in: inlet(f, rho, u, feq, u_in, lat, setup.inlet_kind),
        "collide": lambda f, feq, u: collide(f, feq, u, lat, setup.omega_plus, setup.omega_minus, setup.force),
        "stream": lambda f: stream(f, lat),
    }
    if setup.bounce_back_kind == "fullway":
        fns["bounce_back"] = lambda f_post, f_pre, a: bounce_back_fullway(f_post, f_pre, a["solid"], lat)
    else:
        fns["bounce_back"] = lambda f_post, f_pre, a: bounce_back_halfway(
            f_post, a["solid"], a["links"], lat, a.get("wall_term"))
    fns["forces"] = lambda f_post, f_bb, a: momentum_exchange(
        f_post, f_bb, a["link_dir"], a["link_src"], a["link_dst"], lat)
    return {name: fns[name] for name in setup.stages}


def timestep(stages: Stages, f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """One LBM timestep through the given stages; returns new populations and per-step outputs."""
    if "outflow" in stages:
        f = stages["outflow"](f)
    rho, u = stages["macroscopic"](f)
    feq = stages["equilibrium"](rho, u)
    if "inlet" in stages:
        f, rho, u, feq = stages["inlet"](f, rho, u, feq, arrays["u_in"])
    f_post = stages["collide"](f, feq, u)
    aux: dict[str, jnp.ndarray] = {}
    f_bb = stages["bounce_back"](f_post, f, arrays["bounce_back"]) if "bounce_back" in stages else f_post
    if "forces" in stages:
        aux["force"] = stages["forces"](f_post, f_bb, arrays["forces"])
    return stages["stream"](f_bb), aux


def _scoped(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        with jax.named_scope(name):
            return fn(*args)
    return wrapper


class Stepper:
    """Advances populations by n steps in the configured mode and records compile times."""

    mode = "base"

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.arrays = jax.tree_util.tree_map(jnp.asarray, setup.arrays)
        self.compile_times: dict[str, float] = {}

    @property
    def compile_time_s(self) -> float:
        """Total seconds spent compiling so far."""
        return float(sum(self.compile_times.values()))

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps; per-step outputs are stacked along a leading axis of length n."""
        raise NotImplementedError


ENGINES = ("auto", "native", "xla")
"""Fused-mode engines: ``xla`` = the stage functions composed in one jit (the reference, any device);
``native`` = the hand-fused CPU kernel for the bulk plus the stage functions on boundary cells only;
``auto`` = native where it is available and supports the case, else xla."""

STORAGES = ("compute", "bfloat16", "float16")
"""How fused mode stores populations between steps: in the compute dtype, or as 16-bit
deviations from the rest weights (f - w), computed in the setup's dtype (float32)."""
_STORAGE_DTYPES = {"bfloat16": jnp.bfloat16, "float16": jnp.float16}


class FusedStepper(Stepper):
    """Whole timestep in one jit, n steps per dispatch via lax.scan, populations donated.

    ``engine`` picks how the step is computed (see ENGINES); ``storage`` how the
    populations are kept between steps (see STORAGES). Inputs and outputs of
    :meth:`advance` are always populations in the setup's dtype.
    """

    mode = "fused"

    def __init__(self, setup: Setup, engine: str = "auto", storage: str = "compute") -> None:
        super().__init__(setup)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")
        if storage != "compute" and jnp.dtype(setup.dtype) != jnp.float32:
            raise ValueError(f"{storage} storage computes in float32: build the setup with precision=float32")
        self.storage = storage
        self.stages = {name: _scoped(name, fn) for name, fn in stage_functions(setup).items()}
        self._compiled: dict[int, Any] = {}
        self.native: NativePlan | None = None
        self.engine_note = ""
        if engine in ("auto", "native"):
            try:
                self.native = NativePlan(setup, storage)
            except NativeUnavailable as exc:
                if engine == "native":
                    raise
                self.engine_note = str(exc)
        self.engine = "native" if self.native is not None else "xla"
        if self.native is not None:
            self.arrays = {**self.arrays, "_native": self.native.arrays}

    # --- storage -------------------------------------------------------------------------
    def encode(self, f: jnp.ndarray) -> jnp.ndarray:
        """Populations in the stored representation."""
        if self.storage != "compute":
            return (f - _rest(self.setup.lattice, f.dtype, f.ndim)).astype(_STORAGE_DTYPES[self.storage])
        return f

    def decode(self, s: jnp.ndarray) -> jnp.ndarray:
        """Populations in the compute dtype from the stored representation."""
        if self.storage != "compute":
            dtype = jnp.dtype(self.setup.dtype)
            return s.astype(dtype) + _rest(self.setup.lattice, dtype, s.ndim)
        return s

    # --- chunks --------------------------------------------------------------------------
    def _chunk_fn(self, n: int) -> Callable[..., Any]:
        if self.native is not None:
            return self._native_chunk_fn(n)
        stages = self.stages

        def chunk(f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            def body(s: jnp.ndarray, _: None) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
                with jax.named_scope("timestep"):
                    f_new, aux = timestep(stages, self.decode(s), arrays)
                    return self.encode(f_new), aux
            s, aux = jax.lax.scan(body, self.encode(f), None, length=n)
            return self.decode(s), aux

        return jax.jit(chunk, donate_argnums=0)

    def _native_chunk_fn(self, n: int) -> Callable[..., Any]:
        plan = self.native
        assert plan is not None

        def chunk(f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            a = self.encode(f)
            auxes = []
            if n % 2:  # one two-buffer step so that the in-place pairs below leave the standard layout
                with jax.named_scope("timestep"):
                    a, aux = plan.step(self, a, arrays, "push")
                auxes.append(jax.tree_util.tree_map(lambda v: v[None], aux))
            if n >= 2:
                def pair(a: jnp.ndarray, _: None) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
                    with jax.named_scope("timestep"):
                        a, aux0 = plan.step(self, a, arrays, "aa_even")
                    with jax.named_scope("timestep"):
                        a, aux1 = plan.step(self, a, arrays, "aa_odd")
                    return a, jax.tree_util.tree_map(lambda u, v: jnp.stack([u, v]), aux0, aux1)
                a, aux = jax.lax.scan(pair, a, None, length=n // 2)
                auxes.append(jax.tree_util.tree_map(lambda v: v.reshape((-1,) + v.shape[2:]), aux))
            stacked = {k: jnp.concatenate([x[k] for x in auxes]) for k in (auxes[0] if auxes else {})}
            return self.decode(a), stacked

        return jax.jit(chunk, donate_argnums=0)

    def compiled(self, f: jnp.ndarray, n: int) -> Any:
        """The compiled n-step chunk for populations like ``f`` (compiled once, timed)."""
        if n not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[n] = self._chunk_fn(n).lower(f, self.arrays).compile()
            self.compile_times[f"fused[{n}]"] = time.perf_counter() - t0
        return self._compiled[n]

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps in one dispatch."""
        return self.compiled(f, n)(f, self.arrays)


def _rest(lattice: Any, dtype: Any, ndim: int) -> jnp.ndarray:
    """Rest-state populations w_i, shaped to broadcast against ``(Q, *grid)`` arrays of ``ndim`` dimensions."""
    return jnp.asarray(lattice.w, dtype).reshape((-1,) + (1,) * (ndim - 1))


class NativeUnavailable(RuntimeError):
    """The native engine cannot run this setup here (reason in the message)."""


class NativePlan:
    """The native engine for one setup: the kernel library and the boundary block with its stage pipeline.

    Bulk cells are updated by the generated kernel (lbm.kernels.native); the cells where a
    boundary stage acts (inlet and outflow faces, solid cells, the fluid cells a half-way
    wall or the force sum reads) form a block (lbm.kernels.sparse) processed by the case's
    own stage functions, exactly as :func:`timestep` does on the whole lattice.
    """

    def __init__(self, setup: Setup, storage: str = "compute") -> None:
        from lbm.kernels import native

        dtype = jnp.dtype(setup.dtype)
        if dtype not in (jnp.float32, jnp.float64):
            raise NativeUnavailable(f"no native kernel for dtype {dtype}")
        if storage != "compute":
            store = {"bfloat16": "bf16", "float16": "f16"}[storage]
        else:
            store = "float32" if dtype == jnp.float32 else "float64"
        self.setup = setup
        self.spec = native.KernelSpec(setup.lattice, store, setup.omega_plus != setup.omega_minus, setup.force is not None)
        if not native.available():
            raise NativeUnavailable("native kernels need the CPU backend and a C++ compiler")
        if setup.lattice.q * int(np.prod(setup.shape)) >= 2**31:
            raise NativeUnavailable("more than 2**31 populations: the native engine indexes slots with int32")
        t0 = time.perf_counter()
        try:
            native.register(self.spec)
        except Exception as exc:
            raise NativeUnavailable(f"native kernel build failed: {str(exc).splitlines()[0]}") from None
        self.build_time_s = time.perf_counter() - t0
        self.block = build_block(setup)
        self.arrays = self._block_arrays()

    # --- plan arrays -----------------------------------------------------------------------
    def _block_arrays(self) -> dict[str, Any]:
        from lbm.kernels.sparse import neighbour

        setup, block = self.setup, self.block
        if block is None:
            return {}
        maps = {s: block.maps(s) for s in ("push", "aa_even", "aa_odd")}
        # slots the kernel reads out before it steps (written cells, then ghosts), and where results go
        out: dict[str, Any] = {
            "gather": {s: np.concatenate([m["read"], m.get("ghost_read", m["read"][:, :0])], axis=1).astype(np.int32)
                       for s, m in maps.items()},
            "maps": {s: {"write": m["write"].astype(np.int32)} for s, m in maps.items()},
        }
        lat = setup.lattice
        tail = (1,) * (lat.d - 1)
        cells = block.cells
        if "bounce_back" in setup.stages:
            a = setup.arrays["bounce_back"]
            solid = np.asarray(a["solid"]).reshape(-1)[cells]
            bb: dict[str, Any] = {"solid": solid.reshape((-1,) + tail)}
            if setup.bounce_back_kind != "fullway":
                links = np.asarray(a["links"]).reshape(lat.q, -1)[:, cells]
                nbr = np.tile(np.arange(block.size, dtype=np.int32), (lat.q, 1))
                for j in range(lat.q):
                    flagged = np.flatnonzero(links[j])
                    if flagged.size:
                        nbr[j, flagged] = block.index_of(neighbour(cells[flagged], setup.shape, lat.c[j]))
                bb["links"] = links
                bb["neighbours"] = nbr
                if a.get("wall_term") is not None:
                    bb["wall_term"] = np.asarray(a["wall_term"]).reshape(lat.q, -1)[:, cells]
            out["bounce_back"] = bb
        if "forces" in setup.stages:
            fa = setup.arrays["forces"]
            out["forces"] = {"link_dir": np.asarray(fa["link_dir"]),
                             "link_src": block.index_of(np.asarray(fa["link_src"], np.int64)),
                             "link_dst": block.index_of(np.asarray(fa["link_dst"], np.int64))}
        return jax.tree_util.tree_map(jnp.asarray, out)

    # --- one step ----------------------------------------------------------------------------
    def step(self, stepper: FusedStepper, a: jnp.ndarray, arrays: dict[str, Any], scheme: str
             ) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """One timestep of ``scheme`` (push | aa_even | aa_odd) on stored populations ``a``."""
        from lbm.kernels import native

        setup = self.setup
        plan = arrays["_native"]
        slots = plan["gather"][scheme] if self.block is not None else None
        force = None if setup.force is None else np.asarray(setup.force, np.float64)
        # the scope names the stages the bulk kernel computes, so traces and the profiler attribute it
        with jax.named_scope(BULK_SCOPE):
            if scheme == "push":
                out, old = native.push(self.spec, a, jnp.zeros_like(a), setup.omega_plus, setup.omega_minus, force,
                                       slots)
            else:
                out, old = native.aa_step(self.spec, a, 0 if scheme == "aa_even" else 1, setup.omega_plus,
                                          setup.omega_minus, force, slots)
        pre = ghost = None
        if self.block is not None:
            old = self._decode_block(stepper, old)
            pre, ghost = old[:, : self.block.size], old[:, self.block.size:]
        aux: dict[str, jnp.ndarray] = {}
        if self.block is not None:
            post, aux = self.block_timestep(stepper.stages, pre, ghost, arrays)
            with jax.named_scope("stream"):
                out = native.scatter(self.spec, out, plan["maps"][scheme]["write"], self._encode_block(stepper, post))
        return out, aux

    def _decode_block(self, stepper: FusedStepper, v: jnp.ndarray) -> jnp.ndarray:
        if stepper.storage != "compute":
            dtype = jnp.dtype(self.setup.dtype)
            return v.astype(dtype) + _rest(self.setup.lattice, dtype, 2)
        return v

    def _encode_block(self, stepper: FusedStepper, v: jnp.ndarray) -> jnp.ndarray:
        if stepper.storage != "compute":
            return (v - _rest(self.setup.lattice, v.dtype, 2)).astype(_STORAGE_DTYPES[stepper.storage])
        return v

    def block_timestep(self, stages: Stages, pre: jnp.ndarray, ghost: jnp.ndarray | None, arrays: dict[str, Any]
                       ) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """:func:`timestep` (without streaming) on the block: post-collision, post-bounce-back ``(Q, n)`` and outputs."""
        from lbm.kernels.sparse import bounce_back_halfway_sparse

        setup, block = self.setup, self.block
        assert block is not None
        lat = setup.lattice
        q, n = pre.shape
        face = tuple(setup.shape[1:])
        tail = (1,) * (lat.d - 1)
        plan = arrays["_native"]
        f = pre
        if "outflow" in stages:
            lo, hi = block.segments["outflow"]
            sub = jnp.stack([ghost.reshape((q,) + face), f[:, lo:hi].reshape((q,) + face)], axis=1)
            f = f.at[:, lo:hi].set(stages["outflow"](sub)[:, 1].reshape(q, -1))
        f = f.reshape((q, n) + tail)
        rho, u = stages["macroscopic"](f)
        feq = stages["equilibrium"](rho, u)
        if "inlet" in stages:
            lo, hi = block.segments["inlet"]
            seg = (slice(lo, hi),) + (0,) * len(tail)
            f_in = f[(slice(None),) + seg].reshape((q, 1) + face)
            rho_in = rho[seg].reshape((1,) + face)
            u_in = u[(slice(None),) + seg].reshape((lat.d, 1) + face)
            feq_in = feq[(slice(None),) + seg].reshape((q, 1) + face)
            f_in, rho_in, u_in, feq_in = stages["inlet"](f_in, rho_in, u_in, feq_in, arrays["u_in"])
            f = f.at[(slice(None),) + seg].set(f_in.reshape(q, -1))
            rho = rho.at[seg].set(rho_in.reshape(-1))
            u = u.at[(slice(None),) + seg].set(u_in.reshape(lat.d, -1))
            feq = feq.at[(slice(None),) + seg].set(feq_in.reshape(q, -1))
        f_post = stages["collide"](f, feq, u)
        aux: dict[str, jnp.ndarray] = {}
        f_bb = f_post
        if "bounce_back" in stages:
            bb = plan["bounce_back"]
            if setup.bounce_back_kind == "fullway":
                f_bb = stages["bounce_back"](f_post, f, bb)
            else:
                with jax.named_scope("bounce_back"):
                    flat = bounce_back_halfway_sparse(
                        f_post.reshape(q, n), bb["solid"].reshape(n), bb["links"], bb["neighbours"], lat,
                        bb.get("wall_term"))
                f_bb = flat.reshape(f_post.shape)
        if "forces" in stages:
            aux["force"] = stages["forces"](f_post, f_bb, plan["forces"])
        return f_bb.reshape(q, n), aux


def build_block(setup: Setup) -> Any:
    """The boundary block of a setup (None for a bare periodic lattice); raises NativeUnavailable if unsupported."""
    from lbm.kernels.sparse import Block, neighbour

    lat = setup.lattice
    shape = tuple(setup.shape)
    n_cells = int(np.prod(shape))
    flat = np.arange(n_cells).reshape(shape)
    segments: dict[str, tuple[int, int]] = {}
    ordered: list[np.ndarray] = []
    ghosts = np.zeros(0, np.int64)
    pos = 0
    if "inlet" in setup.stages:
        face = flat[0].reshape(-1)
        segments["inlet"] = (pos, pos + face.size)
        ordered.append(face)
        pos += face.size
    if "outflow" in setup.stages:
        face = flat[-1].reshape(-1)
        segments["outflow"] = (pos, pos + face.size)
        ordered.append(face)
        pos += face.size
        ghosts = flat[-2].reshape(-1).astype(np.int64)
    others: set[int] = set()
    if "bounce_back" in setup.stages:
        a = setup.arrays["bounce_back"]
        solid = np.asarray(a["solid"], bool).reshape(-1)
        others.update(np.flatnonzero(solid).tolist())
        if setup.bounce_back_kind != "fullway":
            links = np.asarray(a["links"], bool).reshape(lat.q, -1)
            for j in range(lat.q):
                src = np.flatnonzero(links[j])
                if src.size:
                    others.update(neighbour(src, shape, lat.c[j]).tolist())
    if "forces" in setup.stages:
        fa = setup.arrays["forces"]
        others.update(np.asarray(fa["link_src"]).tolist())
        others.update(np.asarray(fa["link_dst"]).tolist())
    faces = np.concatenate(ordered) if ordered else np.zeros(0, np.int64)
    if others & set(faces.tolist()):
        raise NativeUnavailable("boundary cells on the inlet/outflow faces are not supported by the native engine")
    if faces.size != np.unique(faces).size:
        raise NativeUnavailable("inlet and outflow faces overlap (grid too small along x)")
    cells = np.concatenate([faces, np.array(sorted(others), np.int64)]).astype(np.int64)
    if cells.size == 0:
        return None
    return Block(lattice=lat, shape=shape, cells=cells, ghosts=ghosts, segments=segments)


class InstrumentedStepper(Stepper):
    """Each stage its own compiled jit, annotated with its stage name; a Python loop over steps."""

    mode = "instrumented"

    def __init__(self, setup: Setup, sync: bool = False) -> None:
        super().__init__(setup)
        self.sync = sync
        self.stages = {name: self._instrument(name, fn) for name, fn in stage_functions(setup).items()}

    def _instrument(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        jitted = jax.jit(fn)
        cache: dict[Any, Any] = {}

        def run_stage(*args: Any) -> Any:
            key = jax.tree_util.tree_structure(args), tuple(
                (a.shape, a.dtype) for a in jax.tree_util.tree_leaves(args))
            if key not in cache:
                t0 = time.perf_counter()
                cache[key] = jitted.lower(*args).compile()
                self.compile_times[name] = self.compile_times.get(name, 0.0) + time.perf_counter() - t0
            out = cache[key](*args)
            if self.sync:  # host-side stage spans then measure execution, not just dispatch
                jax.block_until_ready(out)
            return out

        run_stage.__name__ = name
        return jax.profiler.annotate_function(run_stage, name=name)

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps, one Python iteration (and one trace annotation) per step."""
        outs: list[dict[str, jnp.ndarray]] = []
        for k in range(n):
            with jax.profiler.StepTraceAnnotation("timestep", step_num=first_step + k):
                f, aux = timestep(self.stages, f, self.arrays)
            outs.append(aux)
        stacked = {key: jnp.stack([o[key] for o in outs]) for key in (outs[0] if outs else {})}
        return f, stacked


def make_stepper(setup: Setup, mode: str, sync: bool = False, engine: str = "auto", storage: str = "compute"
                 ) -> Stepper:
    """The stepper for ``mode`` (fused | instrumented); ``sync`` blocks after each instrumented stage;
    ``engine`` and ``storage`` choose how fused mode computes and stores (see ENGINES, STORAGES)."""
    if mode == "instrumented":
        return InstrumentedStepper(setup, sync=sync)
    return FusedStepper(setup, engine=engine, storage=storage)


def fields_of(f: jnp.ndarray, setup: Setup) -> dict[str, np.ndarray]:
    """Host copies of rho, u and solid as the next step sees them (outflow and inlet applied, force-shifted u)."""
    if "moments" not in setup.compiled:  # one jitted function per setup: called at every output interval
        stages = stage_functions(setup)

        @jax.jit
        def moments(f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, jnp.ndarray]:
            if "outflow" in stages:
                f = stages["outflow"](f)
            rho, u = stages["macroscopic"](f)
            if "inlet" in stages:
                _, rho, u, _ = stages["inlet"](f, rho, u, stages["equilibrium"](rho, u), arrays["u_in"])
            return rho, u

        setup.compiled["moments"] = moments
    rho, u = setup.compiled["moments"](f, {k: v for k, v in setup.arrays.items() if k == "u_in"})
    return {"rho": np.asarray(rho), "u": np.asarray(u), "solid": np.asarray(setup.solid, dtype=bool)}


__all__ = ["STAGES", "ENGINES", "STORAGES", "Stepper", "FusedStepper", "InstrumentedStepper", "NativePlan",
           "NativeUnavailable", "make_stepper", "timestep", "fields_of", "stage_functions"]
