"""A fused chunk's kernel events split into per-step samples: by iteration of the chunk's scan loop (the fused
mode's device breakdown, lbm.profiling.breakdown)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from lbm.profiling.events import Execution


@dataclass
class ChunkSamples:
    """One chunk execution split into per-step samples: per row, per scan iteration; and the whole step."""

    steps: int
    totals: dict[str, int]
    """Device time (ns) per row over the whole chunk."""
    samples: dict[str, list[float]]
    """Per row, one per-step value (ns) per scan iteration (one per chunk without a loop)."""
    step_samples: list[float]
    """The step's device span per step (ns), one per scan iteration."""
    iterations: int


def scan_iterations(events: list[dict[str, Any]], steps: int) -> int:
    """The scan loop's iterations in a chunk of ``steps``: among the kernels' run counts above 1 that divide the
    steps, the one holding the most device time (the loop body's kernels run once per iteration, a nested loop's a
    multiple of that); else the largest count."""
    counts = Counter(str(e["hlo_op"]) for e in events)
    time_by_count: dict[int, int] = defaultdict(int)
    for e in events:
        time_by_count[counts[str(e["hlo_op"])]] += int(e["dur"])
    fits = [c for c in time_by_count if c > 1 and steps % c == 0]
    if fits:
        return max(fits, key=lambda c: (time_by_count[c], c))
    return max(counts.values(), default=1)


def chunk_samples(ex: Execution, steps: int, unit_of: Any) -> ChunkSamples:
    """Split a chunk's kernels by scan iteration (:func:`scan_iterations`): a kernel run k times per iteration (its
    count k x the iterations) gives its i-th run to iteration i // k; the others (outside the loop) are spread over
    the chunk's steps."""
    counts = Counter(str(e["hlo_op"]) for e in ex.events)
    iters = scan_iterations(ex.events, steps)
    body = {op for op, c in counts.items() if c % iters == 0} if iters > 1 else set()
    per_iter = max(1, steps // iters) if body else steps
    totals: dict[str, int] = defaultdict(int)
    outside: dict[str, int] = defaultdict(int)
    by_iter: list[dict[str, int]] = [defaultdict(int) for _ in range(iters if body else 1)]
    iter_span = [(np.inf, -np.inf) for _ in by_iter]
    seen: dict[str, int] = defaultdict(int)
    for e in sorted(ex.events, key=lambda e: int(e["ts"])):
        op, dur, ts = str(e["hlo_op"]), int(e["dur"]), int(e["ts"])
        unit = unit_of(op)
        totals[unit] += dur
        if op in body:
            i = seen[op] // (counts[op] // iters)
            seen[op] += 1
            by_iter[i][unit] += dur
            lo, hi = iter_span[i]
            iter_span[i] = (min(lo, ts), max(hi, ts + dur))
        else:
            outside[unit] += dur
    units = set(totals)
    if not body:
        samples = {u: [totals[u] / steps] for u in units}
        return ChunkSamples(steps, dict(totals), samples, [ex.span / steps], 1)
    samples = {u: [it.get(u, 0) / per_iter + outside.get(u, 0) / steps for it in by_iter] for u in units}
    loop_span = sum(hi - lo for lo, hi in iter_span)
    rest = (ex.span - loop_span) / steps  # outside the iterations: the kernels before and after the loop, gaps
    return ChunkSamples(steps, dict(totals), samples, [(hi - lo) / per_iter + rest for lo, hi in iter_span], iters)
