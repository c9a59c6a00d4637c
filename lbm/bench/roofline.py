"""Measured memory bandwidth of a device (copy and triad), the roofline for a memory-bound LBM step."""

from __future__ import annotations

import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp


def _timed(fn: Any, x: jnp.ndarray, repeats: int) -> list[float]:
    """Seconds per call of ``fn`` (which donates and returns its input's buffer), after one warm-up."""
    x = jax.block_until_ready(fn(x))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x = jax.block_until_ready(fn(x))
        times.append(time.perf_counter() - t0)
    return times


def measure_bandwidth(
    nbytes: int = 256 * 2**20, repeats: int = 7, device: Any = None, dtype: Any = jnp.float32
) -> dict[str, Any]:
    """Sustained bandwidth (GB/s = 1e9 B/s) of jitted copy (read+write) and triad (2 reads+write).

    Outputs alias donated inputs, so no fresh buffer is page-faulted on each call; the
    arrays (``nbytes`` each) are far larger than CPU caches. Returns the median and the
    spread of each kernel and ``bandwidth_gbs``, the larger median (the roofline).
    """
    device = device or jax.devices()[0]
    n = max(1, nbytes // jnp.dtype(dtype).itemsize)
    a = jax.device_put(jnp.ones((n,), dtype), device)
    b = jax.device_put(jnp.full((n,), 0.5, dtype), device)

    copy = jax.jit(lambda x: x * 1.0001, donate_argnums=0)  # one read, one write (a pure copy is elided)
    triad_b = b

    @jax.jit
    def _triad(x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
        return x + 0.5 * y

    triad = jax.jit(_triad, donate_argnums=0)
    t_copy = _timed(copy, a, repeats)
    t_triad = _timed(lambda x: triad(x, triad_b), jnp.ones((n,), dtype), repeats)
    item = jnp.dtype(dtype).itemsize
    results: dict[str, Any] = {"array_bytes": n * item, "repeats": repeats, "device": str(device)}
    for name, times, moved in (("copy", t_copy, 2 * n * item), ("triad", t_triad, 3 * n * item)):
        gbs = [moved / t / 1e9 for t in times]
        results[name] = {"median_gbs": statistics.median(gbs), "min_gbs": min(gbs), "max_gbs": max(gbs),
                         "median_s": statistics.median(times)}
    results["bandwidth_gbs"] = max(results["copy"]["median_gbs"], results["triad"]["median_gbs"])
    return results


def lbm_bytes_per_cell(q: int, itemsize: int) -> int:
    """Minimum bytes moved per cell update: read and write every population once."""
    return 2 * q * itemsize


def roofline_mlups(bandwidth_gbs: float, q: int, itemsize: int) -> float:
    """Upper bound on million lattice updates per second for a memory-bound step."""
    return bandwidth_gbs * 1e9 / lbm_bytes_per_cell(q, itemsize) / 1e6
