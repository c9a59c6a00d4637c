"""The engines on a device mesh: populations sharded along the grid axes (lbm.parallel), one block per device.

``layout``: how the grid is split; ``halo``: what the blocks exchange; ``dense``: the timestep on every block
under ``shard_map``, each boundary condition in its block form; ``shardplan``: the bulk step of each block as a
periodic grid with the boundary cells by a plan per block (Pallas, or the xla step); ``gspmd``: XLA's partitioner.
"""

from __future__ import annotations

from typing import Any

import jax

from lbm.cases.base import Setup
from lbm.config.run import single_device_refusal
from lbm.engines.base import Engine, EngineUnavailable, Unavailable, attempt
from lbm.engines.sharded.shardplan import BlockPlan, ShardedPallasEngine, ShardedPlanEngine, block_plan, plan_engine
from lbm.engines.sharded.dense import DenseForms, ShardedEngine, ShardedInstrumentedEngine, dense_forms
from lbm.engines.sharded.gspmd import GspmdEngine
from lbm.engines.sharded.layout import Layout


def make_sharded(setup: Setup, shape: tuple[int, ...], mode: str = "fused", engine: str = "auto",
                 storage: str = "compute", sync: bool = False, partitioner: str = "shard_map",
                 platform: str | None = None, devices: Any = None) -> Engine:
    """The engine on a mesh of ``shape`` blocks (over ``devices``, default JAX's); see lbm.engines.make_engine.

    ``pallas`` (and ``auto`` on a GPU or TPU) runs the Pallas kernel on each block with the boundary cells by a
    plan per block; where that is unavailable (no kernel for the dtype or the block, a wall reading across the
    periodic wrap of a grid with inlet or outlet faces), the xla step on each block, and the note says why;
    ``native`` is refused. ``xla`` composes the boundary conditions' dense block forms on each block; for a
    condition without one, the xla step runs on each block as periodic and the boundary cells by the per-block
    plan (:class:`ShardedPlanEngine`), and the note says why. Instrumented mode needs the dense block forms.
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
        kernel = attempt(PallasKernel, setup, layout.block, storage, platform, None)
        plan = kernel if isinstance(kernel, Unavailable) else attempt(block_plan, setup, layout) if (
            setup.boundaries) else None
        if not isinstance(plan, Unavailable):
            return ShardedPallasEngine(setup, layout, kernel, plan, storage)
        chosen = xla_on_blocks(setup, layout, storage)
        chosen.note = f"{chosen.note}; the xla step on each block ({plan.reason})"
        return chosen
    return xla_on_blocks(setup, layout, storage)


def xla_on_blocks(setup: Setup, layout: Layout, storage: str) -> Engine:
    """The xla engine on a mesh: the dense block forms, else the xla step with the per-block plan (the note says why)."""
    dense = attempt(dense_forms, setup, layout)
    if not isinstance(dense, Unavailable):
        return ShardedEngine(setup, layout, dense, storage)
    chosen = plan_engine(setup, layout, storage)
    chosen.note = f"{chosen.note}; not the dense block forms ({dense.reason})"
    return chosen


__all__ = ["BlockPlan", "DenseForms", "GspmdEngine", "Layout", "ShardedEngine", "ShardedInstrumentedEngine",
           "ShardedPallasEngine", "ShardedPlanEngine", "make_sharded", "plan_engine"]
