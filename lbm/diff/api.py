"""``lbm.value_and_grad``: an objective of a run and its derivatives by continuous config keys, and their check.

:func:`value_and_grad` takes the overrides of ``lbm.run``, validates them the same way, and
differentiates :func:`lbm.diff.run.differentiable_run` by reverse mode. :func:`finite_difference`
gives the central finite difference of the same objective from ``lbm.run`` itself (runs with
perturbed overrides), the reference the gradient is tested against.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lbm.diff.objectives import Objective, check, evaluate, from_result
from lbm.diff.parameters import Parameterisation, parameterise
from lbm.diff.run import check_window, differentiable_run
from lbm.errors import LbmError

log = logging.getLogger("lbm")

DIFFERENTIABLE_ENGINES = ("auto", "xla")


def check_engine(run: Any) -> None:
    """LbmError (one line) for an engine, mode or mesh a differentiable run cannot use; logs the engine it uses."""
    if run.mode != "fused":
        raise LbmError(f"mode={run.mode}: differentiable runs use the fused xla composition; set mode=fused")
    if run.engine not in DIFFERENTIABLE_ENGINES:
        raise LbmError(f"engine={run.engine} has no adjoint: differentiable runs use engine=xla (or engine=auto)")
    if run.mesh_shape and int(np.prod(run.mesh_shape)) > 1:
        raise LbmError("parallel.devices: differentiable runs use one device; set parallel.devices=1")
    note = " (engine=auto picks xla: native and pallas have no adjoint)" if run.engine == "auto" else ""
    log.info("differentiable run: engine xla%s", note)


def prepare_gradient(overrides: Sequence[str], wrt: Sequence[str]) -> Parameterisation:
    """Validate the overrides (as ``lbm.run``) and the keys, and build the case's differentiable form."""
    from lbm.simulation import prepare

    if isinstance(overrides, str) or isinstance(wrt, str):
        raise LbmError("value_and_grad takes lists: overrides=[\"case=cavity\", ...], wrt=[\"flow.reynolds\", ...]")
    case, setup = prepare(list(overrides))
    check_engine(case.run)
    if not wrt:
        raise LbmError("wrt: name at least one config key to differentiate by, e.g. wrt=[\"flow.reynolds\"]")
    return parameterise(case, setup, tuple(wrt))


def gradient_function(param: Parameterisation, wrt: Sequence[str], objective: Objective, checkpoint: str | None = None,
                      every: int | None = None, window: int | None = None, snapshots: int | None = None) -> Any:
    """The jitted ``values -> (objective, {key: derivative})`` of a prepared run (values: key -> scalar); the
    checkpointing arguments left None take the run's config (``gradient.checkpoint``, ``.every``, ``.snapshots``)."""
    import jax

    steps = param.case.run.steps
    policy = param.case.run.gradient
    checkpoint = policy.checkpoint if checkpoint is None else checkpoint
    every = policy.every if every is None else every
    snapshots = policy.snapshots if snapshots is None else snapshots
    check(objective, param.case.name)
    solid = np.asarray(param.setup.solid, bool)

    def value(values: dict[str, Any]) -> Any:
        out = differentiable_run(param, values, steps, checkpoint, every, window, snapshots)
        return evaluate(objective, out, solid)

    return jax.jit(jax.value_and_grad(value))


def value_and_grad(overrides: Sequence[str], wrt: Sequence[str], objective: Objective, checkpoint: str | None = None,
                   every: int | None = None, window: int | None = None, snapshots: int | None = None
                   ) -> tuple[float, dict[str, float]]:
    """An objective of the run of ``overrides`` and its derivative by each key of ``wrt`` (in that key's units).

    ``objective``: a name the case defines (lbm.diff.objectives) or a callable on the final fields;
    ``checkpoint``: none | every (with ``every=k``) | sqrt | binomial (``snapshots`` states kept), by default
    the config's ``gradient.checkpoint`` (sqrt); ``window``: the last steps the drag and lift are averaged over
    (default: all).
    """
    import jax.numpy as jnp

    param = prepare_gradient(overrides, wrt)
    check_window(window, param.case.run.steps)
    fn = gradient_function(param, wrt, objective, checkpoint, every, window, snapshots)
    values = {k: jnp.asarray(param.base[k], param.setup.dtype) for k in wrt}
    value, grads = fn(values)
    return float(value), {k: float(grads[k]) for k in wrt}


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
    check(objective, param.case.name)
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
