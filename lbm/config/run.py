"""The validated run configuration: :class:`RunConfig` and the validation that builds it from a composed config.

Every value is checked here, before anything is compiled; a bad value raises
:class:`lbm.errors.ConfigError` naming the key, the value and the valid range. Nothing here
imports Hydra or the cases: the case and collision names are the files of the config groups.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbm.config.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    group_options,
)
from lbm.errors import ConfigError
from lbm.lattice import CS2, LATTICES

MODES = ("fused", "instrumented")
ENGINES = ("auto", "native", "pallas", "xla")
"""Fused-mode engines: auto (pallas on GPU/TPU, native on CPU where it builds, else xla), native (hand-fused C++
via jax.ffi), pallas (Pallas kernels; interpret mode on CPU), xla."""
PRECISIONS = ("float32", "float64")
MACH_WARN = 0.1
"""Mach numbers above this give a warning (compressibility error grows as Ma^2)."""
MACH_MAX = 0.5
"""Mach numbers at or above this are refused: the second-order equilibrium breaks down."""
TAU_WARN = 0.51
"""Relaxation times below this give a warning: BGK is close to its stability limit."""


class LbmWarning(UserWarning):
    """A risky but allowed configuration (e.g. Mach number above 0.1)."""


SINGLE_DEVICE_ENGINES = ("native",)
"""Engines that run on one device only."""


def single_device_refusal(engine: str) -> str | None:
    """Why ``engine`` cannot run on several devices (and what to do), or None where it can."""
    if engine in SINGLE_DEVICE_ENGINES:
        return f"the {engine} engine is single-device: use engine=xla, or parallel.devices=1"
    return None


def _get(cfg: Mapping[str, Any], dotted: str, default: Any = ...) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if default is ...:
                raise ConfigError(dotted, None, "a value (the key is missing from the config)")
            return default
        node = node[part]
    return node


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, validated; derived physics lives in the case setup."""

    case: str
    case_params: dict[str, Any]
    lattice: str
    collision: str
    trt_magic: float
    mode: str
    precision: str
    steps: int | None
    steps_auto: bool
    grid: tuple[int, ...]
    reynolds: float
    tau: float | None
    u_lattice: float
    output_every: int
    plots: bool
    steps_per_dispatch: int
    parallel_devices: int
    checkpoint: dict[str, Any] = field(default_factory=lambda: {"every": 0, "keep": 3, "resume": None})
    vtk: bool = False
    frames: bool = False
    animation: bool = False
    progress: str = "auto"
    engine: str = "auto"
    profile: dict[str, Any] = field(default_factory=dict)
    collision_rates: dict[str, Any] = field(default_factory=dict)
    """mrt: bulk, ghost, odd (None = from collision.magic); regularized: bulk; both: smagorinsky."""
    parallel_mesh: tuple[int, ...] | None = None
    """Blocks per grid axis (lbm.parallel), None on one device."""
    parallel: dict[str, Any] = field(default_factory=dict)
    """partitioner, coordinator, num_processes, process_id."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def dim(self) -> int:
        """Spatial dimension of the lattice."""
        return LATTICES[self.lattice].d


def validate(cfg: Mapping[str, Any]) -> RunConfig:
    """Check every value of a (resolved, plain-dict) config and return a RunConfig."""
    case = check_choice("case", _get(cfg, "case.name"), group_options("case"))
    lattice = check_choice("lattice", _get(cfg, "lattice.name"), tuple(LATTICES))
    d = LATTICES[lattice].d
    collision = check_choice("collision", _get(cfg, "collision.name"), group_options("collision"))
    trt_magic = check_float("collision.magic", _get(cfg, "collision.magic", 0.1875), 0.0)
    collision_rates: dict[str, Any] = {}
    for key in ("bulk", "ghost", "odd"):
        value = _get(cfg, f"collision.{key}", None)
        if value is not None and (collision == "mrt" or (key == "bulk" and collision.endswith("regularized"))):
            collision_rates[key] = check_float(f"collision.{key}", value, 0.0, 2.0)
    if collision in ("mrt", "regularized", "recursive_regularized"):
        collision_rates["smagorinsky"] = check_float(
            "collision.smagorinsky", _get(cfg, "collision.smagorinsky", 0.0), 0.0, low_open=False)
    mode = check_choice("mode", _get(cfg, "mode"), MODES)
    engine = check_choice("engine", _get(cfg, "engine", "auto"), ENGINES)
    precision = check_choice("precision", _get(cfg, "precision"), PRECISIONS)
    steps_raw = _get(cfg, "steps")
    steps: int | None = None if steps_raw == "auto" else check_int("steps", steps_raw, 1, words="an integer >= 1 or auto")

    nx = check_int("grid.nx", _get(cfg, "grid.nx"), 4)
    ny = check_int("grid.ny", _get(cfg, "grid.ny"), 4)
    nz = _get(cfg, "grid.nz", None)
    if d == 3:
        if nz is None:
            raise ConfigError("grid.nz", nz, f"an integer >= 4 for the 3D lattice {lattice}")
        grid: tuple[int, ...] = (nx, ny, check_int("grid.nz", nz, 4))
    else:
        if nz is not None:
            raise ConfigError("grid.nz", nz, f"null for the 2D lattice {lattice} (use lattice=d3q19 for 3D)")
        grid = (nx, ny)
    cells = math.prod(grid)
    if cells > 2**31 - 1:
        raise ConfigError("grid", "x".join(map(str, grid)), "at most 2**31-1 cells in total")

    reynolds = check_float("flow.reynolds", _get(cfg, "flow.reynolds"), 0.0)
    tau = _get(cfg, "flow.tau", None)
    if tau is not None:
        tau = check_float("flow.tau", tau, 0.5)
    u_lat = check_float("flow.u_lattice", _get(cfg, "flow.u_lattice"), 0.0, math.inf)
    mach = u_lat / math.sqrt(CS2)
    if mach >= MACH_MAX:
        raise ConfigError(
            "flow.u_lattice", u_lat, f"a number in (0, {MACH_MAX * math.sqrt(CS2):.3f}) (Mach < {MACH_MAX})",
            f"it gives Mach {mach:.2f}; use <= 0.1 for accuracy",
        )
    if mach > MACH_WARN:
        warnings.warn(
            f"flow.u_lattice={u_lat:g} gives Mach {mach:.3f} > {MACH_WARN}: expect compressibility errors ~Ma^2",
            LbmWarning, stacklevel=2,
        )

    every = check_int("output.every", _get(cfg, "output.every", 0), 0)
    if steps is not None:
        check_output_every(every, steps)
    plots = check_bool("output.plots", _get(cfg, "output.plots", True))
    vtk = check_bool("output.vtk", _get(cfg, "output.vtk", False))
    animation = check_bool("output.animation", _get(cfg, "output.animation", False))
    frames = check_bool("output.frames", _get(cfg, "output.frames", False)) or animation
    if _get(cfg, "output.frame_limit", None) is not None:
        check_float("output.frame_limit", _get(cfg, "output.frame_limit"), 0.0)
    progress = check_choice("output.progress", _get(cfg, "output.progress", "auto"), ("auto", "bar", "log", "none"))
    checkpoint = validate_checkpoint(_get(cfg, "checkpoint", {}) or {}, steps)
    spd = check_int("steps_per_dispatch", _get(cfg, "steps_per_dispatch", 0), 0)
    devices, mesh, par = validate_parallel(_get(cfg, "parallel", {}) or {}, grid, engine)

    profile = validate_profile(_get(cfg, "profile", {}) or {})
    case_params = {k: v for k, v in dict(_get(cfg, "case")).items() if k != "name"}
    return RunConfig(
        case=case, case_params=case_params, lattice=lattice, collision=collision, trt_magic=trt_magic,
        mode=mode, precision=precision, steps=steps, steps_auto=steps is None, grid=grid, reynolds=reynolds, tau=tau,
        u_lattice=u_lat,
        output_every=every, plots=plots, steps_per_dispatch=spd, parallel_devices=devices, profile=profile,
        parallel_mesh=mesh, parallel=par,
        checkpoint=checkpoint, vtk=vtk, frames=frames, animation=animation, progress=progress, engine=engine,
        collision_rates=collision_rates, raw=dict(cfg),
    )


def validate_checkpoint(section: Mapping[str, Any], steps: int | None) -> dict[str, Any]:
    """The ``checkpoint`` section: every (0 = off), keep, resume (path or null)."""
    every = check_int("checkpoint.every", section.get("every", 0), 0)
    if steps is not None and every > steps:
        raise ConfigError("checkpoint.every", every, f"an integer in [0, steps={steps}] (0 = no periodic checkpoints)")
    keep = check_int("checkpoint.keep", section.get("keep", 3), 1)
    resume = section.get("resume")
    if resume is not None:
        if not isinstance(resume, str) or not resume:
            raise ConfigError("checkpoint.resume", resume, "a run directory or checkpoint file, or null")
        if not Path(resume).expanduser().exists():
            raise ConfigError("checkpoint.resume", resume, "an existing run directory or checkpoint file")
    return {"every": every, "keep": keep, "resume": resume}


PARTITIONERS = ("shard_map", "gspmd")


def validate_parallel(section: Mapping[str, Any], grid: tuple[int, ...],
                      engine: str) -> tuple[int, tuple[int, ...] | None, dict[str, Any]]:
    """The ``parallel`` section: (devices, blocks per grid axis if known, the other keys).

    Touches no device and imports no JAX: jax.distributed is started, the device count checked and
    ``-1`` resolved where the job runs (:func:`lbm.simulation.resolve_parallel`), so that a launcher can validate a
    cluster job on a machine without its devices.
    """
    devices = check_int("parallel.devices", section.get("devices", 1), -1,
                        words="an integer >= 1, or -1 for all devices")
    if devices == 0:
        raise ConfigError("parallel.devices", devices, "an integer >= 1, or -1 for all devices")
    partitioner = check_choice("parallel.partitioner", section.get("partitioner", "shard_map"), PARTITIONERS)
    coordinator = section.get("coordinator")
    if coordinator is not None and (not isinstance(coordinator, str) or ":" not in coordinator):
        raise ConfigError("parallel.coordinator", coordinator, "host:port of process 0, or null")
    nproc = section.get("num_processes")
    nproc = None if nproc is None else check_int("parallel.num_processes", nproc, 1)
    pid = section.get("process_id")
    pid = None if pid is None else check_int("parallel.process_id", pid, 0, (nproc or 1) - 1)
    if (nproc or 1) > 1 and (coordinator is None or pid is None):
        raise ConfigError("parallel.coordinator", coordinator,
                          "host:port together with parallel.process_id when parallel.num_processes > 1")
    mesh = section.get("mesh")
    if mesh is not None and not isinstance(mesh, (list, tuple)):
        raise ConfigError("parallel.mesh", mesh, f"a list of at most {len(grid)} positive integers, or null")
    shape = None
    if devices > 1 or mesh:
        from lbm import parallel  # the mesh check (it imports JAX: only for runs on several devices)

        shape = parallel.mesh_shape(devices if devices != -1 else math.prod(mesh or [1]), list(mesh or []), grid)
        devices = math.prod(shape)
    if devices != 1 and (refused := single_device_refusal(engine)):
        raise ConfigError("engine", engine, "xla or auto with parallel.devices > 1", refused)
    info = {"partitioner": partitioner, "coordinator": coordinator, "num_processes": nproc, "process_id": pid,
            "mesh": list(mesh) if mesh else None}
    return devices, (shape if shape is not None and devices > 1 else None), info


PROFILE_BACKENDS = ("auto", "sqlite", "perfetto")


def validate_profile(section: Mapping[str, Any]) -> dict[str, Any]:
    """The ``profile`` section: enabled, warmup_steps, steps, sync, backend, trace_processor."""
    enabled = section.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError("profile.enabled", enabled, "true or false")
    sync = section.get("sync", False)
    if not isinstance(sync, bool):
        raise ConfigError("profile.sync", sync, "true or false")
    tp = section.get("trace_processor")
    if tp is not None and not isinstance(tp, str):
        raise ConfigError("profile.trace_processor", tp, "a path to a trace_processor binary, or null")
    return {
        "enabled": enabled,
        "warmup_steps": check_int("profile.warmup_steps", section.get("warmup_steps", 5), 1),
        "steps": check_int("profile.steps", section.get("steps", 20), 1),
        "sync": sync,
        "backend": check_choice("profile.backend", section.get("backend", "auto"), PROFILE_BACKENDS),
        "trace_processor": tp,
    }


def check_output_every(every: int, steps: int) -> None:
    """output.every must not exceed the number of steps."""
    if every > steps:
        raise ConfigError("output.every", every, f"an integer in [0, steps={steps}] (0 = automatic)")


def viscosity(run: RunConfig, length: float) -> tuple[float, float, float]:
    """Lattice viscosity, relaxation time and Reynolds number for a case with reference ``length`` (cells).

    From ``flow.tau`` when it is set, else nu = u_lattice * length / reynolds.
    """
    if run.tau is not None:
        tau = run.tau
        nu = CS2 * (tau - 0.5)
        reynolds = run.u_lattice * length / nu
    else:
        reynolds = run.reynolds
        nu = run.u_lattice * length / reynolds
        tau = nu / CS2 + 0.5
        if not tau > 0.5:
            raise ConfigError("flow.reynolds", reynolds, "a value giving tau > 0.5", f"it gives tau={tau!r}")
    if tau < TAU_WARN and run.collision == "bgk":  # trt, mrt and regularized are the remedy the warning names
        warnings.warn(
            f"tau={tau:.5f} is close to 0.5: BGK may go unstable; lower flow.reynolds, "
            "raise the resolution or use collision=trt", LbmWarning, stacklevel=2,
        )
    return nu, tau, reynolds
