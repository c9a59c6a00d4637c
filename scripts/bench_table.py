"""Markdown tables from bench.json files (the before/after table of docs/performance.md).

    .venv/bin/python scripts/bench_table.py outputs/perf/<stamp>/sizes/bench.json [more bench.json ...]

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    args = p.parse_args()
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
