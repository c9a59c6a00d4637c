"""The stages of a gradient program: which pass of which stage a kernel or an executable belongs to.

Reverse-mode differentiation of a run (lbm.diff) gives one program with three passes over the
stages: the forward pass, the recomputation of checkpointed segments during the backward pass, and
the backward pass proper (the stages' adjoints, in reverse order). Their rows are named
``collide``, ``collide (recompute)`` and ``collide (backward)`` (:func:`pass_name`).

JAX keeps each stage's ``jax.named_scope`` in the op_name metadata of every pass and marks the pass
by the path around it (jax 0.12 and 0.11.2): ``jit(value)/jvp()/while/body/.../collide/mul`` (forward).
Under the checkpointing policies of lbm.diff.checkpointing the backward pass is a ``jax.custom_vjp`` rule
that re-runs steps and pulls back through them: inside its ``transpose(jvp())``, a step's ``jax.vjp``
re-runs it under a ``jvp()`` (``.../transpose(jvp())/.../jvp()/.../collide/mul``: recomputed), states
re-run without residuals sit under the scope ``recompute`` (binomial), and the pullbacks are transposed
once more (``.../transpose(jvp())/.../transpose(jvp())/.../collide/mul``: backward). JAX's own reverse mode
of a plain loop (policy ``none``) and of ``jax.checkpoint`` transposes once: ``.../checkpoint/while/body/
.../collide/mul`` is backward, ``.../checkpoint/rematted_computation/.../collide/mul`` recomputed. A scope
JAX folds into the transform's name (``transpose(jvp(collide))``) counts the same. :func:`gradient_stages`
reads them; :func:`kernel_rows` gives each kernel of a compiled program its row, :func:`module_row` each
executable of the instrumented gradient (lbm.diff.instrumented); :func:`breakdown` sums a trace's kernel
events by row and :func:`write` writes gradient_breakdown.csv/.json/.png (lbm.diff.profile).
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lbm.stages import split_scope

BACKWARD = "backward"
RECOMPUTE = "recompute"
PASSES = ("", RECOMPUTE, BACKWARD)
"""The passes of a gradient program in execution order ("": the forward pass)."""
_REMAT = re.compile(r"(^|/)(rematted_computation|remat|checkpoint\(rematted)")
_NAMES = re.compile(r"[A-Za-z_][A-Za-z_0-9+]*")


def pass_name(stage: str, kind: str) -> str:
    """The row of ``stage`` in pass ``kind`` ("" forward, :data:`RECOMPUTE`, :data:`BACKWARD`): ``collide (backward)``."""
    return f"{stage} ({kind})" if kind else stage


def pass_of(op_name: str) -> str:
    """The pass an op_name path belongs to: "" (forward), :data:`RECOMPUTE` or :data:`BACKWARD` (see the module doc)."""
    parts = op_name.split("/")
    transposed = [i for i, p in enumerate(parts) if p.startswith("transpose(")]
    if not transposed:
        return ""
    if len(transposed) > 1:
        return BACKWARD
    inside = parts[transposed[0] + 1:]
    if _REMAT.search(op_name) or RECOMPUTE in inside or any(p.startswith("jvp(") for p in inside):
        return RECOMPUTE
    return BACKWARD


def gradient_stages(op_name: str, stages: Iterable[str]) -> list[str]:
    """The rows (``stage`` or ``stage (pass)``) of the stages named in an op_name path, in path order."""
    wanted = set(stages)
    kind = pass_of(op_name)
    found: list[str] = []
    for word in _NAMES.findall(op_name):  # path components, and names inside a transform's parentheses
        for stage in split_scope(word):
            if stage in wanted and pass_name(stage, kind) not in found:
                found.append(pass_name(stage, kind))
    return found


UNSCOPED = "(unscoped)"
"""Row of the kernels of a pass that carry no stage scope (the objective, loop bookkeeping): ``(unscoped)``,
``(unscoped) (backward)``."""
UNKNOWN = "(no metadata)"
"""Row of the kernels XLA added without an op_name (copies of loop carries and buffers): their pass is unknown."""
UNKNOWN_PASS = "unknown"
SMALL_CALL = "xla_cpu_small_call"
"""The frontend attribute of a ``call`` XLA:CPU runs as one kernel (a loop over small arrays)."""
CSV_COLUMNS = ["stage", "pass", "kernels", "events", "total_ms", "ms_per_call", "ms_per_step", "share"]
"""Columns of gradient_breakdown.csv."""


def kernel_rows(hlo_text: str, stages: Iterable[str]) -> dict[str, str]:
    """Per kernel of a compiled gradient program (its HLO text): its row, the ``+``-joined rows of the stages in it
    and in the computations it calls; without a stage, :data:`UNSCOPED` in the pass its op_names name.

    XLA:CPU runs a loop over small arrays as one "small call" (:data:`SMALL_CALL`): its trace holds one event for
    the whole loop, which counts as a kernel of every stage in it."""
    from lbm.hlo import parse_hlo

    module = parse_hlo(hlo_text)
    stages = list(stages)
    memo: dict[str, list[str]] = {}

    def op_names(comp: str, trail: tuple[str, ...]) -> list[str]:
        if comp not in memo:
            memo[comp] = [n for ins in module.computations.get(comp, []) for n in (
                [ins.op_name] + [m for c in ins.called if c not in trail for m in op_names(c, (*trail, comp))])]
        return memo[comp]

    small_calls = [ins for comp in module.top_level() for ins in module.computations.get(comp, [])
                   if ins.opcode == "call" and SMALL_CALL in ins.attrs]
    out: dict[str, str] = {}
    for ins in module.kernels() + small_calls:
        names = [ins.op_name] + ([n for c in ins.called for n in op_names(c, ())]
                                 if ins.opcode in ("fusion", "custom-call", "call") else [])
        rows: list[str] = []
        for n in names:
            rows += [r for r in gradient_stages(n, stages) if r not in rows]
        kinds = {pass_of(n) for n in names if n}
        unscoped = UNKNOWN if not kinds else pass_name(UNSCOPED, kinds.pop() if len(kinds) == 1 else "")
        out[ins.name] = "+".join(sorted(rows, key=row_order(stages))) or unscoped
    return out


def module_row(module: str) -> str | None:
    """The row of an instrumented gradient's executable from its module name (``jit_backward_collide`` ->
    ``collide (backward)``), None for another one."""
    for prefix, kind in (("jit_stage_", ""), ("jit_forward_", ""), ("jit_recompute_", RECOMPUTE),
                         ("jit_backward_", BACKWARD)):
        if module.startswith(prefix):
            return pass_name(module[len(prefix):], kind)
    return None


def row_order(stages: Iterable[str]) -> Any:
    """Sort key of rows: the forward pass in timestep order, the recomputation, the backward pass in reverse order."""
    order = {s: i for i, s in enumerate(stages)}

    def key(row: str) -> tuple[int, int, str]:
        if row == UNKNOWN:
            return len(PASSES), 0, row
        first = row.split("+")[0]
        kind = pass_of_row(first)
        stage = first[: len(first) - len(kind) - 3] if kind else first
        i = order.get(stage)
        return PASSES.index(kind), len(order) if i is None else -i if kind == BACKWARD else i, row

    return key


def breakdown(events: Iterable[Mapping[str, Any]], row_of: Callable[[Mapping[str, Any]], str], stages: Sequence[str],
              calls: int, steps: int) -> list[dict[str, Any]]:
    """Device time per row over ``calls`` calls of a gradient of ``steps`` steps: one row per stage and pass (and
    sets XLA fused), :data:`UNSCOPED`, then ``sum``; ms per call, per step, and the share of the sum."""
    totals: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    kernels: dict[str, set[str]] = defaultdict(set)
    for e in events:
        row = row_of(e)
        totals[row] += int(e["dur"])
        counts[row] += 1
        kernels[row].add(str(e.get("hlo_op")))
    whole = sum(totals.values())
    out = []
    for row in sorted(totals, key=row_order(stages)):
        out.append({"stage": row, "pass": row_pass(row), "kernels": len(kernels[row]),
                    "events": counts[row], "total_ms": totals[row] / 1e6, "ms_per_call": totals[row] / 1e6 / calls,
                    "ms_per_step": totals[row] / 1e6 / calls / steps, "share": totals[row] / whole if whole else None})
    out.append({"stage": "sum", "pass": "", "kernels": sum(len(k) for k in kernels.values()),
                "events": sum(counts.values()), "total_ms": whole / 1e6, "ms_per_call": whole / 1e6 / calls,
                "ms_per_step": whole / 1e6 / calls / steps, "share": 1.0 if whole else None})
    return out


def row_pass(row: str) -> str:
    """The pass column of a row: forward, recompute, backward, several joined by ``+``, or :data:`UNKNOWN_PASS`."""
    if row == UNKNOWN:
        return UNKNOWN_PASS
    return "+".join(sorted({pass_of_row(r) or "forward" for r in row.split("+")}))


def pass_of_row(row: str) -> str:
    """The pass of a row name (``collide (backward)`` -> backward, ``collide`` -> "")."""
    return next((k for k in PASSES if k and row.endswith(f" ({k})")), "")


def pass_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Device ms per call of each pass (forward, recompute, backward, and the kernels of no known pass); a fused set of
    several passes counts under each, split evenly."""
    out = {"forward": 0.0, RECOMPUTE: 0.0, BACKWARD: 0.0, UNKNOWN_PASS: 0.0}
    for r in rows:
        if r["stage"] != "sum":
            parts = r["pass"].split("+")
            for p in parts:
                out[p] += r["ms_per_call"] / len(parts)
    return out


def write(rows: Sequence[Mapping[str, Any]], out_dir: Path, facts: Mapping[str, Any]) -> list[Path]:
    """gradient_breakdown.csv, gradient_breakdown.json (the rows, the passes' totals and ``facts``) and
    gradient_breakdown.png (ms per step by row) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path, png_path = (out_dir / f"gradient_breakdown.{x}" for x in ("csv", "json", "png"))
    with csv_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    json_path.write_text(json.dumps({**facts, "clock": "device: XLA kernel events, sum of durations",
                                     "passes_ms_per_call": pass_totals(rows), "rows": list(rows)}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["stage"] != "sum"]
    colors = {"forward": "tab:blue", RECOMPUTE: "tab:orange", BACKWARD: "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(shown) + 1.5))
    ax.barh([r["stage"] for r in shown][::-1], [r["ms_per_step"] for r in shown][::-1],
            color=[colors.get(r["pass"], "tab:gray") for r in shown][::-1])
    ax.set(xlabel="device ms per step", title=f"value and gradient: {facts.get('case', '')} {facts.get('grid', '')}")
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [csv_path, json_path, png_path]
