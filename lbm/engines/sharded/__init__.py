"""The engines on a device mesh: populations sharded along the grid axes (lbm.parallel), one shard per device.

``layout``: how the grid is split; ``halo``: what the shards exchange; ``dense``: the timestep on every shard
under ``shard_map``, each boundary condition in its mesh form; ``shardplan``: the bulk step of each shard as a
periodic grid with the boundary cells by a plan per shard (Pallas, or the xla step); ``gspmd``: XLA's partitioner.
"""

from __future__ import annotations

from typing import Any

import jax

from lbm.cases.base import Setup
from lbm.config.run import single_device_refusal
from lbm.engines.base import Engine, EngineUnavailable, Unavailable, attempt
from lbm.engines.sharded.dense import DenseForms, ShardedEngine, ShardedInstrumentedEngine, dense_forms
from lbm.engines.sharded.gspmd import GspmdEngine
from lbm.engines.sharded.layout import Layout
from lbm.engines.sharded.shardplan import ShardedPallasEngine, ShardedPlanEngine, ShardPlan, plan_engine, shard_plan


def make_sharded(setup: Setup, shape: tuple[int, ...], mode: str = "fused", engine: str = "auto",
                 storage: str = "compute", sync: bool = False, partitioner: str = "shard_map",
                 platform: str | None = None, devices: Any = None) -> Engine:
    """The engine on a mesh of ``shape`` shards (over ``devices``, default JAX's); see lbm.engines.make_engine.

    ``pallas`` (and ``auto`` on a GPU or TPU) runs the Pallas kernel on each shard with the boundary cells by a
    plan per shard; where that is unavailable (no kernel for the dtype or the shard, a wall reading across the
    periodic wrap of a grid with inlet or outlet faces), the xla step on each shard, and the note says why;
    ``native`` is refused. ``xla`` composes the boundary conditions' dense mesh forms on each shard; for a
    condition without one, the xla step runs on each shard as periodic and the boundary cells by the per-shard
    plan (:class:`ShardedPlanEngine`), and the note says why. Instrumented mode needs the dense mesh forms.
    """
    from lbm.engines.pallas import ACCELERATORS
    from lbm.engines.pallas.engine import PallasKernel

    refused = single_device_refusal(engine)
    if refused:
        raise EngineUnavailable(refused)
    if mode == "instrumented":
        layout = Layout(setup, shape)
        dense = attempt(dense_forms, setup, layout)
        if isinstance(dense, Unavailable):
            raise EngineUnavailable(f"mode=instrumented on several devices: {dense.reason}; run mode=fused on several "
                                    "devices, or mode=instrumented on one (parallel.devices=1)")
        return ShardedInstrumentedEngine(setup, layout, dense, sync=sync)
    if partitioner == "gspmd":
        return GspmdEngine(setup, shape, storage)
    platform = platform or jax.default_backend()
    layout = Layout(setup, shape, devices)
    if engine == "pallas" or engine == "auto" and platform in ACCELERATORS:
        kernel = attempt(PallasKernel, setup, layout.shard, storage, platform, None)
        plan = kernel if isinstance(kernel, Unavailable) else attempt(shard_plan, setup, layout) if (
            setup.boundaries) else None
        if not isinstance(plan, Unavailable):
            return ShardedPallasEngine(setup, layout, kernel, plan, storage)
        chosen = xla_on_shards(setup, layout, storage)
        chosen.note = f"{chosen.note}; the xla step on each shard ({plan.reason})"
        return chosen
    return xla_on_shards(setup, layout, storage)


def xla_on_shards(setup: Setup, layout: Layout, storage: str) -> Engine:
    """The xla engine on a mesh: the dense mesh forms, else the xla step with the per-shard plan (the note says why)."""
    dense = attempt(dense_forms, setup, layout)
    if not isinstance(dense, Unavailable):
        return ShardedEngine(setup, layout, dense, storage)
    chosen = plan_engine(setup, layout, storage)
    chosen.note = f"{chosen.note}; not the dense mesh forms ({dense.reason})"
    return chosen


__all__ = ["DenseForms", "GspmdEngine", "Layout", "ShardPlan", "ShardedEngine", "ShardedInstrumentedEngine",
           "ShardedPallasEngine", "ShardedPlanEngine", "make_sharded", "plan_engine"]
