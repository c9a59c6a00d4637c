"""The differentiable run on the instrumented engine: every stage's forward and backward pass its own executable.

As lbm.engines.instrumented runs a timestep, one ``jax.jit`` per stage in a Python loop, each call
annotated with its stage name, this runs reverse mode stage by stage: the forward pass calls each
stage's ``jax.vjp`` (compiled once per stage, annotated ``collide``), keeping its residuals; the
backward pass calls each stage's pullback in reverse order (compiled once, annotated ``collide
(backward)``), every step under a ``timestep`` / ``timestep (backward)`` trace annotation. A profile
of it (lbm.diff.profile) thus shows each stage's adjoint as its own executable. The checkpointing
policies are those of lbm.diff.checkpointing, run in Python: for ``every`` and ``sqrt`` the first pass
runs the plain stages and keeps each segment's starting populations, and the backward pass re-runs
each segment with residuals (annotated ``collide (recompute)``) and pulls back through it; ``binomial``
follows the same schedule of actions as the fused run (lbm.diff.checkpointing.binomial_schedule), every
step it re-runs annotated ``collide (recompute)``. It gives the fused run's derivative
(tests/diff/test_gradient_tools.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import StepState
from lbm.diff.checkpointing import SNAPSHOTS, binomial_schedule, segment_length
from lbm.diff.objectives import Objective, evaluate
from lbm.diff.parameters import Parameterisation
from lbm.diff.run import check_window
from lbm.engines.timestep import active_stages, as_arrays, moments, run_stage, step_index
from lbm.profiling.gradient import BACKWARD, RECOMPUTE, pass_name
from lbm.stages import TIMESTEP


def cotangent_zeros(x: Any) -> Any:
    """Zero cotangents for a pytree: float0 for integer and boolean leaves (what jax.vjp's pullbacks take there)."""
    def zero(a: Any) -> Any:
        a = jnp.asarray(a)
        if jnp.issubdtype(a.dtype, jnp.inexact):
            return jnp.zeros_like(a)
        return np.zeros(a.shape, jax.dtypes.float0)

    return jax.tree_util.tree_map(zero, x)


def add_cotangents(a: Any, b: Any) -> Any:
    """The sum of two cotangent pytrees (float0 leaves stay float0)."""
    return jax.tree_util.tree_map(lambda x, y: x if getattr(x, "dtype", None) == jax.dtypes.float0 else x + y, a, b)


@dataclasses.dataclass
class StagePrograms:
    """Per stage: the plain forward, the forward with its pullback, and the pullback; each jitted and annotated."""

    plain: dict[str, Callable[..., Any]]
    forward: dict[str, Callable[..., Any]]
    recompute: dict[str, Callable[..., Any]]
    backward: dict[str, Callable[..., Any]]


def stage_programs(param: Parameterisation, stages: tuple[str, ...]) -> StagePrograms:
    """The executables of each stage, taking the step state and the traced parameters (boundaries, collision)."""
    setup = param.setup

    def make(name: str) -> Callable[[StepState, Any], StepState]:
        def stage(s: StepState, params: Any) -> StepState:
            bcs, collision = params
            return run_stage(name, s, bcs, dataclasses.replace(setup, collision=collision, force=None))

        stage.__name__ = f"stage_{name}"
        return stage

    fns = {name: make(name) for name in stages}

    def vjp_of(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        return jax.jit(named(lambda s, p: jax.vjp(fn, s, p), name))

    annotate = jax.profiler.annotate_function
    return StagePrograms(
        plain={n: annotate(jax.jit(fn), name=n) for n, fn in fns.items()},
        forward={n: annotate(vjp_of(fn, f"forward_{n}"), name=n) for n, fn in fns.items()},
        recompute={n: annotate(vjp_of(fn, f"recompute_{n}"), name=pass_name(n, RECOMPUTE)) for n, fn in fns.items()},
        backward={n: annotate(jax.jit(named(lambda pullback, ct: pullback(ct), f"backward_{n}")),
                              name=pass_name(n, BACKWARD)) for n in stages})


def named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` named ``name`` (its executable's module is then ``jit_<name>``: lbm.profiling.gradient.module_row)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


class InstrumentedGradient:
    """``values -> (objective, {key: derivative})`` of a prepared run, stage by stage (see the module doc)."""

    def __init__(self, param: Parameterisation, objective: Objective, checkpoint: str = "sqrt",
                 every: int | None = None, window: int | None = None, snapshots: int = SNAPSHOTS) -> None:
        self.param, self.objective = param, objective
        self.steps = param.case.run.steps
        self.window = check_window(window, self.steps)
        length = segment_length(checkpoint, self.steps, every, snapshots)
        self.length = None if checkpoint in ("none", "binomial") or length >= self.steps else length
        self.schedule = binomial_schedule(self.steps, min(snapshots, self.steps)) if checkpoint == "binomial" else None
        self.stages = active_stages(param.setup)
        self.programs = stage_programs(param, self.stages)
        self.solid = np.asarray(param.setup.solid, bool)
        self.tail = jax.jit(named(lambda f, t, acc, params, scales: jax.vjp(
            lambda f_, acc_, p_, sc_: self.observe(f_, t, acc_, p_, sc_), f, acc, params, scales), "objective"))
        self.pull = jax.jit(named(lambda pullback, ct: pullback(ct), "objective_backward"))

    def observe(self, f: Any, t: Any, acc: Any, params: Any, scales: dict[str, Any]) -> Any:
        """The objective from the final populations and the force summed over the window (as differentiable_run)."""
        bcs, collision = params
        setup = dataclasses.replace(self.param.setup, collision=collision, force=None)
        rho, u = moments(f, t, bcs, setup)
        out = {"rho": rho, "u": u, **({"wall_velocity": scales["wall_velocity"]} if "wall_velocity" in scales else {})}
        if "force_norm" in scales:
            mean = acc / self.window
            out.update(force_mean=mean, drag=mean[0] / scales["force_norm"], lift=mean[1] / scales["force_norm"])
        return evaluate(self.objective, out, self.solid)

    def step(self, f: Any, t: int, params: Any, kind: str) -> tuple[Any, Any, list[Any]]:
        """One step: ``plain`` (no residuals), ``forward`` or ``recompute`` (keeping each stage's pullback)."""
        s = StepState(f=f, t=step_index(t))
        pullbacks = []
        with jax.profiler.StepTraceAnnotation(TIMESTEP, step_num=t):
            for name in self.stages:
                if kind == "plain":
                    s = self.programs.plain[name](s, params)
                else:
                    s, pullback = getattr(self.programs, kind)[name](s, params)
                    pullbacks.append(pullback)
        return s, s.force, pullbacks

    def backward_step(self, t: int, pullbacks: list[Any], last: StepState, ct_f: Any, ct_force: Any,
                      ct_params: Any) -> tuple[Any, Any]:
        """Pull the cotangent of step ``t``'s output (populations, force) back to its input; ``ct_params`` summed."""
        ct = dataclasses.replace(cotangent_zeros(last), f=ct_f)
        if last.force is not None and t >= self.steps - self.window:
            ct = dataclasses.replace(ct, force=ct_force)
        with jax.profiler.StepTraceAnnotation(pass_name(TIMESTEP, BACKWARD), step_num=t):
            for name, pullback in zip(reversed(self.stages), reversed(pullbacks), strict=True):
                ct, ct_p = self.programs.backward[name](pullback, ct)
                ct_params = add_cotangents(ct_params, ct_p)
        return ct.f, ct_params

    def pull_back(self, kept: list[tuple[list[Any], StepState]], t0: int, ct_f: Any, ct_force: Any,
                  ct_params: Any) -> tuple[Any, Any]:
        """Pull ``ct_f`` back through the steps of ``kept`` (each step's pullbacks and output, from step ``t0``)."""
        for k in reversed(range(len(kept))):
            pullbacks, last = kept[k]
            ct_f, ct_params = self.backward_step(t0 + k, pullbacks, last, ct_f, ct_force, ct_params)
        return ct_f, ct_params

    def segment(self, f: Any, t0: int, n: int, params: Any, ct_f: Any, ct_force: Any, ct_params: Any
                ) -> tuple[Any, Any]:
        """Pull ``ct_f`` back through ``n`` steps from populations ``f`` at step ``t0``, re-run with residuals."""
        kept = []
        for k in range(n):
            s, _, pullbacks = self.step(f, t0 + k, params, "recompute")
            kept.append((pullbacks, s))
            f = s.f
        return self.pull_back(kept, t0, ct_f, ct_force, ct_params)

    def binomial_back(self, f0: Any, params: Any, ct_f: Any, ct_force: Any, ct_params: Any) -> tuple[Any, Any]:
        """Pull back through every step from ``f0`` by the binomial schedule's actions (slots: step, populations)."""
        slots = {0: (0, f0)}
        for source, count, target, adjoint in self.schedule.tolist():
            t, f = slots[source]
            for k in range(count):  # recomputed (its residuals unused): the profile counts it as the recomputation
                f = self.step(f, t + k, params, "recompute")[0].f
            if adjoint:
                ct_f, ct_params = self.segment(f, t + count, 1, params, ct_f, ct_force, ct_params)
            else:
                slots[target] = (t + count, f)
        return ct_f, ct_params

    def __call__(self, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The objective and its derivative by each key of ``values``."""
        def pieces(v: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
            traced = self.param.build(v)
            return (as_arrays(traced.boundaries), traced.setup.collision), traced.f0, traced.scales

        (params, f0, scales), build_pullback = jax.vjp(pieces, values)
        length = self.length
        keep = length is None and self.schedule is None  # no checkpoints: the first pass keeps every step's residuals
        f, acc, kept, starts = f0, jnp.zeros(self.param.setup.lattice.d, f0.dtype), [], [(0, f0)]
        for t in range(self.steps):
            s, force, pullbacks = self.step(f, t, params, "forward" if keep else "plain")
            f = s.f
            if force is not None and t >= self.steps - self.window:
                acc = acc + force
            if length and (t + 1) % length == 0 and t + 1 < self.steps:
                starts.append((t + 1, f))
            if keep:
                kept.append((pullbacks, s))
        value, tail_pullback = self.tail(f, step_index(self.steps), acc, params, scales)
        ct_f, ct_acc, ct_params, ct_scales = self.pull(tail_pullback, jnp.ones_like(value))
        if keep:
            ct_f, ct_params = self.pull_back(kept, 0, ct_f, ct_acc, ct_params)
        elif self.schedule is not None:
            ct_f, ct_params = self.binomial_back(f0, params, ct_f, ct_acc, ct_params)
        else:
            for (start, f_start), end in zip(reversed(starts), [self.steps, *reversed([t for t, _ in starts[1:]])],
                                             strict=True):
                ct_f, ct_params = self.segment(f_start, start, end - start, params, ct_f, ct_acc, ct_params)
        (grads,) = build_pullback((ct_params, ct_f, ct_scales))
        return value, grads
