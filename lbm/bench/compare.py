"""``python -m lbm compare BASE.json NEW.json``: what got slower or faster beyond the noise, and why.

Records are matched by configuration (case, lattice, grid, variant, precision, collision).
On a shared machine, other work only ever slows a repeat down, so a configuration is judged by its
fastest repeat (what the code reaches when the machine lets it); the median is shown beside it.
A record regressed when its fastest repeat fell by more than the noise threshold: the larger of
``--threshold`` (default 15%: identical code on a 2-core machine at a load average of about 13 stayed
within it in 19 of 20 back-to-back pairs with a re-measurement, docs/studies.md) and the two runs'
own uncertainty of their fastest repeat (the relative gap to the second fastest, added), and, where
the repeats allow it, a permutation test on the repeats gives p <= 0.05. ``--remeasure N`` runs
``python -m lbm bench`` again N times for each suspect configuration (called slower, or slower by more than
half the threshold) in this checkout and environment, i.e. the new code, and judges the fastest of all its
repeats: a run that was slowed by a busy machine recovers, a real regression stays slow. With
``--base-python PY`` (the interpreter of the base's environment, e.g. another virtual environment) the base is
measured again as well, alternating with the new code (base, new, base, new, ...), so both sides sample the
machine at the same times: a base that was measured at a good moment can no longer hide a regression, nor
one measured at a bad moment invent one.
Where both records also carry ``mlups.cpu_values`` (repeats timed with the process CPU time), the verdict
judges those: on a shared machine the CPU time counts only the time the benchmark itself ran, where the
wall clock also counts the time other processes held the cores (docs/studies.md: on 2 cores at a load
average of 2-13 the fastest wall-clock repeat of the same native kernel ranged 66-272 MLUPS over 12 runs).
Records timed with different clocks (their ``clock`` texts differ) are not compared.
The report also shows per-stage times, the compiled structure (fusions, custom calls, fusion
kinds, bytes accessed), the measured bandwidth of both runs, and the environment that differs.
Exit code 0: nothing regressed; 1: something did; 2: bad input.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lbm.errors import LbmError

KEY_FIELDS = ("case", "lattice", "grid", "variant", "precision", "collision")
ENV_SKIP = ("timestamp", "date", "time", "hostname")


def load(path: str) -> dict[str, Any]:
    """A bench.json, checked to hold records with MLUPS repeats."""
    p = Path(path)
    if not p.is_file():
        raise LbmError(f"{path}: no such file (expected a bench.json written by python -m lbm bench)")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LbmError(f"{path}: not valid JSON ({exc})") from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list) or not records or not all(
            isinstance(r, dict) and isinstance(r.get("mlups"), dict) and "median" in r["mlups"] for r in records):
        raise LbmError(f"{path}: not a bench.json (needs 'records' with 'mlups' medians; write one with python -m lbm bench)")
    return data


def key_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """The configuration a record measured."""
    return tuple(tuple(record.get(k)) if isinstance(record.get(k), list) else record.get(k) for k in KEY_FIELDS)


def label(key: tuple[Any, ...]) -> str:
    """A short name of a configuration."""
    parts = dict(zip(KEY_FIELDS, key, strict=True))
    grid = "x".join(map(str, parts["grid"])) if parts["grid"] else "?"
    return f"{parts['case']} {grid} {parts['lattice']} {parts['variant']} {parts['precision']}"


def permutation_p(a: list[float], b: list[float], rounds: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value that a and b differ in location: a permutation test on their ranks (nan with < 3 each).

    Ranks, not values (the Wilcoxon-Mann-Whitney statistic): timed repeats are heavy-tailed (a repeat or a whole
    process slowed 4x by the machine, docs/studies.md "Session 4"), and one such repeat moves a mean of the values
    past any real change.
    """
    if len(a) < 3 or len(b) < 3:
        return float("nan")
    pooled = ranks(a + b)
    observed = abs(statistics.fmean(pooled[len(a):]) - statistics.fmean(pooled[: len(a)]))
    n = len(a)
    combos = math.comb(len(pooled), n)
    if combos <= rounds:
        samples = (list(c) for c in itertools.combinations(range(len(pooled)), n))
    else:
        rng = random.Random(seed)
        samples = (rng.sample(range(len(pooled)), n) for _ in range(rounds))
    hits = total = 0
    for idx in samples:
        chosen = set(idx)
        xa = [pooled[i] for i in chosen]
        xb = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(statistics.fmean(xb) - statistics.fmean(xa)) >= observed - 1e-12
        total += 1
    return hits / total


def ranks(values: list[float]) -> list[float]:
    """The rank of each value among ``values`` (1 = smallest; tied values share their mean rank)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


P_MAX = 0.05
"""A difference counts as significant when the permutation p-value is at most this (where the repeats can reach it)."""
DEFAULT_THRESHOLD = 0.15
"""Default smallest change called: at 10% identical code was called slower in 3 of 20 re-measured pairs on a busy
2-core machine, at 15% in 1 of 20 (docs/studies.md, "The regression guard on a shared machine")."""


def values(record: dict[str, Any], cpu: bool = False) -> list[float]:
    """A record's MLUPS repeats (its median alone when the repeats were not saved); ``cpu``: the CPU-time ones."""
    m = record["mlups"]
    if cpu:
        return list(m["cpu_values"])
    return list(m.get("values") or [m["median"]])


def cpu_timed(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether both records carry repeats timed with the process CPU time (then the verdict judges those)."""
    return all(isinstance(r["mlups"].get("cpu_values"), list) and r["mlups"]["cpu_values"] for r in (a, b))


def best(record: dict[str, Any], cpu: bool = False) -> float:
    """The fastest repeat (MLUPS): the speed the code reaches when nothing else slows the machine."""
    return max(values(record, cpu))


def noise(record: dict[str, Any], cpu: bool = False) -> float:
    """Relative uncertainty of the fastest repeat: its gap to the second fastest (0 with one repeat)."""
    v = sorted(values(record, cpu), reverse=True)
    return (v[0] - v[1]) / v[0] if len(v) > 1 and v[0] > 0 else 0.0


def min_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided permutation p-value that n_a and n_b repeats can give (nan below 3 each)."""
    return 2 / math.comb(n_a + n_b, n_a) if n_a >= 3 and n_b >= 3 else float("nan")


def best_change(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The relative change of the fastest repeat from ``a`` to ``b`` (negative: ``b`` is slower)."""
    cpu = cpu_timed(a, b)
    return best(b, cpu) / best(a, cpu) - 1.0


def judge(a: dict[str, Any], b: dict[str, Any], threshold: float) -> dict[str, Any]:
    """The verdict on one configuration: change of the fastest repeat, threshold, p-value, and the verdict."""
    cpu = cpu_timed(a, b)
    va, vb = values(a, cpu), values(b, cpu)
    change = best_change(a, b)
    limit = max(threshold, noise(a, cpu) + noise(b, cpu))
    p = permutation_p(va, vb)
    testable = not math.isnan(p) and min_p(len(va), len(vb)) <= P_MAX
    beyond = abs(change) > limit
    significant = beyond and (p <= P_MAX if testable else True)
    if significant:
        verdict = "**SLOWER**" if change < 0 else "faster"
    elif beyond:
        verdict = "within noise (not significant)"
    else:
        verdict = "unchanged"
    ma, mb = statistics.median(va), statistics.median(vb)
    return {"change": change, "median_change": ma and mb / ma - 1.0, "medians": (ma, mb),
            "limit": limit, "p": p, "testable": testable, "verdict": verdict, "cpu": cpu,
            "slower": significant and change < 0, "faster": significant and change > 0}


def merge_remeasured(new: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """``new`` with the repeats of ``again`` added to the records both hold (a re-measurement of the same code)."""
    out = copy.deepcopy(new)
    extra = {key_of(r): r for r in again["records"]}
    for r in out["records"]:
        more = extra.get(key_of(r))
        if more is None:
            continue
        if None not in (r.get("clock"), more.get("clock")) and r["clock"] != more["clock"]:
            raise LbmError(f"{label(key_of(r))}: the re-measurement was timed with another clock ({more['clock']}) "
                           f"than the file ({r['clock']})")
        v = values(r) + values(more)
        r["mlups"] = {**r["mlups"], "values": v, "median": statistics.median(v), "min": min(v), "max": max(v),
                      "remeasured": r["mlups"].get("remeasured", 0) + len(values(more))}
        if cpu_timed(r, more):
            r["mlups"]["cpu_values"] = values(r, True) + values(more, True)
        else:
            r["mlups"].pop("cpu_values", None)
    return out


def remeasure_overrides(doc: dict[str, Any], record: dict[str, Any], run_dir: Path) -> list[str]:
    """``python -m lbm bench`` overrides that measure one record of ``doc`` again (same timing, one configuration)."""
    cfg = doc.get("config") or {}
    grid = record["grid"]
    node = "cylinder_grid" if record["case"] == "cylinder" else "grid"
    over = [f"lattice={record['lattice']}", f"collision={record.get('collision') or 'bgk'}",
            f"cases=[{record['case']}]", f"variants=[{record['variant']}]", f"precision={record['precision']}",
            f"{node}.nx={grid[0]}", f"{node}.ny={grid[1]}", f"{node}.nz={grid[2] if len(grid) > 2 else 'null'}",
            "bandwidth.enabled=false", "kernel_profile=0", f"hydra.run.dir={run_dir}"]
    if node == "cylinder_grid" and len(grid) > 2:
        over.append(f"grid.nz={grid[2]}")
    for k in ("repeats", "warmup", "min_time_s", "steps", "max_steps", "steps_per_dispatch"):
        if cfg.get(k) is not None:
            over.append(f"{k}={cfg[k]}")
    return over


def bench_again(doc: dict[str, Any], record: dict[str, Any], python: str) -> dict[str, Any]:
    """One ``python -m lbm bench`` run of ``record``'s configuration with interpreter ``python``: its bench.json."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (doc.get("environment") or {}).get("XLA_FLAGS") or ""
    with tempfile.TemporaryDirectory(prefix="lbm-remeasure-") as tmp:
        run_dir = Path(tmp) / "run"
        proc = subprocess.run([python, "-m", "lbm", "bench", *remeasure_overrides(doc, record, run_dir)],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise LbmError(f"--remeasure: {python} -m lbm bench failed for {label(key_of(record))}: {tail}")
        return json.loads((run_dir / "bench.json").read_text())


def remeasure(doc: dict[str, Any], keys: list[tuple[Any, ...]], times: int,
              python: str = sys.executable) -> dict[str, Any]:
    """Measure the configurations ``keys`` of ``doc`` again ``times`` times; returns ``doc`` with the repeats added."""
    records = {key_of(r): r for r in doc["records"]}
    for _ in range(times):
        for k in keys:
            doc = merge_remeasured(doc, bench_again(doc, records[k], python))
    return doc


def suspects(base: dict[str, Any], new: dict[str, Any], threshold: float) -> list[tuple[Any, ...]]:
    """Configurations whose fastest repeat fell by more than half the threshold (what ``--remeasure`` measures again)."""
    recs_a = {key_of(r): r for r in base["records"]}
    return [key_of(r) for r in new["records"]
            if key_of(r) in recs_a and best_change(recs_a[key_of(r)], r) < -threshold / 2]


def remeasure_both(base: dict[str, Any], new: dict[str, Any], keys: list[tuple[Any, ...]], times: int,
                   base_python: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``times`` rounds of re-measuring ``keys``: the base (where ``base_python`` is given) then the new code, in turn."""
    for _ in range(times):
        if base_python:
            base = remeasure(base, keys, 1, base_python)
        new = remeasure(new, keys, 1)
    return base, new


STRUCTURE_FIELDS = ("engine", "fusions", "fusions_in_loop_body", "custom_calls", "cost_analysis_bytes_accessed")
"""Compiled-structure facts of a bench record (optimised HLO of the fused chunk)."""


def structure(record: dict[str, Any]) -> dict[str, Any]:
    """Compiled-structure facts of a record, flattened: counts, fusion kinds, custom-call targets, memory."""
    out: dict[str, Any] = {k: record[k] for k in STRUCTURE_FIELDS if k in record}
    for group in ("fusion_kinds", "custom_call_targets"):
        for name, count in (record.get(group) or {}).items():
            out[f"{group}[{name}]"] = count
    memory = record.get("memory") or {}
    if "planned_peak_bytes" in memory:
        out["planned_peak_bytes"] = memory["planned_peak_bytes"]
    return out


def short_op(op_name: str) -> str:
    """An op_name without the call-path segments that differ between JAX versions."""
    parts = [p for p in op_name.split("/") if p and not p.startswith("jit(") and p not in
             ("while", "body", "closed_call", "eval_jaxpr", "cond", "branch_0_fun", "branch_1_fun")]
    return "/".join(parts)


def special_signature(fusion: dict[str, str]) -> tuple[str, str]:
    """What identifies a special fusion across runs: its kind and its normalised op name."""
    return fusion.get("kind", ""), short_op(fusion.get("op_name", ""))


def compare(base: dict[str, Any], new: dict[str, Any], threshold: float = DEFAULT_THRESHOLD) -> tuple[str, list[str]]:
    """The markdown report and the configurations that regressed (labels; empty when none did)."""
    lines = ["# lbm bench comparison", ""]
    env_a, env_b = base.get("environment", {}), new.get("environment", {})
    env_diff = [(k, env_a.get(k), env_b.get(k)) for k in sorted(set(env_a) | set(env_b))
                if k not in ENV_SKIP and env_a.get(k) != env_b.get(k)]
    lines += ["## Environment", ""]
    if env_diff:
        lines += ["| | base | new |", "|---|---|---|"] + [f"| {k} | {a} | {b} |" for k, a, b in env_diff]
    else:
        lines.append("identical (versions, flags, device)")
    bw_a, bw_b = ((d.get("bandwidth") or {}).get("bandwidth_gbs") for d in (base, new))
    if bw_a and bw_b:
        lines += ["", f"Measured memory bandwidth: base {bw_a:.1f} GB/s, new {bw_b:.1f} GB/s "
                      f"({(bw_b / bw_a - 1) * 100:+.1f}%: a change here is the machine, not the code)."]
    recs_a = {key_of(r): r for r in base["records"]}
    recs_b = {key_of(r): r for r in new["records"]}
    common = [k for k in recs_a if k in recs_b]
    for k in common:
        clocks = recs_a[k].get("clock"), recs_b[k].get("clock")
        if None not in clocks and clocks[0] != clocks[1]:
            raise LbmError(f"{label(k)}: timed with different clocks (base: {clocks[0]}; new: {clocks[1]}); "
                           "measure both with the same bench")
    lines += ["", "## Throughput", "",
              "MLUPS of the fastest repeat (median in brackets); the verdict judges the fastest repeats.", "",
              "| configuration | base MLUPS | new MLUPS | change | noise threshold | p (permutation) | verdict |",
              "|---|---|---|---|---|---|---|"]
    regressed: list[tuple[Any, ...]] = []
    changed: list[tuple[Any, ...]] = []
    for k in common:
        a, b = recs_a[k], recs_b[k]
        j = judge(a, b, threshold)
        if j["slower"]:
            regressed.append(k)
        elif j["faster"]:
            changed.append(k)
        ptext = "n/a" if math.isnan(j["p"]) else f"{j['p']:.3f}" + ("" if j["testable"] else " (too few repeats)")
        again_a, again = a["mlups"].get("remeasured"), b["mlups"].get("remeasured")
        note_a = f" (incl. {again_a} re-measured)" if again_a else ""
        note = (f" (incl. {again} re-measured)" if again else "") + (" (CPU time)" if j["cpu"] else "")
        cpu = j["cpu"]
        ma, mb = j["medians"]
        lines.append(f"| {label(k)} | {best(a, cpu):.1f} ({ma:.1f}){note_a} | {best(b, cpu):.1f} "
                     f"({mb:.1f}){note} | {j['change'] * 100:+.1f}% ({j['median_change'] * 100:+.1f}%) | "
                     f"±{j['limit'] * 100:.1f}% | {ptext} | {j['verdict']} |")
    only_a = [label(k) for k in recs_a if k not in recs_b]
    only_b = [label(k) for k in recs_b if k not in recs_a]
    if only_a or only_b:
        lines += ["", f"Not compared (in one file only): base {only_a or '-'}; new {only_b or '-'}"]
    for k in regressed + changed:
        a, b = recs_a[k], recs_b[k]
        lines += ["", f"## {label(k)}: what changed", ""]
        stages_a, stages_b = a.get("stages") or {}, b.get("stages") or {}
        if stages_a and stages_b:
            lines += ["| stage | base ms | new ms | change |", "|---|---|---|---|"]
            rows = []
            for s in stages_a:
                if s in stages_b:
                    ta, tb = stages_a[s]["median_ms"], stages_b[s]["median_ms"]
                    rows.append((tb / ta - 1.0 if ta else 0.0, s, ta, tb))
            for ch, s, ta, tb in sorted(rows, key=lambda r: -abs(r[0])):
                lines.append(f"| {s} | {ta:.3f} | {tb:.3f} | {ch * 100:+.1f}% |")
            lines.append("")
        sa, sb = structure(a), structure(b)
        diffs = [(f, sa.get(f), sb.get(f)) for f in sorted(set(sa) | set(sb)) if sa.get(f) != sb.get(f)]
        if diffs:
            lines += ["Compiled structure (optimised HLO of the fused step):", "", "| fact | base | new |",
                      "|---|---|---|"] + [f"| {f} | {x} | {y} |" for f, x, y in diffs]
        else:
            lines.append("Compiled structure: identical fusion counts and kinds.")
        ka, kb = (r.get("kernel_times", {}).get("kernels", {}) for r in (a, b))
        if ka and kb:
            both = [n for n in ka if n in kb]
            if both:
                worst = max(both, key=lambda n: abs(kb[n]["us_per_step"] - ka[n]["us_per_step"]))
                delta = kb[worst]["us_per_step"] - ka[worst]["us_per_step"]
                special = {f["fusion"]: f for f in (b.get("special_fusions") or [])}
                origin = f", {special[worst]['kind']} from `{short_op(special[worst]['op_name'])}`" if worst in special else ""
                lines += ["", f"Largest change of one kernel: `{worst}`{origin}: "
                              f"{ka[worst]['us_per_step']:.1f} -> {kb[worst]['us_per_step']:.1f} µs per step "
                              f"({delta:+.1f} µs).", ""]
            lines += ["", "Costliest kernels (device clock, µs per step; a kernel name present in both runs is the same "
                          "HLO instruction only if the programs match):", "",
                      "| kernel | base µs/step | base share | new µs/step | new share |", "|---|---|---|---|---|"]
            names = sorted(set(list(ka)[:8]) | set(list(kb)[:8]),
                           key=lambda n: -max(ka.get(n, {}).get("us_per_step", 0), kb.get(n, {}).get("us_per_step", 0)))
            for name in names:
                x, y = ka.get(name), kb.get(name)
                fx = f"{x['us_per_step']:.1f} | {x['share'] * 100:.0f}%" if x else "- | -"
                fy = f"{y['us_per_step']:.1f} | {y['share'] * 100:.0f}%" if y else "- | -"
                lines.append(f"| `{name}` | {fx} | {fy} |")
        sig_a = {special_signature(f) for f in a.get("special_fusions") or []}
        sig_b = {special_signature(f) for f in b.get("special_fusions") or []}
        new_special = [f for f in b.get("special_fusions") or [] if special_signature(f) not in sig_a]
        gone_special = [f for f in a.get("special_fusions") or [] if special_signature(f) not in sig_b]
        kept = [f for f in b.get("special_fusions") or [] if special_signature(f) in sig_a]
        if kept:
            lines += ["", "Fusions of a special kind in both runs: " + ", ".join(
                f"`{f['fusion']}` ({f['kind']}, from `{short_op(f['op_name'])}`)" for f in kept)]
        for title, items in (("Fusions of a special kind only in new", new_special),
                             ("Fusions of a special kind only in base", gone_special)):
            if items:
                lines += ["", f"{title} (look here first):", ""] + [
                    f"- `{f['fusion']}` kind `{f['kind']}` from `{f['op_name']}`" for f in items]
        if a.get("compile_s") and b.get("compile_s"):
            lines.append(f"\nCompile time: {a['compile_s']:.3f} s -> {b['compile_s']:.3f} s")
    verdict = (f"REGRESSION: {len(regressed)} configuration(s) slower beyond noise: "
               + ", ".join(label(k) for k in regressed)) if regressed else "no regression beyond noise"
    lines += ["", f"**Verdict: {verdict}.**", ""]
    return "\n".join(lines), [label(k) for k in regressed]


def main(args: list[str]) -> int:
    """Entry point of ``python -m lbm compare``: prints the report; exit 1 when something regressed."""
    parser = argparse.ArgumentParser(prog="python -m lbm compare", description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="smallest relative change called (default 0.15 = 15%%)")
    parser.add_argument("--remeasure", type=int, default=0,
                        help="re-run bench N times here for each suspect configuration (called slower, or slower by "
                             "more than half the threshold), then judge again")
    parser.add_argument("--base-python", default=None,
                        help="with --remeasure: the base environment's python; re-measures the base too, in turn "
                             "with the new code")
    parser.add_argument("--out", default=None, help="also write the markdown report to this file")
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        if exc.code == 0:
            return 0
        raise LbmError("usage: python -m lbm compare BASE.json NEW.json [--threshold 0.15] [--remeasure N] "
                       "[--base-python PY] [--out report.md]") from None
    if not 0 <= ns.threshold < 1:
        raise LbmError(f"--threshold={ns.threshold}: expected a fraction in [0, 1)")
    if not 0 <= ns.remeasure <= 20:
        raise LbmError(f"--remeasure={ns.remeasure}: expected an integer in [0, 20]")
    if ns.base_python is not None:
        if not ns.remeasure:
            raise LbmError("--base-python re-measures the base: give it with --remeasure N (N >= 1)")
        if not (os.path.isfile(ns.base_python) and os.access(ns.base_python, os.X_OK)):
            raise LbmError(f"--base-python={ns.base_python}: not an executable file (give the base environment's "
                           "python, e.g. /path/to/venv/bin/python)")
    base, new = load(ns.base), load(ns.new)
    text, regressed = compare(base, new, ns.threshold)
    keys = suspects(base, new, ns.threshold) if ns.remeasure else []
    if keys:
        sides = "the base and the new code in turn" if ns.base_python else "the new code"
        print(f"re-measuring {len(keys)} suspect configuration(s), {ns.remeasure} time(s), {sides}: "
              + ", ".join(label(k) for k in keys), file=sys.stderr)
        base, new = remeasure_both(base, new, keys, ns.remeasure, ns.base_python)
        text, regressed = compare(base, new, ns.threshold)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text)
    return 1 if regressed else 0
