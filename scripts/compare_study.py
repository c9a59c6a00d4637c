"""How well ``python -m lbm compare`` separates noise from regressions, measured on this machine.

    python scripts/compare_study.py run OUT --pairs 20 --fusion 5 --inject 5   # collect bench.json files
    python scripts/compare_study.py score OUT                                    # compare every pair, tabulate

``run`` writes, per trial, three bench.json files measured back to back with small configurations:
``a`` (base), ``b`` (new) and ``b2`` (new again: what ``compare --remeasure`` would measure). Trials:
``same`` (identical code), ``fusion`` (new runs with XLA_FLAGS=--xla_disable_hlo_passes=fusion) and
``inject`` (new runs with the collide stage made about 25% slower per step by extra elementwise work,
see ``inject_bench``). ``score`` runs the comparison on each trial, once from ``a`` and ``b`` alone and
once with ``b2`` as the re-measurement, and prints the verdicts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = ["grid.nx=128", "grid.ny=128", "cylinder_grid.nx=168", "cylinder_grid.ny=72", "variants=[auto,xla]",
         "repeats=7", "min_time_s=0.1", "bandwidth.bytes=33554432", "bandwidth.repeats=5", "kernel_profile=0"]
"""Small, quick configurations (about 17 s per bench run on a 2-core laptop)."""
INJECT_ROUNDS = int(os.environ.get("LBM_STUDY_INJECT_ROUNDS", "8"))
"""Extra multiply-adds per population in collide: 8 gives about +25% step time on the xla periodic 128x128 box
(measured: 4 rounds -9% MLUPS, 12 rounds -33%)."""


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

    timestep.CORE["collide"] = slow_collide
    return main(["bench", *overrides])


def bench(out: Path, env_extra: dict[str, str], inject: int = 0) -> None:
    """One bench run into ``out`` (skipped when its bench.json exists)."""
    if (out / "bench.json").exists():
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env_extra}
    args = [*BENCH, f"hydra.run.dir={out}"]
    cmd = ([sys.executable, __file__, "inject", str(inject), *args] if inject
           else [sys.executable, "-m", "lbm", "bench", *args])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed in {out}:\n{proc.stderr[-2000:]}")


def collect(root: Path, pairs: int, fusion: int, inject: int) -> None:
    """Collect the trials, each as a/b/b2 run back to back."""
    plan = [("same", i, {}, 0) for i in range(pairs)]
    plan += [("fusion", i, {"XLA_FLAGS": "--xla_disable_hlo_passes=fusion"}, 0) for i in range(fusion)]
    plan += [("inject", i, {}, INJECT_ROUNDS) for i in range(inject)]
    plan.sort(key=lambda t: t[1] / {"same": pairs, "fusion": fusion, "inject": inject}[t[0]])  # interleave the kinds
    for kind, i, env, rounds in plan:
        t0 = time.time()
        trial = root / f"{kind}_{i:02d}"
        bench(trial / "a", {})
        bench(trial / "b", env, rounds)
        bench(trial / "b2", env, rounds)
        print(f"{trial.name}: {time.time() - t0:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)


def score(root: Path, threshold: float | None) -> None:
    """Compare every trial without and with the re-measurement and print one line each plus totals."""
    from lbm.bench.compare import compare, load, merge_remeasured

    totals: dict[tuple[str, str], list[int]] = {}
    for trial in sorted(p for p in root.iterdir() if (p / "b2" / "bench.json").exists()):
        kind = trial.name.rsplit("_", 1)[0]
        a, b, b2 = (load(str(trial / x / "bench.json")) for x in ("a", "b", "b2"))
        kw = {} if threshold is None else {"threshold": threshold}
        _, once = compare(a, b, **kw)
        _, twice = compare(a, merge_remeasured(b, b2), **kw) if once else ("", once)
        flagged_once = sorted(once)
        flagged = sorted(twice)
        print(f"{trial.name}: single {flagged_once or 'clean'}; with re-measure {flagged or 'clean'}")
        for mode, got in (("single", once), ("remeasure", twice)):
            totals.setdefault((kind, mode), []).append(bool(got))
    for (kind, mode), flags in sorted(totals.items()):
        print(f"{kind:7s} {mode:9s}: {sum(flags)}/{len(flags)} flagged")


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
    r.add_argument("--inject", type=int, default=5)
    s = sub.add_parser("score")
    s.add_argument("out", type=Path)
    s.add_argument("--threshold", type=float, default=None)
    ns = p.parse_args()
    if ns.what == "run":
        collect(ns.out, ns.pairs, ns.fusion, ns.inject)
    else:
        score(ns.out, ns.threshold)


if __name__ == "__main__":
    main()
