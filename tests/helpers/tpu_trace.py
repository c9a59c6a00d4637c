"""Synthetic TPU-shaped traces in both of jax.profiler's forms, and an independent reader of real ones.

A trace is a list of :class:`Ev` (plane, line, name, time, stats); :func:`to_json` writes it as the trace viewer's
Chrome JSON (µs; an op named by its display name, its HLO text as ``long_name``), :func:`to_xspace` as an XPlane
protobuf (xplane.proto's field numbers, written here with the wire format by hand: no lbm code, no protobuf
package), with the op's stats in its event metadata as a TPU writes them.

:func:`raw_tpu_rows` reads a real TPU trace JSON with plain Python and the documented rule (docs/profiling.md):
the steady window's program runs (``XLA Modules`` events inside the steady marker's time, in order after the
warm-up's), the ``XLA Ops`` events inside them (``while``/``conditional``/``call`` left out), each op's stages the
stage names among the components of its ``tf_op`` path (``+``-joined names split).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ev:
    """One event: plane (process), line (thread), name, start and duration (ns), display name, metadata stats
    (kept once per distinct op, as a TPU keeps tf_op and source) and the event's own stats."""

    plane: str
    line: str
    name: str
    ts_ns: int
    dur_ns: int
    display: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


def to_json(events: list[Ev]) -> dict[str, Any]:
    """The trace viewer's JSON (traceEvents; process and thread names as 'M' events)."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        if e.plane not in pids:
            pids[e.plane] = len(pids) + 1
            out.append({"ph": "M", "pid": pids[e.plane], "name": "process_name", "args": {"name": e.plane}})
        if (e.plane, e.line) not in tids:
            tids[(e.plane, e.line)] = len(tids) + 1
            out.append({"ph": "M", "pid": pids[e.plane], "tid": tids[(e.plane, e.line)], "name": "thread_name",
                        "args": {"name": e.line}})
        args = {**({"long_name": e.name} if e.display else {}), **e.meta, **e.stats}
        out.append({"ph": "X", "pid": pids[e.plane], "tid": tids[(e.plane, e.line)], "ts": e.ts_ns / 1000.0,
                    "dur": e.dur_ns / 1000.0, "name": e.display or e.name,
                    "args": {k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v)
                             for k, v in args.items()}})
    return {"traceEvents": out}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _len(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def _stat(stat_id: int, value: Any) -> bytes:
    """An XStat: str -> str_value (5), float -> double_value (2), int >= 2**63 -> uint64_value (3), else int64 (4)."""
    if isinstance(value, str):
        body = _len(5, value.encode())
    elif isinstance(value, float):
        body = _key(2, 1) + struct.pack("<d", value)
    elif value >= 1 << 63:
        body = _int(3, value)
    else:
        body = _int(4, value)
    return _int(1, stat_id) + body


def to_xspace(events: list[Ev]) -> bytes:
    """An XSpace protobuf: per plane its lines (timestamp 0, events at offset_ps), event and stat metadata."""
    planes: dict[str, dict[str, list[Ev]]] = {}
    for e in events:
        planes.setdefault(e.plane, {}).setdefault(e.line, []).append(e)
    space = b""
    for pi, (plane, lines) in enumerate(planes.items(), start=1):
        stat_ids: dict[str, int] = {}
        meta_ids: dict[tuple[str, str, tuple[tuple[str, Any], ...]], int] = {}
        body_lines = b""
        for li, (line, evs) in enumerate(lines.items(), start=1):
            body_events = b""
            for e in evs:
                key = (e.name, e.display or "", tuple(sorted(e.meta.items())))
                mid = meta_ids.setdefault(key, len(meta_ids) + 1)
                for k in (*e.meta, *e.stats):
                    stat_ids.setdefault(k, len(stat_ids) + 1)
                own = b"".join(_len(4, _stat(stat_ids[k], v)) for k, v in e.stats.items())
                body_events += _len(4, _int(1, mid) + _int(2, e.ts_ns * 1000) + _int(3, e.dur_ns * 1000) + own)
            body_lines += _len(3, _int(1, li) + _len(2, line.encode()) + _int(3, 0) + body_events)
        body_meta = b""
        for (name, display, meta), mid in meta_ids.items():
            value = _int(1, mid) + _len(2, name.encode()) + (_len(4, display.encode()) if display else b"")
            value += b"".join(_len(5, _stat(stat_ids[k], v)) for k, v in meta)
            body_meta += _len(4, _int(1, mid) + _len(2, value))
        body_stats = b"".join(_len(5, _int(1, sid) + _len(2, _int(1, sid) + _len(2, k.encode())))
                              for k, sid in stat_ids.items())
        space += _len(1, _int(1, pi) + _len(2, plane.encode()) + body_lines + body_meta + body_stats)
    return space


CONTAINERS = ("while", "conditional", "call")


def ns(us: float) -> int:
    """A trace JSON's µs as whole nanoseconds (the documented unit of lbm's tables)."""
    return round(us * 1000)
STEADY_MARK = "lbm.profile.steady"


def raw_tpu_rows(data: dict[str, Any], stages: list[str]) -> tuple[dict[str, float], float, int]:
    """From a real TPU trace JSON of a fused run: device ms per step by row (the '+'-joined stages of an op's tf_op,
    '(unscoped)' for none), the step's device ms (the steady chunks' program runs per step), and the steady steps."""
    events = data["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e.get("ph") == "M"
             and e.get("name") == "thread_name"}
    xs = [e for e in events if e.get("ph") == "X"]
    (mark,) = [e for e in xs if e["name"] == STEADY_MARK]
    chunks = [e for e in xs if e["name"] == "timestep" and e["tid"] == mark["tid"]
              and mark["ts"] <= e["ts"] <= mark["ts"] + mark["dur"]]
    steps = sum(int(c["args"]["steps"]) for c in chunks)
    all_chunks = sorted((e for e in xs if e["name"] == "timestep" and e["tid"] == mark["tid"]), key=lambda e: e["ts"])
    runs = sorted((e for e in xs if names.get((e["pid"], e["tid"])) == "XLA Modules"
                   and e["name"].startswith("jit_chunk(")), key=lambda e: e["ts"])
    steady_runs = [r for r, c in zip(runs, all_chunks, strict=True) if c in chunks]
    rows: dict[str, float] = {}
    for r in steady_runs:
        for e in xs:
            if names.get((e["pid"], e["tid"])) != "XLA Ops" or not r["ts"] <= e["ts"] < r["ts"] + r["dur"]:
                continue
            if e["name"].split(".")[0] in CONTAINERS:
                continue
            path = str(e["args"].get("tf_op") or "")
            found = [n for part in path.split("/") for n in part.split("+") if n in stages]
            unit = "+".join(found) or "(unscoped)"
            rows[unit] = rows.get(unit, 0.0) + ns(e["dur"]) / 1e6 / steps
    return rows, sum(ns(r["dur"]) for r in steady_runs) / 1e6 / steps, steps


def raw_tpu_stage_rows(data: dict[str, Any], stages: list[str]) -> tuple[dict[str, float], float]:
    """From a real TPU trace JSON of an instrumented run: device ms per steady call by stage (the XLA Ops events
    inside the program run of the stage's n-th dispatch: the n-th ``jit_stage_<stage>(...)`` XLA Modules event),
    and the step's device ms (its stages' program runs summed), both means."""
    events = data["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e.get("ph") == "M"
             and e.get("name") == "thread_name"}
    xs = [e for e in events if e.get("ph") == "X"]
    (mark,) = [e for e in xs if e["name"] == STEADY_MARK]
    ops = [e for e in xs if names.get((e["pid"], e["tid"])) == "XLA Ops" and e["name"].split(".")[0] not in CONTAINERS]
    steps = [e for e in xs if e["name"] == "timestep" and e["tid"] == mark["tid"]
             and mark["ts"] <= e["ts"] and e["ts"] + e["dur"] <= mark["ts"] + mark["dur"]]
    per_stage: dict[str, list[float]] = {}
    per_step = [0.0] * len(steps)
    for s in stages:
        spans = sorted((e for e in xs if e["name"] == s and e["tid"] == mark["tid"]), key=lambda e: e["ts"])
        runs = sorted((e for e in xs if names.get((e["pid"], e["tid"])) == "XLA Modules"
                       and e["name"].startswith(f"jit_stage_{s}(")), key=lambda e: e["ts"])
        assert len(spans) == len(runs), (s, len(spans), len(runs))
        for sp, run in zip(spans, runs, strict=True):
            inside = [i for i, st in enumerate(steps) if st["ts"] <= sp["ts"] and sp["ts"] + sp["dur"] <= st["ts"] + st["dur"]]
            if not inside:
                continue
            busy = sum(ns(o["dur"]) for o in ops if run["ts"] <= o["ts"] < run["ts"] + run["dur"])
            per_stage.setdefault(s, []).append(busy / 1e6)
            per_step[inside[0]] += ns(run["dur"]) / 1e6
    return {s: sum(v) / len(v) for s, v in per_stage.items()}, sum(per_step) / len(per_step)
