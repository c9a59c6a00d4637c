"""A trace database with SQL: trace files loaded into tables of Perfetto's trace-processor schema.

Two backends answer the same SQL text (see :mod:`lbm.profiling.queries`):

- :class:`SqliteTraceDB` (default, offline): Python's ``sqlite3`` fed from the gzipped
  trace JSON that ``jax.profiler`` writes (``*.trace.json.gz``), or from the ``.xplane.pb``
  (:mod:`lbm.profiling.xplane`). Tables: ``process`` (upid, pid, name), ``thread``
  (utid, tid, name, upid), ``track`` and ``thread_track`` (id, name, utid), ``slice`` (id, ts,
  dur, name, depth, parent_id, track_id, category, arg_set_id) and ``args`` (arg_set_id,
  flat_key, key, int_value, string_value, real_value, value_type, display_value), with
  ``EXTRACT_ARG(arg_set_id, key)`` as in Perfetto. Times are integer nanoseconds. An integer beyond SQLite's
  signed 64 bits (a TPU's program ids are unsigned 64-bit) is kept as Perfetto keeps a ``uint``: ``int_value``
  holds its two's-complement reinterpretation (``int_value % 2**64`` gives it back), ``value_type`` is ``uint``
  and ``display_value`` its exact decimal text; larger integers are kept as text.
- :class:`PerfettoTraceDB`: Perfetto's own ``TraceProcessor`` (the ``perfetto`` package), when
  a ``trace_processor`` binary is given (``profile.trace_processor`` or the environment
  variable ``LBM_TRACE_PROCESSOR``). Nothing is downloaded: without a binary the embedded
  backend is used and the reason is said.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbm.errors import LbmError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of SQLite's INTEGER."""

TRACE_PROCESSOR_ENV = "LBM_TRACE_PROCESSOR"
"""Environment variable naming a Perfetto ``trace_processor`` binary."""

SCHEMA = """
CREATE TABLE process (upid INTEGER PRIMARY KEY, pid INTEGER, name TEXT);
CREATE TABLE thread (utid INTEGER PRIMARY KEY, tid INTEGER, name TEXT, upid INTEGER);
CREATE TABLE track (id INTEGER PRIMARY KEY, name TEXT, type TEXT);
CREATE TABLE thread_track (id INTEGER PRIMARY KEY, name TEXT, utid INTEGER);
CREATE TABLE slice (id INTEGER PRIMARY KEY, ts INTEGER, dur INTEGER, name TEXT, depth INTEGER,
                    parent_id INTEGER, track_id INTEGER, category TEXT, arg_set_id INTEGER);
CREATE TABLE args (arg_set_id INTEGER, flat_key TEXT, key TEXT, int_value INTEGER, string_value TEXT,
                   real_value REAL, value_type TEXT, display_value TEXT);
CREATE INDEX slice_name ON slice(name);
CREATE INDEX slice_track_ts ON slice(track_id, ts);
CREATE INDEX args_set ON args(arg_set_id, key);
"""


@dataclass
class TraceFiles:
    """The files of one profiling session: trace JSON, Perfetto-ready JSON and XPlane protobuf."""

    trace_json: Path | None = None
    perfetto_json: Path | None = None
    xplane: Path | None = None

    @property
    def primary(self) -> Path:
        """The file the embedded backend reads (trace JSON, else Perfetto JSON, else XPlane)."""
        for p in (self.trace_json, self.perfetto_json, self.xplane):
            if p is not None:
                return p
        raise LbmError("no trace file found")

    @property
    def session_dir(self) -> Path:
        """The directory holding the session's files."""
        return self.primary.parent


@dataclass
class TraceTables:
    """A trace normalised to Perfetto's tables (rows as tuples), before loading into SQLite."""

    processes: list[tuple[int, int, str | None]] = field(default_factory=list)
    threads: list[tuple[int, int, str | None, int | None]] = field(default_factory=list)
    slices: list[tuple[Any, ...]] = field(default_factory=list)
    args: list[tuple[Any, ...]] = field(default_factory=list)
    source: str = ""


def _classify(path: Path) -> str | None:
    name = path.name
    if name.endswith(".xplane.pb"):
        return "xplane"
    if name == "perfetto_trace.json.gz":
        return "perfetto_json"
    if name.endswith((".json.gz", ".json")):
        return "trace_json"
    return None


def locate_trace(path: str | os.PathLike[str]) -> TraceFiles:
    """The trace files of a trace file, a session or trace directory, a ``profile/`` or a run directory."""
    p = Path(path)
    if not p.exists():
        raise LbmError(f"{p}: no such file or directory")
    if p.is_file():
        kind = _classify(p)
        if kind is None:
            raise LbmError(f"{p}: not a trace file (expected *.trace.json.gz, *.json or *.xplane.pb)")
        # The file given is the one read; a trace JSON's Perfetto-ready sibling may serve the perfetto backend.
        files = TraceFiles(**{kind: p})
        sibling = p.parent / "perfetto_trace.json.gz"
        if kind == "trace_json" and sibling.is_file():
            files.perfetto_json = sibling
        return files
    # In a directory, only files named as jax.profiler names them (not breakdown.json and the like).
    trace_names = (".trace.json.gz", ".trace.json", "perfetto_trace.json.gz", ".xplane.pb")
    candidates = [c for c in p.rglob("*") if c.is_file() and c.name.endswith(trace_names)
                  and "analysis" not in c.relative_to(p).parts]
    if not candidates:
        raise LbmError(f"{p}: no trace files found (expected plugins/profile/<session>/*.trace.json.gz or *.xplane.pb; "
                       "was the run made with profile.enabled=true?)")
    sessions: dict[Path, list[Path]] = {}
    for c in candidates:
        sessions.setdefault(c.parent, []).append(c)
    latest = max(sessions, key=lambda d: (max(f.stat().st_mtime for f in sessions[d]), str(d)))
    files = TraceFiles()
    for f in sorted(sessions[latest]):
        kind = _classify(f)
        if kind and getattr(files, kind) is None:
            setattr(files, kind, f)
    return files


def read_trace_json(path: Path) -> dict[str, Any]:
    """The parsed Chrome/Perfetto JSON trace at ``path`` (gzipped or not); LbmError if unusable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LbmError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not raw:
        raise LbmError(f"{path}: the trace file is empty")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise LbmError(f"{path}: the gzipped trace is truncated or corrupt ({exc})") from None
        if not raw:
            raise LbmError(f"{path}: the trace file is empty (gzip holds no data)")
    elif path.name.endswith(".gz"):
        raise LbmError(f"{path}: not a gzip file (a jax.profiler trace is *.trace.json.gz)")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise LbmError(f"{path}: not a JSON trace (binary content)") from None
    except json.JSONDecodeError as exc:
        what = "truncated" if exc.pos >= len(raw.rstrip()) - 1 else "not valid JSON"
        raise LbmError(f"{path}: the JSON trace is {what} (line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, list):  # the JSON Array Format of the Chrome trace event spec
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise LbmError(f"{path}: not a Chrome/Perfetto trace (no traceEvents list): is it a jax.profiler trace?")
    return data


def _flatten_args(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten_args(f"{prefix}.{k}", v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten_args(f"{prefix}[{i}]", v, out)
    else:
        out.append((prefix, value))


def _arg_row(arg_set_id: int, key: str, value: Any) -> tuple[Any, ...]:
    flat = key.split("[")[0] if "[" in key else key
    if isinstance(value, bool):
        return (arg_set_id, flat, key, int(value), None, None, "bool", str(value).lower())
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return (arg_set_id, flat, key, value, None, None, "int", str(value))
        if 0 <= value < 2**64:  # unsigned 64-bit: SQLite's INTEGER is signed; Perfetto reinterprets it the same way
            return (arg_set_id, flat, key, value - 2**64, None, None, "uint", str(value))
        return (arg_set_id, flat, key, None, str(value), None, "string", str(value))
    if isinstance(value, float):
        return (arg_set_id, flat, key, None, None, value, "real", repr(value))
    if value is None:
        return (arg_set_id, flat, key, None, None, None, "null", None)
    return (arg_set_id, flat, key, None, str(value), None, "string", str(value))


class _Builder:
    """Collects processes, threads and raw slices, then nests slices per track (depth, parent)."""

    def __init__(self, source: str) -> None:
        self.tables = TraceTables(source=source)
        self.upid: dict[Any, int] = {}
        self.utid: dict[tuple[Any, Any], int] = {}
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.raw: list[tuple[int, int, str, int, str | None, dict[str, Any] | None]] = []

    def thread(self, pid: Any, tid: Any) -> int:
        """The utid of (pid, tid), created on first use."""
        if pid not in self.upid:
            self.upid[pid] = len(self.upid) + 1
        key = (pid, tid)
        if key not in self.utid:
            self.utid[key] = len(self.utid) + 1
        return self.utid[key]

    def add(self, pid: Any, tid: Any, ts_ns: int, dur_ns: int, name: str, cat: str | None,
            args: dict[str, Any] | None) -> None:
        """Record one slice (ns) on the thread (pid, tid)."""
        self.raw.append((self.thread(pid, tid), ts_ns, name, max(0, dur_ns), cat, args))

    def build(self) -> TraceTables:
        """The tables, with slices nested per thread (sorted by start, longer first: depth and parent_id)."""
        t = self.tables
        for pid, upid in self.upid.items():
            t.processes.append((upid, _as_int(pid), self.process_names.get(pid)))
        for (pid, tid), utid in self.utid.items():
            t.threads.append((utid, _as_int(tid), self.thread_names.get((pid, tid)), self.upid[pid]))
        order = sorted(range(len(self.raw)), key=lambda i: (self.raw[i][0], self.raw[i][1], -self.raw[i][3], i))
        stacks: dict[int, list[tuple[int, int]]] = {}
        arg_set = 0
        for sid, i in enumerate(order, start=1):
            utid, ts, name, dur, cat, args = self.raw[i]
            stack = stacks.setdefault(utid, [])
            while stack and stack[-1][1] <= ts:
                stack.pop()
            parent = stack[-1][0] if stack else None
            depth = len(stack)
            aid = None
            if args:
                arg_set += 1
                aid = arg_set
                flat: list[tuple[str, Any]] = []
                _flatten_args("args", args, flat)
                t.args.extend(_arg_row(aid, k, v) for k, v in flat)
            t.slices.append((sid, ts, dur, name, depth, parent, utid, cat, aid))
            stack.append((sid, ts + dur))
        return t


def _as_int(v: Any) -> int:
    """A pid or tid as SQLite's INTEGER: an unsigned 64-bit one reinterpreted as signed, a name hashed."""
    try:
        i = int(v)
    except (TypeError, ValueError):
        return abs(hash(v)) % (2**31)
    return i - 2**64 if INT64_MAX < i < 2**64 else i


def _ns(us: Any) -> int:
    return int(round(float(us) * 1000.0))


def tables_from_json(data: dict[str, Any], source: str = "") -> TraceTables:
    """Perfetto-schema tables from a parsed Chrome JSON trace (X, B/E and instant events; µs → ns)."""
    b = _Builder(source)
    open_spans: dict[tuple[Any, Any], list[tuple[int, str, str | None, dict[str, Any] | None]]] = {}
    for e in data["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        pid, tid = e.get("pid", 0), e.get("tid", 0)
        if ph == "M":
            name = (e.get("args") or {}).get("name")
            if e.get("name") == "process_name" and name is not None:
                b.process_names[pid] = str(name)
                b.upid.setdefault(pid, len(b.upid) + 1)
            elif e.get("name") == "thread_name" and name is not None:
                b.thread_names[(pid, tid)] = str(name)
                b.thread(pid, tid)
            continue
        if "ts" not in e or "name" not in e:
            continue
        try:
            ts = _ns(e["ts"])
        except (TypeError, ValueError):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else None
        if ph == "X":
            b.add(pid, tid, ts, _ns(e.get("dur", 0) or 0), str(e["name"]), e.get("cat"), args)
        elif ph in ("i", "I", "n"):
            b.add(pid, tid, ts, 0, str(e["name"]), e.get("cat"), args)
        elif ph == "B":
            open_spans.setdefault((pid, tid), []).append((ts, str(e["name"]), e.get("cat"), args))
        elif ph == "E":
            stack = open_spans.get((pid, tid))
            if stack:
                t0, name, cat, a = stack.pop()
                merged = {**(a or {}), **(args or {})} or None
                b.add(pid, tid, t0, ts - t0, name, cat, merged)
    return b.build()


def tables_from_xplane(path: Path) -> TraceTables:
    """Perfetto-schema tables from an XPlane protobuf (:mod:`lbm.profiling.xplane`: display names, metadata stats)."""
    from lbm.profiling.xplane import XPlaneError, read_xspace

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LbmError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data:
        raise LbmError(f"{path}: the XPlane file is empty")
    try:
        planes = read_xspace(data)
    except XPlaneError as exc:
        raise LbmError(f"{path}: not a readable XPlane protobuf ({exc})") from None
    return _xplane_tables(path, planes)


def _xplane_tables(path: Path, planes: list[Any]) -> TraceTables:
    b = _Builder(str(path))
    starts = [ev.start_ns for plane in planes for line in plane.lines for ev in line.events]
    t0 = min(starts) if starts else 0
    for pi, plane in enumerate(planes, start=1):
        b.process_names[pi] = plane.name
        b.upid.setdefault(pi, len(b.upid) + 1)
        for li, line in enumerate(plane.lines, start=1):
            b.thread_names[(pi, li)] = line.name
            b.thread(pi, li)
            for ev in line.events:
                b.add(pi, li, int(round(ev.start_ns - t0)), int(round(ev.duration_ns)), ev.name, None,
                      dict(ev.stats) or None)
    if not b.raw:
        raise LbmError(f"{path}: the XPlane file holds no events")
    return b.build()


class TraceDB:
    """A trace loaded for SQL; ``query`` returns rows as dicts."""

    backend = "none"

    def __init__(self, source: str) -> None:
        self.source = source
        self.queries: list[str] = []

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts (column name → value)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the backend."""


class SqliteTraceDB(TraceDB):
    """The embedded backend: an in-memory SQLite database with Perfetto's tables and EXTRACT_ARG."""

    backend = "sqlite"

    def __init__(self, tables: TraceTables) -> None:
        super().__init__(tables.source)
        self.conn = sqlite3.connect(":memory:")
        self.conn.executescript(SCHEMA)
        c = self.conn
        c.executemany("INSERT INTO process VALUES (?, ?, ?)", tables.processes)
        c.executemany("INSERT INTO thread VALUES (?, ?, ?, ?)", tables.threads)
        c.executemany("INSERT INTO track VALUES (?, ?, 'thread_track')", [(u, n) for u, _, n, _ in tables.threads])
        c.executemany("INSERT INTO thread_track VALUES (?, ?, ?)", [(u, n, u) for u, _, n, _ in tables.threads])
        c.executemany("INSERT INTO slice VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", tables.slices)
        c.executemany("INSERT INTO args VALUES (?, ?, ?, ?, ?, ?, ?, ?)", tables.args)
        self._args: dict[tuple[int, str], Any] = {}
        for row in tables.args:
            aid, _, key, iv, sv, rv = row[:6]
            self._args[(aid, key)] = iv if iv is not None else sv if sv is not None else rv
        c.create_function("EXTRACT_ARG", 2, self._extract_arg, deterministic=True)
        c.commit()
        self.n_slices = len(tables.slices)

    def _extract_arg(self, arg_set_id: int | None, key: str) -> Any:
        if arg_set_id is None:
            return None
        return self._args.get((arg_set_id, key))

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts; a bad query raises LbmError with SQLite's message."""
        self.queries.append(sql)
        try:
            cur = self.conn.execute(sql)
        except sqlite3.Error as exc:
            raise LbmError(f"SQL error (sqlite backend): {exc}") from None
        cols = [d[0] for d in cur.description or []]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def close(self) -> None:
        """Close the SQLite connection."""
        self.conn.close()


class PerfettoTraceDB(TraceDB):
    """Perfetto's TraceProcessor (or any object with a compatible ``query``) behind the same interface."""

    backend = "perfetto"

    def __init__(self, tp: Any, source: str = "") -> None:
        super().__init__(source)
        self.tp = tp

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts, from TraceProcessor's result iterator."""
        self.queries.append(sql)
        try:
            result = self.tp.query(sql)
        except Exception as exc:  # perfetto raises TraceProcessorException with the SQL error text
            raise LbmError(f"SQL error (perfetto backend): {str(exc).strip().splitlines()[0] if str(exc) else exc}") from None
        cols = list(getattr(result, "column_names", []) or [])
        rows = []
        for r in result:
            if cols:
                rows.append({c: getattr(r, c, None) for c in cols})
            else:
                rows.append(dict(vars(r)))
        return rows

    def close(self) -> None:
        """Stop the trace_processor process."""
        close = getattr(self.tp, "close", None)
        if callable(close):
            close()


def load_tables(files: TraceFiles) -> TraceTables:
    """Perfetto-schema tables from the best file of a session (trace JSON, else XPlane)."""
    json_path = files.trace_json or files.perfetto_json
    if json_path is not None:
        return tables_from_json(read_trace_json(json_path), str(json_path))
    if files.xplane is not None:
        return tables_from_xplane(files.xplane)
    raise LbmError("no trace file to load")


def resolve_trace_processor(configured: str | None = None) -> tuple[str | None, str]:
    """The trace_processor binary to use (config value, else $LBM_TRACE_PROCESSOR, else on PATH) and why."""
    for origin, value in (("profile.trace_processor", configured), (TRACE_PROCESSOR_ENV, os.environ.get(TRACE_PROCESSOR_ENV))):
        if value:
            p = Path(value).expanduser()
            if p.is_file() and os.access(p, os.X_OK):
                return str(p), f"{origin}={p}"
            return None, f"{origin}={value} is not an executable file"
    found = shutil.which("trace_processor") or shutil.which("trace_processor_shell")
    if found:
        return found, f"found on PATH: {found}"
    return None, (f"no trace_processor binary (set profile.trace_processor or {TRACE_PROCESSOR_ENV}; "
                  "it is not downloaded)")


def open_perfetto(trace_path: Path, bin_path: str) -> Any:
    """A perfetto TraceProcessor on ``trace_path`` using the given binary (never downloads one)."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    return TraceProcessor(trace=str(trace_path), config=TraceProcessorConfig(bin_path=bin_path, load_timeout=60))


def open_trace_db(files: TraceFiles, backend: str = "auto", trace_processor: str | None = None) -> tuple[TraceDB, str]:
    """A TraceDB for the session on the requested backend (auto | sqlite | perfetto) and a note on the choice."""
    if backend not in ("auto", "sqlite", "perfetto"):
        raise LbmError(f"--backend={backend} is invalid: expected one of auto, sqlite, perfetto")
    note = "embedded sqlite backend"
    if backend in ("auto", "perfetto"):
        bin_path, why = resolve_trace_processor(trace_processor)
        named = bool(trace_processor or os.environ.get(TRACE_PROCESSOR_ENV))
        if bin_path is None and (backend == "perfetto" or named):  # asked for explicitly: refuse, never fall back
            raise LbmError(f"--backend {backend}: {why}; give an executable trace_processor "
                           f"(--trace-processor BIN, profile.trace_processor or {TRACE_PROCESSOR_ENV}), "
                           "or use --backend sqlite")
        json_path = files.perfetto_json or files.trace_json
        if bin_path is not None and json_path is None:
            if backend == "perfetto":
                raise LbmError("--backend perfetto needs a JSON trace (only an .xplane.pb was found): "
                               "use --backend sqlite")
            note = "embedded sqlite backend (perfetto needs a JSON trace; only an .xplane.pb was found)"
        elif bin_path is not None:
            try:
                return PerfettoTraceDB(open_perfetto(json_path, bin_path), str(json_path)), f"perfetto backend ({why})"
            except Exception as exc:
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if backend == "perfetto":
                    raise LbmError(f"--backend perfetto: trace_processor {bin_path} failed to start ({msg})") from None
                note = f"WARNING: the perfetto backend failed to start ({msg}); using the embedded sqlite backend"
        else:
            note = "embedded sqlite backend (perfetto: " + why + ")"
    return SqliteTraceDB(load_tables(files)), note


def rows_to_columns(rows: Iterable[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Column names and row values of a query result (for printing)."""
    rows = list(rows)
    cols = list(rows[0].keys()) if rows else []
    return cols, [[r.get(c) for c in cols] for r in rows]
