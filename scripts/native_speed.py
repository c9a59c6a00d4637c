"""Native engine speed against grid size and threads, beside the same-run copy/triad bandwidth.

    .venv/bin/python scripts/native_speed.py [--d2 256,512,...] [--d3 32,64,...] [--threads 1,2]
                                             [--prefetch 0,2048] [--precision float32] [--out FILE.json]

For every grid (D2Q9 n², D3Q19 n³, periodic Taylor-Green box, BGK), every thread count
(LBM_NATIVE_THREADS) and every software prefetch distance (LBM_NATIVE_PREFETCH_BYTES, 0: none), the fused
native chunk is timed, the variants' repeats interleaved (median of --repeats repeats of an even
number of steps lasting about --min-time seconds) and reported as MLUPS, effective GB/s
(72 B per cell in D2Q9 float32: each population read and written once) and the fraction of the
in-place copy bandwidth measured in the same run (lbm.roofline, as `lbm bench` measures it; plus
numpy's single-threaded in-place and two-buffer copy for the one-thread reference).
Prints a markdown table; --out writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import numpy as np


def numpy_bandwidth(nbytes: int, repeats: int = 5) -> dict[str, float]:
    """Single-threaded numpy copy in place (x *= c) and into a second buffer (y = c x), GB/s (bytes named)."""
    x = np.ones(nbytes // 4, np.float32)
    y = np.zeros_like(x)
    out: dict[str, float] = {}
    for name, call in (("np_copy_inplace", lambda: np.multiply(x, np.float32(1.0), out=x)),
                       ("np_copy_2buf", lambda: np.multiply(x, np.float32(1.0), out=y))):
        call()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out[name] = 2 * x.nbytes / statistics.median(times) / 1e9
    return out


def time_native(lattice: str, grid: tuple[int, ...], precision: str, threads: list[int], prefetch: list[str],
                min_time: float, repeats: int) -> list[dict[str, Any]]:
    """MLUPS of the native fused chunk on the periodic box for each thread count and prefetch distance (one engine,
    one compile; the variants' repeats interleaved)."""
    import jax

    from lbm.bench.throughput import PRECISIONS, STORAGE_ITEMSIZE, BenchConfig, make_setup
    from lbm.engines import make_engine

    cfg = BenchConfig("periodic", lattice, grid, "native", precision)
    setup = make_setup(cfg)
    compute, storage = PRECISIONS[precision]
    stepper = make_engine(setup, "fused", engine="native", storage=storage)
    assert stepper.name == "native", stepper.name
    f = setup.initial_populations()
    cells = math.prod(setup.shape)
    q = setup.lattice.q
    item = STORAGE_ITEMSIZE.get(storage, np.dtype(compute).itemsize)
    bpc = 2 * q * item
    # probe: steps per repeat for min_time at the fastest thread count
    stepper.compile(f, 2)
    f, _ = stepper.advance(f, 2)
    jax.block_until_ready(f)
    t0 = time.perf_counter()
    f, _ = stepper.advance(f, 2)
    jax.block_until_ready(f)
    per_step = (time.perf_counter() - t0) / 2
    n = max(2, 2 * math.ceil(min_time / per_step / 2))
    stepper.compile(f, n)
    variants = [(t, pf) for t in threads for pf in prefetch]
    times: dict[tuple[int, str], list[float]] = {v: [] for v in variants}
    for r in range(repeats + 1):  # round 0 warms up; each round times every variant once, in rotating order
        for j in np.roll(np.arange(len(variants)), r):
            t, pf = variants[j]
            os.environ["LBM_NATIVE_THREADS"] = str(t)
            if pf:
                os.environ["LBM_NATIVE_PREFETCH_BYTES"] = pf
            else:
                os.environ.pop("LBM_NATIVE_PREFETCH_BYTES", None)
            t0 = time.perf_counter()
            f, _ = stepper.advance(f, n)
            jax.block_until_ready(f)
            if r:
                times[variants[j]].append(time.perf_counter() - t0)
    rows = []
    for (t, pf), secs in times.items():
        mlups = [cells * n / s / 1e6 for s in secs]
        med = statistics.median(mlups)
        rows.append({"lattice": lattice, "grid": list(grid), "precision": precision, "threads": t,
                     "prefetch_bytes": pf or "default", "steps": n, "population_bytes": cells * q * item,
                     "bytes_per_cell": bpc, "mlups": med, "mlups_values": mlups, "effective_gbs": med * bpc / 1e3})
    os.environ.pop("LBM_NATIVE_PREFETCH_BYTES", None)
    os.environ.pop("LBM_NATIVE_THREADS", None)
    del f, stepper
    return rows


def main(argv: list[str]) -> int:
    """Measure and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d2", default="256,512,1024,2048,4096,8192")
    ap.add_argument("--d3", default="32,64,128,192,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prefetch", default="", help="LBM_NATIVE_PREFETCH_BYTES values to compare, e.g. 0,2048 "
                    "(empty: the kernel's default)")
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--min-time", type=float, default=0.4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bandwidth-bytes", type=int, default=512 * 2**20)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from lbm.roofline import measure_bandwidth

    threads = [int(t) for t in args.threads.split(",")]
    prefetch = args.prefetch.split(",")
    result: dict[str, Any] = {"load_average_start": os.getloadavg(), "rows": []}
    bw = measure_bandwidth(args.bandwidth_bytes)
    result["bandwidth"] = {k: bw[k]["median_gbs"] for k in ("copy", "triad", "copy_2buf", "triad_2buf")}
    result["bandwidth"].update(numpy_bandwidth(args.bandwidth_bytes))
    print("bandwidth GB/s:", {k: round(v, 1) for k, v in result["bandwidth"].items()}, flush=True)
    ref = result["bandwidth"]["copy"]
    plan = [("d2q9", (int(n), int(n))) for n in args.d2.split(",") if n] + \
           [("d3q19", (int(n),) * 3) for n in args.d3.split(",") if n]
    print("| lattice | grid | MB | threads | prefetch | MLUPS | GB/s | % of in-place copy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for lattice, grid in plan:
        for row in time_native(lattice, grid, args.precision, threads, prefetch, args.min_time, args.repeats):
            row["fraction_of_copy"] = row["effective_gbs"] / ref
            result["rows"].append(row)
            print(f"| {lattice} | {'x'.join(map(str, grid))} | {row['population_bytes'] / 1e6:.0f} | {row['threads']} "
                  f"| {row['prefetch_bytes']} | {row['mlups']:.1f} | {row['effective_gbs']:.1f} "
                  f"| {100 * row['fraction_of_copy']:.0f}% |",
                  flush=True)
    bw2 = measure_bandwidth(args.bandwidth_bytes)
    result["bandwidth_after"] = {k: bw2[k]["median_gbs"] for k in ("copy", "triad", "copy_2buf", "triad_2buf")}
    result["load_average_end"] = os.getloadavg()
    print("bandwidth after GB/s:", {k: round(v, 1) for k, v in result["bandwidth_after"].items()},
          "load", result["load_average_start"], result["load_average_end"])
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
