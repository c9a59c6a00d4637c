"""``python -m lbm analyze PATH``: the breakdown of a trace, or the table and plots of a sweep.

PATH may be a run directory (with ``profile/``), a ``profile/`` or trace directory, a single
trace file (``*.trace.json.gz``, ``perfetto_trace.json.gz``, ``*.json`` or ``*.xplane.pb``,
e.g. copied from a GPU machine), or a Hydra multirun directory (jobs with ``metrics.json``).
``--sql`` runs a query on the trace tables (Perfetto's schema) and prints the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lbm.errors import LbmError
from lbm.profiling.pipeline import RunFacts, analyse
from lbm.profiling.tracedb import locate_trace, open_trace_db

USAGE = ("python -m lbm analyze PATH [--sql QUERY] [--backend auto|sqlite|perfetto] [--trace-processor BIN] "
         "[--out DIR] [--warmup N]")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        """Raise LbmError: one clean line (exit code 2) instead of argparse's usage text."""
        raise LbmError(f"analyze: {message} (usage: {USAGE})")


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``analyze``."""
    p = _Parser(prog="python -m lbm analyze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="run directory, profile/trace directory, trace file, or multirun directory")
    p.add_argument("--sql", help="run this SQL on the trace tables (slice, thread_track, thread, process, args) and print it")
    p.add_argument("--backend", default="auto", choices=["auto", "sqlite", "perfetto"],
                   help="trace database: embedded sqlite, or Perfetto's trace_processor (needs a binary)")
    p.add_argument("--trace-processor", default=None, help="path to a Perfetto trace_processor binary "
                   "(default: $LBM_TRACE_PROCESSOR)")
    p.add_argument("--out", default=None, help="directory for the files written (default: <dir>/analysis, or the "
                   "multirun directory for a sweep)")
    p.add_argument("--warmup", type=int, default=None, help="timesteps to skip when the trace has no steady-window "
                   "marker (default 1)")
    return p


def _run_context(trace: Path) -> dict[str, Any]:
    """What the run around a trace tells (metrics.json, compile/compile.json, breakdown.json), read only from the
    layout a profiled run writes (``<run>/profile/plugins/profile/<session>/``) or from beside a loose trace file."""
    session = trace.parent
    if session.parent.name == "profile" and session.parent.parent.name == "plugins":
        profile_dir = session.parents[2]
        places = {"metrics": profile_dir.parent / "metrics.json", "compile": profile_dir / "compile" / "compile.json",
                  "previous": profile_dir / "breakdown.json"}
    else:
        places = {"metrics": session / "metrics.json", "compile": session / "compile" / "compile.json",
                  "previous": session / "breakdown.json"}
    ctx: dict[str, Any] = {}
    for key, p in places.items():
        try:
            ctx[key] = json.loads(p.read_text()) if p.is_file() else None
        except (OSError, json.JSONDecodeError):
            ctx[key] = None
    return ctx


def _print(obj: Any) -> None:
    from rich.console import Console

    Console(width=170).print(obj)


def run_sql(db: Any, sql: str) -> int:
    """Run ``sql`` and print the rows as a table."""
    from rich.table import Table

    from lbm.profiling.tracedb import rows_to_columns

    cols, rows = rows_to_columns(db.query(sql))
    t = Table(title=f"{len(rows)} rows ({db.backend} backend)", title_justify="left")
    for c in cols:
        t.add_column(str(c))
    for r in rows:
        t.add_row(*["NULL" if v is None else str(v) for v in r])
    _print(t)
    return 0


def run_facts(ctx: dict[str, Any], warmup: int | None) -> RunFacts:
    """What the files around a trace tell of the run that made it (see :func:`_run_context`)."""
    metrics = ctx["metrics"] or {}
    prof = metrics.get("profile") or {}
    prev = ctx["previous"] or {}
    sync = (prev.get("run") or {}).get("sync")
    if sync is None and prof.get("clock"):
        sync = "blocked" in prof["clock"]
    return RunFacts(stages=(ctx["compile"] or {}).get("stages"), mode=prof.get("mode") or prev.get("mode"), sync=sync,
                    compile_report=ctx["compile"], compile_times_s=metrics.get("compile_times_s"),
                    compile_phases=prof.get("compile") or prev.get("compile"),
                    bandwidth_gbs=(prev.get("roofline") or {}).get("bandwidth_gbs") or prof.get("bandwidth_gbs"),
                    warmup=warmup)


def _title(ctx: dict[str, Any]) -> str | None:
    """The run's case, grid, lattice, precision and mode, from the files around the trace (None: unknown)."""
    run = (ctx["previous"] or {}).get("run") or {}
    m = ctx["metrics"] or {}
    case, grid = run.get("case") or m.get("case"), run.get("grid") or m.get("grid")
    if not case:
        return None
    mode = run.get("mode") or m.get("mode")
    return (f"{case} {'x'.join(map(str, grid or []))} {run.get('lattice') or m.get('lattice')} "
            f"{run.get('precision') or m.get('precision')}, {mode} mode")


def analyze_trace(path: Path, args: argparse.Namespace) -> int:
    """Breakdown (or SQL) of one trace."""
    target = path / "profile" if path.is_dir() and (path / "profile").is_dir() else path
    files = locate_trace(target)
    if args.sql:
        db, note = open_trace_db(files, args.backend, args.trace_processor)
        print(f"lbm analyze: {files.primary}: {note}", file=sys.stderr)
        try:
            return run_sql(db, args.sql)
        finally:
            db.close()
    session = files.session_dir
    jax_layout = session.parent.name == "profile" and session.parent.parent.name == "plugins"
    out = Path(args.out) if args.out else (session.parents[2] if jax_layout else session) / "analysis"
    ctx = _run_context(files.primary)
    try:  # the folder is made once the trace has been read: a bad trace leaves nothing behind
        result = analyse(files, out, run_facts(ctx, args.warmup), backend=args.backend,
                         trace_processor=args.trace_processor, title=_title(ctx))
    except OSError as exc:
        raise LbmError(f"cannot write to {out} ({exc.strerror}): choose another directory with --out") from None
    print(f"lbm analyze: {files.primary}: {result.backend_note}", file=sys.stderr)
    result.print()
    print(f"lbm analyze: wrote {out}/ ({', '.join(result.written.values())})", file=sys.stderr)
    return 0


def analyze_sweep(path: Path, jobs: list[Path], args: argparse.Namespace) -> int:
    """Table, sweep.csv and sweep.png of a multirun directory."""
    from lbm.profiling.sweep import sweep_rows, sweep_table, write_sweep

    if args.sql:
        raise LbmError(f"{path} is a multirun directory: --sql needs one run or trace (e.g. {jobs[0]})")
    rows = sweep_rows(jobs)
    out = Path(args.out) if args.out else path
    try:
        out.mkdir(parents=True, exist_ok=True)
        csv_path, png = write_sweep(rows, out)
    except OSError as exc:
        raise LbmError(f"cannot write to {out} ({exc.strerror}): choose another directory with --out") from None
    _print(sweep_table(rows, f"sweep {path} ({len(rows)} jobs)"))
    print(f"lbm analyze: wrote {csv_path}" + (f" and {png}" if png else ""), file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``python -m lbm analyze``; returns the exit code (LbmError for user errors)."""
    from lbm.profiling.sweep import job_dirs

    args = parser().parse_args(argv)
    path = Path(args.path)
    if not path.exists():
        raise LbmError(f"{path}: no such file or directory")
    jobs = job_dirs(path) if path.is_dir() and not (path / "profile").is_dir() else []
    if jobs:
        return analyze_sweep(path, jobs, args)
    return analyze_trace(path, args)
