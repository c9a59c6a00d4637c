"""What the breakdown reads from a trace: host annotation spans, device executions, and the compile report.

A device *execution* is the kernel events of one run of one executable (sharing ``hlo_module`` and
``run_id``); each is matched to the host dispatch that launched it (same executable, oldest pending
dispatch first). Container thunks (``while``, ``conditional``, ``call``) are left out: their events
enclose the kernels they run, which are events of their own.
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


def signature_filter(executions: list[Execution], info: CompileInfo, names: Iterable[str]) -> dict[str, set[str] | None]:
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


def executable_kernels(info: CompileInfo, names: list[str]) -> dict[str, set[str]] | None:
    """The kernels of each named executable, when the compile report lists them all."""
    sets = {n: set(info.kernels(n)) for n in names if info.kernels(n)}
    return sets if len(sets) == len(names) else None


