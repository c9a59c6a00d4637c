"""Measured memory bandwidth of a device (copy and triad), the roofline for a memory-bound LBM step.

Four kernels, each jitted, on arrays far larger than CPU caches, outputs written into
donated buffers so that no call page-faults a fresh allocation:

``copy``        x <- 1.0001 x                 in place (1 read + 1 write per element)
``triad``       x <- x + 0.5 y                in place (2 reads + 1 write)
``copy_2buf``   y <- 1.0001 x                 into a second buffer (STREAM's copy)
``triad_2buf``  z <- x + 0.5 y                into a third buffer (STREAM's triad)

GB/s counts the bytes the kernel names (STREAM's convention: a write counts once, the
write-allocate read a CPU may add for a separate output buffer is not counted). The
roofline bandwidth is the largest median of the four: the highest sustained rate this
device showed in the run, so the fraction of roofline is never flattered by choosing a
slow reference. In-place kernels avoid write-allocate traffic, which is why they are the
fast ones on CPUs; the in-place AA-pattern LBM step moves its data the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

KERNELS = ("copy", "triad", "copy_2buf", "triad_2buf")


def _series(call: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``call`` (which returns arrays to wait for), after one warm-up call."""
    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    return times


def measure_bandwidth(
    nbytes: int = 256 * 2**20, repeats: int = 7, device: Any = None, dtype: Any = jnp.float32
) -> dict[str, Any]:
    """Sustained bandwidth (GB/s = 1e9 B/s) of the four kernels; ``bandwidth_gbs`` is the roofline.

    Returns, per kernel, the median, min and max GB/s and the median seconds; plus
    ``array_bytes``, ``repeats``, ``device`` and ``roofline_kernel`` (which one set it).
    """
    device = device or jax.devices()[0]
    item = jnp.dtype(dtype).itemsize
    n = max(1, nbytes // item)
    make = lambda v: jax.device_put(jnp.full((n,), v, dtype), device)  # noqa: E731

    copy = jax.jit(lambda x: x * 1.0001, donate_argnums=0)  # a pure copy would be elided
    triad = jax.jit(lambda x, y: x + 0.5 * y, donate_argnums=0)
    # Separate output: the output aliases the donated, otherwise unused last argument. Without
    # keep_unused=True jit prunes that argument and XLA page-faults a fresh buffer every call.
    copy2 = jax.jit(lambda x, out: x * 1.0001, donate_argnums=1, keep_unused=True)
    triad2 = jax.jit(lambda x, y, out: x + 0.5 * y, donate_argnums=2, keep_unused=True)

    state: dict[str, Any] = {"a": make(1.0), "b": make(0.5)}

    def run_copy() -> Any:
        state["a"] = copy(state["a"])
        return state["a"]

    def run_triad() -> Any:
        state["a"] = triad(state["a"], state["b"])
        return state["a"]

    def run_copy2() -> Any:
        out = copy2(state["a"], state["c"])
        state["a"], state["c"] = out, state["a"]
        return out

    def run_triad2() -> Any:
        out = triad2(state["a"], state["b"], state["c"])
        state["a"], state["c"] = out, state["a"]
        return out

    results: dict[str, Any] = {"array_bytes": n * item, "repeats": repeats, "device": str(device),
                               "unit": "GB/s (1e9 bytes per second)"}
    plan = (("copy", run_copy, 2), ("triad", run_triad, 3), ("copy_2buf", run_copy2, 2), ("triad_2buf", run_triad2, 3))
    for name, call, arrays in plan:
        if name == "copy_2buf":
            state["c"] = make(0.0)
        times = _series(call, repeats)
        gbs = [arrays * n * item / t / 1e9 for t in times]
        results[name] = {"median_gbs": statistics.median(gbs), "min_gbs": min(gbs), "max_gbs": max(gbs),
                         "median_s": statistics.median(times), "bytes_per_call": arrays * n * item}
    state.clear()
    best = max(KERNELS, key=lambda k: results[k]["median_gbs"])
    results["roofline_kernel"] = best
    results["bandwidth_gbs"] = results[best]["median_gbs"]
    return results


def lbm_bytes_per_cell(q: int, itemsize: int) -> int:
    """Minimum bytes moved per cell update: read and write every population once."""
    return 2 * q * itemsize
