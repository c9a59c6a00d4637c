"""How well ``python -m lbm compare`` separates noise from regressions, measured on this machine.

    python scripts/compare_study.py run OUT --pairs 20 --fusion 5 --inject 10   # collect bench.json files
    python scripts/compare_study.py score OUT                                     # compare every pair, tabulate
    python scripts/compare_study.py stats OUT                                     # which statistic separates them

``run`` writes, per trial, four bench.json files measured back to back with small configurations (BENCH), in
the order ``compare --remeasure 1 --base-python ...`` measures them: ``a`` (base), ``b`` (new), then ``a2`` (base
again) and ``b2`` (new again). Trials: ``same`` (identical code), ``fusion`` (new runs with
XLA_FLAGS=--xla_disable_hlo_passes=fusion) and ``inject`` (new runs with the collide stage made about 25% slower
per step by extra elementwise work, see ``inject_bench``). ``score`` judges each trial three ways, as compare
does: ``single`` (``a`` against ``b``), ``remeasure`` (``compare --remeasure 1``: ``b2`` merged into ``b`` for the
suspect configurations) and ``both`` (``compare --remeasure 1 --base-python``: ``a2`` merged into ``a`` as well),
and prints the verdicts. bench records every repeat in the process's CPU time too, and compare judges those.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = ["grid.nx=128", "grid.ny=128", "cases=[cylinder]", "variants=[auto,xla]", "bandwidth.enabled=false",
         "kernel_profile=0"]
"""Small, quick configurations: bench's cylinder (420x180 D2Q9; the grid overrides size only the periodic box) on
the native kernel (auto) and on the xla engine (about 10 s per bench run on a quiet 2-core machine). The
cylinder, not the periodic box: since the xla engine computes rho and u in one kernel, disabling XLA's fusion
pass barely slows the box (40.3 -> 37.8 MLUPS in CPU time, quiet machine) but slows the cylinder threefold
(49.5 -> 14.4). ``--repeats`` repeats of ``--min-time`` seconds each."""
INJECT_ROUNDS = int(os.environ.get("LBM_STUDY_INJECT_ROUNDS", "20"))
"""Extra multiply-adds per population in collide. On the xla cylinder 420x180 (main at 42f0f41, quiet machine,
one bench run each): 0 rounds 51.4 MLUPS, 20 rounds 40.4 in CPU time (87.3 -> 70.4 wall), i.e. +27% step time.
(The periodic box, same day: 0, 10, 40 rounds 45.8, 43.0, 24.8 MLUPS in CPU time.)"""


def inject_bench(rounds: int, overrides: list[str]) -> int:
    """``python -m lbm bench`` with the collide stage doing ``rounds`` extra elementwise passes (a known slowdown)."""

    from lbm.cli import main
    from lbm.engines import timestep

    core = timestep.CORE["collide"]

    def slow_collide(s, setup):  # noqa: ANN001, ANN202
        s = core(s, setup)
        extra = s.post
        for _ in range(rounds):
            extra = extra * 1.0001 + 1e-7
        post = s.post + 0.0 * extra  # 0*x is not simplified away for floats (NaN semantics)
        return s.replace(collided=post, post=post)

    if rounds:
        timestep.CORE["collide"] = slow_collide
    return main(["bench", *overrides])


def bench(out: Path, env_extra: dict[str, str], inject: int = 0, timing: tuple[str, ...] = ()) -> None:
    """One bench run into ``out`` (skipped when its bench.json exists)."""
    if (out / "bench.json").exists():
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env_extra}
    args = [*BENCH, *timing, f"hydra.run.dir={out}"]
    cmd = [sys.executable, __file__, "inject", str(inject), *args]  # 0 rounds: plain bench
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed in {out}:\n{proc.stderr[-2000:]}")


def collect(root: Path, pairs: int, fusion: int, inject: int, timing: tuple[str, ...]) -> None:
    """Collect the trials, each as a, b, a2, b2 run back to back."""
    plan = [("same", i, {}, 0) for i in range(pairs)]
    plan += [("fusion", i, {"XLA_FLAGS": "--xla_disable_hlo_passes=fusion"}, 0) for i in range(fusion)]
    plan += [("inject", i, {}, INJECT_ROUNDS) for i in range(inject)]
    plan.sort(key=lambda t: t[1] / {"same": pairs, "fusion": fusion, "inject": inject}[t[0]])  # interleave the kinds
    for kind, i, env, rounds in plan:
        t0 = time.time()
        trial = root / f"{kind}_{i:02d}"
        bench(trial / "a", {}, 0, timing)
        bench(trial / "b", env, rounds, timing)
        bench(trial / "a2", {}, 0, timing)
        bench(trial / "b2", env, rounds, timing)
        print(f"{trial.name}: {time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f} "
              f"(1-minute load average at the end of the trial)", flush=True)


def best_by_variant(doc: dict) -> dict[str, float]:
    """Fastest judged repeat (CPU time where recorded) of each variant of a bench.json."""
    from lbm.bench.compare import best

    return {r["variant"]: best(r, bool(r["mlups"].get("cpu_values"))) for r in doc["records"]}


def again(doc: dict, more: dict, keys: list) -> dict:
    """``doc`` with the repeats of ``more`` merged into the records ``keys`` (what compare --remeasure measures again)."""
    from lbm.bench.compare import key_of, merge_remeasured

    return merge_remeasured(doc, {**more, "records": [r for r in more["records"] if key_of(r) in keys]})


def score(root: Path, threshold: float | None) -> None:
    """Judge every trial as compare does (single, re-measured new, re-measured both) and print one line each plus totals."""
    import statistics

    from lbm.bench.compare import DEFAULT_THRESHOLD, compare, load, suspects

    limit = DEFAULT_THRESHOLD if threshold is None else threshold
    totals: dict[tuple[str, str], list[int]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    for trial in sorted(p for p in root.iterdir() if (p / "b2" / "bench.json").exists()):
        kind = trial.name.rsplit("_", 1)[0]
        a, b, a2, b2 = (load(str(trial / x / "bench.json")) for x in ("a", "b", "a2", "b2"))
        loads += [d["load_average_start"][0] for d in (a, b, a2, b2) if d.get("load_average_start")]
        ba, bb = best_by_variant(a), best_by_variant(b)
        for v in ba:
            ratios.setdefault((kind, v), []).append(bb[v] / ba[v])
        keys = suspects(a, b, limit)  # what compare --remeasure measures again: only these records are merged

        verdicts = {"single": compare(a, b, limit)[1]}
        verdicts["remeasure"] = compare(a, again(b, b2, keys), limit)[1]
        verdicts["both"] = compare(again(a, a2, keys), again(b, b2, keys), limit)[1]
        print(f"{trial.name}: " + "; ".join(f"{m} {sorted(g) or 'clean'}" for m, g in verdicts.items()))
        for mode, got in verdicts.items():
            totals.setdefault((kind, mode), []).append(bool(got))
            if kind != "same":  # the change slows the xla engine only: caught = its configuration called slower
                totals.setdefault((kind, mode + ", xla"), []).append(any(" xla " in g for g in got))
    for (kind, mode), flags in sorted(totals.items()):
        print(f"{kind:7s} {mode:14s}: {sum(flags)}/{len(flags)} flagged")
    for (kind, v), r in sorted(ratios.items()):
        print(f"{kind:7s} {v:5s}: fastest repeat new/base median {statistics.median(r):.3f}, range {min(r):.3f}-{max(r):.3f}")
    if loads:
        print(f"load average (1 min) at the start of the {len(loads)} bench runs: median {statistics.median(loads):.1f}, "
              f"range {min(loads):.1f}-{max(loads):.1f}")


STATISTICS = {"max": lambda v: max(v), "2nd": lambda v: sorted(v)[-2], "3rd": lambda v: sorted(v)[-3],
              "p90": lambda v: float(np.percentile(v, 90)), "p75": lambda v: float(np.percentile(v, 75)),
              "median": lambda v: float(np.median(v))}
"""Statistics of a run's repeats that ``stats`` tries as the verdict's measure of a run."""


def stats(root: Path, variant: str) -> None:
    """For each statistic of the repeats: the range of new/base over the trials of each kind (do they separate?)."""
    def repeats(trial: Path, run: str, key: str) -> list[float]:
        doc = json.loads((trial / run / "bench.json").read_text())
        return next(r["mlups"][key] for r in doc["records"] if r["variant"] == variant)

    trials = sorted(p for p in root.iterdir() if (p / "b2" / "bench.json").exists())
    for key in ("cpu_values", "values"):
        for merged in (False, True):
            print(f"{variant}, {key}, {'a+a2 against b+b2' if merged else 'a against b'}:")
            for name, fn in STATISTICS.items():
                got: dict[str, list[float]] = {}
                for trial in trials:
                    a, b = repeats(trial, "a", key), repeats(trial, "b", key)
                    if merged:
                        a, b = a + repeats(trial, "a2", key), b + repeats(trial, "b2", key)
                    got.setdefault(trial.name.rsplit("_", 1)[0], []).append(fn(b) / fn(a))
                print(f"  {name:6s} " + "  ".join(f"{k}: {min(v):.3f}-{max(v):.3f} (median {np.median(v):.3f})"
                                                   for k, v in sorted(got.items())))


def main() -> None:
    """Command line of the study."""
    if len(sys.argv) > 1 and sys.argv[1] == "inject":
        raise SystemExit(inject_bench(int(sys.argv[2]), sys.argv[3:]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--pairs", type=int, default=20)
    r.add_argument("--fusion", type=int, default=5)
    r.add_argument("--inject", type=int, default=10)
    r.add_argument("--repeats", type=int, default=30, help="timed repeats per configuration")
    r.add_argument("--min-time", type=float, default=0.03, help="seconds per repeat")
    s = sub.add_parser("score")
    s.add_argument("out", type=Path)
    s.add_argument("--threshold", type=float, default=None)
    st = sub.add_parser("stats", help="how well each statistic of the repeats separates the kinds of trial")
    st.add_argument("out", type=Path)
    st.add_argument("--variant", default="xla")
    ns = p.parse_args()
    if ns.what == "run":
        collect(ns.out, ns.pairs, ns.fusion, ns.inject, (f"repeats={ns.repeats}", f"min_time_s={ns.min_time}"))
    elif ns.what == "stats":
        stats(ns.out, ns.variant)
    else:
        score(ns.out, ns.threshold)


if __name__ == "__main__":
    main()
