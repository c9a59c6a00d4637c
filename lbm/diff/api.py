"""``lbm.value_and_grad``: an objective of a run and its derivatives by continuous config keys, and their check.

:func:`value_and_grad` takes the overrides of ``lbm.run``, validates them the same way, and
differentiates :func:`lbm.diff.run.differentiable_run` by reverse mode. :func:`finite_difference`
gives the central finite difference of the same objective from ``lbm.run`` itself (runs with
perturbed overrides), the reference the gradient is tested against.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lbm.diff.objectives import Objective, check, check_callable, evaluate, from_result
from lbm.diff.parameters import Parameterisation, parameterise
from lbm.diff.run import check_window, differentiable_run
from lbm.environment import float64_enabled, precision_scope
from lbm.errors import LbmError
from lbm.simulation.progress import shown_log

log = logging.getLogger("lbm")

DIFFERENTIABLE_ENGINES = ("auto", "xla")


def check_engine(run: Any) -> None:
    """LbmError (one line) for an engine or mode a differentiable run cannot use; logs the engine it uses."""
    if run.mode == "instrumented":
        if mesh_of(run):
            raise LbmError("mode=instrumented: differentiable runs on several devices use mode=fused (or "
                           "parallel.devices=1)")
        log.info("differentiable run: engine instrumented (one executable per stage and per stage's backward pass)")
        return
    if run.engine not in DIFFERENTIABLE_ENGINES:
        raise LbmError(f"engine={run.engine} has no adjoint: differentiable runs use engine=xla (or engine=auto)")
    note = " (engine=auto picks xla: native and pallas have no adjoint)" if run.engine == "auto" else ""
    if mesh_of(run):
        note += f", on a {'x'.join(map(str, run.mesh_shape))} mesh of devices (XLA's SPMD partitioner splits the step)"
    log.info("differentiable run: engine xla%s", note)


def mesh_of(run: Any) -> tuple[int, ...] | None:
    """The run's mesh of devices (blocks per grid axis), None on one device."""
    shape = run.mesh_shape
    return tuple(shape) if shape and int(np.prod(shape)) > 1 else None


def on_mesh(param: Parameterisation, shape: tuple[int, ...]) -> Parameterisation:
    """``param`` whose initial populations are sharded over a mesh of ``shape`` (lbm.parallel's layout: one block per
    device); XLA's SPMD partitioner carries the sharding through the steps and their transpose."""
    import jax
    from jax.sharding import NamedSharding

    from lbm import parallel

    sharding = NamedSharding(parallel.make_mesh(shape), parallel.grid_spec(len(shape)))
    build = param.build

    def placed(values: dict[str, Any]) -> Any:
        traced = build(values)
        return dataclasses.replace(traced, f0=jax.lax.with_sharding_constraint(traced.f0, sharding))

    return dataclasses.replace(param, build=placed)


def prepare_gradient(overrides: Sequence[str], wrt: Sequence[str]) -> Parameterisation:
    """Validate the overrides (as ``lbm.run``) and the keys, and build the case's differentiable form."""
    from lbm.cases.base import Case
    from lbm.simulation import prepare

    if isinstance(overrides, str) or isinstance(wrt, str):
        raise LbmError("value_and_grad takes lists: overrides=[\"case=cavity\", ...], wrt=[\"flow.reynolds\", ...]")
    case, setup = prepare(list(overrides))
    check_engine(case.run)
    if case.run.steps_auto and type(case).converged is not Case.converged:
        raise LbmError(f"steps=auto: case={case.name} then stops once steady, at a step a differentiable run cannot "
                       f"follow (its steps are fixed when traced; here up to {case.run.steps}): give steps=N")
    if not wrt:
        raise LbmError("wrt: name at least one config key to differentiate by, e.g. wrt=[\"flow.reynolds\"]")
    param = parameterise(case, setup, tuple(wrt))
    mesh = mesh_of(case.run)
    return param if mesh is None else on_mesh(param, mesh)


def gradient_function(param: Parameterisation, wrt: Sequence[str], objective: Objective, checkpoint: str | None = None,
                      every: int | None = None, window: int | None = None, snapshots: int | None = None,
                      platform: str | None = None) -> Any:
    """The jitted ``values -> (objective, {key: derivative})`` of a prepared run (values: key -> scalar); in
    instrumented mode its stage-by-stage form (lbm.diff.instrumented). The checkpointing arguments left None take
    the run's config (``gradient.checkpoint``, ``.every``, ``.snapshots``); ``platform``: the one it is compiled for
    (default jax's backend)."""
    import jax

    steps = param.case.run.steps
    policy = param.case.run.gradient
    checkpoint = policy.checkpoint if checkpoint is None else checkpoint
    every = policy.every if every is None else every
    snapshots = policy.snapshots if snapshots is None else snapshots
    check(objective, param.case)
    check_callable(objective, tuple(param.setup.shape), param.setup.dtype)
    if param.case.run.mode == "instrumented":
        from lbm.diff.instrumented import InstrumentedGradient

        return InstrumentedGradient(param, objective, checkpoint, every, window, snapshots)
    solid = np.asarray(param.setup.solid, bool)

    def value(values: dict[str, Any]) -> Any:
        out = differentiable_run(param, values, steps, checkpoint, every, window, snapshots, platform=platform)
        return evaluate(objective, out, solid)

    return jax.jit(jax.value_and_grad(value))


def value_and_grad(overrides: Sequence[str], wrt: Sequence[str], objective: Objective, checkpoint: str | None = None,
                   every: int | None = None, window: int | None = None, snapshots: int | None = None,
                   profile_dir: str | Path | None = None) -> tuple[float, dict[str, float]]:
    """An objective of the run of ``overrides`` and its derivative by each key of ``wrt`` (in that key's units).

    ``objective``: a name the case defines (lbm.diff.objectives) or a callable on the final fields;
    ``checkpoint``: none | every (with ``every=k``) | sqrt | binomial (``snapshots`` states kept), by default
    the config's ``gradient.checkpoint`` (sqrt); ``window``: the last steps the drag and lift are averaged over
    (default: all). With ``profile.enabled=true`` among the overrides, a profile of the gradient by stage and
    pass is written to ``profile_dir`` (default: a fresh ``outputs/<date>/<time>/profile``; lbm.diff.profile).
    """
    import jax
    import jax.numpy as jnp

    with shown_log(), precision_scope():  # prepare switches float64 on for such a run; put back after
        param = prepare_gradient(overrides, wrt)
        check_window(window, param.case.run.steps)
        out_dir = profile_directory(param, profile_dir)
        values = {k: jnp.asarray(param.base[k], param.setup.dtype) for k in wrt}
        # only a named objective is kept: a callable may read values its caller changes between calls
        key = None if callable(objective) else (tuple(overrides), tuple(wrt), objective, checkpoint, every, window,
                                                snapshots, float64_enabled(), jax.default_backend())
        fn = compiled(key, lambda: gradient_function(param, wrt, objective, checkpoint, every, window, snapshots),
                      values)
        start = time.perf_counter()
        value, grads = jax.block_until_ready(fn(values))
        log.info("value and gradient: %d steps in %.3f s", param.case.run.steps, time.perf_counter() - start)
        if out_dir is not None:
            from lbm.diff.profile import profile_gradient

            profile_gradient(param, fn, values, out_dir)
    return float(value), {k: float(grads[k]) for k in wrt}


COMPILED: dict[Any, Any] = {}
"""The gradient programs of the last calls (:data:`KEPT`), by their arguments: a repeated call runs without compiling."""
KEPT = 4


def compiled(key: Any, make: Callable[[], Any], values: dict[str, Any]) -> Any:
    """The compiled gradient function of ``key`` (None: not kept), ``make()`` compiled for ``values`` if not kept."""
    # logs the compile time; instrumented runs (no single program) are kept as they are
    fn = None if key is None else COMPILED.pop(key, None)
    if fn is None:
        fn = make()
        if hasattr(fn, "lower"):
            start = time.perf_counter()
            fn = fn.lower(values).compile()
            log.info("value and gradient: compiled in %.2f s", time.perf_counter() - start)
    if key is not None:
        COMPILED[key] = fn
        while len(COMPILED) > KEPT:
            COMPILED.pop(next(iter(COMPILED)))
    return fn


def profile_directory(param: Parameterisation, profile_dir: str | Path | None) -> Path | None:
    """Where the gradient's profile goes (None: not profiled); LbmError for a directory that holds a profile."""
    if not param.case.run.profile.enabled:
        if profile_dir is not None:
            raise LbmError("profile_dir is given but profile.enabled is false: add \"profile.enabled=true\" to the "
                           "overrides")
        return None
    if profile_dir is None:
        from lbm.config.command_line import fresh_run_dir

        return fresh_run_dir(Path("outputs")).absolute() / "profile"
    path = Path(profile_dir).expanduser().absolute()
    if (path / "gradient_breakdown.json").exists():
        raise LbmError(f"profile_dir={path} already holds a gradient profile: choose a new directory")
    return path


def perturbed_value(overrides: Sequence[str], param: Parameterisation, key: str, value: float, objective: Objective,
                    window: int) -> tuple[float, np.ndarray]:
    """The objective from a run (as ``lbm.run``) with ``key`` set to ``value`` (plots off, a temporary run directory),
    and its solid mask."""
    from lbm.config import load
    from lbm.simulation import simulate

    with tempfile.TemporaryDirectory(prefix="lbm-fd-") as tmp:
        run_dir = Path(tmp) / "run"
        simulate(load([*overrides, *param.overrides({key: value}), "output.plots=false"]), run_dir)
        with np.load(run_dir / "fields.npz") as fields:
            return from_result(objective, fields, run_dir, window), np.asarray(fields["solid"], bool)


def finite_difference(overrides: Sequence[str], key: str, objective: Objective, step: float | None = None,
                      window: int | None = None, points: int = 2) -> float:
    """The central finite difference of the objective of ``lbm.run`` by ``key`` (2 or 4 points, step ``step``).

    Default step: 1e-4 of the key's value (2 points) or 1e-3 (4 points, for forces.csv's 10 digits).
    LbmError where a perturbed run's solid mask differs (the step moved a node across the wall).
    """
    param = prepare_gradient(overrides, [key])
    steps = param.case.run.steps
    window = check_window(window, steps)
    check(objective, param.case)
    if points not in (2, 4):
        raise LbmError(f"points={points!r}: a central difference of 2 or 4 points")
    x = param.base[key]
    h = step if step is not None else (1e-4 if points == 2 else 1e-3) * max(abs(x), 1e-3)
    stencil = {2: ((1, 0.5), (-1, -0.5)), 4: ((2, -1 / 12), (1, 2 / 3), (-1, -2 / 3), (-2, 1 / 12))}[points]
    total, base_solid = 0.0, np.asarray(param.setup.solid, bool)
    for k, weight in stencil:
        value, solid = perturbed_value(overrides, param, key, x + k * h, objective, window)
        if not np.array_equal(solid, base_solid):
            raise LbmError(f"{key}: the step {k * h:+g} changes the solid mask; choose a smaller step or another value")
        total += weight * value
    return total / h
