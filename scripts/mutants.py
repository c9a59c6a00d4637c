"""Does the suite fail when the code breaks? Apply hand-written mutations one at a time and run the tests.

    python scripts/mutants.py [--lane fast|full] [--only NAME ...] [--tree DIR] [--out mutants.json]

Each mutation replaces one exact string in one file of a scratch copy of the tree (``git archive HEAD``, or
``--tree``), then runs pytest there (``-x``; ``--lane fast`` adds ``-m "not slow"``) on the mutation's test
files. A mutation is *killed* when pytest fails, *survived* when it passes. Every mutation's string must occur
exactly once in its file, so a mutation that no longer applies is reported, not silently skipped. The lists are
the engines, the boundaries, the profiler, the checkpoints and compare (issue 21: "applies its own set of code
mutations ... and expects each to make the suite fail"). Exit 1 when any mutation survived.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import NamedTuple


class Mutation(NamedTuple):
    """One exact replacement in one file, and the tests that should notice it."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


ENGINES = ("tests/kernels/test_kernels.py", "tests/engines/test_engines.py", "tests/engines/test_engines_xla.py",
           "tests/kernels/collisions/test_collision.py")
WALLS = ("tests/boundaries/test_boundaries.py", "tests/cases/test_cases.py", "tests/boundaries/test_boundaries_interpolated.py")
PROFILE = ("tests/profiling/test_profiling_pipeline.py", "tests/profiling/test_profiling_equal.py",
           "tests/profiling/test_profiling_run.py", "tests/profiling/test_profiling_device_fixtures.py",
           "tests/profiling/test_profiling_tracedb.py")
CKPT = ("tests/simulation/test_simulation.py", "tests/test_cli.py", "tests/test_api.py", "tests/simulation/test_deviations.py")
COMPARE = ("tests/bench/test_compare.py",)
FACES = ("tests/boundaries/test_boundaries.py", "tests/boundaries/test_boundaries_outlet.py",
         "tests/boundaries/test_boundaries_pressure.py")
NATIVE = ("tests/engines/native/test_engines_native.py", "tests/engines/native/test_native_collisions.py",
          "tests/scripts/test_engines_agree.py")
PALLAS = ("tests/engines/pallas/test_engines_pallas.py", "tests/engines/pallas/test_pallas_collisions.py")
SHARDED = ("tests/test_parallel.py",)
RUNS = ("tests/simulation/test_simulation.py", "tests/io/test_fields.py", "tests/simulation/test_divergence.py",
        "tests/cases/test_cases_obstacle.py")

MUTATIONS = [
    # engines
    Mutation("equilibrium 4.5 -> 4.4", "lbm/kernels/equilibrium.py", "3.0 + 4.5 * cu", "3.0 + 4.4 * cu", ENGINES),
    Mutation("equilibrium -1.5 u^2 -> -1.4 u^2", "lbm/kernels/equilibrium.py", "base = -1.5 * usq",
             "base = -1.4 * usq", ENGINES),
    Mutation("streaming shifts backwards", "lbm/kernels/streaming.py",
             "shift = tuple(int(s) for s in lattice.c[i])", "shift = tuple(-int(s) for s in lattice.c[i])", ENGINES),
    Mutation("native equilibrium 4.5 -> 4.4", "lbm/engines/native/codegen.py",
             "((real)3 + (real)4.5 * cu{i})", "((real)3 + (real)4.4 * cu{i})", NATIVE),
    Mutation("native TRT/force constant 4.5 -> 4.4", "lbm/engines/native/codegen.py", "pc = (real)4.5 * wr;",
             "pc = (real)4.4 * wr;", NATIVE),
    Mutation("Pallas cell: the force's half shift doubled", "lbm/engines/pallas/cell.py",
             "mom = [m + 0.5 * float(force[a])", "mom = [m + 1.0 * float(force[a])", PALLAS),
    Mutation("Pallas cell: density misses a population", "lbm/engines/pallas/cell.py", "drho = sum(f[1:], f[0])",
             "drho = sum(f[2:], f[0])", PALLAS),
    Mutation("halo: populations from below come from two blocks down", "lbm/engines/sharded/halo.py",
             "from_below = jax.lax.ppermute(high[up], AXES[axis], [(i, (i + 1) % m) for i in range(m)])",
             "from_below = jax.lax.ppermute(high[up], AXES[axis], [(i, (i + 2) % m) for i in range(m)])", SHARDED),
    Mutation("halo: a field's plane from below comes from two blocks down", "lbm/engines/sharded/halo.py",
             "from_below = jax.lax.ppermute(high, AXES[axis], [(i, (i + 1) % m) for i in range(m)])",
             "from_below = jax.lax.ppermute(high, AXES[axis], [(i, (i + 2) % m) for i in range(m)])", SHARDED),
    # boundaries
    Mutation("outflow copies two columns upstream", "lbm/boundaries/outflow.py", "f.at[unknown, -1].set(f[unknown, -2])",
             "f.at[unknown, -1].set(f[unknown, -3])", FACES),
    Mutation("Zou-He known sum counts the leaving ones once", "lbm/boundaries/inlet.py",
             "+ 2.0 * jnp.sum(f0[leaving], axis=0)", "+ 1.0 * jnp.sum(f0[leaving], axis=0)", FACES),
    Mutation("pressure outlet velocity over the wrong density", "lbm/boundaries/pressure.py",
             "un = (drho - known_sum(g, lattice)) / (1.0 + drho)", "un = (drho - known_sum(g, lattice)) / (1.0 + 0.5 * drho)",
             FACES),
    Mutation("moving wall without the factor 2", "lbm/boundaries/moving_wall.py",
             "2.0 * w * rho_wall * cu / CS2", "1.0 * w * rho_wall * cu / CS2", WALLS),
    Mutation("bounce-back keeps the post-collision value", "lbm/boundaries/bounce_back.py",
             "return jnp.where(solid, f_pre[lattice.opposite], f_post)", "return jnp.where(solid, f_pre, f_post)",
             WALLS),
    Mutation("Bouzidi q<1/2 weight 2q -> q", "lbm/boundaries/interpolated.py",
             "w[0] = np.where(low, 2 * q,", "w[0] = np.where(low, q,", WALLS),
    Mutation("Bouzidi q>=1/2 second weight dropped", "lbm/boundaries/interpolated.py",
             "w[2] = np.where(high, (2 * q - 1) / (2 * np.maximum(q, 0.5)), 0.0)", "w[2] = np.where(high, 0.0, 0.0)",
             WALLS),
    # profiler
    Mutation("shares over the total of the medians doubled", "lbm/profiling/breakdown.py",
             'r["share"] = r[STATISTIC] / total if total else None',
             'r["share"] = r[STATISTIC] / (2 * total) if total else None', PROFILE),
    Mutation("sum row's total left out of one stage", "lbm/profiling/breakdown.py",
             'sum_total = sum(r["total_ms"] or 0.0 for r in timed)',
             'sum_total = sum(r["total_ms"] or 0.0 for r in timed[1:])', PROFILE),
    Mutation("breakdown median is the largest sample", "lbm/profiling/breakdown.py",
             "median_ms=statistics.median(vals) / 1e6", "median_ms=max(vals) / 1e6", PROFILE),
    # runs: signals, frames, divergence
    Mutation("a signal stops without its checkpoint", "lbm/simulation/chunks.py",
             "s.run_dir, s.checkpoint(at.step, at.f))", 's.run_dir, s.run_dir / "checkpoints")', RUNS),
    Mutation("each frame its own colour scale", "lbm/simulation/outputs.py",
             "self.frame_limit = frame(path, fields, step, self.frame_limit)",
             "self.frame_limit = frame(path, fields, step, None)", RUNS),
    Mutation("divergence misses densities above the bound", "lbm/simulation/health.py",
             "| (rho >= RHO_BOUNDS[1])", "| (rho >= 10 * RHO_BOUNDS[1])", RUNS),
    Mutation("compare's evidence misses added work", "lbm/bench/evidence.py",
             "up = {f for f, _, _, rel in fields if rel > threshold}",
             "up = {f for f, _, _, rel in fields if rel > 10 * threshold}", COMPARE),
    # checkpoints
    Mutation("checkpoint step off by one", "lbm/io/checkpoint.py", '"step": int(step), "populations"',
             '"step": int(step) - 1, "populations"', CKPT),
    Mutation("checkpoint drops the accumulated state", "lbm/io/checkpoint.py",
             'arrays = {f"state/{k}": np.asarray(v) for k, v in state.items()}', "arrays = {}", CKPT),
    Mutation("checkpoint.keep keeps one more", "lbm/io/checkpoint.py", "sorted(directory.glob(GLOB))[:-keep]",
             "sorted(directory.glob(GLOB))[:-keep - 1]", CKPT),
    Mutation("resume takes the oldest checkpoint", "lbm/io/checkpoint.py", "return found[-1]", "return found[0]",
             CKPT),
    Mutation("resume ignores the case", "lbm/io/checkpoint.py", "    for key in COMPATIBLE_KEYS:",
             "    for key in COMPATIBLE_KEYS[1:]:", CKPT),
    # compare
    Mutation("compare's noise limit ignored", "lbm/bench/compare.py",
             "limit = max(threshold, noise(a, cpu) + noise(b, cpu))", "limit = threshold", COMPARE),
    Mutation("compare's two files see no slowdown", "lbm/bench/compare.py",
             'slower = timing["change"] < -timing["limit"]', 'slower = timing["change"] < -2 * timing["limit"]',
             COMPARE),
    Mutation("compare's overall verdict prefers INCONCLUSIVE", "lbm/bench/compare.py",
             'for x in ("REGRESSION", "INCONCLUSIVE")', 'for x in ("INCONCLUSIVE", "REGRESSION")', COMPARE),
]


def scratch_tree(source: Path | None) -> Path:
    """A copy of HEAD's tracked files (or of ``source``) in a new temporary directory."""
    dest = Path(tempfile.mkdtemp(prefix="lbm_mutants_"))
    if source is not None:
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".venv", ".git", "outputs"))
        return dest
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def run_one(tree: Path, m: Mutation, lane: str) -> dict[str, object]:
    """Apply ``m`` in ``tree``, run its tests, restore the file; the outcome as a record."""
    target = tree / m.path
    original = target.read_text()
    count = original.count(m.old)
    if count != 1:
        return {"name": m.name, "outcome": "not applicable", "why": f"{m.path} holds the string {count} times"}
    tests = [t for t in m.tests if (tree / t).exists()]
    target.write_text(original.replace(m.old, m.new))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    if lane == "fast":
        cmd += ["-m", "not slow"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    finally:
        target.write_text(original)
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    failed = proc.returncode == 1 or (proc.returncode == 2 and " failed" in tail[0])  # -x under xdist: exit 2
    outcome = "survived" if proc.returncode == 0 else "killed" if failed else f"error (pytest exit {proc.returncode})"
    return {"name": m.name, "path": m.path, "tests": tests, "outcome": outcome, "summary": tail[0],
            "seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the mutations; print one line each; exit 1 if any survived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lane", choices=("fast", "full"), default="full")
    parser.add_argument("--only", nargs="*", default=None, help="names (substrings) of the mutations to run")
    parser.add_argument("--tree", type=Path, default=None, help="copy this tree instead of git HEAD")
    parser.add_argument("--out", type=Path, default=None, help="write the records as JSON")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or any(s in m.name for s in args.only)]
    tree = scratch_tree(args.tree)
    records = []
    try:
        for m in chosen:
            rec = run_one(tree, m, args.lane)
            records.append(rec)
            print(f"{rec['outcome']:>16}  {m.name}  ({rec.get('seconds', 0)} s; {rec.get('summary', rec.get('why'))})",
                  flush=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    survived = [r for r in records if r["outcome"] != "killed"]
    print(f"{len(records) - len(survived)} of {len(records)} mutations killed")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())
