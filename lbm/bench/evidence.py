"""Deterministic evidence of a compiled chunk: what the program does per cell and step, independent of timing.

bench compiles every fused configuration once more for a fixed number of steps (:data:`EVIDENCE_STEPS`,
never the timed chunk, whose length follows the machine's speed) and records here, per cell and step:
the kernels of the loop body (lbm.hlo.loop_traffic: kind, stages, bytes moved), the bytes of the lbm.hlo
traffic model, XLA's cost analysis (flops, bytes accessed) and the custom-call targets (a native kernel's
target name carries the hash of its generated source). An instrumented record's step is one executable per
stage, each called once per step: its evidence is each stage's program read the same way and summed
(:func:`stages_evidence`), with the stages' own measures kept, so a change is named by the stage it is in.
Identical code in the same environment gives identical evidence; :func:`diff` says how two records' evidence
differ: more work, less work, or another program doing about the same work.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

EVIDENCE_STEPS = 16
"""Steps of the chunk compiled for the evidence (even: the AA pattern runs in pairs; at least lbm.bench.inspect's
MIN_CHUNK_STEPS, below which XLA may unroll the loop)."""

WORK_FIELDS = {
    "kernels_per_step": "kernels per step",
    "bytes_per_cell_step": "bytes per cell and step (lbm.hlo traffic model)",
    "cost_bytes_per_cell_step": "bytes accessed per cell and step (XLA cost analysis)",
    "cost_flops_per_cell_step": "flops per cell and step (XLA cost analysis)",
}
"""Per-step measures of work, each larger = more work (name in a record -> what it is)."""

TRAFFIC = {"bytes_per_cell_step", "cost_bytes_per_cell_step"}
"""The work measures of memory traffic (they decide the direction when flops move the other way)."""

EXACT = 1e-9
"""Relative difference below which two evidence values are equal (they are computed, not measured)."""


def program_evidence(text: str, cost: dict[str, float | None], cells: int, chunk_steps: int) -> dict[str, Any]:
    """The evidence of a compiled chunk: optimised HLO ``text``, its XLA ``cost`` analysis, ``cells`` per step."""
    from lbm.hlo import loop_traffic
    from lbm.stages import HALO, STAGES

    loop = loop_traffic(text, (*STAGES, HALO))
    steps = max(1, chunk_steps // loop.trip_count) if loop.trip_count > 1 else chunk_steps
    per = float(cells * steps)

    def scaled(value: float | None) -> float | None:
        return None if value is None else float(value) / per

    kernels = [{"name": k.name, "kind": k.kind, "stages": list(k.stages),
                "bytes_per_cell_step": (k.bytes_read + k.bytes_written) / per} for k in loop.kernels]
    return {
        "chunk_steps": chunk_steps, "steps_per_loop_body": steps,
        "kernels_per_step": len(loop.kernels) / steps,
        "bytes_per_cell_step": loop.bytes / per,
        "cost_bytes_per_cell_step": scaled(cost.get("bytes_accessed")),
        "cost_flops_per_cell_step": scaled(cost.get("flops")),
        "custom_call_targets": sorted({k.kind for k in loop.kernels if k.opcode == "custom-call"}),
        "kernels": kernels,
        "source": f"optimised HLO of a {chunk_steps}-step fused chunk: its loop body (lbm.hlo.loop_traffic) and "
                  "XLA's cost analysis (a while loop's body counted once), divided by cells and steps per body; "
                  "custom calls (native kernels) count no flops or bytes in the cost analysis",
    }


def stages_evidence(programs: list[dict[str, Any]], cells: int) -> dict[str, Any]:
    """The evidence of a step made of one executable per stage (instrumented mode), from each stage's program
    (``name``, ``stage``, ``optimized_hlo``, ``cost``: the engine's ``describe``): the stages' evidence summed,
    every kernel named ``<stage>/<kernel>`` with its stage, and each stage's own measures under ``stages``."""
    per_stage: dict[str, dict[str, Any]] = {}
    kernels: list[dict[str, Any]] = []
    targets: set[str] = set()
    for prog in programs:
        stage = prog["stage"] or prog["name"]
        ev = program_evidence(prog["optimized_hlo"], prog["cost"], cells, 1)
        kernels += [{**k, "name": f"{stage}/{k['name']}", "stages": [stage]} for k in ev["kernels"]]
        per_stage[stage] = {f: ev[f] for f in WORK_FIELDS}
        targets.update(ev["custom_call_targets"])
    return {
        "chunk_steps": 1, "steps_per_loop_body": 1,
        **{f: _total(v[f] for v in per_stage.values()) for f in WORK_FIELDS},
        "custom_call_targets": sorted(targets), "kernels": kernels, "stages": per_stage,
        "source": "optimised HLO of each stage's own executable (instrumented mode: one jit per stage, one call per "
                  "step) and XLA's cost analysis of each, per cell, summed over the stages of a step",
    }


def _total(values: Any) -> float | None:
    """The sum of per-stage measures (None when no stage has one: a backend without cost analysis; a stage without
    a count has none of it, e.g. XLA's cost analysis leaves out the flops of a stage that only moves data)."""
    got = [v for v in values if v is not None]
    return float(sum(got)) if got else None


def signature(kernel: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What identifies a kernel across two compilations: its kind and the stages it computes."""
    return kernel["kind"], tuple(kernel["stages"])


@dataclass
class Structural:
    """How the evidence of two records differs."""

    kind: str
    """``identical``, ``more_work``, ``less_work``, ``changed`` (another program, no clear direction) or ``unknown``."""
    fields: list[tuple[str, float, float, float]] = field(default_factory=list)
    """(field, base, new, relative change) of each work measure that differs."""
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    targets: tuple[list[str], list[str]] = ([], [])
    """Custom-call targets of base and new where they differ."""
    note: str = ""
    stages: list[tuple[str, str, float, float, float]] = field(default_factory=list)
    """(stage, field, base, new, relative change) where the evidence is per stage (instrumented mode)."""

    def summary(self, top: int = 3) -> str:
        """One line: the measures that moved and the kernels that appeared or went (costliest first)."""
        if self.kind in ("identical", "unknown"):
            return self.note or self.kind
        parts = [f"{WORK_FIELDS[f].split(' (')[0]} {a:.4g} -> {b:.4g} ({rel * 100:+.1f}%)" for f, a, b, rel in self.fields]
        moved = sorted({stage for stage, *_ in self.stages})
        if moved:
            parts.append(f"in stage(s) {', '.join(moved)}")
        for title, items in (("new kernels", self.added), ("kernels gone", self.removed)):
            if items:
                ranked = sorted(items, key=lambda k: -k["bytes_per_cell_step"])
                names = ", ".join(f"`{k['name']}` ({k['kind']}: {'+'.join(k['stages']) or 'no stage'})"
                                  for k in ranked[:top])
                more = f" and {len(items) - top} more" if len(items) > top else ""
                parts.append(f"{title}: {names}{more}")
        if self.targets[0] != self.targets[1]:
            parts.append(f"custom-call targets {self.targets[0] or '-'} -> {self.targets[1] or '-'}")
        return "; ".join(parts)


def records_diff(a: dict[str, Any], b: dict[str, Any], threshold: float) -> Structural:
    """Compare two bench records' evidence; a same-run peer's record (lbmpy) has no compiled program to compare."""
    peers = [f"{r['peer'].get('peer', 'peer')} {r['peer'].get('lbmpy', '')}".strip()
             for r in (a, b) if isinstance(r.get("peer"), dict)]
    if peers:
        return Structural("unknown", note=f"a same-run peer's kernel ({', '.join(dict.fromkeys(peers))}) has no "
                                          "compiled program to compare: timing alone")
    return diff(a.get("evidence"), b.get("evidence"), threshold)


def diff(a: dict[str, Any] | None, b: dict[str, Any] | None, threshold: float) -> Structural:
    """Compare two records' evidence; a work measure moving by more than ``threshold`` sets the direction."""
    if not a or not b:
        which = "base" if not a else "new"
        return Structural("unknown", note=f"no structural evidence in the {which} record (a bench of an older lbm): "
                                          "timing alone")
    fields = _moved(a, b)
    per_a, per_b = a.get("stages") or {}, b.get("stages") or {}
    stages = [(stage, *m) for stage in per_a if stage in per_b for m in _moved(per_a[stage], per_b[stage])]
    sig_a = Counter(signature(k) for k in a.get("kernels", []))
    sig_b = Counter(signature(k) for k in b.get("kernels", []))
    extra, gone = sig_b - sig_a, sig_a - sig_b
    added = _pick(b.get("kernels", []), extra)
    removed = _pick(a.get("kernels", []), gone)
    targets = (list(a.get("custom_call_targets", [])), list(b.get("custom_call_targets", [])))
    if not fields and not added and not removed and targets[0] == targets[1]:
        return Structural("identical", note="identical (kernels, stages, bytes, flops per cell and step)")
    up = {f for f, _, _, rel in fields if rel > threshold}
    down = {f for f, _, _, rel in fields if rel < -threshold}
    # memory traffic bounds a lattice Boltzmann step: fewer flops with more bytes (an unfused program computes
    # once what a fusion recomputes) is still more work; more flops with fewer bytes is another program
    if up and not down & TRAFFIC:
        kind = "more_work"
    elif down and not up & TRAFFIC:
        kind = "less_work"
    else:
        kind = "changed"
    return Structural(kind, fields, added, removed, targets if targets[0] != targets[1] else ([], []), stages=stages)


def _moved(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(field, base, new, relative change) of each work measure of ``a`` and ``b`` that differs."""
    out = []
    for name in WORK_FIELDS:
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            continue
        rel = (y - x) / x if x else (0.0 if y == x else float("inf"))
        if abs(rel) > EXACT:
            out.append((name, float(x), float(y), rel))
    return out


def _pick(kernels: list[dict[str, Any]], wanted: Counter) -> list[dict[str, Any]]:
    """The kernels whose signatures make up the multiset ``wanted``."""
    left = Counter(wanted)
    out = []
    for k in kernels:
        s = signature(k)
        if left[s] > 0:
            left[s] -= 1
            out.append(k)
    return out
