"""What the breakdown reads from a trace: host annotation spans, device executions, and the compile report.

A device *execution* is the kernel events of one run of one executable (sharing ``hlo_module`` and
``run_id``); each is matched to the host dispatch that launched it (same executable, oldest pending
dispatch first). Container thunks (``while``, ``conditional``, ``call``) are left out: their events
enclose the kernels they run, which are events of their own.

On a TPU the device's timelines say it differently: an ``XLA Modules`` line with one event per program run
(``jit_<name>(<program id>)``, with its ``run_id``) and an ``XLA Ops`` line with one event per op run, named by
the op (``fusion.3``), with ``tf_op``, ``source``, ``hlo_category``, ``bytes_accessed`` and ``model_flops``. There an
execution is a program run's event and the op events inside it (:func:`program_executions`); its device time is
the program run's own event.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lbm.profiling import queries
from lbm.profiling.tracedb import TraceDB

CONTAINER = re.compile(r"^(while|conditional|call)(\.\d+)?$")
"""hlo_op names of thunks that enclose other kernels' events (a scanned chunk's loop): never counted as work."""


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
    steps: int = 1
    """Timesteps the span covers (a fused chunk's ``steps`` argument; 1 for one step)."""

    @property
    def end(self) -> int:
        """End time (ns)."""
        return self.ts + self.dur


PROGRAM_RUN = re.compile(r"^(?P<module>.+?)\((?P<program>\d+)\)$")
"""A TPU's XLA Modules event name: the HLO module's name and the program id (an unsigned 64-bit integer)."""


@dataclass
class Execution:
    """One run of one executable on the device: the kernel events sharing a run_id."""

    module: str
    run_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    program_id: str | None = None
    """The program's id, where the trace names it (a TPU's XLA Modules events)."""
    window: tuple[int, int] | None = None
    """(start, end) ns of the program run's own event (a TPU's XLA Modules line); None: the kernels' extent."""

    @property
    def start(self) -> int:
        """The program run's start, else the first kernel's (ns)."""
        return self.window[0] if self.window else min(int(e["ts"]) for e in self.events)

    @property
    def end(self) -> int:
        """The program run's end, else the last kernel's (ns)."""
        return self.window[1] if self.window else max(int(e["ts"]) + int(e["dur"]) for e in self.events)

    @property
    def span(self) -> int:
        """Device time: the program run's event where the trace has one, else first kernel start to last kernel
        end (ns)."""
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

    def origins(self, name: str) -> dict[str, str]:
        """Kernel name → where it comes from (HLO op, named scopes of its operands and users), for the kernels of
        an executable that carry no stage scope."""
        e = self.executables.get(name)
        return dict(e.get("unscoped", {})) if e else {}


def spans(db: TraceDB, names: Iterable[str]) -> list[Span]:
    """Host annotation spans with these names, in time order."""
    rows = db.query(queries.named_slices(names))
    return [Span(int(r["id"]), int(r["ts"]), int(r["dur"]), str(r["name"]), int(r["track_id"]), r.get("thread_name"),
                 r.get("step_num"), int(r.get("steps") or 1)) for r in rows]


def within(children: list[Span], windows: list[Span]) -> list[Span]:
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
    events = [e for e in events if not CONTAINER.match(str(e["hlo_op"]))]
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


def program_executions(ops: list[dict[str, Any]], programs: list[dict[str, Any]]) -> tuple[list[Execution], int]:
    """A TPU's executions: each ``XLA Modules`` event (a program run) with the ``XLA Ops`` events that start inside
    it on the same device (containers left out; each op event gets ``hlo_module`` and ``run_id``); and the number of
    op events that start inside no program run."""
    runs: dict[str, list[tuple[int, int, Execution]]] = defaultdict(list)
    out: list[Execution] = []
    for m in sorted(programs, key=lambda m: int(m["ts"])):
        name = str(m["name"])
        found = PROGRAM_RUN.match(name)
        module, program = (found["module"], found["program"]) if found else (name, None)
        ts, dur = int(m["ts"]), int(m["dur"])
        ex = Execution(module, str(m.get("run_id") if m.get("run_id") is not None else f"at{ts}"), [], program,
                       (ts, ts + dur))
        runs[str(m.get("process_name"))].append((ts, ts + dur, ex))
        out.append(ex)
    starts = {dev: [r[0] for r in rs] for dev, rs in runs.items()}
    outside = 0
    for e in ops:
        op = str(e["hlo_op"])
        if CONTAINER.match(op):
            continue
        dev, ts = str(e.get("process_name")), int(e["ts"])
        i = bisect.bisect_right(starts.get(dev, []), ts) - 1
        if i < 0 or ts >= runs[dev][i][1]:
            outside += 1
            continue
        ex = runs[dev][i][2]
        ex.events.append({**e, "hlo_module": ex.module, "run_id": ex.run_id})
    return out, outside


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


def assign_in_order(dispatches: dict[str, list[Span]], executions: list[Execution],
                    candidates: dict[str, set[str] | None]) -> dict[int, Execution]:
    """Match the i-th dispatch of each executable to the i-th run of its program where both counts agree (a TPU's
    program runs name their program, and its device clock may run ahead of the host's by more than the time from a
    dispatch to its run); the other executables by time order (:func:`assign_executions`)."""
    out: dict[int, Execution] = {}
    used: set[int] = set()
    rest: dict[str, list[Span]] = {}
    for name, spans in dispatches.items():
        mods = candidates.get(name)
        runs = sorted((ex for ex in executions if mods is not None and ex.module in mods), key=lambda x: x.start)
        if runs and len(runs) == len(spans):
            for sp, ex in zip(sorted(spans, key=lambda s: s.ts), runs, strict=True):
                out[sp.id] = ex
                used.add(id(ex))
        else:
            rest[name] = spans
    if rest:
        out.update(assign_executions(rest, [ex for ex in executions if id(ex) not in used], candidates))
    return out


def signature_filter(executions: list[Execution], info: CompileInfo, names: Iterable[str]) -> dict[str, set[str] | None]:
    """Per executable: the module names its executions may carry (from the compile report, else jit_<name> or, as
    the instrumented engine names a stage's function, jit_stage_<name>)."""
    seen = {ex.module for ex in executions}
    out: dict[str, set[str] | None] = {}
    for n in names:
        mod = info.module(n)
        guessed = [m for m in (f"jit_{n}", f"jit_stage_{n}") if m in seen]
        out[n] = {mod} if mod else {guessed[0]} if guessed else None
    return out


def executable_kernels(info: CompileInfo, names: list[str]) -> dict[str, set[str]] | None:
    """The kernels of each named executable, when the compile report lists them all."""
    sets = {n: set(info.kernels(n)) for n in names if info.kernels(n)}
    return sets if len(sets) == len(names) else None




ASYNC_OPS_LINE = "Async XLA Ops"
"""A TPU's line of asynchronous copies: they overlap the ops of the XLA Ops line, which are the device's time."""


def device_executions(db: TraceDB, kernel_sets: Iterable[set[str]] = ()) -> tuple[list[Execution], bool, list[str]]:
    """The trace's device executions, whether they are a TPU's program runs (XLA Modules and XLA Ops lines) rather
    than kernel events carrying ``hlo_op`` (CPU thunks, GPU kernels), and notes on how they were found."""
    notes: list[str] = []
    events = db.query(queries.DEVICE_EVENTS)
    on_device = [e for e in events if str(e.get("process_name") or "").startswith("/device:")
                 and e.get("thread_name") != ASYNC_OPS_LINE]
    if not on_device:
        ops = db.query(queries.XLA_OPS)
        if ops:
            executions, outside = program_executions(ops, db.query(queries.XLA_MODULES))
            if outside:
                notes.append(f"{outside} of {len(ops)} '{queries.DEVICE_OPS_LINE}' events lie in no "
                             f"'{queries.DEVICE_MODULES_LINE}' event (program run): left out")
            return executions, True, notes
    if on_device:  # GPU: the kernels on the device planes, not host-side launch events that name the same op
        events = on_device
    executions = executions_of(events, kernel_sets)
    if any(ex.run_id.startswith("seq") for ex in executions):
        notes.append("some device events carry no run_id: grouped into executions by time order and kernel repetition")
    return executions, False, notes


def short_source(source: Any) -> str | None:
    """A trace's ``source`` (file:line) from the package on (``lbm/engines/pallas/engine.py:95``), else as given."""
    if not source:
        return None
    text = str(source)
    at = text.rfind("/lbm/")
    return text[at + 1:] if at >= 0 else text


def _int_or_none(v: Any) -> int | None:
    try:
        return None if v is None or v == "" else int(float(v))
    except (TypeError, ValueError):
        return None


def op_facts(event: Mapping[str, Any], program_id: str | None = None) -> dict[str, Any]:
    """What a TPU's op event says of its op: category, bytes accessed and model flops per run, program, named scope
    and source line (empty for kernel events that carry none of them)."""
    facts = {"category": event.get("hlo_category"), "bytes_per_call": _int_or_none(event.get("bytes_accessed")),
             "model_flops_per_call": _int_or_none(event.get("model_flops")), "program_id": program_id,
             "tf_op": event.get("tf_op"), "source": short_source(event.get("source"))}
    return {k: v for k, v in facts.items() if v is not None}
