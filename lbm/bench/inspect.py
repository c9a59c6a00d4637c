"""``python -m lbm inspect target=NAME [run overrides]``: compile the fused chunk for a device without one.

The chunk is the one ``engine=auto`` runs on that target (on a GPU or TPU: ``pallas``), for the
configured case, grid, lattice and precision. It is compiled ahead of time: ``cpu`` with the
installed jaxlib, CUDA targets through a CUDA plugin (``jax-cuda12-plugin`` or ``-cuda13-``, no GPU or
driver needed), TPU targets through libtpu. Targets are data: ``lbm/targets/<name>.yaml`` (platform, the
GPU description or TPU topology, the spec HBM bandwidth and its source).

The loop body of the compiled chunk (the while loop of ``lax.scan``) is read by
:func:`lbm.hlo.loop_traffic`: one row per kernel with the stages it contains and the bytes it
reads and writes per cell and step (the model's assumptions are in lbm/hlo.py), and a summary
with the projection at the target's spec bandwidth. Writes ``inspect.json`` and the optimised
HLO (``chunk.hlo.txt``) into the run directory (``--out DIR`` or ``hydra.run.dir=DIR``; default
``outputs/inspect/<date>/<time>``).

A multi-device target (``target=v5e:2x2``: a 4-chip TPU topology; ``target=h100:1x1x4``: the CUDA
plugin's partitions x hosts x GPUs per host; or ``target=v5e parallel.devices=4``) compiles the
sharded chunk (lbm.engines.sharded, shard_map over a mesh of the topology's chips; ``parallel.mesh``
chooses the blocks, default the TPU's chip grid or all GPUs along x). The HLO is one device's: per-cell
figures are per cell of its block, and ``parallel`` in inspect.json lists the collectives per step
(kind, stages, in the loop body or once per chunk, bytes each device sends) and the halo bytes counted
there against those the lattice calls for (lbm.engines.sharded.halo.halo_bytes).

The CUDA and TPU compilers live in a separate environment (an installed CUDA plugin prints an
initialisation error at every start on a machine without a GPU): ``bash scripts/accel_env.sh``,
then ``.venv-accel/bin/python -m lbm inspect target=h100``.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbm.errors import LbmError

TARGETS_DIR = Path(__file__).resolve().parents[1] / "targets"
SCHEMA = "lbm-inspect/1"
HLO_FILE = "chunk.hlo.txt"
MIN_CHUNK_STEPS = 4
"""A chunk of fewer steps may be unrolled by XLA (no loop left to read); inspect compiles at least this many."""

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
        """The default blocks per grid axis on this target: a TPU's chip grid, all GPUs along x."""
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

    def block(d: dict[str, Any], indent: str) -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += [f"{indent}{k} {{", *block(v, indent + "  "), f"{indent}}}"]
            elif isinstance(v, str):
                out.append(f'{indent}{k}: "{v}"')
            else:
                out.append(f"{indent}{k}: {v}")
        return out

    lines = ["gpu_device_info {", *block(target.gpu, "  "), "}", 'platform_name: "CUDA"',
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
    """The target's chips as a mesh of ``shape`` blocks, one named axis per grid axis (lbm.parallel.AXES)."""
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
    engine, note, bytes a block sends per step for its boundary plan's ghost cells). ``auto`` resolves as on that
    platform (pallas on cuda/tpu, native on cpu, else xla). With a ``mesh`` of several devices (a deviceless
    topology), the sharded chunk on its blocks; its example arguments carry their shardings.

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
        return eng.chunk_function(n), (f, eng.params, t), eng.name, eng.note, eng.plan_halo_bytes
    try:
        eng = make_engine(setup, mode="fused", engine=engine, platform=platform)
    except EngineUnavailable as exc:
        raise LbmError(f"engine={engine} cannot run on {platform}: {exc}") from None
    f = jax.ShapeDtypeStruct((setup.lattice.q, *setup.shape), setup.dtype)
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
                  target: Target | None = None) -> tuple[str, float]:
    """Compile ``fn`` ahead of time for arguments shaped like ``args``, placed by ``sharding`` where they carry
    no sharding of their own; (HLO text, seconds)."""
    import contextlib

    import jax

    def spec(a: Any) -> Any:
        if isinstance(a, jax.ShapeDtypeStruct) and a.sharding is not None:
            return a
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    specs = jax.tree_util.tree_map(spec, args)
    t0 = time.perf_counter()
    with lowering_context(target, sharding) if target is not None else contextlib.nullcontext():
        compiled = fn.lower(*specs).compile()
    return compiled.as_text(), time.perf_counter() - t0


def inspect_run(run: Any, target: Target, overrides: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """Compile the configured run's chunk for ``target`` and read its loop body; (inspect.json record, HLO text)."""
    import dataclasses

    import jax
    import jaxlib
    import numpy as np

    from lbm import parallel
    from lbm.hlo import loop_traffic
    from lbm.roofline import lbm_bytes_per_cell
    from lbm.simulation import chunk_size, prepare
    from lbm.stages import HALO, STAGES

    shape = None
    if target.devices > 1:
        run = dataclasses.replace(run, mesh_shape=None, parallel=dataclasses.replace(run.parallel, devices=1))
    case, setup = prepare(run)
    run = case.run
    if target.devices > 1:  # checked against the case's own grid (schafer_turek derives it from its diameter)
        wanted = run.parallel.mesh or (list(target.mesh) if len(target.mesh) <= len(setup.shape) else None)
        shape = parallel.mesh_shape(target.devices, wanted, setup.shape)
    n = max(MIN_CHUNK_STEPS, chunk_size(run))
    mesh = target_mesh(target, shape) if shape is not None else None
    sharding = target_sharding(target) if mesh is None else jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    fn, args, engine, note, plan_bytes = chunk_for_target(setup, engine_for(target, run.engine), n, target.platform, mesh)
    text, compile_s = compile_chunk(fn, args, sharding, target)
    loop = loop_traffic(text, (*STAGES, HALO))
    steps = max(1, n // loop.trip_count) if loop.trip_count > 1 else n
    cells = int(np.prod(setup.shape))
    block = [g // m for g, m in zip(setup.shape, shape or [1] * len(setup.shape), strict=True)]
    per = float(int(np.prod(block)) * steps)  # the HLO of a sharded chunk is one device's: per cell of its block
    bytes_per = loop.bytes / per
    minimum = lbm_bytes_per_cell(setup.lattice.q, np.dtype(setup.dtype).itemsize)
    target_part = _target_record(target, sharding)
    bandwidth = target_part["bandwidth_gbs"]
    record = {
        "schema": SCHEMA,
        "target": target_part,
        "engine": engine, "engine_note": note,
        "case": run.case, "lattice": setup.lattice.name, "collision": run.collision, "precision": run.precision,
        "grid": list(setup.shape), "cells": cells, "cells_per_device": int(np.prod(block)), "chunk_steps": n,
        "stages": list(setup.stages),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "compile_time_s": round(compile_s, 3),
        "hlo_file": HLO_FILE, "loop_body": loop.body, "trip_count": loop.trip_count,
        "kernels_per_step": len(loop.kernels) / steps,
        "steps_per_loop_body": steps,
        "bytes_per_cell_step": bytes_per,
        "bytes_per_cell_step_upper_bound": loop.upper_bound / per,
        "on_chip_bytes_per_cell_step": loop.on_chip_bytes / per,
        "min_bytes_per_cell_step": minimum,
        "traffic_ratio": bytes_per / minimum,
        # below the minimum the loop keeps its state on chip (TPU VMEM): memory bandwidth does not bound it
        "projected_mlups": bandwidth * 1e9 / bytes_per / 1e6 if bytes_per >= minimum else None,
        "projected_fraction_of_roofline": minimum / bytes_per if bytes_per >= minimum else None,
        "note": "" if bytes_per >= minimum else (
            f"the loop body keeps its state in on-chip memory ({loop.on_chip_bytes / per:.0f} B/cell/step there, "
            f"{bytes_per:.1f} B in memory): memory bandwidth does not bound it, no projection"),
        "kernels": _kernel_rows(loop.kernels, per),
        "traffic_model": "per top-level instruction of the loop body: the part of each operand its outputs need, "
                         "read once, and its results written once; in-place dynamic-update-slice/scatter write the "
                         "update only; on-chip memory spaces (TPU VMEM) apart (lbm/hlo.py, loop_traffic)",
        "overrides": list(overrides or []),
    }
    if shape is not None:
        record["parallel"] = sharded_record(text, setup, shape, steps, n, target, engine, plan_bytes)
        if record["projected_mlups"] is not None:  # every device at the spec bandwidth, the halo not counted
            record["projected_mlups"] *= target.devices
    return record, text


def _target_record(target: Target, sharding: Any) -> dict[str, Any]:
    """The record's ``target``: its name, platform, devices and bandwidth (measured here where it names none)."""
    bandwidth, source = target.bandwidth_gbs, target.bandwidth_source
    if bandwidth is None:
        from lbm.engines.native.stream import probe
        from lbm.roofline import measure_bandwidth

        bandwidth = round(measure_bandwidth(nbytes=128 * 2**20, repeats=3, host=probe())["bandwidth_gbs"], 1)
    devices = getattr(sharding, "device_set", set())
    return {"name": target.name, "platform": target.platform, "device": target.device,
            "device_kind": sorted({d.device_kind for d in devices})[0] if devices else target.device,
            "devices": target.devices, "topology": target.topology,
            "bandwidth_gbs": bandwidth, "bandwidth_source": source}


def _kernel_rows(kernels: Sequence[Any], per: float) -> list[dict[str, Any]]:
    """The record's ``kernels``: each loop-body kernel's bytes per cell and step (``per`` cell updates per loop)."""
    return [{"name": k.name, "kind": k.kind, "opcode": k.opcode, "stages": k.stages,
             "read_bytes_per_cell_step": k.bytes_read / per, "written_bytes_per_cell_step": k.bytes_written / per,
             "on_chip_bytes_per_cell_step": (k.on_chip_read + k.on_chip_written) / per,
             "upper_bound_bytes_per_cell_step": k.upper_bound / per}
            for k in kernels]


def sharded_record(text: str, setup: Any, shape: tuple[int, ...], steps: int, n: int, target: Target,
                   engine: str, plan_bytes: int = 0) -> dict[str, Any]:
    """Devices, mesh, blocks, and the collectives per step of a sharded chunk (``steps`` per loop iteration, ``n``
    per chunk), with the halo bytes counted in the HLO against those the lattice, the blocks and the boundary
    plan (``plan_bytes`` per block) call for."""
    import numpy as np

    from lbm.engines.sharded import halo
    from lbm.hlo import collectives
    from lbm.stages import HALO, STAGES

    rows = [{"kind": r.kind, "stages": r.stages, "where": "loop body" if r.in_loop else "once per chunk",
             "count": r.count / (steps if r.in_loop else n),
             "bytes_per_device": r.bytes_per_device / (steps if r.in_loop else n)}
            for r in collectives(text, (*STAGES, HALO))]
    devices = math.prod(shape)
    itemsize = np.dtype(setup.dtype).itemsize
    return {
        "devices": devices, "topology": target.topology, "mesh": list(shape),
        "block": [g // m for g, m in zip(setup.shape, shape, strict=True)], "partitioner": "shard_map",
        "collectives_per_step": rows,
        "collective_bytes_per_step": sum(r["bytes_per_device"] for r in rows),
        "halo_bytes_per_step": sum(r["bytes_per_device"] for r in rows if HALO in r["stages"]),
        # the xla step's halo extends the block axis by axis (later faces include earlier ghost cells); the pallas
        # kernel's returns the wrapped populations on the block's own faces, and with boundary conditions the
        # neighbours send the Q populations of the ghost cells its boundary plan reads (lbm.engines.sharded)
        "halo_bytes_per_step_expected": halo.halo_bytes(setup.lattice.c, setup.shape, shape, itemsize,
                                                            corners=engine != "pallas") / devices + plan_bytes,
        "halo_plan_bytes_per_step": plan_bytes,
        "halo_populations_per_face": int(halo.entering(setup.lattice.c, 0, 1).size),
        "collective_model": "per device and step: the logical bytes of each collective's operands in the compiled "
                            "chunk (what a device sends or contributes); those of the loop body per step, those XLA "
                            "moved out of the loop per chunk divided by its steps. Expected halo: the populations "
                            "entering through each shared block face (3 of 9 for D2Q9, 5 of 19 for D3Q19) x face "
                            "cells x bytes (engine sharded: the second axis' faces include the first's ghost cells; "
                            "engine pallas: the block's own faces, plus, with boundary conditions, the Q populations of "
                            "the ghost cells its boundary plan reads, padded to one count per neighbour)",
    }


def format_report(record: dict[str, Any]) -> str:
    """The kernel table and the summary of an inspect record, as printed."""
    t = record["target"]
    lines = [f"inspect: target {t['name']} ({t['device']}, {t['platform']}), engine {record['engine']}, "
             f"{record['case']} {record['lattice']} {'x'.join(map(str, record['grid']))} {record['precision']}, "
             f"loop body {record['loop_body']} x {record['trip_count']} iterations",
             ""]
    rows = [(k["name"], k["kind"], "+".join(k["stages"]) or "-", f"{k['read_bytes_per_cell_step']:.2f}",
             f"{k['written_bytes_per_cell_step']:.2f}") for k in record["kernels"]]
    head = ("kernel", "kind", "stages", "read B/cell/step", "written B/cell/step")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths, strict=True))))

    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    lines += ["",
              f"kernels_per_step                {record['kernels_per_step']:g}",
              f"steps_per_loop_body             {record['steps_per_loop_body']}",
              f"bytes_per_cell_step             {record['bytes_per_cell_step']:.1f} B "
              f"(every operand and result whole: {record['bytes_per_cell_step_upper_bound']:.1f} B"
              + (f"; on chip, not counted: {record['on_chip_bytes_per_cell_step']:.1f} B)"
                 if record["on_chip_bytes_per_cell_step"] else ")"),
              f"min_bytes_per_cell_step         {record['min_bytes_per_cell_step']} B (2 Q x bytes per population)",
              f"traffic_ratio                   {num(record['traffic_ratio'], '.2f')}",
              f"projected_mlups                 {num(record['projected_mlups'], '.0f')} MLUPS at "
              f"{t['bandwidth_gbs']:g} GB/s ({t['bandwidth_source']})",
              f"projected_fraction_of_roofline  {num(record['projected_fraction_of_roofline'], '.3f')}"]
    if record["note"]:
        lines.append(f"note: {record['note']}")
    if "parallel" in record:
        lines += ["", *format_parallel(record["parallel"])]
    if "gradient" in record:
        from lbm.bench.inspect_gradient import format_gradient

        lines += ["", *format_gradient(record["gradient"])]
    return "\n".join(lines) + "\n"


def format_parallel(p: dict[str, Any]) -> list[str]:
    """The collectives table and the halo bytes of a sharded inspect record."""
    lines = [f"{p['devices']} devices ({p['topology']}), mesh {'x'.join(map(str, p['mesh']))}, blocks "
             f"{'x'.join(map(str, p['block']))}, {p['partitioner']}; collectives per step (per device):"]
    rows = [(c["kind"], "+".join(c["stages"]) or "-", c["where"], f"{c['count']:g}", f"{c['bytes_per_device']:.1f}")
            for c in p["collectives_per_step"]] or [("none", "-", "-", "0", "0")]
    head = ("collective", "stages", "where", "count", "bytes sent")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    lines.append(f"halo_bytes_per_step             {p['halo_bytes_per_step']:.0f} B per device (expected "
                 f"{p['halo_bytes_per_step_expected']:.0f} B: {p['halo_populations_per_face']} populations per face "
                 "x face cells x bytes" + (f", and {p['halo_plan_bytes_per_step']:.0f} B for the boundary plan's "
                                          "ghost cells" if p.get("halo_plan_bytes_per_step") else "") + ")")
    return lines


def parse_args(args: list[str]) -> tuple[str, Path | None, list[str]]:
    """(target name, output directory or None, run overrides) from the command line."""
    from lbm.config.command_line import split_hydra_args

    target, out, rest = "cpu", None, []
    it = iter(args)
    for a in it:
        if a == "--out":
            value = next(it, None)
            if value is None:
                raise LbmError("--out needs a directory")
            out = Path(value)
        elif a.startswith("--out="):
            out = Path(a.split("=", 1)[1])
        elif a.startswith("target="):
            target = a.split("=", 1)[1]
        elif a.startswith("hydra.run.dir="):
            out = Path(a.split("=", 1)[1]).expanduser()
        else:
            rest.append(a)
    overrides, multirun, _ = split_hydra_args(rest, "inspect", ("--out",))
    if multirun:
        raise LbmError("inspect compiles one configuration, not a sweep")
    return target, out, overrides


def main(args: list[str]) -> int:
    """``python -m lbm inspect [target=NAME] [--out DIR | hydra.run.dir=DIR] [run overrides]``; exit 0, 2 on bad input."""
    from lbm.config import load
    from lbm.config.command_line import check_writable

    if any(a in ("-h", "--help") for a in args):
        print("usage: python -m lbm inspect target=NAME [--out DIR] [run overrides, e.g. case=taylor_green grid.nx=1024]\n"
              "compile the fused chunk that engine=auto runs on a target, without the device; print the kernels of its\n"
              "loop body with their bytes per cell and step; write inspect.json and the optimised HLO (chunk.hlo.txt)\n"
              f"targets: {', '.join(target_names())} (lbm/targets/*.yaml); GPU and TPU targets need the compilers:\n"
              "bash scripts/accel_env.sh, then .venv-accel/bin/python -m lbm inspect target=h100 ...\n"
              "several devices: target=v5e:2x2 (TPU chips), target=h100:1x1x4 (partitions x hosts x GPUs per host),\n"
              "or target=NAME parallel.devices=N [parallel.mesh=[a,b]]: the sharded chunk, its collectives and halo bytes\n"
              "gradient=true [gradient.wrt=KEY,KEY gradient.objective=NAME gradient.checkpoint=POLICY]: also the program\n"
              "of lbm.value_and_grad over the run's steps, its kernels and bytes per cell and step by stage and pass")
        return 0
    from lbm.bench.inspect_gradient import gradient_options

    gradient, args = gradient_options(args)
    name, out, overrides = parse_args(args)
    target = load_target(name)
    prepare_environment(target)
    if target.devices > 1 and not any(o.lstrip("+~").startswith("parallel.devices=") for o in overrides):
        overrides = [*overrides, f"parallel.devices={target.devices}"]  # the target's chips (parallel.mesh checks)
    run = load(overrides)
    target = target_for_run(target, run.devices)
    out = out or Path("outputs/inspect") / datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    if (out / "inspect.json").exists():
        raise LbmError(f"{out} already holds an inspect.json; choose another --out")
    check_writable(out)
    record, text = inspect_run(run, target, overrides)
    out.mkdir(parents=True, exist_ok=True)
    if gradient is not None:
        from lbm.bench.inspect_gradient import GRADIENT_HLO_FILE, inspect_gradient

        record["gradient"], gradient_text = inspect_gradient(overrides, gradient, target, record)
        (out / GRADIENT_HLO_FILE).write_text(gradient_text)
    (out / HLO_FILE).write_text(text)
    (out / "inspect.json").write_text(json.dumps(record, indent=2) + "\n")
    print(format_report(record), end="")
    print(f"wrote {out / 'inspect.json'} and {out / HLO_FILE}")
    return 0
