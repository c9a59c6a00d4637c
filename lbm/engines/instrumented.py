"""The xla engine in ``mode=instrumented``: each stage its own compiled jit, annotated with its stage name; a Python
loop over steps.

Each stage of lbm.engines.timestep is compiled alone and wrapped in
``jax.profiler.annotate_function(name=stage)``; every step runs under
``jax.profiler.StepTraceAnnotation("timestep")``. It exists to be seen, not to be fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from lbm.boundaries.base import StepState
from lbm.cases.base import Setup
from lbm.engines.base import Engine, program, spec_of
from lbm.engines.timestep import outputs, run_stage, step_index
from lbm.stages import TIMESTEP


class InstrumentedEngine(Engine):
    """One compiled executable per stage, each annotated with its name; ``sync`` blocks after every stage."""

    name = "xla"  # the reference stages, each its own jit
    mode = "instrumented"

    def __init__(self, setup: Setup, sync: bool = False) -> None:
        super().__init__(setup)
        self.sync = sync
        self._jitted = {name: jax.jit(self.stage_function(name)) for name in setup.stages}
        self.stages = {name: self._instrument(name, fn) for name, fn in self._jitted.items()}

    def stage_function(self, name: str) -> Callable[[StepState, Any], StepState]:
        """Stage ``name`` as a function of the step state and the boundary conditions (not jitted)."""
        setup = self.setup

        def stage(s: StepState, params: Any) -> StepState:
            return run_stage(name, s, params, setup)

        stage.__name__ = f"stage_{name}"
        return stage

    def _instrument(self, name: str, jitted: Any) -> Callable[..., Any]:
        cache: dict[Any, Any] = {}

        def run(s: StepState, params: Any) -> StepState:
            key = jax.tree_util.tree_structure(s), tuple((a.shape, a.dtype) for a in jax.tree_util.tree_leaves(s))
            if key not in cache:
                t0 = time.perf_counter()
                cache[key] = jitted.lower(s, params).compile()
                self.compile_times[name] = self.compile_times.get(name, 0.0) + time.perf_counter() - t0
            out = cache[key](s, params)
            if self.sync:  # host-side stage spans then measure execution, not just dispatch
                jax.block_until_ready(out)
            return out

        run.__name__ = name
        return jax.profiler.annotate_function(run, name=name)

    def step(self, f: jnp.ndarray, t: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Step ``t``, stage by stage."""
        s = StepState(f=f, t=step_index(t))
        for name in self.setup.stages:
            s = self.stages[name](s, self.params)
        return s.f, outputs(s)

    def compile(self, f: jnp.ndarray, n: int) -> None:
        """Compile every stage on a throw-away step."""
        jax.block_until_ready(self.step(f + 0)[0])

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps, one Python iteration (and one trace annotation) per step."""
        outs: list[dict[str, jnp.ndarray]] = []
        for k in range(n):
            with jax.profiler.StepTraceAnnotation(TIMESTEP, step_num=first_step + k):
                f, aux = self.step(f, first_step + k)
            outs.append(aux)
        stacked = {key: jnp.stack([o[key] for o in outs]) for key in (outs[0] if outs else {})}
        return f, stacked

    def stage_inputs(self) -> dict[str, Any]:
        """The state each stage receives inside one timestep, as ShapeDtypeStructs."""
        seen: dict[str, Any] = {}
        setup = self.setup

        def trace(f: jnp.ndarray, params: Any) -> jnp.ndarray:
            s = StepState(f=f, t=step_index(0))
            for name in setup.stages:
                seen[name] = spec_of(s)
                s = run_stage(name, s, params, setup)
            return s.f

        jax.eval_shape(trace, jax.ShapeDtypeStruct((setup.lattice.q, *setup.shape), jnp.dtype(setup.dtype)),
                       spec_of(self.params))
        return seen

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """Every stage's executable, as data (the same jit the loop calls)."""
        inputs = self.stage_inputs()
        params = spec_of(self.params)
        return [program(name, name, self._jitted[name], inputs[name], params) for name in self.setup.stages]


__all__ = ["InstrumentedEngine"]
