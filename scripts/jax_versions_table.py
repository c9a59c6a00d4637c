"""Markdown tables of what the compiled step is, side by side, from two bench.json files (docs/studies.md,
"JAX 0.10.2 against 0.12.0.1").

    .venv/bin/python scripts/jax_versions_table.py BASE/bench.json NEW/bench.json [--top 6]
    .venv/bin/python scripts/jax_versions_table.py docs/jax-versions/bench/versions-d2q9-{0.10.2,0.12.0.1}.json.gz

Per configuration both files hold: the structural evidence of the fused chunk (kernels per step, steps per loop
body, bytes per cell and step of the lbm.hlo traffic model, XLA's bytes accessed and flops per cell and step, the
fusion kinds, the special fusions and the op they come from), the device-clock time per step of the traced call
summed by fusion kind, and the costliest kernels with their kind and stages. Everything is read from the files;
nothing is measured here. ``compare`` gives the verdicts; this gives the facts its OK verdicts leave out.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from lbm.bench.compare import key_of, label, short_op


def kinds(record: dict[str, Any]) -> str:
    """The fusion kinds of a record's compiled chunk, e.g. ``kLoop 57, __ynn_fusion 2``."""
    return ", ".join(f"{k} {n}" for k, n in sorted((record.get("fusion_kinds") or {}).items(), key=lambda x: -x[1]))


def specials(record: dict[str, Any]) -> str:
    """The special (non-kLoop/kInput) fusions of a record and the op each comes from."""
    out = [f"`{f['fusion']}` ({short_op(f['op_name'])})" for f in record.get("special_fusions") or []]
    return ", ".join(out) or "-"


def facts(record: dict[str, Any]) -> dict[str, str]:
    """The structural facts of one record, formatted."""
    ev = record.get("evidence") or {}
    kt = record.get("kernel_times") or {}

    def num(x: Any, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    return {
        "MLUPS (median of the bench's repeats, wall clock)": num(record["mlups"]["median"], ".1f"),
        "kernels per step": num(ev.get("kernels_per_step"), ".1f"),
        "steps per loop body": num(ev.get("steps_per_loop_body"), "d"),
        "bytes per cell and step (lbm.hlo traffic model)": num(ev.get("bytes_per_cell_step"), ".0f"),
        "bytes accessed per cell and step (XLA cost analysis)": num(ev.get("cost_bytes_per_cell_step"), ".0f"),
        "flops per cell and step (XLA cost analysis)": num(ev.get("cost_flops_per_cell_step"), ".0f"),
        "fusion kinds (compiled chunk)": kinds(record),
        "special fusions (from op)": specials(record),
        "device time per step of the traced call, all events summed (µs)": num(kt.get("total_us_per_step"), ".0f"),
    }


OTHER = "other (while, outside the loop body)"


def by_kind(record: dict[str, Any]) -> dict[str, float]:
    """Device time per step (µs) of the traced call's kernels that bench kept (its 25 costliest), summed by kind."""
    kind_of = {k["name"]: k["kind"] for k in (record.get("evidence") or {}).get("kernels", [])}
    for f in record.get("special_fusions") or []:
        kind_of[f["fusion"]] = f["kind"]
    out: dict[str, float] = defaultdict(float)
    for name, t in ((record.get("kernel_times") or {}).get("kernels") or {}).items():
        out[kind_of.get(name, OTHER)] += t["us_per_step"]
    return dict(out)


def top(record: dict[str, Any], n: int) -> list[str]:
    """The ``n`` costliest kernels of the traced call: name, kind, stages, µs per step, share."""
    ev = {k["name"]: k for k in (record.get("evidence") or {}).get("kernels", [])}
    special = {f["fusion"]: f for f in record.get("special_fusions") or []}
    kernels = ((record.get("kernel_times") or {}).get("kernels") or {}).items()
    rows = []
    for name, t in sorted(kernels, key=lambda x: -x[1]["us_per_step"])[:n]:
        k = ev.get(name, {})
        stages = "+".join(k.get("stages") or []) or (short_op(special[name]["op_name"]) if name in special else "-")
        kind = special[name]["kind"] if name in special else k.get("kind", "other")
        rows.append(f"`{name}` {kind} {stages}: "
                    f"{t['us_per_step']:.0f} µs ({t['share'] * 100:.0f}%)")
    return rows


def table(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str], n: int) -> list[str]:
    """The markdown section of one configuration."""
    fa, fb = facts(a), facts(b)
    lines = [f"### {label(key_of(a))}", "", f"| | {names[0]} | {names[1]} |", "|---|---|---|"]
    lines += [f"| {k} | {fa[k]} | {fb[k]} |" for k in fa]
    ka, kb = by_kind(a), by_kind(b)
    for kind in sorted(set(ka) | set(kb), key=lambda k: -(ka.get(k, 0) + kb.get(k, 0))):
        lines.append(f"| device µs per step, {kind} (of the 25 costliest kernels) | {ka.get(kind, 0):.0f} | "
                     f"{kb.get(kind, 0):.0f} |")
    ta, tb = top(a, n), top(b, n)
    for i in range(max(len(ta), len(tb))):
        lines.append(f"| costliest kernel {i + 1} | {ta[i] if i < len(ta) else '-'} | {tb[i] if i < len(tb) else '-'} |")
    return lines + [""]


def read(path: str) -> dict[str, Any]:
    """A bench.json, plain or gzipped (``.gz``)."""
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if path.endswith(".gz") else data)


def main() -> None:
    """Print one table per configuration both files hold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--top", type=int, default=6, help="costliest kernels listed per side (default 6)")
    ns = parser.parse_args()
    a, b = read(ns.base), read(ns.new)
    names = tuple(f"jax {d['environment'].get('jax')}" + (f" XLA_FLAGS={d['environment'].get('XLA_FLAGS')}"
                                                          if d["environment"].get("XLA_FLAGS") else "") for d in (a, b))
    recs_b = {key_of(r): r for r in b["records"]}
    for r in a["records"]:
        if key_of(r) in recs_b:
            print("\n".join(table(r, recs_b[key_of(r)], names, ns.top)))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
