"""How a chunk of steps is computed: one interface (lbm.engines.base.Engine), several engines.

``xla``: the stage functions composed in one jit (the reference, any device);
``native``: a generated C++ kernel for the bulk plus the stage functions on boundary cells (CPU);
``pallas``: one Pallas kernel per step for the bulk plus the same boundary plan (GPU, TPU; interpreted on CPU);
``instrumented``: one jit per stage, annotated, for the profiler;
``auto``: native on a CPU where it builds; pallas on a GPU; on a TPU pallas for a wall-free box, where the in-place
pair runs a grid whose one condition is a half-way wall (resting or moving: its kernels apply it), and where it runs
an inflow, an outflow and a full-way obstacle (lbm.engines.pallas.faces), xla for other boundaries
(:func:`auto_choice` says why); xla where the chosen one does not support the setup.
"""

from __future__ import annotations

import math
from typing import Any

import jax

from lbm.boundaries.base import FormUnavailable
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

    ``mesh`` (shards per grid axis, lbm.parallel) with more than one shard gives a sharded engine:
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
    engine, why = auto_choice(setup, platform)
    chosen = attempt(_named, engine, setup, storage, platform, native)
    if not isinstance(chosen, Unavailable):
        chosen.note = "; ".join(filter(None, [chosen.note, why]))
        return chosen
    fallback = XlaEngine(setup, storage)
    fallback.note = chosen.reason
    return fallback


def auto_choice(setup: Setup, platform: str) -> tuple[str, str]:
    """The engine ``auto`` picks for ``setup`` on ``platform``, and why (the bench run that decided it), or ''."""
    if platform == "cpu":
        return "native", ""
    if platform != "tpu":
        return ("pallas", "") if platform in ACCELERATORS else ("xla", "")
    # TPU v5e, jax 0.10.2, `lbm bench variants=[pallas,xla]` (docs/performance.md, "Running on a TPU"): the Pallas
    # kernel wins on a wall-free box (periodic D2Q9 1024^2: 8693 against 5546 MLUPS; D3Q19 256^3, in place: 4316
    # against 578).
    # With walls its gathers and scatters over the boundary cells serialise on a TPU and xla wins (the default
    # cylinder 420x180: 297 against 2139; the D3Q19 cylinder 420x180x32: 61 against 92).
    # In 2D the pair pads y to a multiple of 1024 (lbm.engines.pallas.planes.padded_ny) up to P / ny = aa.MAX_PAD: deviceless
    # v5e 4098^2 90.0 B per cell and step (1.25x the pair's 72 B at 4096^2, measured at 9064 MLUPS) against xla's 690 B
    # (measured 1267 MLUPS), so pallas there too (docs/performance.md, "The 2D pair on padded rows"); it groups k
    # rows of x per plane, each padded to a multiple of 128 (planes.row_group: 4098^2 8212 MLUPS, 81 B).
    # The 2D pair runs from 40 MiB of populations (aa.AA2D_MIN_BYTES), with boundaries too: below it xla's step stays on
    # the chip and ties (cavity 1024^2: 5361 against 5187), above it the pair wins (cavity 1500^2 5516 against 2151,
    # cylinder 1680x720 3328 against 2716, the box 1500^2 5764 against 1960; docs/tpu-v5e/2026-12-07/pair-small/).
    if setup.wall_free:
        return "pallas", "auto on a TPU: pallas for a wall-free box, where it is faster than xla"
    # The in-place AA kernels apply one half-way wall themselves (lbm.engines.pallas.walls: no gathers or scatters):
    # their traffic is about 1.16x the box's (R + 1 rows of 10 of 19 slots read per step, and 4 B of link bits), so
    # pallas there, as for the box, before a measurement on the chip (docs/performance.md, Running on a TPU).
    from lbm.engines.pallas.walls import walls_unsupported

    if not walls_unsupported(setup):
        return "pallas", "auto on a TPU: pallas, whose in-place kernels apply the half-way walls themselves"
    # The 2D pair with an inflow, an outflow and a full-way obstacle (lbm.engines.pallas.faces): the solid bit in its
    # kernels, the face rows and the force on the xla side, no gather of cell lists; on the v5e the cylinder at
    # 3360x1440 5037 MLUPS against xla's 1688, at 6720x2880 7591 against 1172, the D3Q19 cylinder at 256x128x128 3606
    # against 589 and at 420x180x32 737 against 296 (docs/performance.md, "The cylinder on the 2D pair").
    from lbm.engines.pallas.faces import faces_unsupported

    if not faces_unsupported(setup):
        return "pallas", ("auto on a TPU: pallas, the in-place pair with the inflow, the outflow and the obstacle "
                          "(lbm.engines.pallas.faces)")
    # Half-way and interpolated obstacles with an inflow (the boundary plan's gathers and scatters on pallas): xla 4-12x
    # faster on the v5e at every size measured, 420x180 to 3360x1440 and the D3Q19 cylinder 256x120x64, although
    # pallas plans fewer bytes (docs/performance.md, "Half-way and interpolated obstacles").
    return "xla", ("auto on a TPU: xla, faster than pallas where there are boundary cells the in-place kernels "
                   "do not apply (docs/performance.md, Running on a TPU)")


def _named(engine: str, setup: Setup, storage: str, platform: str, native: Native | None = None) -> Engine:
    """The engine called ``engine``; EngineUnavailable where it cannot run (a component without a form it needs
    too: FormUnavailable)."""
    try:
        return _built(engine, setup, storage, platform, native)
    except EngineUnavailable:
        raise
    except FormUnavailable as exc:
        raise EngineUnavailable(str(exc)) from None


def _built(engine: str, setup: Setup, storage: str, platform: str, native: Native | None) -> Engine:
    """The engine called ``engine`` built for ``setup`` (its constructor's exceptions pass)."""
    if engine == "native":
        from lbm.engines.native.engine import NativeEngine

        return NativeEngine(setup, storage, native)
    if engine == "pallas":
        from lbm.engines.pallas.engine import PallasEngine

        return PallasEngine(setup, storage, platform=platform)
    return XlaEngine(setup, storage)


__all__ = ["ENGINES", "auto_choice", "MODES", "REFUSED_STORAGES", "STORAGES", "Engine", "EngineUnavailable", "make_engine"]
