"""``python -m lbm compare BASE.json NEW.json``: did the new code regress, and on what evidence.

Records are matched by configuration (case, lattice, grid, variant, precision, collision). Each is judged on
three kinds of evidence, in this order:

1. **Structure** (deterministic): what the compiled program does per cell and step (lbm.bench.evidence: kernels
   per step, bytes of the lbm.hlo traffic model, XLA's flops and bytes accessed, the kernels by kind and stage,
   the custom-call targets). Identical code gives identical evidence. A work measure that grows by more than
   ``--threshold`` is a REGRESSION from the structure alone, at any load (e.g.
   ``XLA_FLAGS=--xla_disable_hlo_passes=fusion``: the verdict names the flag and the kernels that appeared).
2. **Interleaved timing** (``--remeasure N``): both sides measured in turn in one time window, N rounds spread
   over up to 6 fresh pairs of workers (lbm.bench.interleave; ``--base-python`` runs the base in its own
   environment); each pair of workers gives one paired slowdown, the median of its rounds. REGRESSION when the
   95% interval of the median over the pairs is above 0 and the median above the threshold; OK when the interval
   lies below the threshold; INCONCLUSIVE otherwise. The pairs stop as soon as the rest could not change that
   verdict. Fewer pairs than that interval needs (6, so N >= 6) decide nothing:
   the verdict is the two files', made INCONCLUSIVE where it was OK but the pairs' median exceeds the threshold.
3. **The two files' timing**: on a shared machine other work only slows a repeat down, so each file is read by
   its fastest repeat (CPU-timed where both files have ``mlups.cpu_values``, which a record of work on an
   accelerator has not), against a noise limit (the larger
   of ``--threshold`` and the two runs' gaps between fastest and second fastest repeat) with a rank permutation
   test. Two files measured at different moments never make a REGRESSION: a slowdown beyond their noise, or a
   changed program whose noise exceeds the threshold, is INCONCLUSIVE, with what to do next.

Exit code 0: OK; 1: REGRESSION; 3: INCONCLUSIVE; 2: bad input (records timed with different clocks included).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lbm.bench import DEFAULT_COLLISION
from lbm.bench.evidence import WORK_FIELDS, Structural, records_diff
from lbm.bench.interleave import WORKER_PAIRS, Interleaved, rounds_needed, verdict_of_rounds
from lbm.bench.interleave import measure as measure_interleaved
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
    collision = parts["collision"] or DEFAULT_COLLISION
    return f"{parts['case']} {grid} {parts['lattice']} {collision} {parts['variant']} {parts['precision']}"


def permutation_p(a: list[float], b: list[float], rounds: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value that a and b differ in location: a permutation test on their ranks (nan with < 3 each).

    Ranks, not values (the Wilcoxon-Mann-Whitney statistic): timed repeats are heavy-tailed (a repeat or a whole
    process slowed 4x by the machine, docs/studies.md), and one such repeat moves a mean of the values
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
DEFAULT_THRESHOLD = 0.10
"""Default smallest change that matters: of a work measure of the structural evidence, of the interleaved
slowdown, of the two files' fastest repeats (docs/studies.md, "The regression guard on a shared machine")."""


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
    """The two files' timing of one configuration: change of the fastest repeat, noise limit, p-value, medians."""
    cpu = cpu_timed(a, b)
    va, vb = values(a, cpu), values(b, cpu)
    limit = max(threshold, noise(a, cpu) + noise(b, cpu))
    p = permutation_p(va, vb)
    testable = not math.isnan(p) and min_p(len(va), len(vb)) <= P_MAX
    ma, mb = statistics.median(va), statistics.median(vb)
    return {"change": best_change(a, b), "median_change": ma and mb / ma - 1.0, "medians": (ma, mb),
            "spreads": (spread(va), spread(vb)), "limit": limit, "p": p, "testable": testable, "cpu": cpu}


def spread(repeats: list[float]) -> float:
    """Relative spread of a run's repeats: (fastest - slowest) / median (0 with one repeat)."""
    med = statistics.median(repeats)
    return (max(repeats) - min(repeats)) / med if len(repeats) > 1 and med > 0 else 0.0


def short_op(op_name: str) -> str:
    """An op_name without the call-path segments that differ between JAX versions."""
    parts = [p for p in op_name.split("/") if p and not p.startswith("jit(") and p not in
             ("while", "body", "closed_call", "eval_jaxpr", "cond", "branch_0_fun", "branch_1_fun")]
    return "/".join(parts)


def special_signature(fusion: dict[str, str]) -> tuple[str, str]:
    """What identifies a special fusion across runs: its kind and its normalised op name."""
    return fusion.get("kind", ""), short_op(fusion.get("op_name", ""))




@dataclass
class Verdict:
    """The verdict on one configuration: REGRESSION, INCONCLUSIVE or OK, what it rests on and what to do next."""

    verdict: str
    basis: str
    next_step: str = ""


def environment_diff(base: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, base, new) of every environment entry (versions, XLA_FLAGS, device, compiler) that differs."""
    env_a, env_b = base.get("environment", {}), new.get("environment", {})
    return [(k, env_a.get(k), env_b.get(k)) for k in sorted(set(env_a) | set(env_b))
            if k not in ENV_SKIP and env_a.get(k) != env_b.get(k)]


def _pct(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x * 100:+.1f}%"


def busy_note(base: dict[str, Any], new: dict[str, Any]) -> str:
    """Why the two runs' machine was not quiet ('' when it was): the highest 1-minute load average of either run
    above its core count, where other processes share the cores and a run's speed moves between moments."""
    cores = (new.get("environment") or {}).get("cpu_count") or os.cpu_count() or 1
    loads = [d.get(k)[0] for d in (base, new) for k in ("load_average_start", "load_average_end") if d.get(k)]
    if loads and max(loads) > cores:
        return f"a load average of up to {max(loads):.1f} on {cores} cores"
    return ""


def decide(structural: Structural, timing: dict[str, Any], paired: Interleaved | None, threshold: float,
           env_note: str, busy: str = "") -> Verdict:
    """The verdict of one configuration: structure first, then interleaved timing, then the two files' timing."""
    if structural.kind == "more_work":
        return Verdict("REGRESSION", f"structural: more work per cell and step ({structural.summary()})" + env_note)
    if paired is not None and not paired.mismatch and len(paired.log_ratios) >= rounds_needed():
        return _decide_paired(paired, threshold)
    verdict = _decide_two_files(structural, timing, threshold, busy, paired)
    if paired is None or paired.mismatch:
        return verdict
    # fewer pairs of workers than a 95% interval needs: they cannot decide, but a median slowdown beyond the
    # threshold is doubt
    med = paired.slowdown[0]
    rounds = (f"{paired.rounds} interleaved round(s) on {len(paired.log_ratios)} pair(s) of workers, too few for a "
              f"95% interval ({rounds_needed()} pairs needed: --remeasure {rounds_needed()} or more): median new/base "
              f"- 1 = {_pct(med)}")
    step = f"more rounds: --remeasure {max(20, rounds_needed())}"
    if verdict.verdict == "OK" and med > threshold:
        return Verdict("INCONCLUSIVE", f"{verdict.basis}; but {rounds}, above the threshold", step)
    return Verdict(verdict.verdict, f"{verdict.basis}; {rounds} (not used)", verdict.next_step)


def _decide_paired(paired: Interleaved, threshold: float) -> Verdict:
    """The timing verdict of enough interleaved rounds: their median slowdown and its 95% interval."""
    med, lo, hi = paired.slowdown
    pairs = len(paired.log_ratios)
    early = f" of {paired.planned}, the rest could not change the verdict" if paired.planned > pairs else ""
    each = ", ".join(_pct(math.expm1(x)) for x in paired.log_ratios)
    text = (f"interleaved, {paired.rounds} rounds on {pairs} pairs of workers{early}: new/base - 1 = {_pct(med)} "
            f"(median of the pairs' medians {each}; 95% interval {_pct(lo)} .. {_pct(hi)}, {paired.clock})")
    word = verdict_of_rounds(paired.log_ratios, threshold)
    if word == "REGRESSION":
        return Verdict(word, f"timing {text}")
    if word == "OK":
        return Verdict(word, f"timing {text}" + (": faster" if hi < 0 and med < -threshold else ""))
    return Verdict(word, f"timing {text}: the interval holds both no change and the threshold",
                   f"more rounds (--remeasure {2 * paired.rounds}) or a quieter machine")


def _decide_two_files(structural: Structural, timing: dict[str, Any], threshold: float, busy: str,
                      paired: Interleaved | None) -> Verdict:
    """The verdict of two files measured at different moments: never a REGRESSION from their timing."""
    slower = timing["change"] < -timing["limit"]
    two = (f"two files: fastest repeat {_pct(timing['change'])} against a noise limit of ±{timing['limit'] * 100:.1f}%")
    step = (f"measure both interleaved: --remeasure {max(20, rounds_needed())} (with --base-python PY where the base "
            "is another checkout or environment), or a quieter machine")
    if paired is not None and paired.mismatch:
        step = "; ".join(paired.mismatch) + ": give --base-python with the base's environment"
    if structural.kind == "identical":
        if slower:
            return Verdict("INCONCLUSIVE", f"identical programs, but {two}: two runs measured at different moments "
                                           "cannot tell the code from the machine", step)
        return Verdict("OK", f"identical programs; {two}")
    what = {"less_work": f"less work per cell and step ({structural.summary()})",
            "changed": f"another program ({structural.summary()})",
            "unknown": structural.summary()}[structural.kind]
    if slower:
        return Verdict("INCONCLUSIVE", f"{what}; {two}: measured at different moments, so not a verdict", step)
    if timing["limit"] > threshold:
        return Verdict("INCONCLUSIVE", f"{what}; {two}: the noise exceeds the threshold ±{threshold * 100:.0f}%, so a "
                                       "slowdown of that size could hide in it", step)
    if busy:
        return Verdict("INCONCLUSIVE", f"{what}; {two}, measured at different moments at {busy}: there a run's speed "
                                       "moves between moments by more than the threshold, which the repeats of one "
                                       "run do not show", step)
    return Verdict("OK", f"{what}; {two}")


def _load_text(doc: dict[str, Any]) -> str:
    a, b = doc.get("load_average_start"), doc.get("load_average_end")
    return f"{a or '?'} -> {b or '?'}"


def compare(base: dict[str, Any], new: dict[str, Any], threshold: float = DEFAULT_THRESHOLD,
            paired: dict[tuple[Any, ...], Interleaved] | None = None) -> tuple[str, dict[tuple[Any, ...], Verdict]]:
    """The markdown report and the verdict of each configuration both files hold."""
    paired = paired or {}
    env_diff = environment_diff(base, new)
    lines = ["# lbm bench comparison", "", "## Environment", ""]
    if env_diff:
        lines += ["| | base | new |", "|---|---|---|"] + [f"| {k} | {a} | {b} |" for k, a, b in env_diff]
    else:
        lines.append("identical (versions, flags, device)")
    flags = [(k, a, b) for k, a, b in env_diff if k in ("XLA_FLAGS", "jax", "jaxlib", "native_cxxflags")]
    env_note = "".join(f"; environment: {k} {a!r} -> {b!r}" for k, a, b in flags)
    bw_a, bw_b = ((d.get("bandwidth") or {}).get("bandwidth_gbs") for d in (base, new))
    lines += ["", "## Load and noise", "", f"Load average (1, 5, 15 min) during the bench: base {_load_text(base)}, "
              f"new {_load_text(new)}, on {(new.get('environment') or {}).get('cpu_count', '?')} cores. "
              f"Threshold applied: {threshold * 100:.0f}% (--threshold)."]
    if bw_a and bw_b:
        lines.append(f"Measured memory bandwidth: base {bw_a:.1f} GB/s, new {bw_b:.1f} GB/s "
                     f"({(bw_b / bw_a - 1) * 100:+.1f}%: a change here is the machine, not the code).")
    recs_a = {key_of(r): r for r in base["records"]}
    recs_b = {key_of(r): r for r in new["records"]}
    common = [k for k in recs_a if k in recs_b]
    for k in common:
        clocks = recs_a[k].get("clock"), recs_b[k].get("clock")
        if None not in clocks and clocks[0] != clocks[1]:
            raise LbmError(f"{label(k)}: timed with different clocks (base: {clocks[0]}; new: {clocks[1]}); "
                           "measure both with the same bench")
    lines += ["", "## Verdicts", "",
              "Structure: the compiled program's evidence per cell and step (identical for identical code). Timing: "
              "MLUPS of the fastest repeat (median in brackets) and the spread of the repeats, (max - min) / median.",
              "", "| configuration | structure | base MLUPS (spread) | new MLUPS (spread) | change | noise limit | "
              "p (permutation) | interleaved | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    verdicts: dict[tuple[Any, ...], Verdict] = {}
    details: list[str] = []
    busy = busy_note(base, new)
    for k in common:
        a, b = recs_a[k], recs_b[k]
        st = records_diff(a, b, threshold)
        j = judge(a, b, threshold)
        pr = paired.get(k)
        v = verdicts[k] = decide(st, j, pr, threshold, env_note, busy)
        ptext = "n/a" if math.isnan(j["p"]) else f"{j['p']:.3f}" + ("" if j["testable"] else " (too few repeats)")
        cpu, (ma, mb), (sa, sb) = j["cpu"], j["medians"], j["spreads"]
        clock = " (CPU time)" if cpu else ""
        itext = "-"
        if pr is not None:
            itext = interleaved_cell(pr)
        lines.append(f"| {label(k)} | {st.kind.replace('_', ' ')} | {best(a, cpu):.1f} ({ma:.1f}){clock}, {sa * 100:.0f}% | "
                     f"{best(b, cpu):.1f} ({mb:.1f}){clock}, {sb * 100:.0f}% | {_pct(j['change'])} "
                     f"({_pct(j['median_change'])}) | ±{j['limit'] * 100:.1f}% | {ptext} | {itext} | "
                     f"**{v.verdict}** |")
        details += detail(k, a, b, st, v)
    only_a = [label(k) for k in recs_a if k not in recs_b]
    only_b = [label(k) for k in recs_b if k not in recs_a]
    if only_a or only_b:
        lines += ["", f"Not compared (in one file only): base {only_a or '-'}; new {only_b or '-'}"]
    lines += details + ["", summary_line(verdicts), ""]
    return "\n".join(lines), verdicts


def interleaved_cell(pr: Interleaved) -> str:
    """The report's cell of one configuration's interleaved rounds: median, 95% interval, spread, load."""
    med, lo, hi = pr.slowdown
    interval = (f"[{_pct(lo)}, {_pct(hi)}]" if math.isfinite(hi)
                else f"(no 95% interval: {rounds_needed()} pairs of workers needed)")
    iqr = "" if math.isnan(pr.spread) else f", IQR {pr.spread * 100:.0f}%"
    pairs = len(pr.log_ratios)
    of = f" of {pr.planned}" if pr.planned > pairs else ""
    return (f"{_pct(med)} {interval} on {pairs}{of} pairs of workers, {pr.rounds} rounds{iqr}, load {pr.load[0]} -> "
            f"{pr.load[1]}"
            + ("; side mismatch" if pr.mismatch else ""))


def detail(k: tuple[Any, ...], a: dict[str, Any], b: dict[str, Any], st: Structural, v: Verdict) -> list[str]:
    """The section of one configuration: its verdict's basis, the structural change, stages and kernels."""
    lines = ["", f"## {label(k)}: {v.verdict}", "", f"- {v.basis}"] + ([f"- next: {v.next_step}"] if v.next_step else [])
    if st.kind not in ("identical", "unknown"):
        lines += ["", "Structural change (per cell and step):", "", "| measure | base | new | change |", "|---|---|---|---|"]
        lines += [f"| {WORK_FIELDS[f]} | {x:.4g} | {y:.4g} | {_pct(rel)} |" for f, x, y, rel in st.fields]
        lines += [f"| {stage}: {WORK_FIELDS[f].split(' (')[0]} | {x:.4g} | {y:.4g} | {_pct(rel)} |"
                  for stage, f, x, y, rel in st.stages]
        for title, items in (("Kernels only in new", st.added), ("Kernels only in base", st.removed)):
            if items:
                ranked = sorted(items, key=lambda x: -x["bytes_per_cell_step"])
                lines += ["", f"{title} ({len(items)}; kind, stages, bytes per cell and step):", ""]
                lines += [f"- `{x['name']}` {x['kind']} {'+'.join(x['stages']) or '(no stage)'} "
                          f"{x['bytes_per_cell_step']:.1f} B" for x in ranked[:12]]
                if len(items) > 12:
                    lines.append(f"- ... and {len(items) - 12} more")
        if st.targets[0] != st.targets[1]:
            lines += ["", f"Custom-call targets (a native kernel's name carries its source hash): {st.targets[0]} -> "
                          f"{st.targets[1]}"]
    if v.verdict == "OK":
        return lines
    stages_a, stages_b = a.get("stages") or {}, b.get("stages") or {}
    rows = [(stages_b[s]["median_ms"] / stages_a[s]["median_ms"] - 1.0 if stages_a[s]["median_ms"] else 0.0, s,
             stages_a[s]["median_ms"], stages_b[s]["median_ms"]) for s in stages_a if s in stages_b]
    if rows:
        lines += ["", "| stage | base ms | new ms | change |", "|---|---|---|---|"]
        lines += [f"| {s} | {ta:.3f} | {tb:.3f} | {ch * 100:+.1f}% |" for ch, s, ta, tb in sorted(rows, key=lambda r: -abs(r[0]))]
    ka, kb = (r.get("kernel_times", {}).get("kernels", {}) for r in (a, b))
    both = [n for n in ka if n in kb]
    if both:
        worst = max(both, key=lambda n: abs(kb[n]["us_per_step"] - ka[n]["us_per_step"]))
        special = {f["fusion"]: f for f in (b.get("special_fusions") or [])}
        origin = f", {special[worst]['kind']} from `{short_op(special[worst]['op_name'])}`" if worst in special else ""
        lines += ["", f"Largest change of one kernel (device clock): `{worst}`{origin}: {ka[worst]['us_per_step']:.1f} "
                      f"-> {kb[worst]['us_per_step']:.1f} µs per step."]
    sig_a = {special_signature(f) for f in a.get("special_fusions") or []}
    new_special = [f for f in b.get("special_fusions") or [] if special_signature(f) not in sig_a]
    if new_special:
        lines += ["", "Fusions of a special kind only in new (look here first):", ""] + [
            f"- `{f['fusion']}` kind `{f['kind']}` from `{f['op_name']}`" for f in new_special]
    return lines


NEXT = {"INCONCLUSIVE": "the noise is larger than the change: run on a quieter machine, or measure both sides "
                        "interleaved with --remeasure N (--base-python PY for a base in another environment)"}


def overall(verdicts: dict[tuple[Any, ...], Verdict]) -> str:
    """REGRESSION if any configuration regressed, else INCONCLUSIVE if any is, else OK."""
    got = {v.verdict for v in verdicts.values()}
    return next((x for x in ("REGRESSION", "INCONCLUSIVE") if x in got), "OK")


def summary_line(verdicts: dict[tuple[Any, ...], Verdict]) -> str:
    """The closing verdict line of the report."""
    word = overall(verdicts)
    which = [label(k) for k, v in verdicts.items() if v.verdict == word]
    if word == "OK":
        return f"**Verdict: OK** ({len(verdicts)} configuration(s); nothing slower beyond the noise)."
    return f"**Verdict: {word}**: {', '.join(which)}." + (f" Next: {NEXT[word]}." if word in NEXT else "")


EXIT = {"OK": 0, "REGRESSION": 1, "INCONCLUSIVE": 3}
EPILOG = """verdicts and exit codes:
  0  OK            nothing regressed beyond the noise (identical programs, or a change the timing rules out)
  1  REGRESSION    a structural change that adds work per cell and step (kernels, bytes, flops; e.g. an XLA
                   flag that disables fusion), or an interleaved (--remeasure) slowdown beyond the threshold
  3  INCONCLUSIVE  the measured noise is larger than the change: two files measured at different moments cannot
                   separate code from machine; run on a quieter machine or with --remeasure N [--base-python PY]
  2  bad input
Every verdict prints the load average and the repeat spread of both runs, and the threshold applied."""


def main(args: list[str]) -> int:
    """Entry point of ``python -m lbm compare``: prints the report; exit 0 OK, 1 REGRESSION, 3 INCONCLUSIVE."""
    from lbm.config.command_line import ArgumentParser  # a bad option or a missing file: one line, not the usage

    parser = ArgumentParser(prog="python -m lbm compare", description=__doc__.splitlines()[0],
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the base bench.json")
    parser.add_argument("new", help="the new bench.json")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="smallest relative change that matters (default 0.10 = 10%%)")
    parser.add_argument("--remeasure", type=int, default=0, metavar="N",
                        help=f"time N interleaved rounds (base, new, new, base, ...) of each configuration not "
                             f"decided by its structure, in one time window, over up to {WORKER_PAIRS} fresh pairs of "
                             f"workers (stopping once the rest could not change the verdict); {rounds_needed()} or "
                             "more for a 95%% interval, 20 recommended")
    parser.add_argument("--base-python", default=None, metavar="PY",
                        help="with --remeasure: the interpreter of the base's environment (another checkout or "
                             "virtual environment); default: this one, under the base file's XLA_FLAGS")
    parser.add_argument("--out", default=None, help="also write the markdown report to this file")
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if not 0 <= ns.threshold < 1:
        raise LbmError(f"--threshold={ns.threshold}: expected a fraction in [0, 1)")
    if not 0 <= ns.remeasure <= 1000:
        raise LbmError(f"--remeasure={ns.remeasure}: expected a number of rounds in [0, 1000]")
    if ns.base_python is not None:
        if not ns.remeasure:
            raise LbmError("--base-python measures the base interleaved with the new code: give it with "
                           "--remeasure N (N >= 1)")
        if not (os.path.isfile(ns.base_python) and os.access(ns.base_python, os.X_OK)):
            raise LbmError(f"--base-python={ns.base_python}: not an executable file (give the base environment's "
                           "python, e.g. /path/to/venv/bin/python)")
    base, new = load(ns.base), load(ns.new)
    text, verdicts = compare(base, new, ns.threshold)
    keys = [k for k, v in verdicts.items() if not v.basis.startswith("structural")] if ns.remeasure else []
    if keys:
        paired = remeasure(base, new, keys, ns.remeasure, ns.base_python, ns.threshold)
        text, verdicts = compare(base, new, ns.threshold, paired)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text)
    return EXIT[overall(verdicts)]


def remeasure(base: dict[str, Any], new: dict[str, Any], keys: list[tuple[Any, ...]], rounds: int,
              base_python: str | None, threshold: float) -> dict[tuple[Any, ...], Interleaved]:
    """Interleaved rounds of each configuration ``keys`` (lbm.bench.interleave), base and new in turn."""
    recs_a = {key_of(r): r for r in base["records"]}
    recs_b = {key_of(r): r for r in new["records"]}
    flags = [(d.get("environment") or {}).get("XLA_FLAGS") or "" for d in (base, new)]

    def say(i: int, text: str) -> None:
        print(f"compare: [{i + 1}/{len(keys)}] {label(keys[i])}: interleaved {text}", file=sys.stderr, flush=True)

    got = measure_interleaved([(recs_a[k], recs_b[k]) for k in keys], flags[0], flags[1], rounds, base_python, say,
                              threshold)
    return dict(zip(keys, got, strict=True))
