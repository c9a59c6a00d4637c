"""Measured memory bandwidth of a device, the roofline for a memory-bound LBM step: probes that stream as
memory-bound kernels do, beside the device's specification bandwidth.

Every probe kernel moves float32 arrays and is timed call by call (the median of ``repeats`` calls after a warm-up);
GB/s counts the bytes the kernel names (STREAM's convention: a write counts once; the write-allocate read a CPU may
add for a separate output array is not counted).

XLA kernels, on every device, on arrays in the TPU's native tiling (2-D, :data:`LANES` wide, rows a multiple of
:data:`SUBLANES`), each call :func:`passes` passes inside one ``lax.fori_loop`` (no dispatch between passes, as an
LBM chunk runs), the arrays donated so that every pass updates them where they lie:

``copy``        x <- 1.0001 x                 in place (1 read + 1 write per element)
``triad``       x <- x + 0.5 y                in place (2 reads + 1 write)
``copy_2buf``   y <- 1.0001 x                 into another array (STREAM's copy)
``triad_2buf``  z <- x + 0.5 y                into a third array (STREAM's triad)

On a TPU also ``pallas_copy``: x <- 1.0001 x in place by a Pallas kernel in :data:`PALLAS_BLOCK` VMEM blocks, in
the same loop. On a CPU the caller may add the host's own probe (``host``: lbm.engines.native.stream: C++ on every
core, as the native LBM kernel streams, and Q planes at once as its populations), whose kernels are ``native_*``.

Why the loop (TPU v5e, scripts/bandwidth_candidates.py, 1 GiB arrays, jax 0.10.2): one in-place pass per call moved
540 GB/s, ten passes in one ``fori_loop`` 641 GB/s (666 GB/s with 8192-wide rows), and 256 MiB arrays at one pass
per call 368 GB/s (lbm bench before this probe): each call costs about 0.6 ms beyond its passes (3.98 ms a call
against 3.36 ms a pass in the loop, 1 GiB arrays), so a call here moves at least :data:`DEVICE_BYTES_PER_CALL`.

The roofline (``bandwidth_gbs``) is the largest median of the kernels whose working set does not fit in the last
level cache (on a CPU, read from /sys; no cache is known for an accelerator's memory): the highest sustained rate
to memory this device showed in the run, so a fraction of it is never flattered by a slow reference. Each kernel's
bytes are also counted from its compiled program (lbm.hlo's traffic model: ``hlo_bytes_per_call``), and a kernel
whose program moves more than it names is reported, not used.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

KERNELS = ("copy", "triad", "copy_2buf", "triad_2buf")
"""The XLA kernels, measured on every device."""
LANES = 8192
"""The probe arrays' last axis: a multiple of the TPU's 128 lanes (8192: the fastest of 1-D, 1024 and 8192 wide in
the TPU v5e run above, by 4%)."""
SUBLANES = 8
"""Their rows: a multiple of the TPU's 8 sublanes (of float32)."""
PALLAS_BLOCK = (512, 2048)
"""One Pallas copy block (4 MiB of float32; double-buffered in and out, 16 MiB of VMEM): the fastest block of the
TPU v5e run above (551 and 562 GB/s on its two array shapes, against 537-547 GB/s for (256, 8192), (256, 4096) and
(1024, 1024); one call per pass, one run each)."""
HOST_PASSES = 1
"""Passes per call on a CPU: its dispatch is microseconds against the milliseconds of a pass over a large array."""
DEVICE_BYTES_PER_CALL = 16 * 2**30
"""Bytes a call moves at least on an accelerator (21 ms at 800 GB/s: the ~0.6 ms a call costs is 3% of it)."""
HLO_TOLERANCE = 0.01
"""A kernel whose compiled program moves more than this fraction beyond the bytes it names is not used."""
CPU_CACHE_DIR = Path("/sys/devices/system/cpu")
TARGETS_DIR = Path(__file__).parent / "targets"

log = logging.getLogger("lbm")


@dataclass(frozen=True)
class Series:
    """One probe kernel's timed calls: the bytes it names per call, the bytes it holds, the seconds of each call."""

    name: str
    bytes_per_call: int
    working_set_bytes: int
    seconds: list[float]
    threads: int | None = None
    """Host threads (the native probe); None for a device kernel."""
    source: str = "xla"
    hlo_bytes_per_call: int | None = None
    """Bytes the compiled program moves per call by lbm.hlo's traffic model (None where not counted)."""
    passes: int = 1
    """Passes over the arrays per call."""


HostProbe = Callable[[int, int], list[Series]]
"""``(bytes per array, repeats) -> series``: a probe of the host's own (lbm.engines.native.stream.measure)."""


def passes(platform: str, bytes_per_pass: int) -> int:
    """Passes of a kernel per call on ``platform``, for a kernel moving ``bytes_per_pass`` bytes a pass."""
    if platform == "cpu":
        return HOST_PASSES
    return max(1, math.ceil(DEVICE_BYTES_PER_CALL / max(1, bytes_per_pass)))


def tiled_shape(nbytes: int, itemsize: int, rows_multiple: int = SUBLANES, lanes: int = LANES) -> tuple[int, int]:
    """The 2-D ``(rows, lanes)`` shape of about ``nbytes`` bytes, rows a multiple of ``rows_multiple`` (at least
    one such multiple)."""
    rows = nbytes // itemsize // lanes // rows_multiple * rows_multiple
    return max(rows_multiple, rows), lanes


def _series(call: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``call`` (which returns arrays to wait for), after one warm-up call."""
    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    return times


def hlo_bytes(compiled: Any) -> int | None:
    """Bytes a compiled program moves per call (lbm.hlo: every kernel's reads and writes, times its loop's trips)."""
    from lbm.hlo import program_traffic

    try:
        rows = program_traffic(compiled.as_text(), [])
    except Exception:  # a backend whose compiled text lbm.hlo cannot read: not counted
        return None
    return sum((k.bytes_read + k.bytes_written) * times for k, times in rows)


def scale_of(i: Any, value: float) -> Any:
    """``value``, computed from the loop index ``i``: a term scaled by it is then not loop-invariant, and XLA cannot
    hoist it out of the loop into a temporary array (which would add a pass of its own)."""
    return value + 0.0 * i.astype(jnp.float32)


KERNEL_ARRAYS = {"copy": (1, 2, 1), "triad": (2, 3, 2), "copy_2buf": (2, 2, 2), "triad_2buf": (3, 3, 3)}
"""XLA kernel -> (arrays it takes, arrays named per element and pass, arrays held)."""


def xla_kernels(npasses: int) -> dict[str, tuple[Callable[..., Any], int, int, int]]:
    """name -> (jitted call of ``npasses`` passes, arrays it takes (and returns, updated, as a tuple), arrays named per
    element and pass, arrays held)."""
    def copy2(x: Any, y: Any) -> Any:  # the scale depends on the pass: XLA cannot hoist x * s out of the loop
        return lax.fori_loop(0, npasses, lambda i, c: (c[0], c[0] * scale_of(i, 1.0001)), (x, y))

    def triad2(x: Any, y: Any, z: Any) -> Any:
        return lax.fori_loop(0, npasses, lambda i, c: (c[0], c[1], c[0] + scale_of(i, 0.5) * c[1]), (x, y, z))

    def copy(x: Any) -> Any:
        return (lax.fori_loop(0, npasses, lambda _, v: v * 1.0001, x),)

    def triad(x: Any, y: Any) -> Any:
        return lax.fori_loop(0, npasses, lambda i, v: v + scale_of(i, 0.5) * y, x), y

    fns = {"copy": copy, "triad": triad, "copy_2buf": copy2, "triad_2buf": triad2}
    return {name: (jax.jit(fn, donate_argnums=tuple(range(KERNEL_ARRAYS[name][0]))), *KERNEL_ARRAYS[name])
            for name, fn in fns.items()}


def pallas_copy(shape: tuple[int, int], block: tuple[int, int], npasses: int, interpret: bool) -> Callable[[Any], Any]:
    """``npasses`` in-place passes x <- 1.0001 x of a Pallas kernel over ``shape`` in ``block`` tiles (TPU;
    ``interpret``: the interpreter, for checking on a CPU)."""
    from jax.experimental import pallas as pl

    def kernel(x_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] * 1.0001

    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    params = None
    if not interpret:
        from jax.experimental.pallas import tpu as pltpu

        nbytes = block[0] * block[1] * 4
        params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"),
                                      vmem_limit_bytes=4 * nbytes + 16 * 2**20)
    one = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
                         grid=(shape[0] // block[0], shape[1] // block[1]), in_specs=[spec], out_specs=spec,
                         input_output_aliases={0: 0}, interpret=interpret, compiler_params=params)
    return jax.jit(lambda x: lax.fori_loop(0, npasses, lambda _, v: one(v), x), donate_argnums=0)


def measure_xla(nbytes: int, repeats: int, device: Any, npasses: int | None = None) -> list[Series]:
    """The XLA kernels' series on ``device`` (arrays of about ``nbytes`` bytes in the native tiling), each with
    :func:`passes` passes per call (or ``npasses``)."""
    shape = tiled_shape(nbytes, 4)
    size = shape[0] * shape[1] * 4
    out = []
    for name in KERNELS:
        k = npasses or passes(device.platform, KERNEL_ARRAYS[name][1] * size)
        fn, takes, named, held = xla_kernels(k)[name]
        state = [jax.device_put(jnp.full(shape, 1.0 - 0.25 * j, jnp.float32), device) for j in range(takes)]
        compiled = fn.lower(*state).compile()  # called as it is: the program whose bytes are counted is the one timed
        counted = hlo_bytes(compiled)

        def call(fn: Any = compiled, state: list[Any] = state) -> Any:
            state[:] = fn(*state)
            return state

        times = _series(call, repeats)
        out.append(Series(name, named * size * k, held * size, times, hlo_bytes_per_call=counted, passes=k))
        state.clear()
    return out


def measure_pallas(nbytes: int, repeats: int, device: Any, npasses: int | None = None, interpret: bool = False,
                   block: tuple[int, int] = PALLAS_BLOCK) -> list[Series]:
    """The Pallas copy's series (a TPU kernel; ``interpret`` on another device, for checking); none where the
    compiler refuses it (logged)."""
    shape = tiled_shape(nbytes, 4, block[0])
    size = shape[0] * shape[1] * 4
    k = npasses or passes(device.platform, 2 * size)
    try:
        state = [jax.device_put(jnp.ones(shape, jnp.float32), device)]
        fn = pallas_copy(shape, block, k, interpret).lower(state[0]).compile()
        counted = hlo_bytes(fn)

        def call() -> Any:
            state[0] = fn(state[0])
            return state[0]

        times = _series(call, repeats)
    except Exception as exc:  # a block the compiler refuses: say so, measure the rest
        log.warning("the Pallas bandwidth probe did not run: %s", str(exc).splitlines()[0][:300])
        return []
    return [Series("pallas_copy", 2 * size * k, size, times, source="pallas", hlo_bytes_per_call=counted, passes=k)]


def measure_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 7, device: Any = None, dtype: Any = jnp.float32,
                      host: HostProbe | None = None) -> dict[str, Any]:
    """Sustained bandwidth (GB/s = 1e9 B/s) of every probe kernel on ``device``; ``bandwidth_gbs`` is the roofline.

    Returns, per kernel, the median, min and max GB/s, the median seconds and what a call moves and holds; plus
    ``kernels`` (their names), ``array_bytes``, ``repeats``, ``device``, ``platform``,
    ``roofline_kernel`` (which one set it), the last-level cache (``cache_bytes``; None where unknown) and the
    device's specification bandwidth where lbm/targets knows it (``spec_bandwidth_gbs``, ``fraction_of_spec``).
    ``dtype``: kept for callers; the probes move float32 (GB/s does not depend on the element type).
    """
    device = device or jax.devices()[0]
    platform = device.platform
    series = measure_xla(nbytes, repeats, device)
    if platform == "tpu":
        series += measure_pallas(nbytes, repeats, device)
    if host is not None and platform == "cpu":
        series += host(nbytes, repeats)
    cache = last_level_cache() if platform == "cpu" else None
    results = summarise(series, cache[0] if cache else None)
    shape = tiled_shape(nbytes, 4)
    results.update({"array_bytes": shape[0] * shape[1] * 4, "array_shape": list(shape), "repeats": repeats,
                    "device": str(device), "platform": platform,
                    "unit": "GB/s (1e9 bytes per second)", "cache_source": cache[1] if cache else (
                        "no cache size is known for this device's memory" if platform != "cpu" else "not found")})
    spec = spec_bandwidth(getattr(device, "device_kind", ""))
    if spec is not None:
        results["spec_bandwidth_gbs"], results["spec_source"] = spec
        results["fraction_of_spec"] = results["bandwidth_gbs"] / spec[0]
    on_chip = on_chip_memory(getattr(device, "device_kind", ""))
    results["on_chip_bytes"], results["on_chip_source"] = on_chip if on_chip else (None, None)
    return results


def summarise(series: list[Series], cache_bytes: int | None) -> dict[str, Any]:
    """Per-kernel figures of the series and the roofline: the largest median of the kernels that are neither
    cache-resident nor moving more than they name (where none is left: of the cache-resident ones, flagged
    ``roofline_cache_resident``; where every kernel moves more than it names: of all, flagged ``roofline_overcounted``)."""
    results: dict[str, Any] = {"kernels": [s.name for s in series], "cache_bytes": cache_bytes}
    usable, honest = [], []
    for s in series:
        gbs = [s.bytes_per_call / t / 1e9 for t in s.seconds]
        resident = None if cache_bytes is None else s.working_set_bytes <= cache_bytes
        extra = None if s.hlo_bytes_per_call is None else s.hlo_bytes_per_call / s.bytes_per_call - 1
        results[s.name] = {"median_gbs": statistics.median(gbs), "min_gbs": min(gbs), "max_gbs": max(gbs),
                           "median_s": statistics.median(s.seconds), "bytes_per_call": s.bytes_per_call,
                           "working_set_bytes": s.working_set_bytes, "cache_resident": resident, "source": s.source,
                           "threads": s.threads, "passes_per_call": s.passes,
                           "hlo_bytes_per_call": s.hlo_bytes_per_call}
        if extra is not None and extra > HLO_TOLERANCE:
            results[s.name]["note"] = (f"its compiled program moves {100 * extra:.0f}% more than the kernel names: "
                                       "not used as the roofline")
            continue
        honest.append(s.name)
        if not resident:
            usable.append(s.name)
    results["roofline_cache_resident"] = not usable and bool(honest)
    results["roofline_overcounted"] = not honest
    pool = usable or honest or [s.name for s in series]
    best = max(pool, key=lambda k: results[k]["median_gbs"])
    results["roofline_kernel"] = best
    results["bandwidth_gbs"] = results[best]["median_gbs"]
    return results


def _size(text: str) -> int | None:
    """Bytes of a /sys cache size (``32768K``, ``1M``, ``512``)."""
    text = text.strip()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else None


def last_level_cache(root: Path = CPU_CACHE_DIR, cpus: set[int] | None = None) -> tuple[int, str] | None:
    """Bytes of the last-level cache of the cores this process may run on (the sum over its instances: each group
    of cores sharing one counts once) and where it was read; None where /sys does not say."""
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except AttributeError:
            cpus = set(range(os.cpu_count() or 1))
    found: dict[int, dict[str, int]] = {}
    for cpu in sorted(cpus):
        for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
            try:
                kind = (index / "type").read_text().strip()
                level = int((index / "level").read_text())
                size = _size((index / "size").read_text())
                shared = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError):
                continue
            if kind in ("Unified", "Data") and size:
                found.setdefault(level, {})[shared] = size
    if not found:
        return None
    level = max(found)
    total = sum(found[level].values())
    return total, (f"{root}/cpu*/cache: level {level}, {len(found[level])} instance(s) for this process's "
                   f"{len(cpus)} core(s)")


def _target_value(device_kind: str, key: str) -> tuple[float, str] | None:
    """``key`` and its source (``<key minus its unit>_source``) of the lbm/targets entry for ``device_kind``."""
    import yaml

    if not device_kind:
        return None
    for path in sorted(TARGETS_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if data.get("device") == device_kind and data.get(key):
            return float(data[key]), str(data.get(key.rsplit("_", 1)[0] + "_source", path.name))
    return None


def spec_bandwidth(device_kind: str) -> tuple[float, str] | None:
    """The specification bandwidth (GB/s) and its source of the device kind ``device_kind`` (e.g. ``TPU v5 lite``)
    from lbm/targets, or None where no target names it."""
    return _target_value(device_kind, "bandwidth_gbs")


def on_chip_memory(device_kind: str) -> tuple[int, str] | None:
    """Bytes of the software-managed on-chip memory (a TPU's VMEM) of ``device_kind`` and their source, from
    lbm/targets, or None where no target names it."""
    found = _target_value(device_kind, "on_chip_bytes")
    return (int(found[0]), found[1]) if found else None


def lbm_bytes_per_cell(q: int, itemsize: int) -> int:
    """Minimum bytes moved per cell update: read and write every population once."""
    return 2 * q * itemsize
