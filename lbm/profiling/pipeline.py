"""The one trace-to-report pipeline: trace files → SQL tables → per-stage breakdown → reports.

Used by :class:`lbm.profiling.capture.Profiler` at the end of a profiled run and by
``python -m lbm analyze`` on a trace or run directory after the fact. What is known of the
run (stages, mode, compile report, compile times, bandwidth) comes in as :class:`RunFacts`,
plain data; without it the breakdown finds what it can in the trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbm.profiling.breakdown import Breakdown, CompileInfo, compute
from lbm.profiling.plots import breakdown_png, timeline_png
from lbm.profiling.queries import DEVICE_EVENTS
from lbm.profiling.report import (
    compile_record,
    enrich,
    render_tables,
    write_breakdown_json,
    write_csv,
    write_kernels_csv,
)
from lbm.profiling.tracedb import TraceFiles, locate_trace, open_trace_db

NO_BANDWIDTH = ("no measured bandwidth of the machine that made this trace: no roofline column (a trace is never "
                "compared with the bandwidth of another machine)")


@dataclass(frozen=True)
class RunFacts:
    """What is known of the run that made a trace; every field optional (a trace made elsewhere has none)."""

    stages: Sequence[str] | None = None
    """The case's active stages (None: found in the trace)."""
    mode: str | None = None
    """fused | instrumented (None: instrumented if the trace holds stage spans)."""
    sync: bool | None = None
    """Whether instrumented stages blocked (profile.sync); None: inferred from the trace."""
    compile_report: Mapping[str, Any] | None = None
    """compile.json of :mod:`lbm.profiling.compile_report`: module names, kernels, stages, bytes."""
    compile_times_s: Mapping[str, float] | None = None
    """The run's own compile times (s) by executable, as the engine measured them (used without ``compile_phases``)."""
    compile_phases: Mapping[str, Any] | None = None
    """The run's compilation in parts (trace_ms, lower_ms, compile_ms, programs), from jax.monitoring."""
    bandwidth_gbs: float | None = None
    """Measured memory bandwidth of the machine that ran it (GB/s)."""
    warmup: int | None = None
    """Timesteps to skip when the trace has no steady-window marker (None: 1)."""


@dataclass
class Analysis:
    """The outcome of the pipeline: the breakdown, where it came from, what was written, the table as text."""

    breakdown: Breakdown
    trace: TraceFiles
    backend: str
    backend_note: str
    written: dict[str, str]
    table: str
    """The tables as breakdown.txt holds them: names in full, never cut."""
    title: str = ""
    bandwidth_gbs: float | None = None

    def print(self) -> None:
        """Print the tables: on a terminal with long names wrapped to its width, elsewhere as breakdown.txt."""
        import sys

        from rich.console import Console

        if not sys.stdout.isatty():
            print(self.table, end="")
            return
        console = Console()
        for renderable in render_tables(self.breakdown, self.bandwidth_gbs, self.title, fold=True):
            console.print(renderable, markup=False, highlight=False)


def analyse(trace: TraceFiles, out_dir: Path, facts: RunFacts, *, backend: str = "auto",
            trace_processor: str | None = None, title: str | None = None,
            extra: Mapping[str, Any] | None = None) -> Analysis:
    """Breakdown of a trace, written to ``out_dir`` as breakdown.csv/.json/.png/.txt, kernels.csv, timeline.png."""
    db, note = open_trace_db(trace, backend, trace_processor)
    try:
        bd = compute(db, facts.stages, mode=facts.mode, sync=facts.sync,
                     compile_info=CompileInfo.of(facts.compile_report), warmup=facts.warmup)
    finally:
        db.close()
    enrich(bd, facts.compile_report, facts.bandwidth_gbs)
    bd.compile = compile_record(facts.compile_phases, facts.compile_times_s, bd)
    if facts.bandwidth_gbs is None:
        bd.notes.append(NO_BANDWIDTH)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = title or f"{trace.primary.name} ({bd.mode} mode)"
    written = {"breakdown_csv": "breakdown.csv", "breakdown_json": "breakdown.json", "breakdown_png": "breakdown.png",
               "breakdown_txt": "breakdown.txt", "kernels_csv": "kernels.csv"}
    write_csv(out_dir / "breakdown.csv", bd.tables[bd.headline])
    if bd.headline != "host":  # the host clock's table of its own
        write_csv(out_dir / "breakdown_host.csv", bd.tables["host"])
        written["breakdown_host_csv"] = "breakdown_host.csv"
    write_kernels_csv(out_dir / "kernels.csv", bd)
    breakdown_png(bd, out_dir / "breakdown.png", title)
    if timeline_png(bd, out_dir / "timeline.png", title=title) is not None:
        written["timeline_png"] = "timeline.png"
    extra = dict(extra or {})
    written.update(extra.pop("files", {}))
    record = {
        "trace": {"file": relative(trace.primary, out_dir), "trace_json": relative(trace.trace_json, out_dir),
                  "perfetto_json": relative(trace.perfetto_json, out_dir), "xplane": relative(trace.xplane, out_dir),
                  "backend": db.backend, "backend_note": note},
        "roofline": {"bandwidth_gbs": facts.bandwidth_gbs},
        **extra,
        "files": written,
    }
    write_breakdown_json(out_dir / "breakdown.json", bd, record)
    heading = f"profile breakdown: {title}"
    table = render(render_tables(bd, facts.bandwidth_gbs, heading, fold=False))
    (out_dir / "breakdown.txt").write_text(table)
    return Analysis(bd, trace, db.backend, note, written, table, heading, facts.bandwidth_gbs)


def render(renderables: Sequence[Any], width: int = 4000) -> str:
    """Rich renderables (tables) as plain text, as wide as their contents (nothing cut), and plain strings as they
    are; trailing blanks removed."""
    from rich.console import Console

    console = Console(width=width, no_color=True)
    parts = []
    for r in renderables:
        if isinstance(r, str):
            parts.append(r)
            continue
        with console.capture() as cap:
            console.print(r)
        parts += [line.rstrip() for line in cap.get().splitlines()]
    return "\n".join(parts) + "\n"


def device_events(trace_dir: Path) -> list[dict[str, Any]]:
    """The XLA execution events (CPU thunks, GPU/TPU kernels) of the trace in ``trace_dir`` (embedded backend)."""
    db, _ = open_trace_db(locate_trace(trace_dir), "sqlite")
    try:
        return db.query(DEVICE_EVENTS)
    finally:
        db.close()


def relative(p: Path | None, base: Path) -> str | None:
    """``p`` relative to ``base`` where it lies inside it, else as given."""
    if p is None:
        return None
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)

