"""Composes the stages of one timestep, in one of two modes.

``fused``: the whole timestep is one jitted function, each stage under
``jax.named_scope(stage)``, K steps per dispatch with ``lax.scan``, the population
buffer donated. ``instrumented``: each stage is its own compiled ``jax.jit``
function wrapped in ``jax.profiler.annotate_function(name=stage)``, and every step
runs under ``jax.profiler.StepTraceAnnotation("timestep")``. Both call the same
stage functions through the same :func:`timestep`.
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

STAGES = ("outflow", "macroscopic", "equilibrium", "inlet", "collide", "bounce_back", "forces", "stream")
"""Canonical stage names in timestep order (DESIGN.md)."""

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


class FusedStepper(Stepper):
    """Whole timestep in one jit, n steps per dispatch via lax.scan, populations donated."""

    mode = "fused"

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.stages = {name: _scoped(name, fn) for name, fn in stage_functions(setup).items()}
        self._compiled: dict[int, Any] = {}

    def _chunk_fn(self, n: int) -> Callable[..., Any]:
        stages = self.stages

        def chunk(f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
            def body(f: jnp.ndarray, _: None) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
                with jax.named_scope("timestep"):
                    return timestep(stages, f, arrays)
            return jax.lax.scan(body, f, None, length=n)

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


def make_stepper(setup: Setup, mode: str, sync: bool = False) -> Stepper:
    """The stepper for ``mode`` (fused | instrumented); ``sync`` blocks after each instrumented stage."""
    if mode == "instrumented":
        return InstrumentedStepper(setup, sync=sync)
    return FusedStepper(setup)


def fields_of(f: jnp.ndarray, setup: Setup) -> dict[str, np.ndarray]:
    """Host copies of rho, u and solid as the next step sees them (outflow and inlet applied, force-shifted u)."""
    stages = stage_functions(setup)

    @jax.jit
    def moments(f: jnp.ndarray, arrays: dict[str, Any]) -> tuple[jnp.ndarray, jnp.ndarray]:
        if "outflow" in stages:
            f = stages["outflow"](f)
        rho, u = stages["macroscopic"](f)
        if "inlet" in stages:
            _, rho, u, _ = stages["inlet"](f, rho, u, stages["equilibrium"](rho, u), arrays["u_in"])
        return rho, u

    rho, u = moments(f, {k: v for k, v in setup.arrays.items() if k == "u_in"})
    return {"rho": np.asarray(rho), "u": np.asarray(u), "solid": np.asarray(setup.solid, dtype=bool)}


__all__ = ["STAGES", "Stepper", "FusedStepper", "InstrumentedStepper", "make_stepper", "timestep", "fields_of",
           "stage_functions"]
