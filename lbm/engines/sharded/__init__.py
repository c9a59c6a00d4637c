"""The engines on a device mesh: populations sharded along the grid axes (lbm.parallel), one block per device.

``layout``: how the grid is split; ``halo``: what the blocks exchange; ``dense``: the timestep on every block
under ``shard_map``, each boundary condition in its block form; ``blockplan``: the bulk step of each block as a
periodic grid with the boundary cells by a plan per block (Pallas, or the xla step); ``gspmd``: XLA's partitioner.
"""

from __future__ import annotations

from typing import Any

import jax

from lbm.cases.base import Setup
from lbm.engines.base import EngineUnavailable
from lbm.engines.sharded.blockplan import ShardedPallasEngine, ShardedPlanEngine
from lbm.engines.sharded.dense import ShardedEngine, ShardedInstrumentedEngine
from lbm.engines.sharded.gspmd import GspmdEngine
from lbm.engines.sharded.layout import Layout
from lbm.engines.xla import FusedEngine


def make_sharded(setup: Setup, shape: tuple[int, ...], mode: str = "fused", engine: str = "auto",
                 storage: str = "compute", sync: bool = False, partitioner: str = "shard_map",
                 platform: str | None = None, devices: Any = None) -> Any:
    """The engine on a mesh of ``shape`` blocks (over ``devices``, default JAX's); see lbm.engines.make_engine.

    ``pallas`` (and ``auto`` on a GPU or TPU) runs the Pallas kernel on each block with the boundary cells by a
    plan per block; where that is unavailable (no kernel for the dtype or the block, a wall reading across the
    periodic wrap of a grid with inlet or outlet faces), the xla step on each block, and the note says why;
    ``native`` is refused. ``xla`` composes the boundary conditions' dense block forms on each block; for a
    condition without one, the xla step runs on each block as periodic and the boundary cells by the per-block
    plan (:class:`ShardedPlanEngine`), and the note says why. Instrumented mode needs the dense block forms.
    """
    from lbm.engines.pallas import ACCELERATORS

    if engine == "native":
        raise EngineUnavailable("the native engine is single-device: use engine=xla or parallel.devices=1")
    if mode == "instrumented":
        try:
            return ShardedInstrumentedEngine(setup, shape, sync=sync)
        except EngineUnavailable as exc:
            raise EngineUnavailable(f"mode=instrumented on several devices: {exc}; run mode=fused on several "
                                    "devices, or mode=instrumented on one (parallel.devices=1)") from None
    if partitioner == "gspmd":
        return GspmdEngine(setup, shape, storage)
    platform = platform or jax.default_backend()
    if engine == "pallas" or engine == "auto" and platform in ACCELERATORS:
        try:
            return ShardedPallasEngine(setup, shape, storage, platform, devices)
        except EngineUnavailable as exc:
            chosen = xla_on_blocks(setup, shape, storage, devices)
            chosen.note = f"{chosen.note}; the xla step on each block ({exc})"
            return chosen
    return xla_on_blocks(setup, shape, storage, devices)


def xla_on_blocks(setup: Setup, shape: tuple[int, ...], storage: str, devices: Any) -> FusedEngine:
    """The xla engine on a mesh: the dense block forms, else the xla step with the per-block plan (the note says why)."""
    try:
        return ShardedEngine(setup, shape, storage, devices)
    except EngineUnavailable as exc:
        chosen = ShardedPlanEngine(setup, shape, storage, devices=devices)
        chosen.note = f"{chosen.note}; not the dense block forms ({exc})"
        return chosen


__all__ = ["GspmdEngine", "Layout", "ShardedEngine", "ShardedInstrumentedEngine", "ShardedPallasEngine",
           "ShardedPlanEngine", "make_sharded"]
