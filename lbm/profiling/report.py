"""Reports of a breakdown: bytes and roofline columns, breakdown.csv/json, the terminal tables, the compile line."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lbm.profiling.breakdown import CSV_COLUMNS, STATISTIC, STEP, SUM_ROW, TIMED, Breakdown, Table
from lbm.stages import FUSED_STEP

GBS_CLOCK = ("bytes accessed per step / device mean time per step. Instrumented: XLA cost_analysis of each stage's "
             "executable; fused: lbm.hlo's traffic model of the chunk's scan loop body, per step")
COMPILE_PARTS = ("trace_ms", "lower_ms", "compile_ms", "first_run_ms")


def enrich(bd: Breakdown, compile_report: Mapping[str, Any] | None, bandwidth_gbs: float | None) -> None:
    """Fill bytes_accessed, gbs and roofline_pct of the device table's rows (in place)."""
    table = bd.tables.get("device")
    if table is None:
        return
    exes = {e["name"]: e for e in (compile_report or {}).get("executables", [])}
    by_row: dict[str, float] = {}
    if bd.mode == "instrumented":
        by_row = {name: e["bytes_accessed"] for name, e in exes.items() if e.get("bytes_accessed")}
    else:
        loop = (exes.get(FUSED_STEP) or {}).get("loop") or {}
        by_row = dict(loop.get("bytes_per_step_by_unit") or {})
        if loop.get("bytes_per_step"):
            by_row[STEP] = loop["bytes_per_step"]
    timed = [r for r in table.rows if r.get("status") in TIMED]
    if bd.mode == "instrumented" and timed and all(r["stage"] in by_row for r in timed):
        by_row[STEP] = sum(by_row[r["stage"]] for r in timed)
    for row in table.rows:
        nbytes = by_row.get(row["stage"])
        t_ms = row.get(STATISTIC)
        if not nbytes or not t_ms or t_ms <= 0:
            continue
        row["bytes_accessed"] = nbytes
        row["gbs"] = nbytes / (t_ms * 1e-3) / 1e9
        if bandwidth_gbs:
            row["roofline_pct"] = 100.0 * row["gbs"] / bandwidth_gbs
    over = [r["stage"] for r in table.rows if (r.get("roofline_pct") or 0) > 100]
    if over:
        bd.notes.append(f"above 100% of the roofline ({', '.join(over)}): more bytes per second than the measured "
                        "bandwidth allows: the data fit in cache, which the bandwidth measurement (arrays far larger "
                        "than caches) does not bound (use a larger grid), or the byte count (XLA's cost analysis, "
                        "lbm.hlo's traffic model) counts traffic that does not reach memory")


def compile_record(phases: Mapping[str, Any] | None, engine_times_s: Mapping[str, float] | None,
                   bd: Breakdown) -> dict[str, Any]:
    """The run's compilation, once: its parts (trace, lower, compile; jax.monitoring's durations of the compiles
    while the trace ran) and the first run (the first timestep or chunk span on the host, compiled already)."""
    host_step = bd.tables["host"].row(STEP) if "host" in bd.tables else None
    first_steps = bd.window.get("first_call_steps") or 1
    first_run = None if not host_step or host_step.get("first_call_ms") is None else host_step["first_call_ms"] * first_steps
    out: dict[str, Any] = {"clock": "host wall clock", "first_run_ms": first_run, "first_run_steps": first_steps}
    if phases and phases.get("programs"):
        out.update(source="jax.monitoring: tracing, lowering to MLIR and XLA compilation of every program compiled "
                          "while the trace ran", programs=phases["programs"],
                   **{k: phases.get(k) for k in ("trace_ms", "lower_ms", "compile_ms")})
    elif engine_times_s:
        out.update(source="the engine's own timing of lower + compile (no per-part durations recorded)",
                   trace_ms=None, lower_ms=None, compile_ms=sum(engine_times_s.values()) * 1e3,
                   programs=[{"name": k, "compile_ms": v * 1e3} for k, v in engine_times_s.items()])
    else:
        out.update(source="not recorded", trace_ms=None, lower_ms=None, compile_ms=None, programs=[])
    parts = [out.get(k) for k in COMPILE_PARTS]
    out["total_ms"] = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return out


def compile_line(rec: Mapping[str, Any]) -> str:
    """The compile record as one line: total and parts, with the clock."""
    def ms(v: Any) -> str:
        return "—" if v is None else f"{v:.1f} ms"
    return (f"compile: {ms(rec.get('total_ms'))} = trace {ms(rec.get('trace_ms'))} + lower {ms(rec.get('lower_ms'))} "
            f"+ compile {ms(rec.get('compile_ms'))} + first run {ms(rec.get('first_run_ms'))} "
            f"({rec.get('first_run_steps', 1)} steps); {rec.get('clock')}, {rec.get('source')}")


def _fmt(v: Any) -> Any:
    if isinstance(v, float):  # 12 digits: shares add up to 1 and equal mean_ms over the stages' sum as read back
        return "" if not math.isfinite(v) else f"{v:.12g}"
    return "" if v is None else v


def write_csv(path: Path, table: Table) -> None:
    """One table as CSV: one row per stage (or fused stage set), then the sum, unattributed and timestep rows."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in table.rows:
            w.writerow({k: _fmt(row.get(k)) for k in CSV_COLUMNS})


def write_kernels_csv(path: Path, bd: Breakdown) -> None:
    """kernels.csv: device time per XLA kernel in the steady window, the stages it contains, where it comes from;
    on a TPU also what its op events say: category, bytes accessed and model flops per call, program, scope, source."""
    cols = ["unit", "kernel", "stages", "calls", "median_us", "total_ms", "category", "bytes_per_call",
            "model_flops_per_call", "program_id", "tf_op", "source", "origin"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for row in bd.kernels:
            w.writerow({k: _fmt(row.get(k)) for k in cols})


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_breakdown_json(path: Path, bd: Breakdown, extra: dict[str, Any]) -> dict[str, Any]:
    """breakdown.json: the breakdown with units, clocks, window, notes and ``extra`` (run, roofline, files)."""
    data = {"units": {"time": "ms (median_us: µs)", "bytes_accessed": "bytes per step", "gbs": "GB/s (1e9 B/s)",
                      "share": f"fraction of the sum of the stage rows' {STATISTIC} in the same table"},
            **bd.to_json(), "gbs_clock": GBS_CLOCK, **extra}
    data = _clean(data)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def _num(v: Any, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def terminal_table(table: Table, title: str, fold: bool = True) -> Any:
    """A rich Table of one clock: calls, first call, the mean per step (the table's statistic), its share, the spread
    (median, p95), GB/s and % of roofline. ``fold``: long names wrap (a terminal); False: never cut (a file)."""
    from rich.table import Table as RichTable

    t = RichTable(title=title, title_justify="left")
    over = "fold" if fold else "ignore"
    t.add_column("stage", justify="left", overflow=over, no_wrap=not fold)
    t.add_column("status", justify="left", no_wrap=True)
    for col in ("calls", "1st call ms", f"mean ms/step ({table.clock})", f"share of mean ({table.clock})",
                "median ms", "p95 ms", "GB/s", "% roofline"):
        t.add_column(col, justify="right")
    for r in table.rows:
        status = r.get("status", "")
        if status in ("skipped", "fused"):
            t.add_row(r["stage"], status, "", "", "", "", "", "", "", "", style="dim")
            continue
        share = r.get("share")
        t.add_row(r["stage"], status, _num(r.get("calls"), "d"), _num(r.get("first_call_ms"), ".3f"),
                  _num(r.get("mean_ms"), ".4f"), "" if share is None else f"{100 * share:.1f}%",
                  _num(r.get("median_ms"), ".4f"), _num(r.get("p95_ms"), ".4f"), _num(r.get("gbs"), ".2f"),
                  _num(r.get("roofline_pct"), ".1f"), style="bold" if r["stage"] in (STEP, SUM_ROW) else None)
    t.caption = f"clock: {table.description}"
    t.caption_justify = "left"
    return t


def captions(bd: Breakdown, bandwidth_gbs: float | None) -> list[str]:
    """The lines below the tables: window, compile, roofline, fused rows, notes."""
    lines = [f"window: {bd.window.get('steady_steps')} steady steps in {bd.window.get('steady_calls')} "
             f"{'chunks' if bd.mode == 'fused' else 'timesteps'} ({bd.window.get('selection')})",
             f"statistic: {STATISTIC} per step = total_ms / calls; share = a row's mean over the sum of the stage rows' "
             "means (they add up to 100%); unattributed = timestep - sum of stages"]
    if bd.compile:
        lines.append(compile_line(bd.compile))
    if bandwidth_gbs:
        lines.append(f"roofline: measured bandwidth {bandwidth_gbs:.2f} GB/s; GB/s = bytes per step / device mean")
    fused = [r for r in bd.rows if r.get("status") == "fused" and r.get("note")]
    lines += [f"{r['stage']}: {r['note']}" for r in fused]
    lines += [f"{r['stage']} kernels: {r['ops']}" for r in bd.rows if r.get("ops")]
    lines += [f"note: {n}" for n in bd.notes]
    return lines


def render_tables(bd: Breakdown, bandwidth_gbs: float | None, title: str, fold: bool) -> list[Any]:
    """The headline table and the other clock's table (rich renderables), then the caption lines (plain strings)."""
    out: list[Any] = []
    for i, (clock, table) in enumerate(bd.tables.items()):
        if not table.timed() and clock != bd.headline and not (table.row(STEP) or {}).get("calls"):
            continue
        label = "headline" if i == 0 else "also"
        out.append(terminal_table(table, f"{title} — {label}: {clock} clock", fold=fold))
    return out + captions(bd, bandwidth_gbs)
