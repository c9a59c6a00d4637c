"""The per-stage breakdown of a profiled run: one table per clock, each with one statistic, computed from a TraceDB.

Two clocks, never mixed in one table:

- **device**: the XLA execution events (CPU thunks, GPU kernels: slices carrying
  ``hlo_op``/``hlo_module``/``run_id``; a TPU's ``XLA Ops`` events inside its ``XLA Modules``
  events, the program runs), matched to the host dispatch that launched them
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
``named_scope`` metadata (the trace's ``tf_op`` where it gives one, widened to the compile
report's stages where those hold it); a kernel that runs once per scan iteration gives one sample
per iteration, divided by the steps per iteration; kernels outside the loop are spread over the
chunk's steps (lbm.profiling.chunks). On a TPU the step is the chunk's program run; in instrumented mode there, a stage's
time is its program run's ops and the step the sum of its program runs, and where the device works
under half of the host's step a note says so and why.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lbm.errors import LbmError
from lbm.hlo import stages_in
from lbm.profiling import queries
from lbm.profiling.chunks import chunk_samples
from lbm.profiling.events import (
    CompileInfo,
    Execution,
    Span,
    assign_executions,
    assign_in_order,
    device_executions,
    executable_kernels,
    op_facts,
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

DEVICE_SOURCES = {False: "kernel events carrying hlo_op (CPU thunks, GPU kernels)",
                  True: "a TPU's XLA Ops events (ops, by named scope) within its XLA Modules events (program runs)"}
"""Where a trace's device events come from, by whether they are a TPU's program runs."""
IDLE_SHARE = 0.5
"""A step whose device time is under this share of its host time is reported as one the device idles through."""

HOST_ASYNC = "host: annotation span (asynchronous dispatch; execution included only where the runtime ran it inline)"
HOST_SYNC = "host: annotation span, blocked until the stage finished (profile.sync=true): dispatch + execution"
HOST_STEP = "host: timestep annotation span (dispatch, execution and the loop's per-chunk sync), per step"
DEVICE_SPAN = "device: XLA execution events, first kernel start to last kernel end per call"
DEVICE_BUSY = "device: XLA kernel events, sum of kernel durations per step (scan iterations: per iteration / steps)"
TPU_OPS = ("device: a TPU's XLA Ops events (containers left out), sum of op durations per stage call, attributed by "
           "the program the stage dispatched")
TPU_STEP = "timestep: the XLA Modules events (program runs) of the step's stages, summed"
TPU_FUSED = ("device: a TPU's XLA Ops events (containers left out), sum of op durations per step (scan iterations: "
             "per iteration / steps), attributed by named scope (tf_op)")
TPU_CHUNK = "timestep: the chunk's XLA Modules event (its program run) per step"


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
    executions, programs, found_notes = device_executions(db, [set(e.get("kernels", {}))
                                                               for e in info.executables.values()])
    notes += found_notes
    window = {"steady_calls": len(steady), "steady_steps": sum(s.steps for s in steady),
              "warmup_steps": sum(s.steps for s in warm), "selection": how,
              "steady_start_ns": steady[0].ts if steady else None, "steady_end_ns": steady[-1].end if steady else None}
    if mode == "instrumented":
        bd = _instrumented(stages, stage_spans, steps_all, steady, executions, info, sync, notes, programs)
    else:
        bd = _fused(stages, steps_all, steady, executions, info, notes, programs)
    first = _first(steps_all)
    window["first_call_steps"] = first.steps if first else None
    bd.window = window
    bd.attribution["device_events"] = DEVICE_SOURCES[programs]
    if not executions:
        notes.append("the trace holds no XLA execution events (kernel events with hlo_op, or a TPU's "
                     f"'{queries.DEVICE_OPS_LINE}' and '{queries.DEVICE_MODULES_LINE}' lines): only the host clock "
                     "is reported")
    idle_note(bd)
    return bd


def idle_note(bd: Breakdown) -> None:
    """Where the device works less than IDLE_SHARE of a step's host time, a note that says so and why."""
    dev, host = bd.tables.get("device"), bd.tables.get("host")
    if bd.headline != "device" or dev is None or host is None:
        return
    d, h = (dev.row(STEP) or {}).get(STATISTIC), (host.row(STEP) or {}).get(STATISTIC)
    if not d or not h or d >= IDLE_SHARE * h:
        return
    bd.attribution["device_busy_share_of_host_step"] = d / h
    window = bd.attribution.get("device_window_ms")
    span = f"; the step's device work runs within {window:.4f} ms" if window else ""
    bd.notes.append(f"the device idles for most of a step: it works {d:.4f} ms of a {h:.4f} ms step on the host clock "
                    f"({100 * d / h:.0f} %{span}); cause: {bd.attribution.get('idle_cause', 'the host')}; the host "
                    "clock bounds the step")


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
                  executions: list[Execution], info: CompileInfo, sync: bool | None, notes: list[str],
                  programs: bool = False) -> Breakdown:
    """Per stage call, its execution; ``programs``: a TPU's program runs, whose stage time is the sum of its ops and
    whose step time is the sum of the step's program runs (else: first kernel start to last kernel end)."""
    steady_calls = within(stage_spans, steady)
    dispatches = {s: [sp for sp in stage_spans if sp.name == s] for s in stages}
    cands = signature_filter(executions, info, stages)
    if all(c is None for c in cands.values()):
        notes.append("no compile report and no per-stage module names: executions matched to stages by time order only")
    # a TPU's program runs name their program: matched in order, by module name (the compile report's kernel list
    # names no op of a loop nested in a kernel, and the device clock may run ahead of the host's)
    matched = assign_in_order(dispatches, executions, cands) if programs else \
        assign_executions(dispatches, executions, cands, executable_kernels(info, stages))

    def stage_time(ex: Execution) -> int:
        return ex.busy if programs else ex.span

    inline = blocked = linked = 0
    per_stage_dev: dict[str, list[int]] = defaultdict(list)
    kernels: dict[tuple[str, str], list[int]] = defaultdict(list)
    facts: dict[tuple[str, str], dict[str, Any]] = {}
    for sp in steady_calls:
        ex = matched.get(sp.id)
        if ex is None:
            continue
        linked += 1
        per_stage_dev[sp.name].append(stage_time(ex))
        blocked += ex.end <= sp.end
        for e in ex.events:
            key = (sp.name, str(e["hlo_op"]))
            kernels[key].append(int(e["dur"]))
            facts.setdefault(key, op_facts(e, ex.program_id))
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
        first_dev = stage_time(matched[first.id]) if first is not None and first.id in matched else None
        dev_rows.append({"stage": stage, "status": "measured", "contains": stage, "kernels": n_kernels,
                         **summarize(per_stage_dev.get(stage, []), first_dev)})

    step_dev, step_window, first_dev = _instrumented_steps(steps_all, steady, steady_calls, stage_spans, matched,
                                                           programs)
    description = (f"{TPU_OPS}; {TPU_STEP}" if programs else
                   DEVICE_SPAN + "; timestep: first kernel start to last kernel end of the step's stage executions")
    tables = {"device": finish_table("device", description, dev_rows, summarize(step_dev, first_dev)),
              "host": finish_table("host", f"{host_clock}; timestep: {HOST_STEP}", host_rows,
                                   _host_step(steps_all, steady))}
    kern_rows = [{"unit": s, "kernel": op, "stages": s, "calls": len(v), "median_us": statistics.median(v) / 1e3,
                  "total_ms": sum(v) / 1e6, **facts.get((s, op), {})}
                 for (s, op), v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    n_steady = len(steady_calls)
    if n_steady and linked < n_steady:
        notes.append(f"device events matched to {linked} of {n_steady} steady stage calls; device columns use those")
    attribution = {"stage_calls": n_steady, "matched_executions": linked, "executions_in_trace": len(executions),
                   "calls_blocked_until_done": blocked, "kernel_events_on_host_thread": inline,
                   "host_clock": host_clock,
                   "device_window_ms": statistics.mean(step_window) / 1e6 if step_window else None,
                   "idle_cause": "instrumented mode dispatches one jit per stage from Python, and the device waits "
                                 "for each dispatch"}
    headline = "device" if linked else "host"
    timeline = {"steady": steady, "stage_spans": stage_spans, "matched": matched}
    return Breakdown("instrumented", _ordered(tables, headline), headline, kern_rows, {}, notes, attribution,
                     timeline=timeline)


def _instrumented_steps(steps_all: list[Span], steady: list[Span], steady_calls: list[Span], stage_spans: list[Span],
                        matched: dict[int, Execution], programs: bool) -> tuple[list[int], list[int], int | None]:
    """Per steady step its device time (a TPU's: its program runs summed; else first kernel start to last kernel
    end of its stage executions) and its window (first start to last end); the first step's device time."""

    def step_time(inside: list[Execution]) -> int:
        if programs:
            return sum(x.span for x in inside)
        return max(x.end for x in inside) - min(x.start for x in inside)

    step_dev, step_window = [], []
    for st in steady:
        inside = [matched[sp.id] for sp in steady_calls if sp.id in matched and sp.ts >= st.ts and sp.end <= st.end]
        if inside:
            step_dev.append(step_time(inside))
            step_window.append(max(x.end for x in inside) - min(x.start for x in inside))
    first_step = _first(steps_all)
    first_inside = [matched[sp.id] for sp in stage_spans if first_step is not None and sp.id in matched
                    and sp.ts >= first_step.ts and sp.end <= first_step.end]
    return step_dev, step_window, step_time(first_inside) if first_inside else None


def _ordered(tables: dict[str, Table], headline: str) -> dict[str, Table]:
    return {headline: tables[headline], **{k: v for k, v in tables.items() if k != headline}}


def kernel_stage_map(reported: dict[str, list[str]], events: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Kernel → stages: the named scope the trace gives the kernel as it ran (``tf_op``: a TPU's every op, some GPU
    kernels), widened to the compile report's stages where those hold it (a fusion of several stages' instructions,
    whose tf_op names one); the compile report's where the trace gives no scope."""
    traced: dict[str, list[str]] = {}
    for e in events:
        if e.get("tf_op"):
            traced.setdefault(str(e["hlo_op"]), stages_in(str(e["tf_op"]), REPORTED))
    out = dict(reported)
    for op, scoped in traced.items():
        known = reported.get(op)
        out[op] = known if known is not None and set(scoped) <= set(known) else scoped
    return out


def chunk_modules(executions: list[Execution], info: CompileInfo, steps_all: list[Span], programs: bool) -> set[str] | None:
    """The module names of the fused chunk's executions: the compile report's; without one, a TPU's longest-running
    program during the chunks (a run overlapping a chunk's span: the device clock may run ahead of the host's), or
    the modules of executions that start inside the chunks' spans."""
    mods = signature_filter(executions, info, [FUSED_STEP])[FUSED_STEP]
    if mods is not None:
        return mods
    if programs:
        held: dict[str, int] = defaultdict(int)
        for ex in executions:
            if any(ex.start <= st.end and ex.end >= st.ts for st in steps_all):
                held[ex.module] += ex.span
        return {max(held, key=lambda m: held[m])} if held else None
    return {ex.module for ex in executions for st in steps_all if st.ts <= ex.start <= st.end} or None


def _unscoped_origin(op: str, facts: dict[str, Any], origins: dict[str, str]) -> str:
    """Where an unscoped kernel comes from: the trace's source line (and scope), else the compile report's."""
    if facts.get("source"):
        return f"{facts['source']} (scope {facts['tf_op']})" if facts.get("tf_op") else f"{facts['source']} (no scope)"
    return origins.get(op, "no HLO metadata (not in the compile report)")


def _fused_stage_rows(stages: list[str], units: list[str], unit_rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The fused device table's rows: each listed stage (its own unit's row, skipped, or fused into a group's), then
    the remaining units (groups, unscoped) in stage order."""
    unit_rows = dict(unit_rows)
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
    return rows + [unit_rows[u] for u in sorted(unit_rows, key=_stage_order)]


def _fused(stages: list[str], steps_all: list[Span], steady: list[Span], executions: list[Execution],
           info: CompileInfo, notes: list[str], programs: bool = False) -> Breakdown:
    """Per chunk, its execution's kernels by row; ``programs``: a TPU's program runs (the step: the chunk's run)."""
    mods = chunk_modules(executions, info, steps_all, programs)
    matched = (assign_in_order if programs else assign_executions)({STEP: steps_all}, executions, {STEP: mods})
    kmap = kernel_stage_map(info.kernels(FUSED_STEP), (e for ex in matched.values() for e in ex.events))
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
    facts: dict[str, dict[str, Any]] = {}
    for st, _ in chunks:
        ex = matched[st.id]
        for e in ex.events:
            kernels[str(e["hlo_op"])].append(int(e["dur"]))
            facts.setdefault(str(e["hlo_op"]), op_facts(e, ex.program_id))

    def origin(op: str) -> str:
        return _unscoped_origin(op, facts.get(op, {}), origins)

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
            mine = sorted((k for k in kernels if unit_of(k) == UNSCOPED), key=lambda k: (-sum(kernels[k]), k))
            row["ops"] = "; ".join(f"{op}: {origin(op)}" for op in mine)  # the costliest first
        unit_rows[u] = row
    rows = _fused_stage_rows(stages, units, unit_rows)
    device_step = summarize([v for _, c in chunks for v in c.step_samples],
                            matched[first_step.id].span / first_step.steps if first is not None and first_step else None,
                            sum(matched[st.id].span for st, _ in chunks), n_steps)
    host_rows = [_skipped(s) if s not in stages else {"stage": s, "status": "fused", "contains": s,
                                                     "note": "no host span of its own in fused mode"}
                 for s in _listed(stages)]
    description = (f"{TPU_FUSED}; {TPU_CHUNK}" if programs else
                   DEVICE_BUSY + "; timestep: the chunk's device span (first kernel start to last kernel end) per step")
    tables = {"device": finish_table("device", description, rows, device_step),
              "host": finish_table("host", HOST_STEP, host_rows, _host_step(steps_all, steady))}
    kern_rows = [{"unit": unit_of(op), "kernel": op, "stages": " ".join(kmap.get(op, [])), "calls": len(v),
                  "median_us": statistics.median(v) / 1e3, "total_ms": sum(v) / 1e6, **facts.get(op, {}),
                  "origin": origin(op) if unit_of(op) == UNSCOPED else ""}
                 for op, v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    if steady and len(chunks) < len(steady):
        notes.append(f"device executions matched to {len(chunks)} of {len(steady)} steady chunks")
    attribution = {"steady_chunks": len(steady), "steady_steps": sum(s.steps for s in steady),
                   "matched_executions": len(chunks), "executions_in_trace": len(executions),
                   "scan_iterations_per_chunk": sorted({c.iterations for _, c in chunks}),
                   "modules": sorted(mods) if mods else None,
                   "idle_cause": "the host: between chunks (dispatch, the per-chunk sync and the run loop's "
                                 "observations) the device waits"}
    headline = "device" if chunks else "host"
    timeline = {"steady": steady, "stage_spans": [], "matched": matched, "unit_of": {op: unit_of(op) for op in kmap}}
    return Breakdown("fused", _ordered(tables, headline), headline, kern_rows, {}, notes, attribution,
                     timeline=timeline)
