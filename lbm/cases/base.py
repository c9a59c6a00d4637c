"""What every case provides: a Setup (geometry, boundary plan, initial state, derived
parameters) and its own monitors, metrics and output files."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.base import BoundaryCondition, pytree_dataclass, static
from lbm.cases.traced import Traced
from lbm.config import RunConfig, viscosity
from lbm.config.cases import CaseParams
from lbm.errors import ConfigError, LbmError
from lbm.kernels.collisions import COLLISION_KINDS, Collision
from lbm.kernels.equilibrium import equilibrium
from lbm.lattice import CS2, Lattice, get_lattice
from lbm.stages import CORE_STAGES, STAGES


@pytree_dataclass
class Setup:
    """A case made concrete: geometry, boundary conditions, initial state and derived parameters (immutable).

    Arrays (``solid``, ``rho0``, ``u0`` and those of the boundary conditions) are pytree leaves;
    everything else is static. ``boundaries`` lists the case's boundary conditions
    (lbm.boundaries), which also decide the active stages (:attr:`stages`).
    """

    solid: np.ndarray
    rho0: np.ndarray
    u0: np.ndarray
    boundaries: tuple[BoundaryCondition, ...]
    lattice: Lattice = static()
    shape: tuple[int, ...] = static()
    dtype: Any = static()
    tau: float = static()
    nu: float = static()
    reynolds: float = static()
    omega_plus: float = static()
    omega_minus: float = static()
    force: tuple[float, ...] | None = static(None)
    collision: Collision | None = static(None)
    """The collision of kinds beyond bgk and trt (None: bgk or trt from omega_plus, omega_minus)."""
    derived: Mapping[str, Any] = static(default_factory=lambda: MappingProxyType({}))
    wall_velocity: Any = None
    """The walls' own velocity ``(D, *grid)``, read in solid cells (None: every wall at rest)."""
    f_neq0: np.ndarray | None = None
    """Non-equilibrium part of the initial populations (Q, *grid), added to the equilibrium (None: none)."""

    @property
    def fluid(self) -> np.ndarray:
        """Boolean mask of fluid cells."""
        return ~self.solid

    @property
    def wall_free(self) -> bool:
        """Whether only the periodic wrap bounds the grid: no boundary condition and no solid cell."""
        return not self.boundaries and not np.asarray(self.solid).any()

    @property
    def force_array(self) -> np.ndarray | None:
        """The body force as an array ``(D,)`` (None without one)."""
        return None if self.force is None else np.asarray(self.force, np.float64)

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages of this setup's timestep, in timestep order."""
        used = set(CORE_STAGES) | {bc.stage for bc in self.boundaries}
        return tuple(s for s in STAGES if s in used)

    @property
    def periodic(self) -> tuple[bool, ...]:
        """Per grid axis: whether the domain wraps around it (no inlet or outlet face on its ends)."""
        wraps = [True] * len(self.shape)
        for bc in self.boundaries:
            if bc.stage not in ("inlet", "outflow"):
                continue
            face = bc.footprint(self.shape, self.lattice).face
            if face.size:
                for axis, coord in enumerate(np.unravel_index(face, self.shape)):
                    if np.all(coord == coord[0]) and coord[0] in (0, self.shape[axis] - 1):
                        wraps[axis] = False
        return tuple(wraps)

    @property
    def closed(self) -> bool:
        """No inlet or outlet: the fluid's mass is conserved (up to rounding)."""
        return not any(bc.stage in ("inlet", "outflow") for bc in self.boundaries)

    def written_fields(self, fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The fields as a run writes and shows them: the walls' velocity in solid cells, and the vorticity."""
        from lbm.io.fields import with_wall_velocity

        return with_wall_velocity(fields, self.wall_velocity, self.periodic)

    def initial_populations(self, slab_bytes: int | None = None) -> jnp.ndarray:
        """Equilibrium populations of the initial density and velocity (plus ``f_neq0``), in the run's dtype, as the
        engines hold them: deviations f - w from the rest state (lbm.kernels.equilibrium).

        Populations larger than ``slab_bytes`` (default INITIAL_SLAB_BYTES) are computed slab by slab along x, each
        slab written into the one population array in place: the device then holds the populations once plus a
        slab, not the 19 per-direction terms beside their stacked copy (D3Q19 512^3 on a 16 GiB TPU). The values are
        those of the whole-array computation (the same element-wise operations)."""
        q, nx = self.lattice.q, self.shape[0]
        row = q * math.prod(self.shape[1:]) * jnp.dtype(self.dtype).itemsize
        rows = max(1, (INITIAL_SLAB_BYTES if slab_bytes is None else slab_bytes) // row)
        if rows >= nx:
            return self._initial_rows(slice(None))
        f = jnp.zeros((q, *self.shape), self.dtype)
        for x0 in range(0, nx, rows):
            f = _put_rows(f, self._initial_rows(slice(x0, min(nx, x0 + rows))), x0)
        return f

    def _initial_rows(self, rows: slice) -> jnp.ndarray:
        """:meth:`initial_populations` of the cells ``rows`` along x, ``(Q, len(rows), ...)``."""
        rho0 = np.broadcast_to(np.asarray(self.rho0), self.shape)[rows]
        u0 = np.broadcast_to(np.asarray(self.u0), (self.lattice.d, *self.shape))[:, rows]
        drho = jnp.asarray(np.asarray(rho0, np.float64) - 1.0, self.dtype)
        feq = equilibrium(drho, jnp.asarray(u0, self.dtype), self.lattice)
        return feq if self.f_neq0 is None else feq + jnp.asarray(self.f_neq0[:, rows], self.dtype)


INITIAL_SLAB_BYTES = 256 * 2**20
"""Populations above this size are built slab by slab (:meth:`Setup.initial_populations`)."""


@partial(jax.jit, donate_argnums=0)
def _put_rows(f: jnp.ndarray, rows: jnp.ndarray, x0: int) -> jnp.ndarray:
    """``f`` with the populations ``rows`` ``(Q, r, ...)`` written at x0 along x, in place (``f`` donated)."""
    return jax.lax.dynamic_update_slice_in_dim(f, rows, x0, axis=1)


def make_setup(case: Case, *, solid: np.ndarray, rho0: np.ndarray, u0: np.ndarray, rel: dict[str, float],
               boundaries: tuple[BoundaryCondition, ...] = (), force: np.ndarray | None = None,
               derived: dict[str, Any] | None = None, wall_velocity: np.ndarray | None = None,
               f_neq0: np.ndarray | None = None) -> Setup:
    """A Setup of ``case`` from its arrays, its relaxation parameters (:meth:`Case.relaxation`) and derived values."""
    return Setup(
        solid=solid, rho0=rho0, u0=u0, boundaries=tuple(boundaries), lattice=case.lattice, shape=tuple(case.run.grid),
        dtype=case.dtype, tau=rel["tau"], nu=rel["nu"], reynolds=rel["reynolds"], omega_plus=rel["omega_plus"],
        omega_minus=rel["omega_minus"], force=None if force is None else tuple(float(v) for v in force),
        collision=rel.get("collision"),
        derived=MappingProxyType(dict(derived or {})), wall_velocity=wall_velocity, f_neq0=f_neq0,
    )


FLOAT32_EPS = 2.0**-23
MASS_DRIFT_FACTOR = 10.0
"""A closed domain's |mass_rel_drift| bound is MASS_DRIFT_FACTOR * FLOAT32_EPS * sqrt(steps) (see mass_drift_bound)."""


def mass_drift_bound(steps: int) -> float:
    """The relative mass drift a closed domain may show after ``steps``: 10 float32 epsilons times sqrt(steps).

    Unbiased rounding of the total mass once per step is a random walk of about eps sqrt(steps); ten
    times float32's is the bound in every precision, so a drift above it is systematic (a bias or a leak).
    """
    return MASS_DRIFT_FACTOR * FLOAT32_EPS * math.sqrt(max(steps, 1))


@dataclass(frozen=True)
class Convergence:
    """A case's criterion for the state its metrics describe: ``measure`` (value) against ``bound``."""

    converged: bool
    measure: str
    value: float | None
    bound: float
    hint: str = "run more steps"

    def as_dict(self) -> dict[str, Any]:
        """The criterion as metrics.json records it."""
        return {"measure": self.measure, "value": self.value, "bound": self.bound}


@dataclass(frozen=True)
class Published:
    """Published values a case's metrics are held against: quantity -> (low, high), and their source."""

    intervals: Mapping[str, tuple[float, float]]
    source: str


def distance_to_interval(value: float, interval: tuple[float, float]) -> str:
    """``inside`` the interval, or how far (relative, in %) above or below it ``value`` lies."""
    low, high = interval
    if low <= value <= high:
        return "inside"
    bound = high if value > high else low
    percent = 100 * abs(value - bound) / abs(bound)
    return f"{percent:.2g}% {'above' if value > high else 'below'}" if percent < 99.5 else \
        f"{percent:.0f}% {'above' if value > high else 'below'}"


def published_verdict(published: Published, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``published`` (per quantity: value, low, high, verdict), ``inside_published`` (every quantity measured and
    inside; None where none was measured) and ``published_source``."""
    rows: dict[str, dict[str, Any]] = {}
    for quantity, (low, high) in published.intervals.items():
        value = metrics.get(quantity)
        verdict = "not measured" if value is None else distance_to_interval(float(value), (low, high))
        rows[quantity] = {"value": value, "low": low, "high": high, "verdict": verdict}
    measured = [r for r in rows.values() if r["value"] is not None]
    inside = None if not measured else len(measured) == len(rows) and all(r["verdict"] == "inside" for r in measured)
    return {"published": rows, "inside_published": inside, "published_source": published.source}


def published_phrase(case_name: str, verdict: Mapping[str, Any]) -> str:
    """One line: whether the metrics are inside the published intervals, quantity by quantity."""
    parts = [f"{q} {r['value']:.5g} {r['verdict']} [{r['low']:g}, {r['high']:g}]" if r["value"] is not None
             else f"{q} not measured" for q, r in verdict["published"].items()]
    head = {True: "inside", False: "NOT inside", None: "not measured against"}[verdict["inside_published"]]
    return f"{case_name}: {head} the published intervals ({verdict['published_source']}): {', '.join(parts)}"


def result_checks(case: Case, setup: Setup, metrics: Mapping[str, Any], steps: int,
                  result_keys: Sequence[str]) -> dict[str, Any]:
    """``converged`` (where the case has a criterion), the mass-drift bound, the verdict against published values
    (where the case has them), and ``warnings`` about them.

    ``result_keys``: the case's own metrics, named in the warning when they come from an unconverged state.
    """
    out: dict[str, Any] = {}
    warnings: list[str] = []
    published = case.published()
    if published is not None:
        out.update(published_verdict(published, metrics))
        if out["inside_published"] is not True:
            warnings.append(published_phrase(case.name, out))
    crit = case.convergence(setup, steps)
    if crit is not None:
        out["converged"], out["convergence"] = crit.converged, crit.as_dict()
        if not crit.converged:
            value = "unknown (the run is too short to measure it)" if crit.value is None else f"{crit.value:.3g}"
            what = ", ".join(result_keys) or "its metrics"
            warnings.append(f"{case.name} is not converged at step {steps}: {crit.measure} = {value}, bound "
                            f"{crit.bound:.3g}; {what}: taken from an unconverged state; {crit.hint}")
    drift = metrics.get("mass_rel_drift")
    if setup.closed and drift is not None:
        bound = mass_drift_bound(steps)
        out["mass_drift_bound"] = bound
        if not abs(drift) <= bound:
            warnings.append(f"mass drifts: mass_rel_drift = {drift:.3g} after {steps} steps in a closed domain, above "
                            f"the bound {bound:.3g} (10 float32 epsilons x sqrt(steps)): rounding or a leak "
                            "changes the mass, and with it the density the metrics see")
    out["warnings"] = warnings
    return out


class Snapshot:
    """What a case may look at after a chunk: its last step, the per-step outputs, and the fields on demand."""

    def __init__(self, step: int, aux: dict[str, np.ndarray], fields: Callable[[], dict[str, np.ndarray]],
                 populations: jnp.ndarray | Callable[[], jnp.ndarray] | None = None) -> None:
        self.step = step
        self.aux = aux
        self._fields = fields
        self._populations = populations

    @cached_property
    def populations(self) -> jnp.ndarray | None:
        """The populations (Q, *grid) on the device after the chunk, for reductions a case runs there (given, or made
        on first use by the function given: the run loop's engine may hold them in a layout of its own)."""
        return self._populations() if callable(self._populations) else self._populations

    @cached_property
    def fields(self) -> dict[str, np.ndarray]:
        """Host copies of rho, u and solid after the chunk (computed on first use)."""
        return self._fields()


class Case:
    """Base class of a flow case; subclasses build the Setup and interpret the results."""

    name = "case"
    dims: tuple[int, ...] = (2, 3)
    setup_bytes_per_cell: ClassVar[dict[int, int]] = {}
    """Bytes per cell the case's Setup holds at its peak while it is built, per spatial dimension (tracemalloc, rounded
    up; tests/simulation/test_memory.py measures every entry); a dimension without one: lbm.simulation.memory's
    default."""
    output_bytes_per_cell: ClassVar[dict[int, int]] = {}
    """Bytes per cell the observation, fields and plots add, per spatial dimension (measured, lbm.simulation.memory);
    a dimension without one: lbm.simulation.memory's default."""

    def __init__(self, run: RunConfig) -> None:
        self.run = run
        if self.run.flow.u_lattice is None:
            raise ConfigError("flow.u_lattice", None, f"a number > 0 (case={self.name} does not derive the velocity "
                              "from flow.tau)")
        self.lattice = get_lattice(run.lattice)
        self.params: CaseParams = run.case_params
        """The case's own parameters (typed, checked by their dataclass: lbm.config.cases)."""
        self.dtype = jnp.dtype(run.precision)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        """The case parameter ``key``, which must be one of ``choices`` (the kinds the boundary conditions offer)."""
        value = getattr(self.params, key)
        if value not in choices:
            raise ConfigError(f"case.{key}", value, f"one of {', '.join(choices)}")
        return value

    # --- building --------------------------------------------------------------------
    def check(self) -> None:
        """Validate the case's own parameters without building arrays (raises ConfigError)."""

    def auto_steps(self) -> int:
        """Steps for ``steps=auto``: long enough for the case's physics (steady state, one decay time)."""
        raise ConfigError("steps", "auto", f"an integer >= 1 (case {self.name} has no automatic length)")

    def setup(self) -> Setup:
        """Geometry, boundary plan, initial state and derived parameters."""
        raise NotImplementedError

    def relaxation(self, length: float) -> dict[str, Any]:
        """nu, tau, Reynolds number, relaxation rates and collision (kinds beyond bgk/trt) for a length in cells."""
        nu, tau, reynolds = viscosity(self.run, length)
        omega_plus = 1.0 / tau
        rates = self.run.collision_params
        omega_minus, collision = COLLISION_KINDS[rates.name].relaxation(omega_plus, rates)
        return dict(nu=nu, tau=tau, reynolds=reynolds, omega_plus=omega_plus, omega_minus=omega_minus,
                    collision=collision)

    def base_derived(self, length: float, rel: dict[str, float]) -> dict[str, Any]:
        """Derived quantities every case reports (lattice units)."""
        return {
            "tau": rel["tau"],
            "nu": rel["nu"],
            "u_lattice": self.run.flow.u_lattice,
            "mach": self.run.flow.u_lattice / math.sqrt(CS2),
            "reynolds": rel["reynolds"],
            "reference_length": length,
            "omega": rel["omega_plus"],
        }

    # --- running ---------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> None:
        """Record what the case monitors after a chunk (its last step, per-step outputs, fields on demand)."""

    def converged(self, step: int) -> bool:
        """True when a steps=auto run may stop early (steady state reached); never by default."""
        return False

    def convergence(self, setup: Setup, steps: int) -> Convergence | None:
        """The case's criterion for the state its metrics describe, after ``steps`` (None: the case has none)."""
        return None

    def published(self) -> Published | None:
        """The published values this run's metrics are compared with (None: the case has none)."""
        return None

    def state(self) -> dict[str, np.ndarray]:
        """What the case has accumulated (time series), as arrays for a checkpoint."""
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state` returned (after :meth:`setup`)."""

    def metrics(self, setup: Setup, fields: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
        """The case's own quantities for metrics.json."""
        return {}

    def write_outputs(self, run_dir: Path, setup: Setup, fields: dict[str, np.ndarray], metrics: dict[str, Any]) -> list[str]:
        """Write case-specific files (CSV, plots); return their paths relative to ``run_dir``."""
        return []

    def summary_keys(self) -> tuple[str, ...]:
        """The keys of :meth:`metrics` that a run's last log line shows (those the case computed), in that order."""
        return ()

    monitor_label = ""
    """The y label of the panel the monitor plot gives :meth:`monitor_series` (with units)."""

    def monitor_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per-step series the monitor plot shows in a panel of their own: name -> (steps, values); none by default."""
        return {}

    # --- differentiable form (lbm.diff, from the pieces of lbm.cases.traced) ------------------------------------
    def no_differentiable_form(self) -> LbmError:
        """The one-line error of a differentiable run of a case that has no differentiable form."""
        return LbmError(f"case={self.name} has no differentiable form: differentiate one of the cases "
                        "docs/differentiable.md lists")

    def differentiable_keys(self) -> tuple[str, ...]:
        """The continuous config keys a differentiable run of this case takes (``flow.reynolds`` standing for
        ``flow.tau`` where the run sets tau); LbmError where the case has no differentiable form."""
        raise self.no_differentiable_form()

    def shape_keys(self) -> tuple[str, ...]:
        """Of :meth:`differentiable_keys`, those that move a wall (they need a curved wall: a mask has no gradient)."""
        return ()

    def differentiable_values(self) -> dict[str, float]:
        """Each of :meth:`differentiable_keys` outside the flow section -> its value in the run."""
        return {}

    def differentiable_objectives(self) -> tuple[str, ...]:
        """The named objectives (lbm.diff.objectives) this case's differentiable form gives beyond the fields'."""
        return ()

    def traced(self, setup: Setup, v: Mapping[str, Any], base: Mapping[str, float]) -> Traced:
        """``setup`` rebuilt from the traced values ``v`` of every key (``base``: their values in the run);
        LbmError where the case has no differentiable form."""
        raise self.no_differentiable_form()


DIFFERENTIABLE_FORM = ("differentiable_keys", "shape_keys", "differentiable_values", "differentiable_objectives",
                       "traced")
"""The methods of :class:`Case` that make up a differentiable form."""

C = TypeVar("C", bound=type[Case])


def without_differentiable_form(cls: C) -> C:
    """``cls`` (a case class) with :class:`Case`'s :data:`DIFFERENTIABLE_FORM`: for a subclass whose flow is not its
    parent's differentiable one (a cylinder's subclass with another obstacle)."""
    for name in DIFFERENTIABLE_FORM:
        setattr(cls, name, getattr(Case, name))
    return cls


# --- geometry helpers shared by cases --------------------------------------------------

def coordinates(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Integer node coordinates, one array per axis, each of ``shape``."""
    return list(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"))
