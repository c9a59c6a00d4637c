"""Ensemble batching study: B independent Taylor-Green vortices run three ways.

``loop``: a Python loop over members inside one jit (the program grows with B);
``map``: ``jax.lax.map`` over members (one member's program, run B times; ``batch_size``
vectorises chunks of members); ``vmap``: ``jax.vmap`` over members (one program on a
batched array). Each member has its own viscosity, so members differ. For each B we
measure compile time, run time per member-step (MLUPS), compiled peak memory, jaxpr
equations and optimised-HLO fusions, and check every member against a single run.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.bench.study_args import STRATEGIES, batching_parser
from lbm.hlo import count_fusions
from lbm.kernels.collisions import bgk
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import D2Q9


def member_initial(n: int, u0: float = 0.04) -> np.ndarray:
    """Equilibrium populations (deviations f - w) of a Taylor-Green vortex on an n x n periodic grid (float32)."""
    k = 2 * math.pi / n
    x, y = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    u = np.stack([-u0 * np.cos(k * x) * np.sin(k * y), u0 * np.sin(k * x) * np.cos(k * y)])
    rho = 1.0 - u0**2 / 4 * (np.cos(2 * k * x) + np.cos(2 * k * y)) * 3.0
    return np.asarray(equilibrium(jnp.asarray(rho - 1.0, jnp.float32), jnp.asarray(u, jnp.float32), D2Q9))


def member_run(steps: int) -> Callable[[jnp.ndarray, jnp.ndarray], jnp.ndarray]:
    """``steps`` BGK steps of one member with its own relaxation rate ``omega`` (a traced scalar)."""

    def run(f: jnp.ndarray, omega: jnp.ndarray) -> jnp.ndarray:
        def body(_: int, f: jnp.ndarray) -> jnp.ndarray:
            drho, u = macroscopic(f, D2Q9)
            return stream(bgk(f, equilibrium(drho, u, D2Q9), omega), D2Q9)
        return jax.lax.fori_loop(0, steps, body, f)

    return run


def ensemble_fn(strategy: str, steps: int, members: int, map_batch: int | None = None) -> Callable[..., Any]:
    """The jitted ensemble step of one strategy: (f[B, Q, n, n], omega[B]) -> f after ``steps``."""
    one = member_run(steps)
    if strategy == "loop":
        def fn(f: jnp.ndarray, omega: jnp.ndarray) -> jnp.ndarray:
            return jnp.stack([one(f[b], omega[b]) for b in range(members)])
    elif strategy == "map":
        def fn(f: jnp.ndarray, omega: jnp.ndarray) -> jnp.ndarray:
            return jax.lax.map(lambda a: one(*a), (f, omega), batch_size=map_batch)
    elif strategy == "vmap":
        def fn(f: jnp.ndarray, omega: jnp.ndarray) -> jnp.ndarray:
            return jax.vmap(one)(f, omega)
    else:
        raise ValueError(strategy)
    return jax.jit(fn, donate_argnums=0)


def count_eqns(jaxpr: Any) -> int:
    """Equations in a jaxpr, sub-jaxprs (loop bodies, maps) included."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    total += count_eqns(inner)
                elif hasattr(sub, "eqns"):
                    total += count_eqns(sub)
    return total


def omegas(members: int) -> np.ndarray:
    """Relaxation rates of the members: tau spread over [0.55, 1.2]."""
    tau = np.linspace(0.55, 1.2, members) if members > 1 else np.array([0.8])
    return (1.0 / tau).astype(np.float32)


def measure(strategy: str, members: int, n: int, steps: int, repeats: int, map_batch: int | None,
            jaxpr_dir: Path | None = None) -> dict[str, Any]:
    """Compile and run one strategy for B members; returns the figures and the final populations."""
    f0 = np.broadcast_to(member_initial(n), (members, 9, n, n)).copy()
    om = jnp.asarray(omegas(members))
    fn = ensemble_fn(strategy, steps, members, map_batch)
    t0 = time.perf_counter()
    lowered = fn.lower(jnp.asarray(f0), om)
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t0
    jaxpr = jax.make_jaxpr(fn)(jnp.asarray(f0), om)
    hlo = compiled.as_text()
    if jaxpr_dir is not None:
        jaxpr_dir.mkdir(parents=True, exist_ok=True)
        (jaxpr_dir / f"jaxpr_{strategy}_B{members}.txt").write_text(str(jaxpr))
        (jaxpr_dir / f"hlo_{strategy}_B{members}.txt").write_text(hlo)
    mem = compiled.memory_analysis()
    times = []
    out = None
    for _ in range(repeats):
        f = jnp.asarray(f0)
        jax.block_until_ready(f)
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(f, om))
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {
        "strategy": strategy, "members": members, "grid": [n, n], "steps": steps, "map_batch_size": map_batch,
        "trace_lower_s": t_lower, "compile_s": t_compile,
        "run_s_median": median, "run_s_min": min(times), "run_s_max": max(times), "repeats": repeats,
        "member_step_us": median / (members * steps) * 1e6,
        "mlups": members * steps * n * n / median / 1e6,
        "peak_memory_bytes": int(getattr(mem, "peak_memory_in_bytes", 0) or
                                 mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes),
        "jaxpr_eqns": count_eqns(jaxpr.jaxpr), "hlo_fusions": count_fusions(hlo), "hlo_chars": len(hlo),
        "_final": np.asarray(out),
    }


def run_study(members: list[int], n: int, steps: int, repeats: int, out_dir: Path, map_batch: int | None = None,
              strategies: tuple[str, ...] = STRATEGIES, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every strategy at every ensemble size; write batching.json, batching.csv and plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    single = {b: None for b in members}
    ref_run = jax.jit(member_run(steps))
    f_single = member_initial(n)
    records = []
    for b in members:
        reference = np.stack([np.asarray(ref_run(jnp.asarray(f_single), jnp.float32(w))) for w in omegas(b)])
        single[b] = reference
        for strategy in strategies:
            progress(f"batching: {strategy:>4} B={b:<3} grid {n}x{n}, {steps} steps ...")
            rec = measure(strategy, b, n, steps, repeats, map_batch, out_dir / "jaxpr" if b == members[-1] else None)
            final = rec.pop("_final")
            rec["max_abs_diff_vs_single"] = float(np.abs(final - reference).max())
            rec["bitwise_equal_single"] = bool(np.array_equal(final, reference))
            records.append(rec)
    result = {
        "study": "batching", "jax": jax.__version__, "device": str(jax.devices()[0]),
        "device_kind": getattr(jax.devices()[0], "device_kind", ""), "members": members, "grid": [n, n],
        "steps": steps, "records": records,
        "notes": "compile_s = lower().compile() seconds; run times = host wall clock around a blocking call; "
                 "peak memory = XLA's compiled memory analysis",
    }
    (out_dir / "batching.json").write_text(json.dumps(result, indent=2) + "\n")
    cols = ["strategy", "members", "compile_s", "run_s_median", "member_step_us", "mlups", "peak_memory_bytes",
            "jaxpr_eqns", "hlo_fusions", "max_abs_diff_vs_single"]
    lines = [",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in records]
    (out_dir / "batching.csv").write_text("\n".join(lines) + "\n")
    result["plots"] = plot_study(records, out_dir)
    return result


def plot_study(records: list[dict[str, Any]], out_dir: Path) -> list[str]:
    """compile time, throughput and peak memory against B, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    written = []
    for key, label, name in (("compile_s", "compile time (s)", "compile_time_vs_B.png"),
                             ("mlups", "throughput (MLUPS, all members)", "throughput_vs_B.png"),
                             ("peak_memory_bytes", "compiled peak memory (MiB)", "memory_vs_B.png"),
                             ("jaxpr_eqns", "jaxpr equations", "jaxpr_size_vs_B.png")):
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for strategy in STRATEGIES:
            rows = sorted((r for r in records if r["strategy"] == strategy), key=lambda r: r["members"])
            if rows:
                ys = [r[key] / 2**20 if key == "peak_memory_bytes" else r[key] for r in rows]
                ax.plot([r["members"] for r in rows], ys, "o-", label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ensemble members B")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title(label + " vs B")
        fig.savefig(out_dir / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        written.append(name)
    return written


def table(records: list[dict[str, Any]]) -> str:
    """A markdown table of the study."""
    head = ("| strategy | B | compile s | run ms | us/member-step | MLUPS | peak MiB | jaxpr eqns | fusions "
            "| max diff vs single |\n|---|---|---|---|---|---|---|---|---|---|\n")
    rows = "".join(
        f"| {r['strategy']} | {r['members']} | {r['compile_s']:.2f} | {r['run_s_median'] * 1e3:.1f} | "
        f"{r['member_step_us']:.1f} | {r['mlups']:.1f} | {r['peak_memory_bytes'] / 2**20:.3f} | {r['jaxpr_eqns']} | "
        f"{r['hlo_fusions']} | {r['max_abs_diff_vs_single']:.1e} |\n" for r in records)
    return head + rows



def mebibytes(n: int) -> str:
    """``n`` bytes in MiB, with the digits a small value needs (never a bare 0.0)."""
    mib = n / 2**20
    return f"{mib:.1f} MiB" if mib >= 0.1 else f"{mib:.3g} MiB"


def findings(records: list[dict[str, Any]]) -> list[str]:
    """Plain-language comparisons computed from the measurements (smallest vs largest B)."""
    out = []
    sizes = sorted({r["members"] for r in records})
    lo, hi = sizes[0], sizes[-1]
    by = {(r["strategy"], r["members"]): r for r in records}
    for s in STRATEGIES:
        a, b = by.get((s, lo)), by.get((s, hi))
        if a and b:
            out.append(f"{s}: from B={lo} to B={hi} compile time x{b['compile_s'] / a['compile_s']:.2f}, "
                       f"run time x{b['run_s_median'] / a['run_s_median']:.2f}, "
                       f"jaxpr equations x{b['jaxpr_eqns'] / a['jaxpr_eqns']:.2f}, "
                       f"peak memory x{b['peak_memory_bytes'] / max(1, a['peak_memory_bytes']):.2f}")
    at_hi = [by[(s, hi)] for s in STRATEGIES if (s, hi) in by]
    if at_hi:
        fastest = max(at_hi, key=lambda r: r["mlups"])
        biggest = max(at_hi, key=lambda r: r["peak_memory_bytes"])
        memory = (f"most memory {biggest['strategy']} ({mebibytes(biggest['peak_memory_bytes'])})"
                  if biggest["peak_memory_bytes"] > 0 else "compiled peak memory not reported by XLA here")
        out.append(f"at B={hi}: fastest {fastest['strategy']} ({fastest['mlups']:.1f} MLUPS), {memory}")
    worst = max(records, key=lambda r: r["max_abs_diff_vs_single"])
    out.append(f"largest difference of a member from its single run: {worst['max_abs_diff_vs_single']:.2e} "
               f"({worst['strategy']}, B={worst['members']}); bitwise equal in "
               f"{sum(r['bitwise_equal_single'] for r in records)}/{len(records)} measurements")
    return out


def main(args: list[str]) -> int:
    """``python -m lbm study batching [--members 1,2,4] [--grid N] [--steps N] [--repeats N] [--out DIR]``."""
    import datetime

    from lbm.errors import LbmError

    parser = batching_parser()
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        if exc.code == 0:
            return 0
        raise LbmError("bad arguments for 'study batching' (see python -m lbm study batching --help)") from None
    try:
        members = sorted({int(v) for v in ns.members.split(",") if v.strip()})
    except ValueError:
        raise LbmError(f"--members={ns.members!r}: expected comma-separated positive integers") from None
    strategies = tuple(s.strip() for s in ns.strategies.split(",") if s.strip())
    if not members or min(members) < 1:
        raise LbmError(f"--members={ns.members!r}: expected comma-separated positive integers")
    if bad := [s for s in strategies if s not in STRATEGIES] or not strategies:
        raise LbmError(f"--strategies: unknown {bad}; choose from {', '.join(STRATEGIES)}")
    for name, value, low in (("--grid", ns.grid, 4), ("--steps", ns.steps, 1), ("--repeats", ns.repeats, 1)):
        if value < low:
            raise LbmError(f"{name}={value}: expected an integer >= {low}")
    if ns.map_batch is not None and ns.map_batch < 1:
        raise LbmError(f"--map-batch={ns.map_batch}: expected an integer >= 1")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    out = Path(ns.out) if ns.out else Path("outputs") / "studies" / "batching" / stamp
    if (out / "batching.json").exists():
        raise LbmError(f"{out} already holds a study (batching.json); choose another --out")
    result = run_study(members, ns.grid, ns.steps, ns.repeats, out, ns.map_batch, strategies)
    text = table(result["records"])
    notes = findings(result["records"])
    (out / "batching.md").write_text(
        f"# Batching study ({result['device']}, jax {result['jax']})\n\n"
        f"{len(members)} ensemble sizes, {ns.grid}x{ns.grid} Taylor-Green members, {ns.steps} steps per call, "
        f"median of {ns.repeats} repeats (host wall clock around a blocking call).\n\n{text}\n"
        + "".join(f"- {n}\n" for n in notes))
    print(text)
    for n in notes:
        print("-", n)
    print(f"wrote {out}/batching.json, batching.csv, batching.md, {', '.join(result['plots'])}, jaxpr/")
    return 0
