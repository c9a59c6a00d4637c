"""How a chunk of steps is computed: one interface (lbm.engines.base.Engine), several engines.

``xla``: the stage functions composed in one jit (the reference, any device);
``native``: a generated C++ kernel for the bulk plus the stage functions on boundary cells (CPU);
``instrumented``: one jit per stage, annotated, for the profiler;
``auto``: native where it builds and supports the setup, else xla.
"""

from __future__ import annotations

import math

from lbm.cases.base import Setup
from lbm.config.run import ENGINES, MODES  # the choices of the config keys engine and mode
from lbm.engines.base import STORAGES, Engine, EngineUnavailable
from lbm.engines.instrumented import InstrumentedEngine
from lbm.engines.xla import XlaEngine


def make_engine(setup: Setup, mode: str = "fused", engine: str = "auto", storage: str = "compute",
                sync: bool = False, mesh: tuple[int, ...] | None = None, partitioner: str = "shard_map") -> Engine:
    """The engine for ``mode`` and ``engine`` (see ENGINES); EngineUnavailable if ``native`` cannot run here.

    ``mesh`` (blocks per grid axis, lbm.parallel) with more than one block gives a sharded engine:
    ``partitioner`` shard_map (lbm.engines.sharded, halo exchange) or gspmd (XLA partitions the xla step).
    """
    if mesh is not None and math.prod(mesh) > 1:
        from lbm.engines import sharded

        if engine == "native":
            raise EngineUnavailable("the native engine is single-device: use engine=xla or parallel.devices=1")
        if mode == "instrumented":
            return sharded.ShardedInstrumentedEngine(setup, tuple(mesh), sync=sync)
        if partitioner == "gspmd":
            return sharded.GspmdEngine(setup, tuple(mesh), storage)
        return sharded.ShardedEngine(setup, tuple(mesh), storage)
    if mode == "instrumented":
        return InstrumentedEngine(setup, sync=sync)
    if mode != "fused":
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine in ("auto", "native"):
        from lbm.engines.native.engine import NativeEngine

        try:
            return NativeEngine(setup, storage)
        except EngineUnavailable as exc:
            if engine == "native":
                raise
            fallback = XlaEngine(setup, storage)
            fallback.note = str(exc)
            return fallback
    return XlaEngine(setup, storage)


__all__ = ["ENGINES", "MODES", "STORAGES", "Engine", "EngineUnavailable", "make_engine"]
