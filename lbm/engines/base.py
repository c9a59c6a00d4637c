"""The engine interface: compile a chunk of n steps, advance the populations, describe the compiled programs.

An engine advances populations ``(Q, *grid)`` in the setup's dtype by n steps per call and
returns them with the per-step outputs stacked along a leading axis of length n. Its
``describe`` gives the programs it runs as plain data (texts of the jaxpr and of the HLO
before and after optimisation, XLA's cost analysis, lowering and compile times), which
``inspect``, ``bench`` and the profiler read without knowing the engine. ``fields`` gives
host copies of the moments a step sees, compiled once per engine. What a caller needs besides
(``place``, ``place_cells``, ``layout``, ``stage_names``, ``halo_plan_bytes``) every engine has, with
single-device defaults here that the engines on a mesh (lbm.engines.sharded) override.

The populations' state layout: ``place`` puts populations ``(Q, *grid)`` where and as the engine's step takes them,
and the run loop keeps them so from chunk to chunk; ``canonical`` (and ``host_populations``, a host copy) gives them
back as ``(Q, *grid)`` wherever something outside the engine reads them (fields, checkpoints, the health check's
first bad cell, an observation). Every engine holds the grid's layout (identity) but the pallas engine's 2D in-place
pair, which holds the kernels' view (lbm.engines.pallas.planes.plane_view) for the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm import parallel
from lbm.boundaries.base import FormUnavailable
from lbm.cases.base import Setup
from lbm.engines.timestep import as_arrays, moments, step_index
from lbm.hlo import compiled_cost

STORAGES = ("compute", "float16")
"""How fused engines keep populations between steps: in the compute dtype, or in 16 bits, computed in float32.
Either holds the engine state, the deviations f - w from the rest state (lbm.kernels.equilibrium)."""
STORAGE_DTYPES = {"float16": jnp.float16}
REFUSED_STORAGES = {
    "bfloat16": "bfloat16 keeps 8 significant bits of each population's deviation f - w: the 130x130 cavity "
                "(Re 100, 60000 steps) ends 3% of the lid speed from float64 and its Ghia error is 4x float32's "
                "(float16: 0.36%, docs/physics.md); use storage=float16",
}
"""Storage types the engines refuse, with the reason (one line each)."""


def check_storage(storage: str) -> None:
    """ValueError (one line) unless ``storage`` is one of STORAGES; a refused type says why."""
    if storage in REFUSED_STORAGES:
        raise ValueError(f"storage={storage} is refused: {REFUSED_STORAGES[storage]}")
    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")


class EngineUnavailable(FormUnavailable):
    """An engine cannot run this setup here (the reason is the message); a condition without a form an engine
    needs is one such reason."""


@dataclass(frozen=True)
class Unavailable:
    """Why an engine, or a form it needs, cannot be built here (the value :func:`attempt` returns instead)."""

    reason: str


def attempt(build: Callable[..., Any], *args: Any) -> Any:
    """``build(*args)``, or :class:`Unavailable` with the reason it cannot be built: how engines are chosen from
    what can be built, without a chain of fallbacks on exceptions."""
    try:
        return build(*args)
    except FormUnavailable as exc:  # EngineUnavailable, or a form of a component the engine needs
        return Unavailable(str(exc))


def encode(f: jnp.ndarray, storage: str) -> jnp.ndarray:
    """Populations (or a block of them, ``(Q, ...)``) in the storage type (the deviations f - w, rounded)."""
    if storage == "compute":
        return f
    return f.astype(STORAGE_DTYPES[storage])


def decode(s: jnp.ndarray, storage: str, dtype: Any) -> jnp.ndarray:
    """Populations in the compute dtype from the storage type."""
    if storage == "compute":
        return s
    return s.astype(dtype)


def program(name: str, stage: str | None, jitted: Any, *specs: Any, options: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """Lower and compile ``jitted`` for argument ``specs`` (timed; with XLA's ``options``, as the engine compiles it)
    and return the texts and costs as data."""
    t0 = time.perf_counter()
    lowered = jitted.lower(*specs)
    t1 = time.perf_counter()
    compiled = lowered.compile(options)
    t2 = time.perf_counter()
    try:
        hlo = lowered.as_text(dialect="hlo")
    except Exception:  # older jax: no dialect argument
        hlo = lowered.compiler_ir(dialect="hlo").as_hlo_text()
    return {
        "name": name, "stage": stage, "jaxpr": str(jax.make_jaxpr(jitted)(*specs)), "stablehlo": lowered.as_text(),
        "hlo": hlo, "optimized_hlo": compiled.as_text() or "",
        "cost": compiled_cost(compiled),
        "lower_ms": (t1 - t0) * 1e3, "compile_ms": (t2 - t1) * 1e3,
    }


def spec_of(x: Any) -> Any:
    """The shape and dtype of an array (or of every leaf of a pytree) as ShapeDtypeStructs."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)), x)


class Engine:
    """Base of the engines: holds the setup, its boundary conditions on the device, and compile times."""

    name = "engine"
    """The engine that computes the steps, as the config's ``engine`` key names it (xla, native, pallas)."""
    mode = "fused"
    """How the steps are dispatched, as the config's ``mode`` key names it (fused, instrumented)."""
    partitioner: str | None = None
    """How the steps are split over a device mesh, as ``parallel.partitioner`` names it (shard_map, gspmd); None on
    one device."""
    layout: Any = None
    """How the grid is split over a device mesh (lbm.engines.sharded.layout.Layout); None on one device."""
    halo_plan_bytes = 0
    """Bytes a shard sends per step for its boundary plan's ghost cells (0 on one device)."""
    threads: int | None = None
    """CPU threads of the engine's own kernel sharing a step (the native engine's), None where XLA schedules it."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.params: Any = as_arrays(self.step_boundaries(setup))
        self.compile_times: dict[str, float] = {}
        self.note = ""
        self._moments = jax.jit(lambda f, t, bcs: moments(self.canonical(f), t, bcs, setup))

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages of this engine's timestep in order (the setup's; on a mesh, ``halo`` too)."""
        return self.setup.stages

    def place(self, f: Any) -> Any:
        """Populations ``(Q, *grid)`` (on the host or a device) where and as this engine's step takes them, the state
        the run loop keeps between chunks (one device: as they are, on the device; :meth:`canonical` undoes the
        layout)."""
        return jnp.asarray(f)

    def canonical(self, f: Any) -> Any:
        """The populations ``(Q, *grid)`` of this engine's state ``f`` (as :meth:`place` gave it, or already so), on the
        device or a host copy alike (here: ``f`` itself)."""
        return f

    def host_populations(self, f: Any) -> np.ndarray:
        """A host copy of the populations ``(Q, *grid)`` of this engine's state ``f`` (a checkpoint's, a divergence's)."""
        return np.asarray(self.canonical(parallel.to_host(f)))

    @property
    def state_shape(self) -> tuple[int, ...]:
        """The shape of the populations as this engine holds them between chunks (:meth:`place`): ``(Q, *grid)``."""
        return (self.setup.lattice.q, *self.setup.shape)

    def place_cells(self, a: Any) -> jnp.ndarray:
        """A per-cell array ``(*grid)`` (a mask) placed like the populations."""
        return jnp.asarray(a)

    def outside_cells(self) -> jnp.ndarray | None:
        """A mask of the state's cells that are no grid cell (a layout's pads), placed like the populations; None
        where every cell of the state is one of the grid's."""
        return None

    def step_boundaries(self, setup: Setup) -> tuple[Any, ...]:
        """The boundary conditions this engine's step receives: the setup's own (an engine may use an equivalent form)."""
        return setup.boundaries

    @property
    def compile_time_s(self) -> float:
        """Total seconds spent compiling so far."""
        return float(sum(self.compile_times.values()))

    def compile(self, f: jnp.ndarray, n: int) -> None:
        """Compile what :meth:`advance` runs for ``n`` steps on populations like ``f`` (timed), ahead of the loop."""
        raise NotImplementedError

    def advance(self, f: jnp.ndarray, n: int, first_step: int = 0) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
        """Run ``n`` steps; per-step outputs are stacked along a leading axis of length n."""
        raise NotImplementedError

    def describe(self, n: int = 1) -> list[dict[str, Any]]:
        """The programs this engine runs for a chunk of ``n`` steps, as data (see :func:`program`)."""
        raise NotImplementedError

    def _dense_params(self) -> Any:
        """The boundary conditions as the dense stages receive them."""
        return self.params

    def fields(self, f: jnp.ndarray, step: int = 0) -> dict[str, np.ndarray]:
        """Host copies of rho, u and solid as step ``step`` sees them (outflow and inlet applied, force-shifted u), from
        the engine's state ``f`` (:meth:`place`) or populations ``(Q, *grid)``."""
        rho, u = self._moments(f, step_index(step), self._dense_params())
        return {"rho": np.asarray(rho), "u": np.asarray(u), "solid": np.asarray(self.setup.solid, dtype=bool)}
