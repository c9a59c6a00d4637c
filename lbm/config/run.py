"""The validated run configuration: :class:`RunConfig` and the validation that builds it from a composed config.

Every value is checked here, before anything is compiled; a bad value raises
:class:`lbm.errors.ConfigError` naming the key, the value and the valid range. Nothing here
imports Hydra or the cases: the case and collision names are the files of the config groups. The
composed config is read into the typed tree (:func:`read_tree`) and every section is checked there.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lbm.config.cases import CASE_PARAMS, CaseParams
from lbm.config.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    group_options,
)
from lbm.config.defaults import AUTO, TAU_WARN, Pick, check_dims, pick
from lbm.config.schema import RunSchema
from lbm.config.sections import (
    Checkpoint,
    CollisionKind,
    CollisionParams,
    Flow,
    Gradient,
    Grid,
    Native,
    Output,
    Parallel,
    Profile,
)
from lbm.errors import ConfigError
from lbm.kernels.collisions import COLLISION_KINDS
from lbm.lattice import CS2, LATTICES

MODES = ("fused", "instrumented")
ENGINES = ("auto", "native", "pallas", "xla")
"""Fused-mode engines: auto (native on CPU where it builds, pallas on GPU, on TPU pallas for a wall-free box and
xla with walls, else xla), native (hand-fused C++
via jax.ffi), pallas (Pallas kernels; interpret mode on CPU), xla."""
PRECISIONS = ("float32", "float64")
MACH_WARN = 0.1
"""Mach numbers above this give a warning (compressibility error grows as Ma^2)."""
MACH_MAX = 0.5
"""Mach numbers at or above this are refused: the second-order equilibrium breaks down."""


class LbmWarning(UserWarning):
    """A risky but allowed configuration (e.g. Mach number above 0.1)."""


SINGLE_DEVICE_ENGINES = ("native",)
"""Engines that run on one device only."""


def single_device_refusal(engine: str) -> str | None:
    """Why ``engine`` cannot run on several devices (and what to do), or None where it can."""
    if engine in SINGLE_DEVICE_ENGINES:
        return f"the {engine} engine is single-device: use engine=xla, or parallel.devices=1"
    return None


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, validated; derived physics lives in the case setup.

    The sections (``case_params``, ``collision_params``, ``flow``, ``output``, ``checkpoint``, ``gradient``,
    ``parallel``, ``profile``) are the classes of the Hydra schema with every value checked (``case`` and ``collision``: their
    names); the lattice's name, the grid's shape and the mesh the run uses are plain values, and ``source`` is the
    typed config as composed.
    """

    case_params: CaseParams
    lattice: str
    collision_params: CollisionParams  # type: ignore[valid-type]
    mode: str
    engine: str
    precision: str
    steps: int | None
    """None for ``steps=auto`` until the case resolves it (:func:`lbm.simulation.make_case`)."""
    steps_auto: bool
    grid: tuple[int, ...]
    flow: Flow
    """``flow.u_lattice`` None: derived from ``flow.tau`` by the case (schafer_turek), final in the case's ``run``."""
    steps_per_dispatch: int
    output: Output
    checkpoint: Checkpoint
    gradient: Gradient
    parallel: Parallel
    """As configured (``parallel.devices`` -1: every device; ``parallel.mesh`` null: all along x)."""
    native: Native
    """The native engine's threads per step (0: XLA's intra-op pool size) and pinning."""
    profile: Profile
    mesh_shape: tuple[int, ...] | None
    """The shards per grid axis the run uses (lbm.parallel), None on one device; with ``parallel.devices=-1`` and no
    ``parallel.mesh`` known where the job runs (:func:`lbm.simulation.resolve_parallel`)."""
    source: RunSchema = field(repr=False, compare=False)
    """As composed: ``collision`` auto and null grid or velocity keys where the case picks them (``picked``)."""
    picked: tuple[Pick, ...] = ()
    """The keys the case filled because the user left them open (lbm.config.defaults), in the order picked."""

    @property
    def case(self) -> str:
        """The case's name (``case_params.name``)."""
        return self.case_params.name

    @property
    def collision(self) -> str:
        """The collision's kind (``collision_params.name``)."""
        return self.collision_params.name

    @property
    def dim(self) -> int:
        """Spatial dimension of the lattice."""
        return LATTICES[self.lattice].d

    @property
    def devices(self) -> int:
        """Devices the run uses: the mesh's shards, 1 without a mesh; -1 (every device) until the job resolves it."""
        if self.mesh_shape is not None:
            return math.prod(self.mesh_shape)
        return -1 if self.parallel.devices == -1 else 1


S = TypeVar("S")
T = TypeVar("T")


def read_section(cls: type[S], node: Any, key: str) -> S:
    """The section ``cls`` of the composed config ``node`` at ``key``, its values as given (checked after)."""
    if not isinstance(node, Mapping):
        raise ConfigError(key, node, "a group of keys: " + ", ".join(f.name for f in dataclasses.fields(cls)))
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in node:
            values[f.name] = node[f.name]
        elif f.default is None:
            values[f.name] = None  # a key the chosen option does not set (collision rates)
        else:
            raise ConfigError(f"{key}.{f.name}", None, "a value (the key is missing from the config)")
    return cls(**values)


def read_tree(cfg: Mapping[str, Any], schema: type[T] = RunSchema) -> T:  # type: ignore[assignment]
    """The typed tree ``schema`` of a composed (plain-dict) config; a missing key is refused, values are checked after.

    A run config's ``case`` is read into the parameter dataclass of the case it names (lbm.config.cases).
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError("config", cfg, "a mapping of the keys of the config")
    sections: dict[str, Any] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):  # type: ignore[arg-type]
        tp = hints[f.name]
        if tp is CaseParams:
            node = cfg.get(f.name)
            name = check_choice("case", node.get("name") if isinstance(node, Mapping) else None, group_options("case"))
            sections[f.name] = read_section(CASE_PARAMS[name], node, "case")
        elif tp is CollisionKind:  # every kind's rates, None where the kind has none (validate_collision checks them)
            sections[f.name] = read_section(CollisionParams, cfg.get(f.name), f.name)
        elif f.name not in cfg:
            raise ConfigError(f.name, None, "a value (the key is missing from the config)")
        else:
            sections[f.name] = read_section(tp, cfg[f.name], f.name) if dataclasses.is_dataclass(tp) else cfg[f.name]
    return schema(**sections)


def validate(cfg: Mapping[str, Any]) -> RunConfig:
    """Check every value of a (resolved, plain-dict) config and return a RunConfig."""
    tree = read_tree(cfg)
    lattice = check_choice("lattice", tree.lattice.name, tuple(LATTICES))
    check_dims(tree.case.name, tree.case.dims, lattice)  # the case's parameter class (lbm.config.cases) says
    collision = validate_collision(tree.collision, auto=True)
    check_float("flow.reynolds", tree.flow.reynolds, 0.0)
    tau = None if tree.flow.tau is None else check_float("flow.tau", tree.flow.tau, 0.5)
    # the keys a case's picks read, checked first where they are set (a bad one is named, not the pick's rule)
    given = {k: v if v is None else check_int(f"grid.{k}", v, 4) for k, v in dict(tree.grid).items()}
    u_given = None if tree.flow.u_lattice is None else check_float("flow.u_lattice", tree.flow.u_lattice, 0.0)
    kind, grid_keys, u_lattice, picked = pick(tree.case.name, CASE_PARAMS, lattice, collision.name, given,
                                              tree.flow.reynolds, u_given, tau)
    if kind != collision.name:  # picked for collision=auto: the kind's own default rates
        defaults = dataclasses.asdict(COLLISION_KINDS[kind].Rates())
        collision = validate_collision(CollisionParams(name=kind, **defaults))  # type: ignore[call-arg]
    check_collision_lattice(collision.name, lattice)
    mode = check_choice("mode", tree.mode, MODES)
    engine = check_choice("engine", tree.engine, ENGINES)
    precision = check_choice("precision", tree.precision, PRECISIONS)
    steps = None if tree.steps == "auto" else check_int("steps", tree.steps, 1, words="an integer >= 1 or auto")
    grid = validate_grid(Grid(**grid_keys), lattice)
    flow = validate_flow(Flow(reynolds=tree.flow.reynolds, u_lattice=u_lattice, tau=tau),
                         picked=any(p.key == "flow.u_lattice" for p in picked))
    output = validate_output(tree.output, steps)
    checkpoint = validate_checkpoint(tree.checkpoint, steps)
    gradient = validate_gradient(tree.gradient)
    spd = check_int("steps_per_dispatch", tree.steps_per_dispatch, 0)
    mesh, par = validate_parallel(tree.parallel, grid, engine)
    native = validate_native(tree.native)
    profile = validate_profile(tree.profile)
    return RunConfig(
        case_params=tree.case, lattice=lattice, collision_params=collision, mode=mode, engine=engine,
        precision=precision, steps=steps, steps_auto=steps is None, grid=grid, flow=flow, steps_per_dispatch=spd,
        output=output, checkpoint=checkpoint, gradient=gradient, parallel=par, native=native, profile=profile,
        mesh_shape=mesh,
        source=tree, picked=picked,
    )


def validate_collision(node: Mapping[str, Any], auto: bool = False) -> Any:
    """The ``collision`` group: its kind, and the rates that kind reads (the others None): a CollisionParams.

    Each key is checked by the range its kind declares (lbm.kernels.collisions: the fields of the kind's ``Rates``).
    ``auto``: ``collision=auto`` is accepted (a run's case picks the kind, lbm.config.defaults); elsewhere refused.
    """
    section = node if isinstance(node, CollisionParams) else read_section(CollisionParams, node, "collision")
    kinds = tuple(k for k in group_options("collision") if auto or k != AUTO)
    name = check_choice("collision", section.name, kinds)
    if name == AUTO:
        return CollisionParams(name=name)
    rates: dict[str, float | None] = {}
    for f in dataclasses.fields(COLLISION_KINDS[name].Rates):
        value, rule = getattr(section, f.name), f.metadata
        if value is None and rule["optional"]:
            rates[f.name] = None
            continue
        rates[f.name] = check_float(f"collision.{f.name}", value, rule["low"], rule["high"], low_open=rule["low_open"])
    for key in (f.name for f in dataclasses.fields(section) if f.name != "name" and f.name not in rates):
        value = getattr(section, key)  # a rate this kind does not read: unused, but checked (a typo fails here too)
        rule = next((g.metadata for op in COLLISION_KINDS.values() for g in dataclasses.fields(op.Rates)
                     if g.name == key), None)
        if value is not None and rule is not None:
            check_float(f"collision.{key}", value, rule["low"], rule["high"], low_open=rule["low_open"])
    return CollisionParams(name=name, **rates)  # type: ignore[call-arg]


def check_collision_lattice(kind: str, lattice: str) -> None:
    """A ConfigError where the collision ``kind`` does not run on ``lattice`` (the kind's own lattices)."""
    op = COLLISION_KINDS[kind]
    if op.lattices is not None and lattice not in op.lattices:
        raise ConfigError("lattice", lattice, f"one of {', '.join(op.lattices)} with collision={kind}",
                          f"{op.lattice_reason}; on {lattice} choose another collision, e.g. collision={op.instead}")


def validate_grid(section: Grid, lattice: str, key: str = "grid") -> tuple[int, ...]:
    """A grid section (``grid``; bench's ``cylinder_grid`` too): cells per axis, as many as the lattice's dimensions."""
    nx = check_int(f"{key}.nx", section.nx, 4)
    ny = check_int(f"{key}.ny", section.ny, 4)
    nz = section.nz
    if LATTICES[lattice].d == 3:
        if nz is None:
            raise ConfigError(f"{key}.nz", nz, f"an integer >= 4 for the 3D lattice {lattice}",
                              f"set the cells along z, e.g. {key}.nz=32")
        grid: tuple[int, ...] = (nx, ny, check_int(f"{key}.nz", nz, 4))
    else:
        if nz is not None:
            raise ConfigError(f"{key}.nz", nz, f"null for the 2D lattice {lattice} (use lattice=d3q19 for 3D)")
        grid = (nx, ny)
    if math.prod(grid) > 2**31 - 1:
        raise ConfigError(key, "x".join(map(str, grid)), "at most 2**31-1 cells in total")
    return grid


def validate_flow(section: Flow, picked: bool = False) -> Flow:
    """The ``flow`` section: reynolds, tau (or None), u_lattice; a warning above Mach 0.1, refused from Mach 0.5.

    ``u_lattice`` is None only with ``flow.tau`` set: for a case that derives it from tau (it refuses None otherwise).
    ``picked``: the case chose u_lattice (lbm.config.defaults, which states its Mach number): no Mach warning.
    """
    reynolds = check_float("flow.reynolds", section.reynolds, 0.0)
    tau = None if section.tau is None else check_float("flow.tau", section.tau, 0.5)
    if section.u_lattice is None and tau is not None:
        return Flow(reynolds=reynolds, u_lattice=None, tau=tau)
    u_lat = check_float("flow.u_lattice", section.u_lattice, 0.0, math.inf)
    mach = u_lat / math.sqrt(CS2)
    if mach >= MACH_MAX:
        raise ConfigError(
            "flow.u_lattice", u_lat, f"a number in (0, {MACH_MAX * math.sqrt(CS2):.3f}) (Mach < {MACH_MAX})",
            f"it gives Mach {mach:.2f}; use <= 0.1 for accuracy",
        )
    if mach > MACH_WARN and not picked:
        warnings.warn(
            f"flow.u_lattice={u_lat:g} gives Mach {mach:.3f} > {MACH_WARN}: expect compressibility errors ~Ma^2",
            LbmWarning, stacklevel=3,
        )
    return Flow(reynolds=reynolds, u_lattice=u_lat, tau=tau)


PROGRESS = ("auto", "bar", "log", "none")


def validate_output(section: Output, steps: int | None) -> Output:
    """The ``output`` section (``output.animation`` implies the frames it is made of)."""
    every = check_int("output.every", section.every, 0)
    if steps is not None:
        check_output_every(every, steps)
    plots = check_bool("output.plots", section.plots)
    vtk = check_bool("output.vtk", section.vtk)
    animation = check_bool("output.animation", section.animation)
    frames = check_bool("output.frames", section.frames) or animation
    limit = None if section.frame_limit is None else check_float("output.frame_limit", section.frame_limit, 0.0)
    progress = check_choice("output.progress", section.progress, PROGRESS)
    return Output(every=every, plots=plots, vtk=vtk, frames=frames, animation=animation, frame_limit=limit,
                  progress=progress)


def validate_checkpoint(section: Checkpoint, steps: int | None) -> Checkpoint:
    """The ``checkpoint`` section: every (0 = off), keep, resume (path or null)."""
    every = check_int("checkpoint.every", section.every, 0)
    if steps is not None and every > steps:
        raise ConfigError("checkpoint.every", every, f"an integer in [0, steps={steps}] (0 = no periodic checkpoints)")
    keep = check_int("checkpoint.keep", section.keep, 1)
    resume = section.resume
    if resume is not None:
        if not isinstance(resume, str) or not resume:
            raise ConfigError("checkpoint.resume", resume, "a run directory or checkpoint file, or null")
        if not Path(resume).expanduser().exists():
            raise ConfigError("checkpoint.resume", resume, "an existing run directory or checkpoint file")
    return Checkpoint(every=every, keep=keep, resume=resume)


GRADIENT_CHECKPOINTS = ("none", "every", "sqrt", "binomial")
"""The checkpointing policies of a differentiable run (lbm.diff.checkpointing)."""


def validate_gradient(section: Gradient) -> Gradient:
    """The ``gradient`` section: the checkpointing policy, its ``every`` (k steps, for every) and ``snapshots``."""
    checkpoint = check_choice("gradient.checkpoint", section.checkpoint, GRADIENT_CHECKPOINTS)
    every = None if section.every is None else check_int("gradient.every", section.every, 1)
    if checkpoint == "every" and every is None:
        raise ConfigError("gradient.every", None, "an integer >= 1 with gradient.checkpoint=every (steps between "
                                                  "kept states)")
    snapshots = check_int("gradient.snapshots", section.snapshots, 1)
    return Gradient(checkpoint=checkpoint, every=every, snapshots=snapshots)


PARTITIONERS = ("shard_map", "gspmd")


def validate_parallel(section: Parallel, grid: tuple[int, ...],
                      engine: str) -> tuple[tuple[int, ...] | None, Parallel]:
    """The ``parallel`` section: (shards per grid axis where known and more than one, the section).

    Touches no device and imports no JAX: jax.distributed is started, the device count checked and
    ``-1`` resolved where the job runs (:func:`lbm.simulation.resolve_parallel`), so that a launcher can validate a
    cluster job on a machine without its devices.
    """
    devices = check_int("parallel.devices", section.devices, -1, words="an integer >= 1, or -1 for all devices")
    if devices == 0:
        raise ConfigError("parallel.devices", devices, "an integer >= 1, or -1 for all devices")
    partitioner = check_choice("parallel.partitioner", section.partitioner, PARTITIONERS)
    coordinator = section.coordinator
    if coordinator is not None and (not isinstance(coordinator, str) or ":" not in coordinator):
        raise ConfigError("parallel.coordinator", coordinator, "host:port of process 0, or null")
    nproc = None if section.num_processes is None else check_int("parallel.num_processes", section.num_processes, 1)
    pid = None if section.process_id is None else check_int("parallel.process_id", section.process_id, 0,
                                                             (nproc or 1) - 1)
    if (nproc or 1) > 1 and (coordinator is None or pid is None):
        raise ConfigError("parallel.coordinator", coordinator,
                          "host:port together with parallel.process_id when parallel.num_processes > 1")
    mesh = section.mesh
    if mesh is not None and not isinstance(mesh, (list, tuple)):
        raise ConfigError("parallel.mesh", mesh, f"a list of at most {len(grid)} positive integers, or null")
    shape = None
    if devices > 1 or mesh:
        from lbm import parallel  # the mesh check (it imports JAX: only for runs on several devices)

        shape = parallel.mesh_shape(devices if devices != -1 else math.prod(mesh or [1]), list(mesh or []), grid)
        devices = math.prod(shape)
    if devices != 1 and (refused := single_device_refusal(engine)):
        raise ConfigError("engine", engine, "xla or auto with parallel.devices > 1", refused)
    checked = Parallel(devices=section.devices, mesh=list(mesh) if mesh else None, partitioner=partitioner,
                       coordinator=coordinator, num_processes=nproc, process_id=pid)
    return (shape if shape is not None and devices > 1 else None), checked


def validate_native(section: Native) -> Native:
    """The ``native`` section: threads per step (0: as many as XLA's intra-op thread pool) and pinning."""
    threads = check_int("native.threads", section.threads, 0,
                        words="an integer >= 0 (threads per step; 0: as many as XLA's intra-op thread pool)")
    return Native(threads=threads, pinning=check_bool("native.pinning", section.pinning))


PROFILE_BACKENDS = ("auto", "sqlite", "perfetto")


def validate_profile(section: Profile) -> Profile:
    """The ``profile`` section: enabled, warmup_steps, steps, sync, backend, trace_processor."""
    tp = section.trace_processor
    if tp is not None and not isinstance(tp, str):
        raise ConfigError("profile.trace_processor", tp, "a path to a trace_processor binary, or null")
    return Profile(
        enabled=check_bool("profile.enabled", section.enabled),
        warmup_steps=check_int("profile.warmup_steps", section.warmup_steps, 1),
        steps=check_int("profile.steps", section.steps, 1),
        sync=check_bool("profile.sync", section.sync),
        backend=check_choice("profile.backend", section.backend, PROFILE_BACKENDS),
        trace_processor=tp,
    )


def check_output_every(every: int, steps: int) -> None:
    """output.every must not exceed the number of steps."""
    if every > steps:
        raise ConfigError("output.every", every, f"an integer in [0, steps={steps}] (0 = automatic)")


def viscosity(run: RunConfig, length: float) -> tuple[float, float, float]:
    """Lattice viscosity, relaxation time and Reynolds number for a case with reference ``length`` (cells).

    From ``flow.tau`` when it is set, else nu = u_lattice * length / reynolds.
    """
    if run.flow.tau is not None:
        tau = run.flow.tau
        nu = CS2 * (tau - 0.5)
        reynolds = run.flow.u_lattice * length / nu
    else:
        reynolds = run.flow.reynolds
        nu = run.flow.u_lattice * length / reynolds
        tau = nu / CS2 + 0.5
        if not tau > 0.5:
            raise ConfigError("flow.reynolds", reynolds, "a value giving tau > 0.5", f"it gives tau={tau!r}")
    if tau < TAU_WARN and COLLISION_KINDS[run.collision].tau_warning:
        warnings.warn(
            f"tau={tau:.5f} is close to 0.5: BGK may go unstable; lower flow.reynolds, "
            "raise the resolution or use collision=trt", LbmWarning, stacklevel=2,
        )
    return nu, tau, reynolds
