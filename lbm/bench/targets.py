"""Accelerator targets without the accelerator: the target files (lbm/targets/<name>.yaml), their deviceless
topologies, the compiler environment they need, and the ahead-of-time compile of a jitted chunk for one
(what ``python -m lbm inspect``, its gradient form and the compile probe share)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbm.errors import LbmError

TARGETS_DIR = Path(__file__).resolve().parents[1] / "targets"


ACCEL_HINT = ("run 'bash scripts/accel_env.sh' (a separate environment with the CUDA plugin and libtpu), "
              "then '.venv-accel/bin/python -m lbm inspect target={name} ...'")


@dataclass(frozen=True)
class Target:
    """A device to compile for: platform, description for the compiler, spec bandwidth (GB/s) and its source."""

    name: str
    platform: str
    device: str
    bandwidth_gbs: float | None
    bandwidth_source: str
    gpu: dict[str, Any] = field(default_factory=dict)
    topology: str = ""
    accelerator_type: str = ""
    devices: int = 1
    """Chips of the topology (TPU ``v5e:2x2``: 4; CUDA ``1x1x4``, partitions x hosts x GPUs per host: 4)."""

    @property
    def mesh(self) -> tuple[int, ...]:
        """The default shards per grid axis on this target: a TPU's chip grid, all GPUs along x."""
        dims = chip_grid(self.topology) if self.topology else [1]
        if self.platform == "tpu":
            return tuple(d for d in dims if d > 1) or (1,)
        return (self.devices,)


def target_names() -> list[str]:
    """Names of the targets shipped with lbm."""
    return sorted(p.stem for p in TARGETS_DIR.glob("*.yaml"))


TOPOLOGY = re.compile(r"^\d+(x\d+)*$")


def load_target(name: str, devices: int = 1) -> Target:
    """The target ``name`` from lbm/targets/, on ``devices`` chips or on the topology after a colon
    (``v5e:2x2``, ``h100:1x1x4``); LbmError if there is none."""
    import yaml

    name, _, topology = name.partition(":")
    path = TARGETS_DIR / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        raise LbmError(f"target={name} is not known: choose one of {', '.join(target_names())}")
    data = yaml.safe_load(path.read_text())
    if data.get("platform") not in ("cpu", "cuda", "tpu"):
        raise LbmError(f"{path}: platform must be cpu, cuda or tpu")
    target = Target(name=data["name"], platform=data["platform"], device=data["device"],
                    bandwidth_gbs=data.get("bandwidth_gbs"), bandwidth_source=data["bandwidth_source"],
                    gpu=data.get("gpu") or {}, topology=data.get("topology", ""),
                    accelerator_type=data.get("accelerator_type", ""))
    return with_topology(target, topology, devices)


def with_topology(target: Target, topology: str, devices: int = 1) -> Target:
    """``target`` on a topology (``2x2`` on a TPU, ``1x1x4`` on CUDA), or on ``devices`` chips (TPU: the squarest
    chip grid; CUDA: one host); LbmError where it cannot be."""
    import dataclasses

    if not topology and devices == 1:
        return target
    if target.platform == "cpu":
        raise LbmError(f"target={target.name} compiles for this machine's CPU: a multi-device target is a GPU or TPU "
                       "one (e.g. target=v5e:2x2, target=h100:1x1x4)")
    if topology and not TOPOLOGY.match(topology):
        raise LbmError(f"target={target.name}:{topology}: the topology is chips per axis joined by x "
                       "(TPU: v5e:2x2; CUDA: partitions x hosts x GPUs per host, h100:1x1x4)")
    if not topology:
        if target.platform == "cuda":
            topology = f"1x1x{devices}"
        else:
            a = max(d for d in range(1, math.isqrt(devices) + 1) if devices % d == 0)
            topology = f"{a}x{devices // a}"
    dims = chip_grid(topology)
    chips = math.prod(dims)
    if devices not in (1, chips):
        raise LbmError(f"parallel.devices={devices} but target={target.name}:{topology} has {chips} chips")
    if target.platform == "cuda":
        if len(dims) != 3:
            raise LbmError(f"target={target.name}:{topology}: a CUDA topology is partitions x hosts x GPUs per host, "
                           "e.g. 1x1x4")
        return dataclasses.replace(target, topology=topology, devices=chips)
    generation = target.topology.split(":")[0]
    kind = target.accelerator_type.rsplit("-", 1)[0]
    return dataclasses.replace(target, topology=f"{generation}:{topology}", devices=chips,
                               accelerator_type=f"{kind}-{chips}" if kind else "")


def chip_grid(topology: str) -> list[int]:
    """Chips per axis of a topology text (``2x2``, ``v5e:2x2``, ``1x1x4``)."""
    return [int(d) for d in topology.rsplit(":", 1)[-1].split("x")]


def gpu_target_config(target: Target) -> str:
    """The GpuTargetConfigProto text of a CUDA target (its ``gpu`` fields as gpu_device_info)."""

    def message(d: dict[str, Any], indent: str) -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += [f"{indent}{k} {{", *message(v, indent + "  "), f"{indent}}}"]
            elif isinstance(v, str):
                out.append(f'{indent}{k}: "{v}"')
            else:
                out.append(f"{indent}{k}: {v}")
        return out

    lines = ["gpu_device_info {", *message(target.gpu, "  "), "}", 'platform_name: "CUDA"',
             f'device_description_str: "{target.device}"']
    return "\n".join(lines) + "\n"


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


CUDA_PLUGINS = ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")
"""JAX's CUDA plugins, either of which compiles for a CUDA target (jax-cuda12-plugin, jax-cuda13-plugin)."""


def cuda_plugin() -> str | None:
    """The installed CUDA plugin's module (one of ``CUDA_PLUGINS``), or None."""
    return next((m for m in CUDA_PLUGINS if _installed(m)), None)


def prepare_environment(target: Target) -> None:
    """Check the compiler for ``target`` is installed and set what a deviceless compile needs; call before jax starts."""
    if target.platform == "cuda" and cuda_plugin() is None:
        raise LbmError(f"target={target.name} needs a CUDA compiler plugin (jax-cuda12-plugin or jax-cuda13-plugin), "
                       "not installed here: "
                       + ACCEL_HINT.format(name=target.name))
    if target.platform == "tpu" and not _installed("libtpu"):
        raise LbmError(f"target={target.name} needs libtpu (the jax[tpu] extra), not installed here: "
                       + ACCEL_HINT.format(name=target.name))
    # the plugin's version check calls cuInit, which fails without a driver
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    if target.platform == "tpu":  # without these libtpu looks for a TPU VM's metadata and logs errors
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", target.accelerator_type)
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        # no chip to guard: compile even while another process (e.g. a test session) has libtpu loaded
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if "JAX_PLATFORMS" not in os.environ:  # run on the CPU; the accelerator is only compiled for
        import jax

        try:
            jax.config.update("jax_platforms", "cpu")
        except Exception:  # backends already initialised (e.g. inside a test session): keep them
            pass


def target_for_run(target: Target, devices: int) -> Target:
    """``target`` for a run configured with ``parallel.devices`` (-1: the target's chips); LbmError if they differ."""
    if devices in (-1, target.devices) or devices == 1 and target.devices > 1:
        return target
    if target.devices > 1:
        raise LbmError(f"parallel.devices={devices} but target={target.name}:{target.topology} has "
                       f"{target.devices} chips")
    return with_topology(target, "", devices)


def _tpu_host_bounds(topology: str) -> dict[str, tuple[int, ...]]:
    """``chips_per_host_bounds`` for a TPU topology smaller than one host's 2x2 chips; none for larger ones.

    libtpu 0.0.48 (jax[tpu] 0.11.2) refuses ``v5e:1x1`` unless told its host holds one chip ("not divisible by
    the given (or default) chips_per_host_bounds 2x2x1"); libtpu 0.0.50 (jax 0.12) accepts either.
    """
    dims = chip_grid(topology)
    if math.prod(dims) >= 4:
        return {}
    return {"chips_per_host_bounds": tuple(dims + [1] * (3 - len(dims)))}


def _topology(target: Target) -> Any:
    """The deviceless topology of a CUDA or TPU target."""
    from jax.experimental import topologies

    try:
        if target.platform == "cuda":
            return topologies.get_topology_desc(platform="cuda", target_config=gpu_target_config(target),
                                                topology=target.topology or "1x1x1")
        return topologies.get_topology_desc(topology_name=target.topology, platform="tpu",
                                            **_tpu_host_bounds(target.topology))
    except Exception as exc:  # the compiler's own message says what it accepts
        raise LbmError(f"target={target.name} topology {target.topology!r} is refused by the "
                       f"{target.platform} compiler: {str(exc).splitlines()[0]}") from None


def target_sharding(target: Target) -> Any:
    """A single-device sharding on ``target``: this machine's CPU, or a deviceless CUDA/TPU topology."""
    import jax
    from jax.experimental import topologies

    if target.platform == "cpu":
        return jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    mesh = topologies.make_mesh(_topology(target), (1,), ("x",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def target_mesh(target: Target, shape: tuple[int, ...]) -> Any:
    """The target's chips as a mesh of ``shape`` shards, one named axis per grid axis (lbm.parallel.AXES)."""
    from jax.experimental import topologies

    from lbm.parallel import AXES

    return topologies.make_mesh(_topology(target), shape, AXES[: len(shape)])


def engine_for(target: Target, requested: str) -> str:
    """The engine to compile on ``target`` for the configured ``engine`` (native runs on CPUs only)."""
    if target.platform != "cpu" and requested == "native":
        raise LbmError(f"engine=native runs on CPUs only; target={target.name} is {target.platform}")
    return requested


def chunk_for_target(setup: Any, engine: str, n: int, platform: str = "cpu", mesh: Any = None
                     ) -> tuple[Callable[..., Any], tuple[Any, ...], str, str, int]:
    """The jitted n-step fused chunk of ``engine`` for ``setup`` on ``platform``: (function, example arguments,
    engine, note, bytes a shard sends per step for its boundary plan's ghost cells). ``auto`` resolves as on that
    platform (pallas on cuda/tpu, native on cpu, else xla). With a ``mesh`` of several devices (a deviceless
    topology), the sharded chunk on its shards; its example arguments carry their shardings.

    The one place inspect reaches into the engines: it compiles what the run loop would dispatch.
    """
    import jax

    from lbm.engines import EngineUnavailable, make_engine
    from lbm.engines.timestep import step_index

    if mesh is not None and mesh.size > 1:
        try:
            eng = make_engine(setup, mode="fused", engine=engine, platform=platform, mesh=tuple(mesh.devices.shape),
                              devices=list(mesh.devices.flat))
        except EngineUnavailable as exc:
            raise LbmError(f"engine={engine} cannot run sharded on {platform}: {exc}") from None
        f = jax.ShapeDtypeStruct((setup.lattice.q, *setup.shape), setup.dtype, sharding=eng.layout.sharding())
        t = jax.ShapeDtypeStruct((), step_index(0).dtype,
                                 sharding=jax.sharding.NamedSharding(eng.layout.mesh, jax.sharding.PartitionSpec()))
        return eng.chunk_function(n), (f, eng.params, t), eng.name, eng.note, eng.halo_plan_bytes
    try:
        eng = make_engine(setup, mode="fused", engine=engine, platform=platform)
    except EngineUnavailable as exc:
        raise LbmError(f"engine={engine} cannot run on {platform}: {exc}") from None
    f = jax.ShapeDtypeStruct(eng.state_shape, setup.dtype)  # as the run loop holds them between chunks (engine.place)
    return eng.chunk_function(n), (f, eng.params, step_index(0)), eng.name, eng.note, 0


def lowering_context(target: Target, sharding: Any) -> Any:
    """What lowering needs to know about a deviceless target: the GPU (Triton kernels) as an abstract mesh."""
    import contextlib

    if target.platform != "cuda":
        return contextlib.nullcontext()
    import jax
    from jax._src.mesh import AbstractDevice, AbstractMesh  # public in later jax; 0.12 keeps it here

    device = next(iter(sharding.device_set))
    abstract = AbstractDevice(device_kind=device.device_kind, num_cores=target.gpu.get("core_count"),
                              platform="gpu")
    mesh = getattr(sharding, "mesh", None)
    shape, names = (tuple(mesh.devices.shape), mesh.axis_names) if mesh is not None else ((1,), ("x",))
    mesh = AbstractMesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(shape), abstract_device=abstract)
    return jax.sharding.use_abstract_mesh(mesh)


def compile_chunk(fn: Callable[..., Any], args: tuple[Any, ...], sharding: Any,
                  target: Target | None = None) -> tuple[str, float, int | None]:
    """Compile ``fn`` ahead of time for arguments shaped like ``args``, placed by ``sharding`` where they carry
    no sharding of their own; (HLO text, seconds, XLA's planned peak bytes per device or None: lbm.hlo.planned_bytes)."""
    import contextlib

    import jax

    from lbm.hlo import planned_bytes

    def spec(a: Any) -> Any:
        if isinstance(a, jax.ShapeDtypeStruct) and a.sharding is not None:
            return a
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    specs = jax.tree_util.tree_map(spec, args)
    t0 = time.perf_counter()
    with lowering_context(target, sharding) if target is not None else contextlib.nullcontext():
        compiled = fn.lower(*specs).compile()
    seconds = time.perf_counter() - t0
    planned = planned_bytes(compiled)
    return compiled.as_text(), seconds, planned[0] if planned else None


