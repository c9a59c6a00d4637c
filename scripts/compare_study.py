"""How often ``python -m lbm compare`` gives the right verdict, for four known changes, quiet and under load.

    python scripts/compare_study.py run OUT --pairs 20 --load quiet      # collect and judge the trials
    python scripts/compare_study.py run OUT --pairs 20 --load loaded     # the same under a concurrent bench load
    python scripts/compare_study.py score OUT                            # the table of verdicts
    python scripts/compare_study.py rejudge OUT                          # the two-file verdicts again (this code)

Trials (each pair: a base bench ``a`` and a new bench ``b`` back to back, then ``compare a b`` and
``compare a b --remeasure ROUNDS --base-python <the unchanged interpreter>``, whose interleaved workers time both
sides in turn; ROUNDS: ``--rounds``, 20):

``same``           identical code (native and xla engines)
``fusion``         the new side under XLA_FLAGS=--xla_disable_hlo_passes=fusion (native and xla engines)
``inject_xla``     +25% arithmetic in collide on the xla engine: extra multiplications per population, as many
                   as make XLA's flops per cell and step of the base about 25% larger (+23% on the 96x48 cylinder)
``inject_native``  +25% arithmetic in the native kernel's collision: extra operations, 25% of the generated
                   collision's binary operations per cell (scripts/compare_study_site/sitecustomize.py)

``--load loaded`` runs ``--load-procs`` concurrent bench processes in a loop during the trials (a load average
of about three times the core count on a 2-core machine), started and stopped by the script. Each trial
records the 1-minute load average at its start, and ``cost.json`` the seconds of each part, the CPU seconds of
its processes and the loads. Every file stays in OUT (bench.json, the reports, exit codes). A pair stays cheap:
a fixed number of steps per repeat (no probe compilation), JAX's persistent compilation cache in OUT/jax-cache
for every bench and worker (a changed program is still compiled: the cache is keyed by program and flags), one
interleaved worker per side, rounds that stop once settled, and the two-file verdict in this process.
Two processes can share one OUT's pairs (``--first``); docs/studies.md has the commands and the results.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "scripts" / "compare_study_site"
BENCH = ["cases=[cylinder]", "cylinder_grid.nx=96", "cylinder_grid.ny=48", "bandwidth.enabled=false",
         "kernel_profile=0", "repeats=5", "steps=512"]
"""Small, quick configurations: the cylinder (inlet, outflow, bounce-back, forces) on a 96x48 D2Q9 grid, where
disabling XLA's fusion pass changes the xla program most (the periodic box barely changes). A fixed number of
steps per repeat (one dispatch; about 10 ms of CPU time on the native engine, 40 ms on xla on the development
machine) spares the probe's compilation that steps=auto needs."""
VARIANTS = {"same": "[native,xla]", "fusion": "[native,xla]", "inject_xla": "[xla]", "inject_native": "[native]"}
TRIALS = tuple(VARIANTS)
LOAD_BENCH = ["cases=[periodic]", "variants=[xla]", "grid.nx=256", "grid.ny=256", "bandwidth.enabled=false",
              "kernel_profile=0", "repeats=20", "min_time_s=0.5"]
"""What the concurrent load runs, in a loop."""


def native_ops() -> int:
    """Binary arithmetic operations per cell in the native kernel's generated collision (D2Q9, BGK)."""
    from lbm.engines.native.codegen import KernelSpec, collide_body
    from lbm.lattice import LATTICES

    text = "\n".join(collide_body(KernelSpec(LATTICES["d2q9"], "float32", False, False, "")))
    return len(re.findall(r" [-+*/] ", text))


def injection(trial: str, base_doc: dict | None) -> str:
    """The LBM_STUDY_INJECT value of a trial's new side ('' for none)."""
    if trial == "inject_native":
        return f"native:{round(0.25 * native_ops() / 2) * 2}"
    if trial == "inject_xla":
        rec = next(r for r in base_doc["records"] if r["variant"] == "xla")
        flops, q = rec["evidence"]["cost_flops_per_cell_step"], rec["q"]
        # 1 flop per round and 2 to fold them in, per population, counted in both consumers of the populations
        return f"xla:{max(0, round(0.25 * flops / (2 * q)) - 2)}"
    return ""


def env_for(inject: str, xla_flags: str, cache: Path) -> dict[str, str]:
    """The environment of one side: the study's sitecustomize on the path, the injection, XLA_FLAGS, and JAX's
    persistent compilation cache in ``cache`` (keyed by the program and the XLA flags: a program compiled once is
    loaded, not compiled again, by every later bench and interleaved worker of the study)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LBM_STUDY_INJECT", "XLA_FLAGS")}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(REPO)])
    env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    if inject:
        env["LBM_STUDY_INJECT"] = inject
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    return env


def bench(out: Path, trial: str, env: dict[str, str]) -> None:
    """One bench run of a trial into ``out`` (skipped when its bench.json exists)."""
    if (out / "bench.json").exists():
        return
    cmd = [sys.executable, "-m", "lbm", "bench", *BENCH, f"variants={VARIANTS[trial]}", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed in {out}:\n{proc.stderr[-2000:]}")


def judge(pair: Path, env: dict[str, str], name: str, extra: list[str]) -> None:
    """``compare a b [extra]`` in the new side's environment; its report and exit code into ``pair``."""
    if (pair / f"{name}.rc").exists():
        return
    args = ["compare", str(pair / "a" / "bench.json"), str(pair / "b" / "bench.json"), "--out",
            str(pair / f"{name}.md"), *extra]
    if extra:  # interleaved: workers in the new side's environment
        proc = subprocess.run([sys.executable, "-m", "lbm", *args], env=env, capture_output=True, text=True, cwd=REPO)
        code, err = proc.returncode, proc.stderr
    else:  # two files: no measuring, the same command in this process (no interpreter to start)
        from lbm.cli import main as lbm_main

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as caught:
            code = lbm_main(args)
        err = caught.getvalue()
    if code == 2:
        raise SystemExit(f"compare failed in {pair}:\n{err[-2000:]}")
    (pair / f"{name}.rc").write_text(str(code))


def base_python(root: Path) -> str:
    """An interpreter that runs the unchanged code (the injection removed from its environment)."""
    path = root / "base-python"
    tmp = root / f"base-python.{os.getpid()}"
    tmp.write_text(f"#!/bin/sh\nunset LBM_STUDY_INJECT\nexec {sys.executable} \"$@\"\n")
    tmp.chmod(0o755)
    tmp.replace(path)  # atomic: another process of the study may be running it
    return str(path)


def start_load(procs: int, root: Path) -> list[subprocess.Popen]:
    """``procs`` shell loops, each running bench again and again (the concurrent load)."""
    cmd = " ".join([sys.executable, "-m", "lbm", "bench", *LOAD_BENCH, f"hydra.run.dir={root}/load/$$"])
    return [subprocess.Popen(["nice", "-n", "5", "sh", "-c", f"while true; do {cmd} >/dev/null 2>&1; done"],
                             start_new_session=True) for _ in range(procs)]


def stop_load(loops: list[subprocess.Popen]) -> None:
    """End the load loops this script started (each its own process group)."""
    for p in loops:
        try:
            os.killpg(p.pid, 15)
        except ProcessLookupError:
            pass
        p.wait()


def one_pair(pair: Path, trial: str, cache: Path, py: str, rounds: int) -> dict[str, float]:
    """A trial's pair: bench ``a``, bench ``b`` with the change, both verdicts; the seconds each part took."""
    seconds = {}
    t0 = time.time()
    bench(pair / "a", trial, env_for("", "", cache))
    seconds["bench_a"] = time.time() - t0
    inject = injection(trial, json.loads((pair / "a" / "bench.json").read_text()))
    new_env = env_for(inject, "--xla_disable_hlo_passes=fusion" if trial == "fusion" else "", cache)
    t0 = time.time()
    bench(pair / "b", trial, new_env)
    seconds["bench_b"] = time.time() - t0
    t0 = time.time()
    judge(pair, new_env, "two_files", [])
    seconds["two_files"] = time.time() - t0
    t0 = time.time()
    judge(pair, new_env, "interleaved", ["--remeasure", str(rounds), "--base-python", py])
    seconds["interleaved"] = time.time() - t0
    return seconds


def collect(root: Path, pairs: range, load: str, procs: int, rounds: int, trials: list[str]) -> None:
    """Run the pairs numbered ``pairs`` of every trial at one load, interleaving the trials in time."""
    top = root / load
    top.mkdir(parents=True, exist_ok=True)
    py = base_python(root)
    loops = start_load(procs, root) if load == "loaded" else []
    try:
        if loops:
            time.sleep(60)  # let the load average climb
        for i in pairs:
            for trial in trials:
                pair = top / f"{trial}_{i:02d}"
                pair.mkdir(exist_ok=True)
                if (pair / "interleaved.rc").exists():
                    continue
                load_start = os.getloadavg()
                (pair / "load.json").write_text(json.dumps(load_start))
                cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
                seconds = one_pair(pair, trial, root / "jax-cache", py, rounds)
                done = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_s = done.ru_utime + done.ru_stime - cpu.ru_utime - cpu.ru_stime  # what a quiet machine's wall takes
                (pair / "cost.json").write_text(json.dumps({"seconds": seconds, "cpu_s": cpu_s, "load_start": load_start,
                                                            "load_end": os.getloadavg()}))
                print(f"{load} {pair.name}: {sum(seconds.values()):.0f} s, load {os.getloadavg()[0]:.1f}, exit codes "
                      f"{(pair / 'two_files.rc').read_text()} / {(pair / 'interleaved.rc').read_text()}", flush=True)
    finally:
        stop_load(loops)


WORDS = {"0": "OK", "1": "REGRESSION", "3": "INCONCLUSIVE"}


def score(root: Path) -> None:
    """The table: per trial and load, the verdicts of the two files alone and with the interleaved rounds."""
    print("| trial | load | pairs | 1-min load average (median, range) | two files: REGRESSION / INCONCLUSIVE / OK "
          "| interleaved: REGRESSION / INCONCLUSIVE / OK | seconds per pair: wall, CPU (median) |")
    print("|---|---|---|---|---|---|---|")
    for load in ("quiet", "loaded"):
        for trial in TRIALS:
            done = sorted(p for p in (root / load).glob(f"{trial}_*") if (p / "interleaved.rc").exists())
            if not done:
                continue
            loads = [json.loads((p / "load.json").read_text())[0] for p in done]
            cells = []
            for name in ("two_files", "interleaved"):
                got = [WORDS[(p / f"{name}.rc").read_text().strip()] for p in done]
                cells.append(" / ".join(str(got.count(w)) for w in ("REGRESSION", "INCONCLUSIVE", "OK")))
            costs = [json.loads((p / "cost.json").read_text()) for p in done if (p / "cost.json").exists()]
            walls = [sum(c["seconds"].values()) for c in costs]
            cpus = [c["cpu_s"] for c in costs if "cpu_s" in c]
            cost = (f"{statistics.median(walls):.0f}" if walls else "-") + ", " + (
                f"{statistics.median(cpus):.0f}" if cpus else "-")
            print(f"| {trial} | {load} | {len(done)} | {statistics.median(loads):.1f} ({min(loads):.1f}-"
                  f"{max(loads):.1f}) | {cells[0]} | {cells[1]} | {cost} |")
    named = [p for load in ("quiet", "loaded") for p in (root / load).glob("fusion_*") if (p / "interleaved.rc").exists()]
    reports = [(p / "two_files.md").read_text() for p in named if (p / "two_files.md").exists()]
    flagged = sum("XLA_FLAGS '' -> '--xla_disable_hlo_passes=fusion'" in r and "structural: more work" in r
                  for r in reports)
    print(f"\nfusion trials whose two-file report names the flag and the structural change: {flagged}/{len(named)}")


def rejudge(root: Path) -> None:
    """Judge every pair's two files again with this checkout's compare (deterministic: no measuring)."""
    for pair in sorted(root.glob("*/*_[0-9][0-9]")):
        if (pair / "b" / "bench.json").exists():
            (pair / "two_files.rc").unlink(missing_ok=True)
            judge(pair, env_for("", "", root / "jax-cache"), "two_files", [])


def main() -> None:
    """Command line of the study."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--pairs", type=int, default=20)
    r.add_argument("--first", type=int, default=0, help="number of the first pair (two processes can share the pairs "
                                                        "of one OUT: --first 0 --pairs 10 and --first 10 --pairs 10)")
    r.add_argument("--load", choices=("quiet", "loaded"), default="quiet")
    r.add_argument("--load-procs", type=int, default=2, help="concurrent bench loops for --load loaded")
    r.add_argument("--rounds", type=int, default=20, help="interleaved rounds (compare --remeasure; they stop once "
                                                           "the rest could not change the verdict)")
    r.add_argument("--trials", default=",".join(TRIALS))
    for name in ("score", "rejudge"):
        sub.add_parser(name).add_argument("out", type=Path)
    ns = p.parse_args()
    if ns.what == "run":
        collect(ns.out, range(ns.first, ns.first + ns.pairs), ns.load, ns.load_procs, ns.rounds,
                ns.trials.split(","))
    elif ns.what == "rejudge":
        rejudge(ns.out)
    else:
        score(ns.out)


if __name__ == "__main__":
    main()
