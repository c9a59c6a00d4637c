"""bench.json and the terminal table: records, per-configuration comparisons, units on every number."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lbm.bench.peers import PEERS
from lbm.config.run import ENGINES
from lbm.io.fields import write_json as _write_json

FUSED_PREFERENCE = ("auto", "native", "xla")
"""Which fused variant stands for "fused" in comparisons, first present wins."""


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write the bench document atomically (NaN/inf become null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, doc)


def _key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return rec["case"], rec["lattice"], tuple(rec["grid"]), rec["precision"], rec["collision"]


def summary(records: Iterable[dict[str, Any]], bandwidth_gbs: float | None, baseline: str | None = None
            ) -> list[dict[str, Any]]:
    """One comparison per (case, lattice, grid, precision, collision): fused against naive, xla, instrumented and the
    same-run peers (``speedup_vs_<variant>``: the fused variant's median MLUPS over the other's); with a ``baseline``
    collision (``collisions=[...]``'s first), each variant's time over the baseline's (:func:`time_over`)."""
    groups: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault(_key(rec), {})[rec["variant"]] = rec
    out = []
    for (case, lattice, grid, precision, collision), by_variant in groups.items():
        fused_variant = next((v for v in FUSED_PREFERENCE if v in by_variant), None)
        row: dict[str, Any] = {"case": case, "lattice": lattice, "grid": list(grid), "precision": precision,
                               "collision": collision,
                               "mlups": {v: r["mlups"]["median"] for v, r in by_variant.items()}}
        if fused_variant is not None:
            fused = by_variant[fused_variant]
            row["fused_variant"] = fused_variant
            row["fused_engine"] = fused["engine"]
            row["fused_mlups"] = fused["mlups"]["median"]
            row["fused_fraction_of_roofline"] = fused.get("fraction_of_roofline")
            row["fused_cache_resident"] = fused.get("cache_resident")
            row["fused_on_chip"] = fused.get("on_chip")
            row["fused_compile_s"] = fused["compile_s"]
            for other in ("naive", "xla", "instrumented", *PEERS):
                if other in by_variant and other != fused_variant:
                    row[f"speedup_vs_{other}"] = fused["mlups"]["median"] / by_variant[other]["mlups"]["median"]
        if "auto" in by_variant:
            row["auto_check"] = auto_check(by_variant)
        if baseline is not None:
            row["baseline_collision"] = baseline
        base = groups.get((case, lattice, grid, precision, baseline), {})
        if baseline is not None and collision != baseline:
            ratios = {v: time_over(r, base[v]) for v, r in by_variant.items() if v in base}
            row["time_over_baseline"] = {v: t for v, t in ratios.items() if t is not None}
        out.append(row)
    return out


ENGINE_VARIANTS = tuple(e for e in ENGINES if e != "auto")
"""The variants that name an engine (bench measures each as ``engine=<name>`` would run)."""
AUTO_TOLERANCE = 0.10
"""``engine=auto`` may pick an engine at most this much slower than the fastest one measured beside it (issue 38)."""


def auto_check(by_variant: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Auto's pick against the engines measured beside it in the same run (variants named native, pallas, xla):
    the fastest, how much faster it was than auto, and whether auto is within AUTO_TOLERANCE of it; None where no
    other engine was measured."""
    auto = by_variant["auto"]
    engines = {v: r["mlups"]["median"] for v, r in by_variant.items() if v in ENGINE_VARIANTS}
    if not engines or all(v == auto["engine"] for v in engines):
        return None
    auto_mlups = max(auto["mlups"]["median"], engines.get(auto["engine"], 0.0))  # its engine, measured twice
    fastest = max({**engines, auto["engine"]: auto_mlups}.items(), key=lambda item: item[1])[0]
    over = engines[fastest] / auto_mlups - 1 if fastest != auto["engine"] else 0.0
    return {"picked": auto["engine"], "fastest": fastest,
            "mlups": {"auto": auto["mlups"]["median"], **engines}, "fastest_over_auto": max(0.0, over),
            "ok": over <= AUTO_TOLERANCE}


def auto_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """One line per configuration with an auto check: what auto picked against the fastest engine beside it."""
    lines = []
    for s in rows:
        check = s.get("auto_check")
        if not check:
            continue
        label = f"{s['case']} {'x'.join(map(str, s['grid']))} {s['lattice']} {s['collision']} {s['precision']}"
        measured = ", ".join(f"{v} {m:.0f}" for v, m in check["mlups"].items())
        if check["picked"] == check["fastest"]:
            verdict = "the fastest engine measured"
        elif check["ok"]:
            verdict = (f"{check['fastest']} was {100 * check['fastest_over_auto']:.1f} % faster, within the "
                       f"{100 * AUTO_TOLERANCE:.0f} % auto allows")
        else:
            verdict = (f"WRONG: {check['fastest']} was {100 * check['fastest_over_auto']:.1f} % faster, more than the "
                       f"{100 * AUTO_TOLERANCE:.0f} % auto allows")
        lines.append(f"auto picked {check['picked']} for {label}: {verdict} (MLUPS: {measured})")
    return lines


def time_over(record: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any] | None:
    """A record's time per step over the baseline record's in the same rounds: the median over rounds of the ratio,
    by the wall clock and by the process CPU time (None where the two were not timed in turn, round for round)."""
    rounds = len(record["mlups"]["values"])
    if "interleaved" not in record or "interleaved" not in baseline or len(baseline["mlups"]["values"]) != rounds:
        return None

    def ratio(clock: str) -> float | None:  # MLUPS ∝ 1 / time per step: same cells; None where a side lacks the clock
        if record["mlups"].get(clock) is None or baseline["mlups"].get(clock) is None:
            return None
        return statistics.median(b / a for a, b in zip(record["mlups"][clock], baseline["mlups"][clock], strict=True))

    return {"wall": ratio("values"), "cpu": ratio("cpu_values"), "rounds": rounds}


def _fmt(v: Any, spec: str, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:{spec}}{unit}"


def print_table(doc: dict[str, Any], console: Any = None) -> None:
    """Print the measured configurations and the comparisons as rich tables (stdout)."""
    from rich.console import Console
    from rich.table import Table

    out = Console()
    if not out.is_terminal:  # files and pipes: wide enough for every column
        out = Console(width=170)
    bw = doc.get("bandwidth")
    if bw:
        for line in bandwidth_lines(bw):
            out.print(line)
    env = doc.get("environment", {})
    out.print(f"{env.get('device', '?')} {env.get('cpu_model', '')} | jax {env.get('jax', '?')} | "
              f"load average {doc.get('load_average_start')} -> {doc.get('load_average_end')}")
    table = Table(title="lbm bench (MLUPS = million lattice updates per second; median of the repeats)")
    for col in ("case", "grid", "lattice", "collision", "variant", "engine", "precision", "MLUPS", "spread", "GB/s",
                "roofline", "compile", "memory"):
        table.add_column(col, justify="right" if col in ("MLUPS", "spread", "GB/s", "roofline", "compile", "memory")
                         else "left")
    for r in doc.get("records", []):
        mem = r.get("memory", {}).get("planned_peak_over_population")
        table.add_row(
            r["case"], "x".join(map(str, r["grid"])), r["lattice"], r["collision"], r["variant"], r["engine"],
            r["precision"],
            _fmt(r["mlups"]["median"], ".1f", " MLUPS"), _fmt(r["mlups"]["spread_pct"], ".1f", " %"),
            _fmt(r["effective_gbs"], ".1f", " GB/s"),
            roofline_cell(r.get("fraction_of_roofline"), r.get("cache_resident"), r.get("on_chip")),
            _fmt(r["compile_s"], ".2f", " s"), _fmt(mem, ".2f", " x pop"),
        )
    out.print(table)
    rows = doc.get("summary", [])
    if rows:
        comp = Table(title="fused against the baselines (same run)")
        peers = [p for p in PEERS if any(f"speedup_vs_{p}" in s for s in rows)]
        for col in ("case", "grid", "precision", "collision", "fused", "MLUPS", "roofline", "x naive", "x xla", "x instrumented",
                    *(f"x {p}" for p in peers)):
            comp.add_column(col, justify="left" if col in ("case", "grid", "precision", "collision", "fused")
                            else "right")
        for s in rows:
            if "fused_mlups" not in s:
                continue
            comp.add_row(
                s["case"], "x".join(map(str, s["grid"])), s["precision"], s["collision"],
                f"{s['fused_variant']} ({s['fused_engine']})",
                _fmt(s["fused_mlups"], ".1f", " MLUPS"),
                roofline_cell(s.get("fused_fraction_of_roofline"), s.get("fused_cache_resident"), s.get("fused_on_chip")),
                _fmt(s.get("speedup_vs_naive"), ".2f", "x"), _fmt(s.get("speedup_vs_xla"), ".2f", "x"),
                _fmt(s.get("speedup_vs_instrumented"), ".2f", "x"),
                *(_fmt(s.get(f"speedup_vs_{p}"), ".2f", "x") for p in peers),
            )
        out.print(comp)
        if any("baseline_collision" in s for s in rows):
            out.print(collision_table(doc))
        for line in auto_lines(rows):
            out.print(line)
    for s in doc.get("skipped", []):
        out.print(f"skipped {s['label']}: {s['reason']}")
    for line in doc.get("roofline_warnings", []):
        out.print(f"WARNING {line}")


def roofline_cell(fraction: float | None, cache_resident: bool | None, on_chip: bool | None = None) -> str:
    """The roofline column: the percentage, ``cache-resident`` (no DRAM bound), or the percentage flagged where it
    is above 100 %: its working set fits in the device's on-chip memory (a TPU's VMEM), or, at a memory-bound size,
    the probe is wrong there."""
    if cache_resident:
        return "cache-resident"
    if fraction is None:
        return "-"
    flag = " (above: fits on chip)" if on_chip else " (above: probe wrong)"
    return f"{100 * fraction:.1f} %" + (flag if fraction > 1 else "")


def bandwidth_lines(bw: dict[str, Any]) -> list[str]:
    """The measured bandwidth: each run's kernels (GB/s; cache-resident ones marked), the roofline, the spec."""
    lines = []
    for run in bw.get("runs", [bw]):
        names = run.get("kernels") or [k for k in ("copy", "triad", "copy_2buf", "triad_2buf") if k in run]
        kernels = ", ".join(f"{k} {run[k]['median_gbs']:.1f}" + (" (cache-resident)" if run[k].get("cache_resident")
                                                                  else "") for k in names)
        lines.append(f"memory bandwidth {run.get('when', '')} (GB/s, median of {run['repeats']}): {kernels}")
    cache = bw.get("cache_bytes")
    notes = [bw["roofline_kernel"], bw.get("when"), cache and f"last-level cache {cache / 2**20:.1f} MiB"]
    lines.append(f"roofline {bw['bandwidth_gbs']:.1f} GB/s ({', '.join(n for n in notes if n)})")
    if bw.get("roofline_overcounted"):
        lines.append("every probe kernel's compiled program moves more than the kernel names (lbm.hlo): this roofline "
                     "counts fewer bytes than the device moved; the probe is wrong here")
    if bw.get("roofline_cache_resident"):
        lines.append("the probe's arrays fit in the last-level cache: this roofline is the cache's bandwidth, not the "
                     "memory's (raise bandwidth.bytes)")
    if bw.get("spec_bandwidth_gbs"):
        lines.append(f"specification {bw['spec_bandwidth_gbs']:.0f} GB/s ({bw['spec_source']}): the roofline is "
                     f"{100 * bw['fraction_of_spec']:.0f} % of it")
    if bw.get("on_chip_bytes"):
        lines.append(f"on-chip memory {bw['on_chip_bytes'] / 2**20:.0f} MiB ({bw['on_chip_source']}): a record above "
                     "the roofline whose working set fits there is marked 'fits on chip', not 'probe wrong'")
    return lines


def collision_table(doc: dict[str, Any]) -> Any:
    """The rich table of ``collisions=[...]``: each record's MLUPS and its time over the baseline collision's."""
    from rich.table import Table

    rows = {(s["case"], s["lattice"], tuple(s["grid"]), s["precision"], s["collision"]): s for s in doc["summary"]}
    baseline = next(s["baseline_collision"] for s in rows.values() if "baseline_collision" in s)
    table = Table(title=f"collisions against {baseline}: time per step over {baseline}'s in the same rounds (median of "
                        "the rounds' ratios); MLUPS by the wall clock, (CPU) by the process CPU time, n/a where the "
                        "work ran on an accelerator")
    for col in ("case", "grid", "lattice", "precision", "variant", "engine", "collision", "MLUPS", "MLUPS (CPU)",
                f"time / {baseline}", f"time / {baseline} (CPU)", "rounds"):
        table.add_column(col, justify="right" if col.startswith(("MLUPS", "time", "rounds")) else "left")
    for r in doc.get("records", []):
        ratio = rows[_key(r)].get("time_over_baseline", {}).get(r["variant"])
        own = r["collision"] == baseline
        cpu = r["mlups"].get("cpu_values")
        # where the work ran on an accelerator the process's CPU time is the host's dispatch, not the work: n/a
        na = f"n/a ({r.get('work_platform', 'device')})"
        table.add_row(
            r["case"], "x".join(map(str, r["grid"])), r["lattice"], r["precision"], r["variant"], r["engine"],
            r["collision"], _fmt(r["mlups"]["median"], ".1f"), na if cpu is None else _fmt(statistics.median(cpu), ".1f"),
            "1 (baseline)" if own else _fmt(ratio and ratio["wall"], ".2f", "x"),
            na if cpu is None else "1 (baseline)" if own else _fmt(ratio and ratio["cpu"], ".2f", "x"),
            str(len(r["mlups"]["values"])))
    return table

