"""Per-kernel (per-fusion) device times of a compiled step, from a short jax.profiler trace."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax


def kernel_times(run: Callable[[], Any], steps: int, top: int = 25) -> dict[str, Any]:
    """Trace one call of ``run`` (``steps`` timesteps) and return each XLA kernel's time per step (µs).

    Kernels are the trace's execution events that carry an ``hlo_op`` (CPU thunks, GPU
    kernels), named by their HLO instruction (``fusion.12``, ``ynn_fusion``, custom calls);
    the clock is the device clock of those events. Only the ``top`` costliest are kept.
    """
    from lbm.profiling.pipeline import device_events

    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(run())
        rows = device_events(Path(tmp))
    per_op: dict[str, list[float]] = {}
    for r in rows:
        name = r.get("hlo_op") or r["name"]
        per_op.setdefault(str(name), []).append(float(r["dur"]) / 1e3)
    total = sum(sum(v) for v in per_op.values())
    ranked = sorted(per_op.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "clock": "device: XLA execution events of one traced call, summed per HLO instruction and divided by steps",
        "steps_traced": steps,
        "total_us_per_step": total / steps if steps else None,
        "kernels": {name: {"us_per_step": sum(v) / steps, "share": sum(v) / total if total else 0.0,
                           "events": len(v), "median_event_us": statistics.median(v)} for name, v in ranked},
    }
