r"""engine=auto's pick against every other engine, for any case as `lbm run` runs it, in one process (issue 38 item 4).

`lbm bench` checks auto on its three cases (periodic, cavity, cylinder); this checks it on any run configuration,
the cases' defaults included (the duct, the channel, Schafer-Turek, the Taylor-Green vortices), each timed as `run`
advances it: chunks of ``--chunk`` steps (the run's default chunk, 100), one dispatch each, synchronised.

    python3 scripts/auto_sweep.py --engines pallas,xla --out sweep.json \
        "case=taylor_green" "case=duct" "case=cavity lattice=d3q19 grid.nx=34"

Each positional argument is one run's overrides (space-separated). Per configuration and engine (auto first, then
each of ``--engines`` that auto did not pick): the compile time, MLUPS per round (``--rounds`` rounds of at least
``--min-time`` s each, the median reported), and auto's verdict: the fastest engine, and whether auto's pick is
within 10 % of it (lbm.bench.report.AUTO_TOLERANCE). An engine that cannot run the setup is reported with its reason.
A line per configuration goes to stdout; ``--out`` writes every record as JSON.
Rehearsal on a CPU: ``JAX_PLATFORMS=cpu python3 scripts/auto_sweep.py --engines xla --rounds 1 "case=taylor_green"``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from typing import Any

import jax


def timed(stepper: Any, f: Any, chunk: int, rounds: int, min_time: float) -> tuple[float, list[float]]:
    """Compile seconds (the first chunk) and MLUPS per round of ``stepper`` advancing ``f`` by ``chunk`` steps a call."""
    cells = math.prod(stepper.setup.shape)
    t0 = time.perf_counter()
    f, _ = stepper.advance(f, chunk)
    jax.block_until_ready(f)
    compile_s = time.perf_counter() - t0
    out = []
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while True:
            f, _ = stepper.advance(f, chunk, first_step=chunk * (n + 1))
            n += 1
            jax.block_until_ready(f)
            t = time.perf_counter() - t0
            if t >= min_time:
                break
        out.append(cells * chunk * n / t / 1e6)
    return compile_s, out


def sweep_one(overrides: list[str], engines: list[str], chunk: int, rounds: int, min_time: float) -> dict[str, Any]:
    """One configuration: auto's pick and each engine's compile time and MLUPS, with auto's verdict."""
    from lbm.engines import EngineUnavailable, make_engine
    from lbm.simulation import prepare

    _, setup = prepare(overrides)
    rec: dict[str, Any] = {"overrides": overrides, "grid": list(setup.shape), "lattice": setup.lattice.name,
                           "engines": {}}
    auto = make_engine(setup, "fused", engine="auto")
    rec["auto"] = {"picked": auto.name, "note": auto.note}
    runs = {"auto": auto}
    for name in engines:
        if name == auto.name:
            continue
        try:
            runs[name] = make_engine(setup, "fused", engine=name)
        except EngineUnavailable as exc:
            rec["engines"][name] = {"unavailable": str(exc)}
    for name, stepper in runs.items():
        try:
            compile_s, mlups = timed(stepper, stepper.place(setup.initial_populations()), chunk, rounds, min_time)
        except Exception as exc:  # a compile that fails is a finding, not the end of the sweep
            rec["engines"][name] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            continue
        rec["engines"][name] = {"compile_s": compile_s, "mlups": mlups, "median": statistics.median(mlups)}
    medians = {n: r["median"] for n, r in rec["engines"].items() if "median" in r}
    if "auto" in medians:
        rec["verdict"] = verdict(medians, auto.name)
    return rec


def verdict(medians: dict[str, float], picked: str) -> dict[str, Any]:
    """Auto's median MLUPS (key ``auto``, engine ``picked``) against the others': the fastest engine, how much faster
    than auto it ran, and whether auto is within AUTO_TOLERANCE of it."""
    from lbm.bench.report import AUTO_TOLERANCE

    fastest = max(medians, key=medians.__getitem__)
    over = medians[fastest] / medians["auto"] - 1
    return {"fastest": picked if fastest == "auto" else fastest, "fastest_over_auto": max(0.0, over),
            "ok": over <= AUTO_TOLERANCE}


def line(rec: dict[str, Any]) -> str:
    """One printed line per configuration."""
    runs = ", ".join(f"{n} {r['median']:.0f} (compile {r['compile_s']:.1f} s)" if "median" in r
                     else f"{n}: {r.get('unavailable') or r.get('failed')}" for n, r in rec["engines"].items())
    v = rec.get("verdict")
    verdict = "no verdict" if not v else ("OK" if v["ok"] else "WRONG") + (
        f": {v['fastest']} fastest, {100 * v['fastest_over_auto']:.1f} % over auto")
    return f"{' '.join(rec['overrides'])} {'x'.join(map(str, rec['grid']))}: auto={rec['auto']['picked']}; {runs}; {verdict}"


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; exit 1 where auto's pick was more than the tolerance slower than another engine."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+", help="one run's overrides each, space-separated")
    p.add_argument("--engines", default="pallas,xla", help="engines to time beside auto's pick")
    p.add_argument("--chunk", type=int, default=100, help="steps per dispatch (the run's default chunk)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per round at least")
    p.add_argument("--out", default="", help="write the records as JSON here")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"backend {jax.default_backend()}, {jax.devices()[0].device_kind}, jax {jax.__version__}", flush=True)
    recs, wrong = [], 0
    for config in a.configs:
        try:
            rec = sweep_one(config.split(), a.engines.split(","), a.chunk, a.rounds, a.min_time)
        except Exception as exc:
            rec = {"overrides": config.split(), "error": f"{type(exc).__name__}: {exc}"}
            print(f"{config}: {rec['error']}", flush=True)
        else:
            print(line(rec), flush=True)
            wrong += not rec.get("verdict", {"ok": True})["ok"]
        recs.append(rec)
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(recs, fh, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
