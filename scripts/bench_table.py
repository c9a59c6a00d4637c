"""Markdown tables from bench.json files (the before/after table of docs/performance.md).

    .venv/bin/python scripts/bench_table.py outputs/perf/<stamp>/sizes/bench.json [more bench.json ...]
    .venv/bin/python scripts/bench_table.py --peers d2/bench.json d3/bench.json   # native against lbmpy

One row per (case, grid, precision); one column group per variant: MLUPS (median of the
repeats), % of the roofline the same run measured, compile seconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ("naive", "xla", "auto", "native", "instrumented")


def rows(doc: dict) -> list[str]:
    """Markdown rows of one bench document."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in doc["records"]:
        key = (r["case"], "x".join(map(str, r["grid"])), r["lattice"], r["precision"])
        groups.setdefault(key, {})[r["variant"]] = r
    out = []
    for (case, grid, lattice, precision), by in groups.items():
        cells = []
        for v in ORDER:
            r = by.get(v)
            if r is None:
                cells.append("–")
                continue
            frac = r.get("fraction_of_roofline")
            pct = f", {100 * frac:.0f} %" if frac is not None else ""
            cells.append(f"{r['mlups']['median']:.1f}{pct}, {r['compile_s']:.2f} s")
        out.append(f"| {case} | {grid} | {lattice} | {precision} | " + " | ".join(cells) + " |")
    return out


def peer_rows(doc: dict) -> list[str]:
    """Markdown rows of native against lbmpy: MLUPS (spread), GB/s, % of the run's in-place copy and of its roofline."""
    bw = doc["bandwidth"]
    copy = max(run["copy"]["median_gbs"] for run in bw.get("runs", [bw]))  # before and after: the larger, as bench
    out = []
    for s in doc["summary"]:
        if "lbmpy" not in s["mlups"]:
            continue
        by = {r["variant"]: r for r in doc["records"] if r["grid"] == s["grid"] and r["lattice"] == s["lattice"]}
        nat, peer = by[s["fused_variant"]], by["lbmpy"]
        cells = []
        for r in (nat, peer):
            gbs = r["mlups"]["median"] * r["bytes_per_cell_update"] / 1e3
            frac = r.get("fraction_of_roofline")  # None: cache-resident (bench.json's cache_resident)
            cells.append(f"{r['mlups']['median']:.1f} ({r['mlups']['spread_pct']:.0f} %) | {gbs:.1f} | "
                         f"{100 * gbs / copy:.0f} % | " + ("cache-resident" if frac is None else f"{100 * frac:.0f} %"))
        grid = "x".join(map(str, s["grid"]))
        out.append(f"| {s['lattice'].upper()} {grid} | " + " | ".join(cells) + f" | **{s['speedup_vs_lbmpy']:.2f}×** |")
    return out


def peers(files: list[Path]) -> None:
    """Print the native-against-lbmpy table of ``files``."""
    head = "MLUPS (spread) | GB/s | % of in-place copy | % of roofline"
    print(f"| grid | native {head.replace(' | ', ' | native ')} | lbmpy {head.replace(' | ', ' | lbmpy ')} "
          "| native / lbmpy |")
    print("|---|" + "---:|" * 9)
    for f in files:
        doc = json.loads(f.read_text())
        for line in peer_rows(doc):
            print(line)
    for f in files:
        doc = json.loads(f.read_text())
        runs = doc["bandwidth"].get("runs", [doc["bandwidth"]])
        figures = "; ".join(", ".join(f"{k} {run[k]['median_gbs']:.1f}" for k in ("copy", "triad", "copy_2buf",
                                                                                    "triad_2buf")) for run in runs)
        print(f"\n{f}: bandwidth GB/s (before; after) {figures}; roofline {doc['bandwidth']['bandwidth_gbs']:.1f} "
              f"GB/s ({doc['bandwidth']['roofline_kernel']}); load average {doc.get('load_average_start')} -> "
              f"{doc.get('load_average_end')}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--peers", action="store_true", help="native against the same-run peer lbmpy")
    args = p.parse_args()
    if args.peers:
        peers(args.files)
        return
    print("| case | grid | lattice | precision | " + " | ".join(ORDER) + " |")
    print("|---|---|---|---|" + "---|" * len(ORDER))
    notes = []
    for f in args.files:
        doc = json.loads(f.read_text())
        for line in rows(doc):
            print(line)
        bw = doc.get("bandwidth") or {}
        notes.append(f"{f}: roofline {bw.get('bandwidth_gbs', float('nan')):.1f} GB/s ({bw.get('roofline_kernel')}), "
                     f"load average {doc.get('load_average_start')} -> {doc.get('load_average_end')}")
    print()
    print("cells: MLUPS (median), % of roofline, compile s. " + "; ".join(notes))


if __name__ == "__main__":
    main()
