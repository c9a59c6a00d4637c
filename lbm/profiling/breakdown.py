"""The per-stage breakdown of a profiled run: one table per clock, each with one statistic, computed from a TraceDB.

Two clocks, never mixed in one table:

- **device**: the XLA execution events (CPU thunks, GPU/TPU kernels: slices carrying
  ``hlo_op``/``hlo_module``/``run_id``), matched to the host dispatch that launched them
  (:mod:`lbm.profiling.events`). The headline table wherever such events exist.
- **host**: the ``jax.profiler`` annotation spans on the Python thread (``timestep`` and, in
  instrumented mode, one span per stage call). With asynchronous dispatch a stage span measures
  dispatching the stage, not running it, unless the stage blocks (``profile.sync=true``).

Every table lists the canonical stages (skipped ones say so), then (fused mode) the sets of
stages XLA fused into the same kernels and the kernels without a stage scope, then three rows:
``sum of stages``, ``unattributed`` (the step minus that sum) and ``timestep``. Its statistic is
the mean time per step (``mean_ms`` = ``total_ms`` / ``calls``), and ``share`` is a row's mean
over the sum of the stage rows' means: the shares add up to 1. ``median_ms``, ``p95_ms`` and
``min_ms`` describe each row's spread (per call, or per scan iteration in fused mode).

Fused mode runs chunks of the run's own length, one dispatch per chunk, under one span each (with
its number of steps). A chunk's kernels are attributed to rows by the stages in their
``named_scope`` metadata; a kernel that runs once per scan iteration gives one sample per
iteration, divided by the steps per iteration; kernels outside the loop are spread over the
chunk's steps.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lbm.errors import LbmError
from lbm.hlo import stages_in
from lbm.profiling import queries
from lbm.profiling.events import (
    CompileInfo,
    Execution,
    Span,
    assign_executions,
    executable_kernels,
    executions_of,
    signature_filter,
    spans,
    within,
)
from lbm.profiling.tracedb import TraceDB
from lbm.stages import FUSED_STEP, HALO, STAGES, TIMESTEP

__all__ = ["Breakdown", "CompileInfo", "Execution", "Span", "Table", "compute", "summarize"]

REPORTED = (*STAGES, HALO)
"""Stage names a breakdown reports: the timestep's stages and, in sharded runs, the halo exchange."""

STEP = TIMESTEP
"""Name of the per-step (instrumented) or per-chunk (fused) annotation, a StepTraceAnnotation."""
WARMUP_MARK = "lbm.profile.warmup"
STEADY_MARK = "lbm.profile.steady"
"""Spans the profiler puts around the warm-up and the steady-state chunks."""
UNSCOPED = "(unscoped)"
"""Row name for fused-mode kernels whose HLO carries no stage scope (copies XLA inserted, loop bookkeeping)."""
SUM_ROW = "sum of stages"
GAP_ROW = "unattributed"
"""The rows after the stages: their sum, and the step's time that no stage row holds (step minus sum)."""
TIMED = ("measured", "fused-group", "unscoped")
"""Statuses of the rows that carry a time and a share."""
STATISTIC = "mean_ms"
"""The statistic of every table: shares are computed from it."""

REQUIRED_COLUMNS = ["stage", "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "total_ms", "share", "clock"]
"""DESIGN.md's required columns of breakdown.csv."""
CSV_COLUMNS = ["stage", "status", "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "min_ms", "total_ms",
               "share", "share_of", "clock", "bytes_accessed", "gbs", "roofline_pct", "kernels", "contains", "ops"]
"""Columns of breakdown.csv (the required ones and more), one table: the headline clock's."""

HOST_ASYNC = "host: annotation span (asynchronous dispatch; execution included only where the runtime ran it inline)"
HOST_SYNC = "host: annotation span, blocked until the stage finished (profile.sync=true): dispatch + execution"
HOST_STEP = "host: timestep annotation span (dispatch, execution and the loop's per-chunk sync), per step"
DEVICE_SPAN = "device: XLA execution events, first kernel start to last kernel end per call"
DEVICE_BUSY = "device: XLA kernel events, sum of kernel durations per step (scan iterations: per iteration / steps)"


def summarize(values_ns: Sequence[float], first_ns: float | None = None, total_ns: float | None = None,
              calls: int | None = None) -> dict[str, Any]:
    """calls, first_call/median/mean/p95/min/total in ms: the spread from the samples ``values_ns``, the mean as
    ``total_ns / calls`` (both default to the samples' sum and number; p95: linear interpolation)."""
    vals = [float(v) for v in values_ns]
    calls = len(vals) if calls is None else calls
    total = sum(vals) if total_ns is None else float(total_ns)
    out: dict[str, Any] = {"calls": calls, "first_call_ms": None if first_ns is None else first_ns / 1e6}
    if vals and calls:
        out.update(median_ms=statistics.median(vals) / 1e6, mean_ms=total / calls / 1e6,
                   p95_ms=float(np.percentile(vals, 95)) / 1e6, min_ms=min(vals) / 1e6, total_ms=total / 1e6)
    else:
        out.update(median_ms=None, mean_ms=None, p95_ms=None, min_ms=None, total_ms=None)
    return out


@dataclass
class Table:
    """One clock's rows: stages, fused sets, unscoped kernels, then the sum, the unattributed gap and the step."""

    clock: str
    """``device`` or ``host``."""
    description: str
    """What the clock measures, in words."""
    rows: list[dict[str, Any]]
    statistic: str = STATISTIC

    def row(self, name: str) -> dict[str, Any] | None:
        """The row of that stage (or set, or sum, gap, step) name."""
        return next((r for r in self.rows if r["stage"] == name), None)

    def timed(self) -> list[dict[str, Any]]:
        """The rows that carry a share (stages and fused sets with a time of their own)."""
        return [r for r in self.rows if r.get("status") in TIMED]

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {"clock": self.clock, "description": self.description, "statistic": self.statistic, "rows": self.rows}


def finish_table(clock: str, description: str, listed: list[dict[str, Any]], step: dict[str, Any]) -> Table:
    """Shares from the statistic over the timed rows; the sum, unattributed and step rows appended."""
    timed = [r for r in listed if r.get("status") in TIMED and r.get(STATISTIC) is not None]
    total = sum(r[STATISTIC] for r in timed)
    for r in listed:
        r["clock"] = clock
        if r in timed:
            r["share"] = r[STATISTIC] / total if total else None
            r["share_of"] = STATISTIC
    rows = list(listed)
    if timed:
        calls = max(int(r["calls"]) for r in timed)
        sum_total = sum(r["total_ms"] or 0.0 for r in timed)
        rows.append({"stage": SUM_ROW, "status": "sum", "calls": calls, "mean_ms": total, "total_ms": sum_total,
                     "clock": clock, "contains": " ".join(sorted({s for r in timed for s in r["contains"].split()},
                                                                  key=_stage_order))})
        if step.get(STATISTIC) is not None:
            rows.append({"stage": GAP_ROW, "status": "unattributed", "calls": step["calls"],
                         "mean_ms": step[STATISTIC] - total, "total_ms": (step["total_ms"] or 0.0) - sum_total,
                         "clock": clock, "coverage": total / step[STATISTIC] if step[STATISTIC] else None})
    rows.append({"stage": STEP, "status": "step", **step, "clock": clock})
    return Table(clock, description, rows)


@dataclass
class Breakdown:
    """The result: a table per clock (the headline first), kernels, window, compile, notes, attribution."""

    mode: str
    tables: dict[str, Table]
    headline: str
    kernels: list[dict[str, Any]]
    window: dict[str, Any]
    notes: list[str]
    attribution: dict[str, Any]
    compile: dict[str, Any] = field(default_factory=dict)
    timeline: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The headline table's rows (breakdown.csv)."""
        return self.tables[self.headline].rows

    def stage_rows(self) -> list[dict[str, Any]]:
        """The headline table's timed rows (stages or fused stage sets with a share)."""
        return self.tables[self.headline].timed()

    @property
    def timestep(self) -> dict[str, Any]:
        """The step row of each table, by clock."""
        return {clock: t.row(STEP) or {} for clock, t in self.tables.items()}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of everything (breakdown.json)."""
        return {"mode": self.mode, "headline": self.headline, "statistic": STATISTIC, "window": self.window,
                "compile": self.compile, "rows": self.rows,
                "tables": {k: t.to_json() for k, t in self.tables.items()},
                "kernels": self.kernels, "attribution": self.attribution, "notes": self.notes}


def _stage_order(name: str) -> tuple[int, int, str]:
    parts = name.split("+")
    order = {s: i for i, s in enumerate(REPORTED)}
    return (order.get(parts[0], 99), len(parts), name)


def _listed(stages: Iterable[str]) -> tuple[str, ...]:
    """The rows of a breakdown: every timestep stage (skipped ones say so) and the halo where the run has one."""
    return STAGES + ((HALO,) if HALO in set(stages) else ())


def _steady_steps(steps: list[Span], marks: list[Span], warmup: int | None) -> tuple[list[Span], list[Span], str]:
    steady_marks = [m for m in marks if m.name == STEADY_MARK]
    if steady_marks:
        steady = within(steps, steady_marks)
        return steady, [s for s in steps if s not in steady], f"timesteps inside the '{STEADY_MARK}' span"
    skip = 1 if warmup is None else warmup
    return steps[skip:], steps[:skip], f"all timesteps after the first {skip} (no '{STEADY_MARK}' marker in the trace)"


def compute(db: TraceDB, stages: Sequence[str] | None = None, *, mode: str | None = None, sync: bool | None = None,
            compile_info: CompileInfo | None = None, warmup: int | None = None) -> Breakdown:
    """The breakdown of the trace in ``db``; ``stages``: the case's active stages (None: found in the trace)."""
    info = compile_info or CompileInfo()
    found = spans(db, [*REPORTED, STEP, WARMUP_MARK, STEADY_MARK])
    steps_all = [s for s in found if s.name == STEP]
    marks = [s for s in found if s.name in (WARMUP_MARK, STEADY_MARK)]
    stage_spans = [s for s in found if s.name in REPORTED]
    if not steps_all and not stage_spans:
        raise LbmError(f"{db.source or 'trace'}: no lbm '{STEP}' or stage annotations found: "
                       "is it a trace of python -m lbm run profile.enabled=true? (--sql still works on any trace)")
    if mode is None:
        mode = "instrumented" if stage_spans else "fused"
    if stages is None:
        fused_kernels = info.kernels(FUSED_STEP)
        stages = [s for s in REPORTED if any(sp.name == s for sp in stage_spans)] if mode == "instrumented" else [
            s for s in REPORTED if any(s in v for v in fused_kernels.values())]
    stages = [s for s in REPORTED if s in stages]
    track_counts: dict[int, int] = defaultdict(int)  # the host thread is the one holding the timestep spans
    for s in steps_all or stage_spans:
        track_counts[s.track_id] += 1
    host_track = max(track_counts, key=lambda t: track_counts[t])
    steps_all = [s for s in steps_all if s.track_id == host_track]
    stage_spans = [s for s in stage_spans if s.track_id == host_track]
    steady, warm, how = _steady_steps(steps_all, [m for m in marks if m.track_id == host_track], warmup)
    notes: list[str] = []
    if not steady:
        notes.append("the steady-state window holds no timestep: figures are empty (run more steps than profile.warmup_steps)")
    events = db.query(queries.DEVICE_EVENTS)
    on_device = [e for e in events if str(e.get("process_name") or "").startswith("/device:")]
    if on_device:  # GPU/TPU: the kernels on the device planes, not host-side launch events that name the same op
        events = on_device
    executions = executions_of(events, [set(e.get("kernels", {})) for e in info.executables.values()])
    if any(ex.run_id.startswith("seq") for ex in executions):
        notes.append("some device events carry no run_id: grouped into executions by time order and kernel repetition")
    window = {"steady_calls": len(steady), "steady_steps": sum(s.steps for s in steady),
              "warmup_steps": sum(s.steps for s in warm), "selection": how,
              "steady_start_ns": steady[0].ts if steady else None, "steady_end_ns": steady[-1].end if steady else None}
    if mode == "instrumented":
        bd = _instrumented(stages, stage_spans, steps_all, steady, executions, info, sync, notes)
    else:
        bd = _fused(stages, steps_all, steady, executions, info, notes)
    first = _first(steps_all)
    window["first_call_steps"] = first.steps if first else None
    bd.window = window
    if not executions:
        notes.append("the trace holds no XLA execution events (hlo_op/run_id): only the host clock is reported")
    return bd


def _first(items: list[Span]) -> Span | None:
    return min(items, key=lambda s: s.ts) if items else None


def _host_step(steps_all: list[Span], steady: list[Span]) -> dict[str, Any]:
    """The step row on the host clock: each span over its steps (a fused chunk covers many)."""
    first = _first(steps_all)
    return summarize([s.dur / s.steps for s in steady], first.dur / first.steps if first else None,
                     sum(s.dur for s in steady), sum(s.steps for s in steady))


def _skipped(stage: str) -> dict[str, Any]:
    return {"stage": stage, "status": "skipped", "note": "not used by this case"}


def _instrumented(stages: list[str], stage_spans: list[Span], steps_all: list[Span], steady: list[Span],
                  executions: list[Execution], info: CompileInfo, sync: bool | None, notes: list[str]) -> Breakdown:
    steady_calls = within(stage_spans, steady)
    dispatches = {s: [sp for sp in stage_spans if sp.name == s] for s in stages}
    cands = signature_filter(executions, info, stages)
    if all(c is None for c in cands.values()):
        notes.append("no compile report and no per-stage module names: executions matched to stages by time order only")
    matched = assign_executions(dispatches, executions, cands, executable_kernels(info, stages))
    inline = blocked = linked = 0
    per_stage_dev: dict[str, list[int]] = defaultdict(list)
    kernels: dict[tuple[str, str], list[int]] = defaultdict(list)
    for sp in steady_calls:
        ex = matched.get(sp.id)
        if ex is None:
            continue
        linked += 1
        per_stage_dev[sp.name].append(ex.span)
        blocked += ex.end <= sp.end
        for e in ex.events:
            kernels[(sp.name, str(e["hlo_op"]))].append(int(e["dur"]))
            inline += sp.thread is not None and e.get("thread_name") == sp.thread
    host_clock = HOST_SYNC if sync else HOST_ASYNC
    if sync is None:
        host_clock = HOST_SYNC if linked and blocked == linked else HOST_ASYNC
    host_rows: list[dict[str, Any]] = []
    dev_rows: list[dict[str, Any]] = []
    for stage in _listed(stages):
        if stage not in stages:
            host_rows.append(_skipped(stage))
            dev_rows.append(_skipped(stage))
            continue
        calls = [sp for sp in steady_calls if sp.name == stage]
        first = _first(dispatches[stage])
        n_kernels = len({op for (s, op) in kernels if s == stage}) or None
        host_rows.append({"stage": stage, "status": "measured", "contains": stage,
                          **summarize([c.dur for c in calls], first.dur if first else None)})
        first_dev = matched[first.id].span if first is not None and first.id in matched else None
        dev_rows.append({"stage": stage, "status": "measured", "contains": stage, "kernels": n_kernels,
                         **summarize(per_stage_dev.get(stage, []), first_dev)})
    step_dev = []
    for st in steady:
        inside = [matched[sp.id] for sp in steady_calls if sp.id in matched and sp.ts >= st.ts and sp.end <= st.end]
        if inside:
            step_dev.append(max(x.end for x in inside) - min(x.start for x in inside))
    first_step = _first(steps_all)
    first_inside = [matched[sp.id] for sp in stage_spans if first_step is not None and sp.id in matched
                    and sp.ts >= first_step.ts and sp.end <= first_step.end]
    first_dev = max(x.end for x in first_inside) - min(x.start for x in first_inside) if first_inside else None
    tables = {"device": finish_table("device", DEVICE_SPAN + "; timestep: first kernel start to last kernel end of "
                                     "the step's stage executions", dev_rows, summarize(step_dev, first_dev)),
              "host": finish_table("host", f"{host_clock}; timestep: {HOST_STEP}", host_rows,
                                   _host_step(steps_all, steady))}
    kern_rows = [{"unit": s, "kernel": op, "stages": s, "calls": len(v), "median_us": statistics.median(v) / 1e3,
                  "total_ms": sum(v) / 1e6} for (s, op), v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    n_steady = len(steady_calls)
    if n_steady and linked < n_steady:
        notes.append(f"device events matched to {linked} of {n_steady} steady stage calls; device columns use those")
    attribution = {"stage_calls": n_steady, "matched_executions": linked, "executions_in_trace": len(executions),
                   "calls_blocked_until_done": blocked, "kernel_events_on_host_thread": inline,
                   "host_clock": host_clock}
    headline = "device" if linked else "host"
    timeline = {"steady": steady, "stage_spans": stage_spans, "matched": matched}
    return Breakdown("instrumented", _ordered(tables, headline), headline, kern_rows, {}, notes, attribution,
                     timeline=timeline)


def _ordered(tables: dict[str, Table], headline: str) -> dict[str, Table]:
    return {headline: tables[headline], **{k: v for k, v in tables.items() if k != headline}}


def _kernel_stage_map(info: CompileInfo, executions: list[Execution], stages: list[str]) -> dict[str, list[str]]:
    mapping = info.kernels(FUSED_STEP)
    if mapping:
        return mapping
    out: dict[str, list[str]] = {}
    for ex in executions:  # GPU traces may carry the op_name path as tf_op
        for e in ex.events:
            if e.get("tf_op"):
                out.setdefault(str(e["hlo_op"]), stages_in(str(e["tf_op"]), stages))
    return out


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


def chunk_samples(ex: Execution, steps: int, unit_of: Any) -> ChunkSamples:
    """Split a chunk's kernels by scan iteration: a kernel seen as often as the most frequent one runs once per
    iteration (its i-th event is iteration i's); the others (outside the loop) are spread over the chunk's steps."""
    counts = Counter(str(e["hlo_op"]) for e in ex.events)
    iters = max(counts.values(), default=1)
    body = {op for op, c in counts.items() if c == iters} if iters > 1 else set()
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
            i = seen[op]
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


def _fused(stages: list[str], steps_all: list[Span], steady: list[Span], executions: list[Execution],
           info: CompileInfo, notes: list[str]) -> Breakdown:
    mods = signature_filter(executions, info, [FUSED_STEP])[FUSED_STEP]
    if mods is None:  # no compile report: the modules of executions that start inside timestep spans
        mods = {ex.module for ex in executions for st in steps_all if st.ts <= ex.start <= st.end} or None
    matched = assign_executions({STEP: steps_all}, executions, {STEP: mods})
    kmap = _kernel_stage_map(info, executions, stages)
    origins = info.origins(FUSED_STEP)
    if not kmap:
        notes.append("no compile report (compile/compile.json) and no op_name in the trace: kernels cannot be "
                     "attributed to stages; only the whole step is timed")
    if not stages:
        stages = [s for s in REPORTED if any(s in v for v in kmap.values())]

    def unit_of(op: str) -> str:
        st = [s for s in kmap.get(op, []) if s in REPORTED]
        return "+".join(st) if st else UNSCOPED

    chunks = [(st, chunk_samples(matched[st.id], st.steps, unit_of)) for st in steady if st.id in matched]
    first_step = _first(steps_all)
    first = chunk_samples(matched[first_step.id], first_step.steps, unit_of) \
        if first_step is not None and first_step.id in matched else None
    units = sorted({u for _, c in chunks for u in c.totals}, key=_stage_order)
    n_steps = sum(c.steps for _, c in chunks)
    kernels: dict[str, list[int]] = defaultdict(list)
    for st, _ in chunks:
        for e in matched[st.id].events:
            kernels[str(e["hlo_op"])].append(int(e["dur"]))
    unit_rows: dict[str, dict[str, Any]] = {}
    for u in units:
        status = "unscoped" if u == UNSCOPED else "fused-group" if "+" in u else "measured"
        first_ns = first.totals.get(u, 0) / first.steps if first is not None else None
        row = {"stage": u, "status": status,
               **summarize([v for _, c in chunks for v in c.samples.get(u, [0.0] * c.iterations)], first_ns,
                           sum(c.totals.get(u, 0) for _, c in chunks), n_steps),
               "kernels": len({op for op in kernels if unit_of(op) == u}),
               "contains": " ".join(u.split("+")) if u != UNSCOPED else ""}
        if u == UNSCOPED:
            row["ops"] = "; ".join(f"{op}: {origins.get(op, 'no HLO metadata (not in the compile report)')}"
                                   for op in sorted(k for k in kernels if unit_of(k) == UNSCOPED))
        unit_rows[u] = row
    rows: list[dict[str, Any]] = []
    for stage in _listed(stages):
        if stage not in stages:
            rows.append(_skipped(stage))
        elif stage in unit_rows:
            rows.append(unit_rows.pop(stage))
        else:
            groups = sorted((u for u in units if stage in u.split("+")), key=_stage_order)
            rows.append({"stage": stage, "status": "fused", "contains": stage,
                         "note": ("fused with other stages: see " + ", ".join(groups)) if groups
                         else "no kernel of this stage found in the trace"})
    rows += [unit_rows[u] for u in sorted(unit_rows, key=_stage_order)]
    device_step = summarize([v for _, c in chunks for v in c.step_samples],
                            matched[first_step.id].span / first_step.steps if first is not None and first_step else None,
                            sum(matched[st.id].span for st, _ in chunks), n_steps)
    host_rows = [_skipped(s) if s not in stages else {"stage": s, "status": "fused", "contains": s,
                                                     "note": "no host span of its own in fused mode"}
                 for s in _listed(stages)]
    tables = {"device": finish_table("device", DEVICE_BUSY + "; timestep: the chunk's device span (first kernel "
                                     "start to last kernel end) per step", rows, device_step),
              "host": finish_table("host", HOST_STEP, host_rows, _host_step(steps_all, steady))}
    kern_rows = [{"unit": unit_of(op), "kernel": op, "stages": " ".join(kmap.get(op, [])), "calls": len(v),
                  "median_us": statistics.median(v) / 1e3, "total_ms": sum(v) / 1e6,
                  "origin": origins.get(op, "") if unit_of(op) == UNSCOPED else ""}
                 for op, v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    if steady and len(chunks) < len(steady):
        notes.append(f"device executions matched to {len(chunks)} of {len(steady)} steady chunks")
    attribution = {"steady_chunks": len(steady), "steady_steps": sum(s.steps for s in steady),
                   "matched_executions": len(chunks), "executions_in_trace": len(executions),
                   "scan_iterations_per_chunk": sorted({c.iterations for _, c in chunks}),
                   "modules": sorted(mods) if mods else None}
    headline = "device" if chunks else "host"
    timeline = {"steady": steady, "stage_spans": [], "matched": matched, "unit_of": {op: unit_of(op) for op in kmap}}
    return Breakdown("fused", _ordered(tables, headline), headline, kern_rows, {}, notes, attribution,
                     timeline=timeline)
