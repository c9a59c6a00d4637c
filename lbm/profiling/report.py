"""Reports of a breakdown: compile and roofline columns, breakdown.csv/json, the terminal table."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from lbm.profiling.breakdown import CSV_COLUMNS, STEP, Breakdown
from lbm.stages import FUSED_STEP

GBS_CLOCK = ("bytes accessed (XLA cost_analysis of the stage compiled alone) / device median time; "
             "host median when the stage blocked (profile.sync=true) and no device events were matched")


def enrich(bd: Breakdown, compile_report: dict[str, Any] | None, compile_times_s: dict[str, float] | None,
           bandwidth_gbs: float | None) -> None:
    """Fill compile_ms, bytes_accessed, gbs and roofline_pct of the rows (in place)."""
    exes = {e["name"]: e for e in (compile_report or {}).get("executables", [])}
    times = compile_times_s or {}
    fused_compile = next((v for k, v in times.items() if k.startswith("fused[1]")), None)
    stage_bytes = 0.0
    for row in bd.rows:
        name = row["stage"]
        if row.get("status") == "skipped":
            continue
        exe = exes.get(name)
        if row.get("status") == "step":
            exe = exes.get(FUSED_STEP) if bd.mode == "fused" else None
            run_compile = fused_compile if bd.mode == "fused" else (sum(times.get(s, 0.0) for s in exes if s in times) or None)
            row["compile_ms"] = run_compile * 1e3 if run_compile else (exe or {}).get("compile_ms")
            nbytes = exe.get("bytes_accessed") if exe else (stage_bytes or None)
        elif exe is not None and bd.mode == "instrumented":
            row["compile_ms"] = times[name] * 1e3 if name in times else exe.get("compile_ms")
            nbytes = exe.get("bytes_accessed")
            stage_bytes += nbytes or 0.0
        else:
            continue
        row["bytes_accessed"] = nbytes
        t_ms = row.get("device_median_ms")
        if t_ms is None and "blocked" in str(row.get("clock", "")) and row.get("status") != "step":
            t_ms = row.get("host_median_ms")
        if nbytes and t_ms:
            row["gbs"] = nbytes / (t_ms * 1e-3) / 1e9
            if bandwidth_gbs:
                row["roofline_pct"] = 100.0 * row["gbs"] / bandwidth_gbs
    over = [r["stage"] for r in bd.rows if (r.get("roofline_pct") or 0) > 100]
    if over:
        bd.notes.append(f"above 100% of the roofline ({', '.join(over)}): the data fit in cache, which the "
                        "bandwidth measurement (arrays far larger than caches) does not bound; use a larger grid")


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return "" if v is None else v


def write_csv(path: Path, bd: Breakdown) -> None:
    """breakdown.csv: one row per stage (or fused stage set), plus the timestep row."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in bd.rows:
            w.writerow({k: _fmt(row.get(k)) for k in CSV_COLUMNS})


def write_kernels_csv(path: Path, bd: Breakdown) -> None:
    """kernels.csv: device time per XLA kernel in the steady window and the stages it contains."""
    cols = ["unit", "kernel", "stages", "calls", "median_us", "total_ms"]
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
    data = {"units": {"time": "ms (median_us: µs)", "bytes_accessed": "bytes", "gbs": "GB/s (1e9 B/s)",
                      "share": "fraction of the summed row time in the row's clock"},
            **bd.to_json(), "gbs_clock": GBS_CLOCK, **extra}
    data = _clean(data)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def terminal_table(bd: Breakdown, bandwidth_gbs: float | None, title: str = "") -> Any:
    """A rich Table: stage, calls, compile ms, median ms (host and device), share, GB/s, % of roofline."""
    from rich.table import Table

    share_clock = "device" if bd.mode == "fused" else "host"
    t = Table(title=title or f"lbm profile breakdown ({bd.mode} mode)", title_justify="left")
    for col, just in (("stage", "left"), ("status", "left"), ("calls", "right"), ("compile ms", "right"),
                      ("1st call ms", "right"), ("host med. ms", "right"), ("device med. ms", "right"),
                      (f"share ({share_clock})", "right"), ("dev. share", "right"), ("GB/s", "right"),
                      ("% roofline", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in bd.rows:
        if r.get("status") == "skipped":
            t.add_row(r["stage"], "skipped", "", "", "", "", "", "", "", "", "", style="dim")
            continue
        if r.get("status") == "fused":
            t.add_row(r["stage"], "fused", str(r.get("calls", "")), "", "", "", "", "", "", "", "", style="dim")
            continue
        host = r.get("host_median_ms") if bd.mode == "instrumented" or r["stage"] == STEP else None
        t.add_row(r["stage"], r.get("status", ""), str(r.get("calls", "")), _num(r.get("compile_ms"), ".1f"),
                  _num(r.get("first_call_ms"), ".3f"), _num(host, ".4f"), _num(r.get("device_median_ms"), ".4f"),
                  _num(None if r.get("share") is None else 100 * r["share"], ".1f") + ("%" if r.get("share") is not None else ""),
                  _num(None if r.get("device_share") is None else 100 * r["device_share"], ".1f")
                  + ("%" if r.get("device_share") is not None else ""),
                  _num(r.get("gbs"), ".2f"), _num(r.get("roofline_pct"), ".1f"),
                  style="bold" if r["stage"] == STEP else None)
    cap = [f"main clock: {bd.clocks.get('main')}", f"device clock: {bd.clocks.get('device')}",
           f"timestep: {bd.clocks.get('timestep')}",
           f"window: {bd.window.get('steady_steps')} steady steps ({bd.window.get('selection')})"]
    if bandwidth_gbs:
        cap.append(f"roofline: measured bandwidth {bandwidth_gbs:.2f} GB/s; GB/s = XLA bytes accessed / device median")
    cap += [f"note: {n}" for n in bd.notes]
    t.caption = "\n".join(cap)
    t.caption_justify = "left"
    return t
