"""Device mesh, sharding of grid arrays, the halo exchange between shards, and jax.distributed across hosts.

A run on N devices splits the grid into shards over a mesh ``(mx, my[, mz])`` (one mesh axis per
grid axis, named ``x``, ``y``, ``z``; ``mx * my * mz = N``). Populations ``(Q, *grid)`` are sharded
with ``NamedSharding(mesh, P(None, "x", "y"[, "z"]))``; a device holds the shard ``(Q, *grid / mesh)``.
:func:`halo_extend` (inside ``shard_map``) gives a shard a ghost layer on each face it shares with
another shard, holding only the populations that enter through that face (those with c_a > 0 on the
low side, c_a < 0 on the high side: 3 of 9 for D2Q9, 5 of 19 for D3Q19), exchanged with ``ppermute``.
Mesh axes of size 1 need no ghost layer (the shard's own periodic wrap is the grid's).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lbm.errors import ConfigError

AXES = ("x", "y", "z")
"""Mesh axis names, one per grid axis."""

_initialized: dict[str, Any] = {}


def cluster_processes() -> int:
    """Processes the surrounding launcher started for one job (Slurm, Open MPI); 1 outside one."""
    for key in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(key, "")
        if value.isdigit() and int(value) > 1 and (key != "SLURM_NTASKS" or "SLURM_PROCID" in os.environ):
            return int(value)
    return 1


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> bool:
    """Start jax.distributed for a multi-process run (explicit keys, or detected from Slurm/Open MPI); True if started.

    Must run before JAX touches a backend; a second call with the same arguments does nothing.
    """
    explicit = coordinator is not None or (num_processes or 1) > 1
    if not explicit and cluster_processes() == 1:
        return False
    key = repr((coordinator, num_processes, process_id))
    if _initialized:
        if _initialized.get("key") != key:
            raise ConfigError("parallel.coordinator", coordinator,
                              "the same distributed settings in every run of one process")
        return True
    cpu = jax.config.jax_platforms in (None, "", "cpu") or jax.default_backend() == "cpu"
    if cpu:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        without_persistent_cache()
    if explicit:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id)
    else:
        jax.distributed.initialize()
    _initialized["key"] = key
    return True


def without_persistent_cache() -> None:
    """Turn JAX's persistent compilation cache off for this process (a multi-process run on CPU), saying so when one
    was set.

    Only process 0 writes the cache and only process 0's key can match it (the others' keys name their own devices),
    so with a warm cache process 0 loads a collective program the others compile afresh. On jax 0.12.1 the two then
    wait on each other in their first gloo all-reduce for ever (every time: scripts/multiprocess_cache_hang.sh); on
    jax 0.10.2 they do not. The programs of a CPU run compile in seconds, so the cache is off for all of them.
    """
    if jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache:
        logging.getLogger("lbm").info("jax's persistent compilation cache (%s) is off for this multi-process CPU run:"
                                      " with it, jax 0.12 hangs in the first all-reduce once process 0 loads a cached"
                                      " program", jax.config.jax_compilation_cache_dir)
    jax.config.update("jax_enable_compilation_cache", False)


def resolve_devices(devices: int) -> int:
    """``parallel.devices`` as a count (-1: every device of every process); ConfigError if more than exist."""
    available = jax.device_count()
    if devices == -1:
        return available
    if devices > available:
        raise ConfigError("parallel.devices", devices,
                          f"at most {available} (the devices JAX sees here: {jax.devices()[0].platform} x{available})")
    return devices


def mesh_shape(devices: int, mesh: Sequence[int] | None, grid: Sequence[int]) -> tuple[int, ...]:
    """Shards along each grid axis: ``mesh`` padded with 1s, or all ``devices`` along x; checked against the grid."""
    d = len(grid)
    if not mesh:
        shape = (devices,) + (1,) * (d - 1)
    else:
        if len(mesh) > d or any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in mesh):
            raise ConfigError("parallel.mesh", list(mesh), f"a list of at most {d} positive integers, one per grid axis")
        shape = tuple(mesh) + (1,) * (d - len(mesh))
        if math.prod(shape) != devices:
            raise ConfigError("parallel.mesh", list(mesh),
                              f"shards whose product is parallel.devices={devices} (it is {math.prod(shape)})")
    for axis, (n, m) in enumerate(zip(grid, shape, strict=True)):
        if n % m or (m > 1 and n // m < 2):
            name = "grid.n" + AXES[axis]
            raise ConfigError(name, n, f"a multiple of {m} (the mesh's shards along {AXES[axis]}) with at least "
                              f"2 cells per shard: choose parallel.mesh or the grid so that they divide")
    return shape


def make_mesh(shape: Sequence[int], devices: Sequence[Any] | None = None) -> Mesh:
    """A device mesh with one named axis per grid axis, over the first prod(shape) of ``devices`` (default: JAX's)."""
    n = math.prod(shape)
    chosen = np.asarray(list(jax.devices() if devices is None else devices)[:n]).reshape(tuple(shape))
    return Mesh(chosen, AXES[: len(shape)])


def grid_spec(ndim: int, lead: int = 1) -> P:
    """The PartitionSpec of an array ``(*lead axes, *grid)`` sharded along its ``ndim`` grid axes."""
    return P(*([None] * lead), *AXES[:ndim])


def place(a: Any, mesh: Mesh, spec: P) -> jax.Array:
    """A global array sharded by ``spec`` from a host (or single-device) array, in one or many processes."""
    host = np.asarray(a)
    return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), lambda index: host[index])


def describe_placement(a: Any, mesh: Mesh, spec: P) -> jax.ShapeDtypeStruct:
    """The shape, dtype and sharding a host array would have if placed by ``spec`` (for a mesh of devices that
    are not here: a deviceless compile)."""
    host = np.asarray(a)
    return jax.ShapeDtypeStruct(host.shape, jax.dtypes.canonicalize_dtype(host.dtype), sharding=NamedSharding(mesh, spec))


def to_host(a: Any) -> np.ndarray:
    """A host copy of a (possibly sharded, possibly multi-process) array, the same on every process."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable and not a.is_fully_replicated:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return np.asarray(a)


def is_writer() -> bool:
    """True on the process that writes a run directory's shared files (process 0)."""
    return jax.process_index() == 0


def own_log_file(directory: str | os.PathLike[str]) -> list[str]:
    """On process k > 0 of a multi-process run: the log file handlers writing into ``directory`` (the run's shared
    log, e.g. Hydra's ``lbm.log``) write to this process's own file instead (``lbm.process1.log``); the new paths."""
    from pathlib import Path

    if is_writer():
        return []
    where = Path(directory).resolve()
    moved = []
    for logger in (logging.getLogger(), logging.getLogger("lbm")):
        for h in list(logger.handlers):
            if not isinstance(h, logging.FileHandler) or Path(h.baseFilename).parent != where:
                continue
            path = Path(h.baseFilename)
            if path.stem.endswith(f".process{jax.process_index()}"):
                continue  # already its own (lbm.cli.own_record)
            own = logging.FileHandler(path.with_name(f"{path.stem}.process{jax.process_index()}{path.suffix}"))
            own.setLevel(h.level)
            own.setFormatter(h.formatter)
            logger.removeHandler(h)
            h.close()
            logger.addHandler(own)
            moved.append(own.baseFilename)
    return moved


def extended(a: np.ndarray, shape: Sequence[int], lead: int = 1) -> np.ndarray:
    """``a`` ``(*lead, *grid)`` laid out as shards each with its periodic ghost layer (width 1 on sharded axes)."""
    out = np.asarray(a)
    for axis, m in enumerate(shape):
        if m == 1:
            continue
        ax = lead + axis
        n = out.shape[ax]
        b = n // m
        idx = np.concatenate([np.arange(i * b - 1, (i + 1) * b + 1) % n for i in range(m)])
        out = np.take(out, idx, axis=ax)
    return out


