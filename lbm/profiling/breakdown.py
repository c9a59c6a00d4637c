"""The per-stage breakdown of a profiled run, computed from a TraceDB with the shared SQL queries.

Two clocks, never mixed in one number:

- **host**: the ``jax.profiler`` annotation spans on the Python thread (``timestep`` and, in
  instrumented mode, one span per stage call). With asynchronous dispatch a stage span
  measures dispatching the stage, not running it, unless the stage blocks
  (``profile.sync=true``) or the runtime happened to run it inline.
- **device**: the XLA execution events (CPU thunks, GPU/TPU kernels: slices carrying
  ``hlo_op``/``hlo_module``/``run_id``). Events sharing a ``run_id`` form one execution; each
  execution is matched to the host dispatch that launched it (same executable, first come
  first served in time order). An execution's device time is its span on the device, first
  kernel start to last kernel end (CPU thunks of one execution may run in parallel).

Instrumented mode: one row per stage, host figures in the main columns and device figures in
``device_*`` columns. Fused mode: the stages run inside one executable, so rows are the sets
of stages that XLA fused into the same kernels (from ``named_scope`` metadata in the
optimised HLO), timed by the device events of those kernels; a stage that never has a
kernel of its own is listed as ``fused`` without a number of its own.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lbm.errors import LbmError
from lbm.hlo import stages_in
from lbm.profiling import queries
from lbm.profiling.tracedb import TraceDB
from lbm.stages import FUSED_STEP, HALO, STAGES, TIMESTEP

REPORTED = (*STAGES, HALO)
"""Stage names a breakdown reports: the timestep's stages and, in sharded runs, the halo exchange."""


def _listed(stages: Iterable[str]) -> tuple[str, ...]:
    """The rows of a breakdown: every timestep stage (skipped ones say so) and the halo where the run has one."""
    return STAGES + ((HALO,) if HALO in set(stages) else ())

STEP = TIMESTEP
"""Name of the per-step annotation (StepTraceAnnotation) in both modes."""
WARMUP_MARK = "lbm.profile.warmup"
STEADY_MARK = "lbm.profile.steady"
"""Spans the profiler puts around the warm-up and the steady-state steps."""
COMPILE_MARK = "lbm.profile.compile"
"""Span around the fused mode's ahead-of-time compilation of the one-step chunk used in the window."""
UNSCOPED = "(unscoped)"
"""Row name for fused-mode kernels whose HLO carries no stage scope (copies XLA inserted, loop bookkeeping)."""

CSV_COLUMNS = ["stage", "status", "calls", "first_call_ms", "first_run_device_ms", "median_ms", "mean_ms", "p95_ms",
               "min_ms", "total_ms", "share", "clock", "host_median_ms", "device_median_ms", "device_mean_ms",
               "device_p95_ms", "device_min_ms", "device_total_ms", "device_share", "compile_ms", "bytes_accessed", "gbs",
               "roofline_pct", "kernels", "contains"]
"""Columns of breakdown.csv (DESIGN.md's list and more)."""

HOST_ASYNC = "host: annotation span (asynchronous dispatch; execution included only where the runtime ran it inline)"
HOST_SYNC = "host: annotation span, blocked until the stage finished (profile.sync=true): dispatch + execution"
HOST_STEP = "host: timestep annotation span (dispatch, execution and the loop's per-chunk sync)"
DEVICE_SPAN = "device: XLA execution events, first kernel start to last kernel end per call"
DEVICE_BUSY = "device: XLA kernel events, sum of kernel durations per step"


def summarize(values_ns: Sequence[float], first_ns: float | None = None) -> dict[str, Any]:
    """calls, first_call/median/mean/p95/min/total in ms from durations in ns (p95: linear interpolation)."""
    vals = [float(v) for v in values_ns]
    out: dict[str, Any] = {"calls": len(vals), "first_call_ms": None if first_ns is None else first_ns / 1e6}
    if vals:
        out.update(median_ms=statistics.median(vals) / 1e6, mean_ms=statistics.fmean(vals) / 1e6,
                   p95_ms=float(np.percentile(vals, 95)) / 1e6, min_ms=min(vals) / 1e6, total_ms=sum(vals) / 1e6)
    else:
        out.update(median_ms=None, mean_ms=None, p95_ms=None, min_ms=None, total_ms=None)
    return out


@dataclass
class Span:
    """A host annotation span (ns)."""

    id: int
    ts: int
    dur: int
    name: str
    track_id: int
    thread: str | None = None
    step_num: Any = None

    @property
    def end(self) -> int:
        """End time (ns)."""
        return self.ts + self.dur


@dataclass
class Execution:
    """One run of one executable on the device: the kernel events sharing a run_id."""

    module: str
    run_id: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def start(self) -> int:
        """First kernel start (ns)."""
        return min(int(e["ts"]) for e in self.events)

    @property
    def end(self) -> int:
        """Last kernel end (ns)."""
        return max(int(e["ts"]) + int(e["dur"]) for e in self.events)

    @property
    def span(self) -> int:
        """Device time: first kernel start to last kernel end (ns)."""
        return self.end - self.start

    @property
    def busy(self) -> int:
        """Sum of kernel durations (ns)."""
        return sum(int(e["dur"]) for e in self.events)

    @property
    def ops(self) -> frozenset[str]:
        """The kernels (hlo_op names) it ran."""
        return frozenset(str(e["hlo_op"]) for e in self.events)


@dataclass
class CompileInfo:
    """What the compile report knows about each executable: module name, kernels and the stages in each."""

    executables: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, report: Mapping[str, Any] | None) -> CompileInfo:
        """From a compile report (compile.json, :mod:`lbm.profiling.compile_report`); empty for None."""
        exes = (report or {}).get("executables", [])
        return cls({e["name"]: e for e in exes if isinstance(e, dict) and "name" in e})

    def module(self, name: str) -> str | None:
        """The HLO module name of an executable."""
        e = self.executables.get(name)
        return e.get("module") if e else None

    def kernels(self, name: str) -> dict[str, list[str]]:
        """Kernel name → stages, for an executable."""
        e = self.executables.get(name)
        return dict(e.get("kernels", {})) if e else {}


def _spans(db: TraceDB, names: Iterable[str]) -> list[Span]:
    rows = db.query(queries.named_slices(names))
    return [Span(int(r["id"]), int(r["ts"]), int(r["dur"]), str(r["name"]), int(r["track_id"]), r.get("thread_name"),
                 r.get("step_num")) for r in rows]


def _within(children: list[Span], windows: list[Span]) -> list[Span]:
    """Children contained in a window on the same track (windows of one name do not overlap)."""
    by_track: dict[int, list[Span]] = defaultdict(list)
    for w in sorted(windows, key=lambda w: w.ts):
        by_track[w.track_id].append(w)
    starts = {t: [w.ts for w in ws] for t, ws in by_track.items()}
    out = []
    for c in children:
        ws = by_track.get(c.track_id)
        if not ws:
            continue
        i = bisect.bisect_right(starts[c.track_id], c.ts) - 1
        if i >= 0 and ws[i].id != c.id and c.end <= ws[i].end:
            out.append(c)
    return out


def executions_of(events: list[dict[str, Any]], kernel_sets: Iterable[set[str]] = ()) -> list[Execution]:
    """Kernel events grouped into executions: by (hlo_module, run_id); events without a run_id (some device
    tracers omit it) by time order, a new execution whenever the module changes, a kernel repeats or (with the
    compile report's ``kernel_sets``) the kernels would fit no single executable."""
    sets = [set(s) for s in kernel_sets]
    groups: dict[tuple[str, str], Execution] = {}
    current: Execution | None = None
    seq = 0
    for e in sorted(events, key=lambda e: int(e["ts"])):
        module = str(e.get("hlo_module"))
        if e.get("run_id") is not None:
            key = (module, str(e["run_id"]))
            if key not in groups:
                groups[key] = Execution(*key)
            groups[key].events.append(e)
            continue
        op = str(e["hlo_op"])
        if (current is None or current.module != module or op in current.ops
                or (sets and not any(current.ops | {op} <= s for s in sets))):
            seq += 1
            current = groups.setdefault((module, f"seq{seq}"), Execution(module, f"seq{seq}"))
        current.events.append(e)
    return sorted(groups.values(), key=lambda x: x.start)


def assign_executions(dispatches: dict[str, list[Span]], executions: list[Execution],
                      candidates: dict[str, set[str] | None],
                      kernel_sets: dict[str, set[str]] | None = None) -> dict[int, Execution]:
    """Match executions to host dispatch spans: each execution, in time order, to the oldest pending dispatch
    (started before it) of an executable it can be (``candidates[name]``: module names, None = any; ``kernel_sets``:
    the kernels of each executable, when known)."""
    pending = {name: sorted(spans, key=lambda s: s.ts) for name, spans in dispatches.items()}
    pos = dict.fromkeys(pending, 0)
    out: dict[int, Execution] = {}
    for ex in executions:
        best = None
        for name, spans in pending.items():
            mods = candidates.get(name)
            if mods is not None and ex.module not in mods:
                continue
            if kernel_sets and name in kernel_sets and not ex.ops <= kernel_sets[name]:
                continue
            i = pos[name]
            if i < len(spans) and spans[i].ts <= ex.start and (best is None or spans[i].ts < pending[best][pos[best]].ts):
                best = name
        if best is not None:
            out[pending[best][pos[best]].id] = ex
            pos[best] += 1
    return out


def _signature_filter(executions: list[Execution], info: CompileInfo, names: Iterable[str]) -> dict[str, set[str] | None]:
    """Per executable: the module names its executions may carry (from the compile report, else jit_<name>)."""
    seen = {ex.module for ex in executions}
    out: dict[str, set[str] | None] = {}
    for n in names:
        mod = info.module(n)
        if mod:
            out[n] = {mod}
        elif f"jit_{n}" in seen:
            out[n] = {f"jit_{n}"}
        else:
            out[n] = None
    return out


def _kernel_sets(info: CompileInfo, names: list[str]) -> dict[str, set[str]] | None:
    """The kernels of each named executable, when the compile report lists them all."""
    sets = {n: set(info.kernels(n)) for n in names if info.kernels(n)}
    return sets if len(sets) == len(names) else None


@dataclass
class Breakdown:
    """The result: CSV rows, the timestep, kernels, clocks, window and notes."""

    mode: str
    rows: list[dict[str, Any]]
    timestep: dict[str, Any]
    kernels: list[dict[str, Any]]
    window: dict[str, Any]
    clocks: dict[str, str]
    notes: list[str]
    attribution: dict[str, Any]
    timeline: dict[str, Any] = field(default_factory=dict, repr=False)

    def stage_rows(self) -> list[dict[str, Any]]:
        """Rows that carry a share (stages or fused stage sets), without skipped/fused/step rows."""
        return [r for r in self.rows if r.get("share") is not None]

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of everything (breakdown.json)."""
        return {"mode": self.mode, "clocks": self.clocks, "window": self.window, "timestep": self.timestep,
                "rows": self.rows, "kernels": self.kernels, "attribution": self.attribution, "notes": self.notes}


def _steady_steps(steps: list[Span], marks: list[Span], warmup: int | None) -> tuple[list[Span], list[Span], str]:
    steady_marks = [m for m in marks if m.name == STEADY_MARK]
    if steady_marks:
        steady = _within(steps, steady_marks)
        return steady, [s for s in steps if s not in steady], f"timesteps inside the '{STEADY_MARK}' span"
    skip = 1 if warmup is None else warmup
    return steps[skip:], steps[:skip], f"all timesteps after the first {skip} (no '{STEADY_MARK}' marker in the trace)"


def compute(db: TraceDB, stages: Sequence[str] | None = None, *, mode: str | None = None, sync: bool | None = None,
            compile_info: CompileInfo | None = None, warmup: int | None = None) -> Breakdown:
    """The breakdown of the trace in ``db``; ``stages``: the case's active stages (None: found in the trace)."""
    info = compile_info or CompileInfo()
    spans = _spans(db, [*REPORTED, STEP, WARMUP_MARK, STEADY_MARK, COMPILE_MARK])
    steps_all = [s for s in spans if s.name == STEP]
    marks = [s for s in spans if s.name in (WARMUP_MARK, STEADY_MARK, COMPILE_MARK)]
    stage_spans = [s for s in spans if s.name in REPORTED]
    if not steps_all and not stage_spans:
        raise LbmError(f"{db.source or 'trace'}: no lbm '{STEP}' or stage annotations found: "
                       "is it a trace of python -m lbm run profile.enabled=true? (--sql still works on any trace)")
    if mode is None:
        mode = "instrumented" if stage_spans else "fused"
    present = [s for s in REPORTED if any(sp.name == s for sp in stage_spans)]
    if stages is None:
        stages = present if mode == "instrumented" else [s for s in REPORTED if info.kernels(FUSED_STEP)
                                                          and any(s in v for v in info.kernels(FUSED_STEP).values())]
    stages = [s for s in REPORTED if s in stages]
    # The host thread is the one holding the timestep spans.
    track_counts: dict[int, int] = defaultdict(int)
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
    window = {"steady_steps": len(steady), "warmup_steps": len(warm), "selection": how,
              "steady_start_ns": steady[0].ts if steady else None, "steady_end_ns": steady[-1].end if steady else None}
    if mode == "instrumented":
        bd = _instrumented(stages, stage_spans, steps_all, steady, executions, info, sync, notes)
    else:
        bd = _fused(stages, steps_all, steady, executions, info, notes, [m for m in marks if m.name == COMPILE_MARK])
    bd.window = window
    return bd


def _first(spans: list[Span]) -> Span | None:
    return min(spans, key=lambda s: s.ts) if spans else None


def _step_summary(steps_all: list[Span], steady: list[Span]) -> dict[str, Any]:
    first = _first(steps_all)
    out = summarize([s.dur for s in steady], first.dur if first else None)
    out["clock"] = HOST_STEP
    return out


def _instrumented(stages: list[str], stage_spans: list[Span], steps_all: list[Span], steady: list[Span],
                  executions: list[Execution], info: CompileInfo, sync: bool | None, notes: list[str]) -> Breakdown:
    steady_calls = _within(stage_spans, steady)
    dispatches = {s: [sp for sp in stage_spans if sp.name == s] for s in stages}
    cands = _signature_filter(executions, info, stages)
    if all(c is None for c in cands.values()):
        notes.append("no compile report and no per-stage module names: executions matched to stages by time order only")
    matched = assign_executions(dispatches, executions, cands, _kernel_sets(info, stages))
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
    rows: list[dict[str, Any]] = []
    host_total = sum(sp.dur for sp in steady_calls if sp.name in stages)
    dev_total = sum(sum(v) for v in per_stage_dev.values())
    for stage in _listed(stages):
        if stage not in stages:
            rows.append({"stage": stage, "status": "skipped", "clock": "not used by this case"})
            continue
        calls = [sp for sp in steady_calls if sp.name == stage]
        first = _first(dispatches[stage])
        row: dict[str, Any] = {"stage": stage, "status": "measured",
                               **summarize([c.dur for c in calls], first.dur if first else None)}
        row["share"] = (sum(c.dur for c in calls) / host_total) if host_total else None
        row["clock"] = host_clock
        row["host_median_ms"] = row["median_ms"]
        dev = summarize(per_stage_dev.get(stage, []))
        for k in ("median_ms", "mean_ms", "p95_ms", "min_ms", "total_ms"):
            row[f"device_{k}"] = dev[k]
        row["device_calls"] = dev["calls"]
        row["first_run_device_ms"] = matched[first.id].span / 1e6 if first is not None and first.id in matched else None
        row["device_share"] = (sum(per_stage_dev[stage]) / dev_total) if dev_total and per_stage_dev.get(stage) else None
        row["kernels"] = len({op for (s, op) in kernels if s == stage}) or None
        row["contains"] = stage
        rows.append(row)
    step = _step_summary(steps_all, steady)
    step_dev = [sum(matched[sp.id].span for sp in steady_calls if sp.id in matched and sp.ts >= st.ts and sp.end <= st.end)
                for st in steady]
    step["device_median_ms"] = statistics.median(step_dev) / 1e6 if step_dev and linked else None
    step["device_clock"] = "device: sum over the step's stage executions of their device spans"
    step["stages_cover"] = (host_total / sum(s.dur for s in steady)) if steady and host_total else None
    kern_rows = [{"unit": s, "kernel": op, "stages": s, "calls": len(v), "median_us": statistics.median(v) / 1e3,
                  "total_ms": sum(v) / 1e6} for (s, op), v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    n_steady = len(steady_calls)
    if n_steady and linked < n_steady:
        notes.append(f"device events matched to {linked} of {n_steady} steady stage calls; device columns use those")
    if not executions:
        notes.append("the trace holds no XLA execution events (hlo_op/run_id): device columns are empty")
    attribution = {"stage_calls": n_steady, "matched_executions": linked, "executions_in_trace": len(executions),
                   "calls_blocked_until_done": blocked, "kernel_events_on_host_thread": inline}
    clocks = {"main": host_clock, "device": DEVICE_SPAN, "timestep": HOST_STEP}
    timeline = {"steady": steady, "stage_spans": stage_spans, "matched": matched}
    return Breakdown("instrumented", rows + [{"stage": STEP, "status": "step", **{k: step[k] for k in (
        "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "min_ms", "total_ms")}, "clock": HOST_STEP,
        "host_median_ms": step["median_ms"], "device_median_ms": step["device_median_ms"]}],
        step, kern_rows, {}, clocks, notes, attribution, timeline)


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


def _fused(stages: list[str], steps_all: list[Span], steady: list[Span], executions: list[Execution],
           info: CompileInfo, notes: list[str], compile_marks: list[Span]) -> Breakdown:
    cands = _signature_filter(executions, info, [FUSED_STEP])
    mods = cands[FUSED_STEP]
    if mods is None:  # no compile report: the modules of executions that start inside timestep spans
        inside = {ex.module for ex in executions for st in steps_all if st.ts <= ex.start <= st.end}
        mods = inside or None
    matched = assign_executions({STEP: steps_all}, executions, {STEP: mods})
    kmap = _kernel_stage_map(info, executions, stages)
    if not kmap:
        notes.append("no compile report (compile/compile.json) and no op_name in the trace: kernels cannot be "
                     "attributed to stages; only the whole step is timed")
    if not stages:
        stages = [s for s in REPORTED if any(s in v for v in kmap.values())]
    per_set: dict[str, list[int]] = defaultdict(list)
    first_set: dict[str, int] = defaultdict(int)
    kernels: dict[str, list[int]] = defaultdict(list)
    step_busy: list[int] = []
    step_span: list[int] = []
    linked = 0
    set_kernels: dict[str, set[str]] = defaultdict(set)

    def unit_of(op: str) -> str:
        st = [s for s in kmap.get(op, []) if s in REPORTED]
        return "+".join(st) if st else UNSCOPED

    first_step = _first(steps_all)
    if first_step is not None and first_step.id in matched:
        for e in matched[first_step.id].events:
            first_set[unit_of(str(e["hlo_op"]))] += int(e["dur"])
    units = {unit_of(str(e["hlo_op"])) for st in steady if st.id in matched for e in matched[st.id].events}
    for st in steady:
        ex = matched.get(st.id)
        if ex is None:
            continue
        linked += 1
        step_busy.append(ex.busy)
        step_span.append(ex.span)
        acc: dict[str, int] = defaultdict(int)
        for e in ex.events:
            op = str(e["hlo_op"])
            u = unit_of(op)
            acc[u] += int(e["dur"])
            kernels[op].append(int(e["dur"]))
            set_kernels[u].add(op)
        for u in units:
            per_set[u].append(acc.get(u, 0))
    busy_total = sum(step_busy)
    order = {s: i for i, s in enumerate(REPORTED)}

    def unit_key(u: str) -> tuple[int, int, str]:
        parts = u.split("+")
        return (order.get(parts[0], 99), len(parts), u)

    step = _step_summary(steps_all, steady)
    if compile_marks and step["first_call_ms"] is not None:
        # The one-step chunk was compiled ahead of time (span COMPILE_MARK): the first call is that plus the first step.
        step["compile_span_ms"] = compile_marks[0].dur / 1e6
        step["first_call_ms"] += step["compile_span_ms"]
        notes.append(f"fused: first_call_ms = ahead-of-time compile of the one-step chunk ('{COMPILE_MARK}' span, "
                     f"{step['compile_span_ms']:.1f} ms) + the first timestep span, for the step and every stage in it "
                     "(first_run_device_ms: the kernels' device time in that first run)")
    rows: list[dict[str, Any]] = []
    unit_rows: dict[str, dict[str, Any]] = {}
    for u in sorted(per_set, key=unit_key):
        vals = per_set[u]
        status = "unscoped" if u == UNSCOPED else "fused-group" if "+" in u else "measured"
        # A fused row cannot be called alone: its first call is the step's (compile + first run); the device time
        # of its kernels in that first run is first_run_device_ms.
        r = {"stage": u, "status": status, **summarize(vals, None), "clock": DEVICE_BUSY,
             "first_call_ms": step["first_call_ms"], "first_run_device_ms": first_set[u] / 1e6 if u in first_set else None}
        r["share"] = sum(vals) / busy_total if busy_total else None
        r["host_median_ms"] = None
        for k in ("median_ms", "mean_ms", "p95_ms", "min_ms", "total_ms"):
            r[f"device_{k}"] = r[k]
        r["device_share"] = r["share"]
        r["kernels"] = len(set_kernels[u])
        r["contains"] = " ".join(u.split("+")) if u != UNSCOPED else ""
        unit_rows[u] = r
    for stage in _listed(stages):
        if stage not in stages:
            rows.append({"stage": stage, "status": "skipped", "clock": "not used by this case"})
        elif stage in unit_rows:
            rows.append(unit_rows.pop(stage))
        else:
            groups = [u for u in per_set if stage in u.split("+")]
            rows.append({"stage": stage, "status": "fused", "calls": len(steady) if groups else 0,
                         "first_call_ms": step["first_call_ms"] if groups else None,
                         "clock": "fused with other stages: see " + ", ".join(sorted(groups, key=unit_key))
                         if groups else "no kernel of this stage found in the trace",
                         "contains": stage})
    rows += [unit_rows[u] for u in sorted(unit_rows, key=unit_key)]
    step["device_median_ms"] = statistics.median(step_span) / 1e6 if step_span else None
    step["device_busy_median_ms"] = statistics.median(step_busy) / 1e6 if step_busy else None
    step["device_clock"] = DEVICE_SPAN
    rows.append({"stage": STEP, "status": "step", **{k: step[k] for k in (
        "calls", "first_call_ms", "median_ms", "mean_ms", "p95_ms", "min_ms", "total_ms")}, "clock": HOST_STEP,
        "host_median_ms": step["median_ms"], "device_median_ms": step["device_median_ms"]})
    kern_rows = [{"unit": unit_of(op), "kernel": op, "stages": " ".join(kmap.get(op, [])), "calls": len(v),
                  "median_us": statistics.median(v) / 1e3, "total_ms": sum(v) / 1e6}
                 for op, v in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))]
    if steady and linked < len(steady):
        notes.append(f"device executions matched to {linked} of {len(steady)} steady timesteps")
    if not executions:
        notes.append("the trace holds no XLA execution events: only host timestep spans are reported")
    attribution = {"steady_steps": len(steady), "matched_executions": linked, "executions_in_trace": len(executions),
                   "modules": sorted(mods) if mods else None}
    clocks = {"main": DEVICE_BUSY, "device": DEVICE_SPAN, "timestep": HOST_STEP}
    timeline = {"steady": steady, "stage_spans": [], "matched": matched, "unit_of": {op: unit_of(op) for op in kmap}}
    return Breakdown("fused", rows, step, kern_rows, {}, clocks, notes, attribution, timeline)
