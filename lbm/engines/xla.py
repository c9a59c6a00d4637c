"""The ``xla`` engine: the whole timestep in one jit, n steps per dispatch with ``lax.scan``, buffers donated.

The reference engine, on any device: it composes the stage functions of lbm.engines.timestep,
each under ``jax.named_scope(stage)`` inside ``jax.named_scope("timestep")``, and leaves the
fusion to XLA. Two steps per loop iteration: the loop then hands its state buffer from step to
step without a copy (a stream reads shifted neighbours, so its result cannot overwrite its
input; with one step per iteration XLA copied the whole population array back every step), and
an optimisation barrier after each step (docs/performance.md, "Accelerator compiles"). Half-way
walls are applied while streaming where nothing reads them before (lbm.engines.timestep.fold_walls:
the same step bitwise, without a second shift of the reflected populations; "Wall-bounded cases").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from lbm.boundaries.box import in_boxes
from lbm.cases.base import Setup
from lbm.engines.base import Engine, check_storage, decode, encode, program, spec_of
from lbm.engines.timestep import fold_walls, step_index, timestep
from lbm.stages import FUSED_STEP, TIMESTEP

Step = Callable[[jnp.ndarray, jnp.ndarray, Any], tuple[jnp.ndarray, dict[str, jnp.ndarray]]]
"""A step function of the fused engines: (stored populations, step index, params) -> (stored, per-step outputs)."""


class FusedEngine(Engine):
    """Base of the fused engines: one compiled chunk per length, populations kept in ``storage`` between steps."""

    mode = "fused"
    compiler_options: dict[str, str] | None = None
    """XLA's options for the engine's compiles of its chunks (:meth:`compile`; None: the defaults). Given to the
    compile, not to ``jax.jit``: a jit with options cannot be traced inside another (``jax.make_jaxpr``, inspect)."""

    def __init__(self, setup: Setup, storage: str = "compute") -> None:
        super().__init__(setup)
        check_storage(storage)
        if storage != "compute" and jnp.dtype(setup.dtype) != jnp.float32:
            raise ValueError(f"{storage} storage computes in float32: build the setup with precision=float32")
        self.storage = storage
        self._compiled: dict[int, Any] = {}

    def encode(self, f: jnp.ndarray) -> jnp.ndarray:
        """Populations in the stored representation."""
        return encode(f, self.storage)

    def decode(self, s: jnp.ndarray) -> jnp.ndarray:
        """Populations in the compute dtype from the stored representation."""
        return decode(s, self.storage, self.setup.dtype)

    def chunk_function(self, n: int) -> Any:
        """The jitted n-step chunk ``(f, params, t0) -> (f, outputs)``: steps t0 .. t0 + n - 1 (f donated)."""
        raise NotImplementedError

    def paired_chunk(self, n: int, single: Step, even: Step | None = None, odd: Step | None = None
                     ) -> Callable[[jnp.ndarray, Any, jnp.ndarray], tuple[jnp.ndarray, dict[str, jnp.ndarray]]]:
        """The n-step chunk ``(f, params, t0) -> (f, outputs)`` from step functions ``(stored, t, params) -> (stored, aux)``.

        ``single`` once if n is odd, then ``even`` and ``odd`` (default: ``single``) in each iteration of
        a ``lax.scan``: two steps per iteration let a step that writes a new buffer hand the loop back
        the buffer it received (no copy of the loop state), and let in-place schemes pair up (AA).
        Per-step outputs are stacked in step order along a leading axis of length n.
        """
        even = even or single
        odd = odd or single

        def chunk(f: jnp.ndarray, params: Any, t0: jnp.ndarray) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            a = self.encode(f)
            auxes = []
            if n % 2:
                with jax.named_scope(TIMESTEP):
                    a, aux = single(a, t0, params)
                auxes.append(jax.tree_util.tree_map(lambda v: v[None], aux))
            if n >= 2:
                def pair(carry: tuple[jnp.ndarray, jnp.ndarray], _: None
                         ) -> tuple[tuple[jnp.ndarray, jnp.ndarray], dict[str, jnp.ndarray]]:
                    a, t = carry
                    with jax.named_scope(TIMESTEP):
                        a, aux0 = even(a, t, params)
                    with jax.named_scope(TIMESTEP):
                        a, aux1 = odd(a, t + 1, params)
                    return (a, t + 2), jax.tree_util.tree_map(lambda u, v: jnp.stack([u, v]), aux0, aux1)
                (a, _), aux = jax.lax.scan(pair, (a, t0 + n % 2), None, length=n // 2)
                auxes.append(jax.tree_util.tree_map(lambda v: v.reshape((-1,) + v.shape[2:]), aux))
            stacked = {k: jnp.concatenate([x[k] for x in auxes]) for k in (auxes[0] if auxes else {})}
            return self.decode(self.at_rest(a, params)), stacked

        return chunk

    def at_rest(self, a: jnp.ndarray, params: Any) -> jnp.ndarray:
        """The stored populations ``a`` at a chunk's end with the cells the engine left to its kernel but the
        conditions hold at rest set to rest (lbm.engines.plan.Block.rest); here none, ``a`` itself."""
        return a

    def lower(self, f: Any, n: int) -> Any:
        """The n-step chunk lowered for populations like ``f`` (an array or a ShapeDtypeStruct, possibly sharded)."""
        return self.chunk_function(n).lower(f, spec_of(self.params), spec_of(step_index(0)))

    def compile(self, f: jnp.ndarray, n: int) -> Any:
        """The compiled n-step chunk for populations like ``f`` (compiled once, timed)."""
        if n not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[n] = self.chunk_function(n).lower(f, self.params, step_index(0)).compile(self.compiler_options)
            self.compile_times[f"fused[{n}]"] = time.perf_counter() - t0
        return self._compiled[n]

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps in one dispatch."""
        return self.compile(f, n)(f, self.params, step_index(first_step))

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """The fused chunk of ``n`` steps, as data."""
        f = jax.ShapeDtypeStruct(self.state_shape, jnp.dtype(self.setup.dtype))  # as the run loop holds them
        return [program(FUSED_STEP, None, self.chunk_function(n), f, spec_of(self.params), spec_of(step_index(0)),
                        options=self.compiler_options)]


class XlaEngine(FusedEngine):
    """The stage functions composed in one jit; XLA fuses them (the reference, any device)."""

    name = "xla"

    def step_boundaries(self, setup: Setup) -> tuple[Any, ...]:
        """The setup's conditions with half-way walls applied while streaming (the same step, without a second
        shift of the reflected populations), and each obstacle's condition with a box form on the box of cells it
        touches, in programs lowered for a TPU (lbm.boundaries.box)."""
        return in_boxes(fold_walls(setup.boundaries, setup.lattice), setup.shape, setup.lattice)

    def step(self, s: jnp.ndarray, t: jnp.ndarray, params: Any) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t`` on stored populations: the whole timestep, every stage under its named_scope."""
        f_new, aux = timestep(self.decode(s), t, params, self.setup)
        # a barrier between steps: XLA otherwise fuses across the two steps of an iteration into many
        # kernels that re-read the populations, and keeps a copy of the loop state (inspect, h100)
        return jax.lax.optimization_barrier(self.encode(f_new)), aux

    def chunk_function(self, n: int) -> Any:
        """n timesteps, two per ``lax.scan`` iteration (see :meth:`FusedEngine.paired_chunk`)."""
        return jax.jit(self.paired_chunk(n, self.step), donate_argnums=0)
