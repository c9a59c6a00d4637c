"""How a chunk of steps is computed: one interface (lbm.engines.base.Engine), several engines.

``xla``: the stage functions composed in one jit (the reference, any device);
``native``: a generated C++ kernel for the bulk plus the stage functions on boundary cells (CPU);
``pallas``: one Pallas kernel per step for the bulk plus the same boundary plan (GPU, TPU; interpreted on CPU);
``instrumented``: one jit per stage, annotated, for the profiler;
``auto``: pallas on a GPU or TPU, native on a CPU where it builds; xla where neither supports the setup.
"""

from __future__ import annotations

import math
from typing import Any

import jax

from lbm.cases.base import Setup
from lbm.config.run import ENGINES, MODES  # the choices of the config keys engine and mode
from lbm.config.sections import Native
from lbm.engines.base import REFUSED_STORAGES, STORAGES, Engine, EngineUnavailable, Unavailable, attempt
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.pallas import ACCELERATORS
from lbm.engines.xla import XlaEngine


def make_engine(setup: Setup, mode: str = "fused", engine: str = "auto", storage: str = "compute",
                sync: bool = False, mesh: tuple[int, ...] | None = None, partitioner: str = "shard_map",
                platform: str | None = None, devices: Any = None, native: Native | None = None) -> Engine:
    """The engine for ``mode`` and ``engine`` (see ENGINES) on ``platform`` (default: JAX's default backend);
    EngineUnavailable if a named engine (native, pallas) cannot run this setup there.

    ``mesh`` (blocks per grid axis, lbm.parallel) with more than one block gives a sharded engine:
    ``partitioner`` shard_map (lbm.engines.sharded, halo exchange) or gspmd (XLA partitions the xla step), over
    ``devices`` (default JAX's; those of a deviceless topology to compile for it, lbm.bench.inspect).
    ``native``: the native engine's threads and pinning (the run config's section; None: its defaults).
    """
    if mesh is not None and math.prod(mesh) > 1:
        from lbm.engines.sharded import make_sharded

        return make_sharded(setup, tuple(mesh), mode, engine, storage, sync, partitioner, platform, devices)
    if mode == "instrumented":
        return InstrumentedEngine(setup, sync=sync)
    if mode != "fused":
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    platform = platform or jax.default_backend()
    if engine != "auto":
        return _named(engine, setup, storage, platform, native)
    engine = "native" if platform == "cpu" else "pallas" if platform in ACCELERATORS else "xla"
    chosen = attempt(_named, engine, setup, storage, platform, native)
    if not isinstance(chosen, Unavailable):
        return chosen
    fallback = XlaEngine(setup, storage)
    fallback.note = chosen.reason
    return fallback


def _named(engine: str, setup: Setup, storage: str, platform: str, native: Native | None = None) -> Engine:
    """The engine called ``engine``; EngineUnavailable where it cannot run."""
    if engine == "native":
        from lbm.engines.native.engine import NativeEngine

        return NativeEngine(setup, storage, native)
    if engine == "pallas":
        from lbm.engines.pallas.engine import PallasEngine

        return PallasEngine(setup, storage, platform=platform)
    return XlaEngine(setup, storage)


__all__ = ["ENGINES", "MODES", "REFUSED_STORAGES", "STORAGES", "Engine", "EngineUnavailable", "make_engine"]
