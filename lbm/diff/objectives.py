"""The scalars a differentiable run can be differentiated for: named per case, or a callable on the final fields.

Named objectives (lattice units):
- ``kinetic_energy`` (every case): sum over fluid cells of rho |u|^2 / 2 in the final fields;
- ``drag``, ``lift`` (the cases whose differentiable form gives them, lbm.cases.base.Case.differentiable_objectives:
  the cylinder): the mean of cd (cl) over the last ``window`` steps (default: all),
  cd = 2 F_x / (u_lattice^2 D), D = 2 r, as ``forces.csv`` gives it per step.

A callable takes the final fields ``{"rho": (grid), "u": (D, *grid), "solid": (grid) bool}`` (jax
arrays, the moments ``fields.npz`` holds) and returns a scalar. :func:`from_result` evaluates the
same objective on a finished run (its fields.npz and forces.csv), for finite differences.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from lbm.errors import LbmError

if TYPE_CHECKING:
    from lbm.cases.base import Case

Objective = str | Callable[[Mapping[str, Any]], Any]

FIELD_OBJECTIVES = ("kinetic_energy",)
FORCE_OBJECTIVES = ("drag", "lift")


def kinetic_energy(fields: Mapping[str, Any]) -> Any:
    """Sum over fluid cells of rho |u|^2 / 2 (lattice units)."""
    rho, u = jnp.asarray(fields["rho"]), jnp.asarray(fields["u"])
    fluid = ~jnp.asarray(fields["solid"], bool)
    return jnp.sum(jnp.where(fluid, 0.5 * rho * jnp.sum(u * u, axis=0), 0.0))


def names(case: Case) -> tuple[str, ...]:
    """The named objectives of ``case``: the fields' and those its differentiable form gives."""
    return FIELD_OBJECTIVES + case.differentiable_objectives()


def check(objective: Objective, case: Case) -> None:
    """LbmError (one line) unless ``objective`` is a callable or one of the case's names."""
    if callable(objective):
        return
    if objective not in names(case):
        raise LbmError(f"objective={objective!r} is not defined for case={case.name}: use one of "
                       f"{', '.join(names(case))} or a callable on the final fields {{rho, u, solid}}")


def check_callable(objective: Objective, shape: tuple[int, ...], dtype: Any) -> None:
    """LbmError (one line) unless a callable objective maps the final fields of a ``shape`` grid to a real scalar."""
    import jax

    if not callable(objective):
        return
    fields = {"rho": jax.ShapeDtypeStruct(shape, dtype), "u": jax.ShapeDtypeStruct((len(shape), *shape), dtype),
              "solid": jax.ShapeDtypeStruct(shape, bool)}
    try:
        out = jax.eval_shape(objective, fields)
    except Exception as e:  # the user's function: any error it raises on the fields is reported in one line
        reason = (str(e).strip().splitlines() or [""])[0]
        raise LbmError(f"objective: the callable failed on the final fields {{rho, u, solid}} (jax arrays): "
                       f"{type(e).__name__}: {reason}") from None
    shape_of, dtype_of = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape_of != () or not np.issubdtype(dtype_of, np.floating):
        got = f"shape {shape_of} of {dtype_of}" if shape_of is not None else type(out).__name__
        fix = "reduce it to one number, e.g. fields[\"u\"][0].sum()" if shape_of != () else "return a float"
        raise LbmError(f"objective: the callable must return a real (floating-point) scalar, it returned {got}: {fix}")


def written_velocity(u: Any, solid: np.ndarray, wall_velocity: Any = None) -> Any:
    """``u`` as fields.npz holds it (lbm.io.fields.with_wall_velocity): the wall's velocity in solid cells, else 0."""
    wall = jnp.zeros_like(u) if wall_velocity is None else jnp.asarray(wall_velocity, u.dtype)
    return jnp.where(jnp.asarray(solid, bool), wall, u)


def evaluate(objective: Objective, out: Mapping[str, Any], solid: np.ndarray) -> Any:
    """The objective's value from a differentiable run's output (lbm.diff.run.differentiable_run)."""
    if isinstance(objective, str) and objective in FORCE_OBJECTIVES:
        return out[objective]
    if objective == "kinetic_energy":
        return kinetic_energy({"rho": out["rho"], "u": out["u"], "solid": jnp.asarray(solid)})
    u = written_velocity(out["u"], solid, out.get("wall_velocity"))  # a callable sees fields.npz's u in solid cells too
    return objective({"rho": out["rho"], "u": u, "solid": jnp.asarray(solid)})  # type: ignore[operator]


def from_result(objective: Objective, fields: Mapping[str, np.ndarray], run_dir: Path, window: int) -> float:
    """The objective's value on a finished run: its final ``fields`` (fields.npz), and forces.csv for drag and lift."""
    if isinstance(objective, str) and objective in FORCE_OBJECTIVES:
        rows = np.loadtxt(run_dir / "forces.csv", delimiter=",", skiprows=1, ndmin=2)
        column = -2 if objective == "drag" else -1
        return float(rows[-window:, column].mean())
    fields = {name: jnp.asarray(fields[name]) for name in ("rho", "u", "solid")}
    value = kinetic_energy(fields) if objective == "kinetic_energy" else objective(fields)  # type: ignore[operator]
    return float(value)
