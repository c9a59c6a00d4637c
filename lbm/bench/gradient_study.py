"""Gradient study: ``python -m lbm study gradient [key=value ...] [--out DIR]``; writes gradient.json and gradient.png.

Three measurements of lbm.value_and_grad (lbm.diff), in one process:
- ``records``: the gradient against central finite differences of ``lbm.run`` in float64 for each kind
  of parameter (cavity: viscosity through flow.reynolds, lid speed; taylor_green: the initial amplitude;
  poiseuille: the body force through flow.u_lattice; cylinder with interpolated walls: radius and centre,
  objective the mean drag), with the float32 gradient's error against the float64 one;
- ``timing``: value-and-gradient against the forward run of the xla engine, cavity D2Q9 ``timing_grid``²,
  ``timing_steps`` steps, float32, checkpoint ``timing_policy``, the two compiled programs called in turn
  ``repeats`` times (wall clock and the process's CPU time, medians; the load average before and after);
  ``forward_auto_s`` is the forward run of the engine ``engine=auto`` picks (native on a CPU with a compiler);
  ``passes`` (policies every and sqrt): the wall per step of each pass of the gradient compiled alone, the forward
  pass, one segment's recomputation and one segment's adjoint steps, and each over the xla engine's forward step;
- ``memory``: the peak memory XLA plans for the compiled forward chunk and gradient program
  (memory_analysis: arguments + outputs - aliased + temporaries) per checkpointing policy at each of
  ``memory_steps``, cavity ``memory_grid``², float32 (``every``: k = steps / 10; ``binomial``: once per count in
  ``snapshots``; a binomial timing uses the first).

Options (defaults): timing_grid=256 timing_steps=1000 timing_policy=sqrt memory_grid=32
memory_steps=[1000,10000] policies=[none,every,sqrt,binomial] snapshots=[8] repeats=3 records=true;
``--out DIR`` (default outputs/studies/gradient/<date>/<time>).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from lbm.config.run import GRADIENT_CHECKPOINTS
from lbm.errors import LbmError

CYLINDER = ["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=100", "flow.reynolds=5", "case.radius=3.3",
            "case.center=[10.0,10.0]", "case.bounce_back=interpolated"]
RECORDS: list[tuple[str, list[str], str, str, dict[str, Any]]] = [
    ("cavity", ["case=cavity", "grid.nx=12", "grid.ny=12", "steps=100", "flow.reynolds=20"], "flow.reynolds",
     "kinetic_energy", {}),
    ("cavity", ["case=cavity", "grid.nx=12", "grid.ny=12", "steps=100", "flow.reynolds=20"], "flow.u_lattice",
     "kinetic_energy", {}),
    ("taylor_green", ["case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=100", "flow.reynolds=10"],
     "flow.u_lattice", "kinetic_energy", {}),
    ("poiseuille", ["case=poiseuille", "grid.nx=4", "grid.ny=10", "steps=100", "flow.reynolds=5"], "flow.u_lattice",
     "kinetic_energy", {}),
    ("cylinder", CYLINDER, "case.radius", "drag", {"window": 50, "points": 4, "step": 3e-3}),
    ("cylinder", CYLINDER, "case.center.x", "drag", {"window": 50, "points": 4, "step": 3e-3}),
]
"""(case, overrides, key, objective, finite-difference options) of the agreement records."""
POLICIES = GRADIENT_CHECKPOINTS
DEFAULTS = {"timing_grid": 256, "timing_steps": 1000, "timing_policy": "sqrt", "memory_grid": 32,
            "memory_steps": [1000, 10000], "policies": list(POLICIES), "snapshots": [8], "repeats": 3, "records": True}

LEAST = {"timing_grid": 4, "timing_steps": 1, "memory_grid": 4, "repeats": 1}
"""The least value of each integer option (a cavity needs 4 cells a side: a wall on each side and two fluid cells)."""


def parse(args: list[str]) -> tuple[dict[str, Any], str | None]:
    """(options, --out) from ``key=value`` arguments; LbmError for an unknown key or a bad value."""
    from lbm.config.command_line import take_option

    out, args = take_option(args, "--out")
    opts = dict(DEFAULTS)
    for a in args:
        key, sep, text = a.partition("=")
        if not sep or key not in DEFAULTS:
            raise LbmError(f"{a}: study gradient takes {', '.join(f'{k}=' for k in DEFAULTS)} and --out DIR")
        try:
            if key in ("memory_steps", "snapshots"):
                value: Any = [int(v) for v in text.strip("[]() ").split(",") if v.strip()]
                if not value or min(value) < 1:
                    raise ValueError
            elif key == "policies":
                value = [v.strip() for v in text.strip("[]() ").split(",") if v.strip()]
                if not value or set(value) - set(POLICIES):
                    raise ValueError
            elif key == "records":
                value = {"true": True, "false": False}[text.lower()]
            elif key == "timing_policy":
                value = text
            else:
                value = int(text)
                if value < LEAST[key]:
                    raise ValueError
        except (ValueError, KeyError):
            hint = f"an integer >= {LEAST[key]}" if key in LEAST else f"a {key}={DEFAULTS[key]!r}-like value"
            raise LbmError(f"{a}: expected {hint}") from None
        opts[key] = value
    if opts["timing_policy"] not in POLICIES:
        raise LbmError(f"timing_policy={opts['timing_policy']}: one of {', '.join(POLICIES)}")
    return opts, out


def agreement(case: str, overrides: list[str], key: str, objective: str, fd: dict[str, Any]) -> dict[str, Any]:
    """One record: the float64 gradient, the finite difference of lbm.run, and the float32 gradient's error."""
    from lbm.diff import finite_difference, value_and_grad

    opts = {"window": fd["window"]} if "window" in fd else {}
    _, g64 = value_and_grad([*overrides, "precision=float64"], [key], objective, **opts)
    diff = finite_difference([*overrides, "precision=float64"], key, objective, **fd)
    _, g32 = value_and_grad([*overrides, "precision=float32"], [key], objective, **opts)
    return {"case": case, "parameter": key, "objective": objective, "overrides": overrides,
            "gradient": g64[key], "finite_difference": diff, "rel_error": abs(g64[key] - diff) / abs(diff),
            "finite_difference_points": fd.get("points", 2), "gradient_float32": g32[key],
            "float32_rel_error": abs(g32[key] - g64[key]) / abs(g64[key])}


def planned_bytes(compiled: Any) -> int:
    """Peak memory XLA plans for a compiled program: arguments + outputs - aliased + temporaries."""
    mem = compiled.memory_analysis()
    return int(mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
               + mem.temp_size_in_bytes)


def cavity(grid: int, steps: int, precision: str = "float32") -> list[str]:
    """Overrides of the cavity the timing and memory use."""
    return ["case=cavity", f"grid.nx={grid}", f"grid.ny={grid}", f"steps={steps}", "flow.reynolds=100",
            f"precision={precision}", "engine=xla"]


def forward_chunk(param: Any, steps: int) -> tuple[Any, Any]:
    """(the xla engine's chunk of ``steps`` steps of the run, compiled; its input (f0, engine, t0))."""
    from lbm.engines.timestep import step_index
    from lbm.engines.xla import XlaEngine

    engine = XlaEngine(param.setup)
    f0 = param.setup.initial_populations()
    return engine.chunk_function(steps).lower(f0, engine.params, step_index(0)).compile(), (f0, engine, step_index(0))


def compiled_gradient(param: Any, steps: int, policy: str, snapshots: int = 8) -> tuple[Any, Any]:
    """(the compiled value-and-grad of the cavity's kinetic energy by its lid speed under ``policy``; its input)."""
    import jax.numpy as jnp

    from lbm.diff.api import gradient_function

    every = max(1, steps // 10) if policy == "every" else None
    fn = gradient_function(param, ["flow.u_lattice"], "kinetic_energy", policy, every, snapshots=snapshots)
    values = {"flow.u_lattice": jnp.asarray(param.base["flow.u_lattice"], jnp.float32)}
    return fn.lower(values).compile(), values


def programs(grid: int, steps: int, policy: str, snapshots: int = 8) -> tuple[Any, Any, Any, Any, Any]:
    """(compiled forward chunk, its input, compiled value-and-grad, its input, the parameterisation)."""
    from lbm.diff.api import prepare_gradient

    param = prepare_gradient(cavity(grid, steps), ["flow.u_lattice"])
    return (*forward_chunk(param, steps), *compiled_gradient(param, steps, policy, snapshots), param)


def clocks(call: Any) -> tuple[float, float]:
    """Wall and process CPU seconds of ``call()`` (which blocks until its result is ready)."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(calls: dict[str, Any], repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall s, CPU s) of each call, the calls made in turn ``repeats`` times (a load change hits them all)."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(clocks(call))
    return {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for name, ts in times.items()}


def pass_programs(param: Any, values: dict[str, Any], steps: int, policy: str) -> dict[str, tuple[int, Any]]:
    """(steps it runs, call) of each pass of the gradient alone: the forward pass, one segment's recomputation and
    one segment's adjoint steps (lbm.diff.checkpointing; policies every and sqrt); empty for the other policies."""
    import jax
    import jax.numpy as jnp

    from lbm.diff.checkpointing import advance_kept, into_reverse, pull_back, recompute, segment_length, zero_cotangents
    from lbm.diff.run import step_function

    length = min(segment_length(policy, steps, max(1, steps // 10)), steps) if policy in ("every", "sqrt") else 0
    if length < 2:
        return {}

    def parts(v: dict[str, Any]) -> tuple[Any, Any, Any]:
        return step_function(param.build(v), 0)

    def states_like(carry: Any) -> Any:
        return jax.tree_util.tree_map(lambda x: jnp.zeros((length, *jnp.shape(x)), jnp.result_type(x)), carry)

    forward = jax.jit(lambda v: advance_kept(*parts(v), steps))
    fill = jax.jit(lambda v, states: recompute(*parts(v), states, length), donate_argnums=1)

    @jax.jit
    def adjoint(v: dict[str, Any], states: Any) -> Any:
        step, carry, params = parts(v)
        lam = zero_cotangents(carry)
        lam = (jnp.ones_like(lam[0]), *lam[1:])
        return pull_back(step, states, length, params, into_reverse(step, carry, params, lam, zero_cotangents(params)),
                         False)

    states = [fill(values, jax.jit(lambda v: states_like(parts(v)[1]))(values))]

    def refill() -> None:
        states[0] = jax.block_until_ready(fill(values, states[0]))

    return {"forward_pass": (steps, lambda: jax.block_until_ready(forward(values))),
            "recompute": (length - 1, refill),
            "adjoint": (length, lambda: jax.block_until_ready(adjoint(values, states[0])))}


def timing(grid: int, steps: int, policy: str, repeats: int, snapshots: int = 8) -> dict[str, Any]:
    """Forward (xla engine, and the auto engine) and value-and-grad wall times, measured in turn in this process."""
    import jax
    import jax.numpy as jnp

    from lbm.engines import make_engine

    forward, (f0, engine, t0), grad, values, param = programs(grid, steps, policy, snapshots)
    auto = make_engine(param.setup, engine="auto")
    auto.compile(f0, steps)
    passes = pass_programs(param, values, steps, policy)
    for _, call in passes.values():
        call()
    load = list(os.getloadavg())
    median = interleaved({
        "forward": lambda: jax.block_until_ready(forward(jnp.array(f0), engine.params, t0)),
        "value_and_grad": lambda: jax.block_until_ready(grad(values)),
        "auto": lambda: jax.block_until_ready(auto.advance(jnp.array(f0), steps)[0]),
        **{name: call for name, (_, call) in passes.items()}}, repeats)
    step_ms = median["forward"][0] / steps * 1e3
    per_pass = {name: {"ms_per_step": median[name][0] / n * 1e3, "over_forward_step": median[name][0] / n * 1e3 / step_ms}
                for name, (n, _) in passes.items()}
    (forward_s, forward_cpu), (vg_s, vg_cpu), (auto_s, _) = median["forward"], median["value_and_grad"], median["auto"]
    return {"case": "cavity", "lattice": "d2q9", "grid": [grid, grid], "steps": steps, "precision": "float32",
            "policy": policy, "parameter": "flow.u_lattice", "objective": "kinetic_energy",
            "forward_s": forward_s, "value_and_grad_s": vg_s, "ratio": vg_s / forward_s,
            "forward_cpu_s": forward_cpu, "value_and_grad_cpu_s": vg_cpu, "cpu_ratio": vg_cpu / forward_cpu,
            "forward_auto_engine": auto.name, "forward_auto_s": auto_s, "ratio_to_auto": vg_s / auto_s,
            "repeats": repeats, "load_average_before": load, "load_average_after": list(os.getloadavg()),
            "clock": "host wall clock and process CPU time, medians of repeats made in turn, compiled programs",
            "mlups_forward": grid * grid * steps / forward_s / 1e6,
            "passes": per_pass, "forward_ms_per_step": step_ms}


def memory(grid: int, steps_list: list[int], policies: list[str], snapshots: list[int]) -> list[dict[str, Any]]:
    """Planned peak bytes of the forward chunk and of the gradient program per policy (and snapshot count) and step
    count."""
    from lbm.diff.api import prepare_gradient

    rows = []
    runs = [(p, s) for p in policies for s in (snapshots if p == "binomial" else [snapshots[0]])]
    for steps in steps_list:
        param = prepare_gradient(cavity(grid, steps), ["flow.u_lattice"])
        forward = planned_bytes(forward_chunk(param, steps)[0])  # one forward chunk for every policy
        for policy, count in runs:
            rows.append({"policy": policy, "steps": steps, "grid": [grid, grid], "precision": "float32",
                         "snapshots": count if policy == "binomial" else None, "forward_bytes": forward,
                         "gradient_bytes": planned_bytes(compiled_gradient(param, steps, policy, count)[0]),
                         "population_bytes": int(param.setup.initial_populations().nbytes)})
            rows[-1]["ratio"] = rows[-1]["gradient_bytes"] / rows[-1]["forward_bytes"]
    return rows


def plot(record: dict[str, Any], path: Path) -> None:
    """gradient.png: planned peak memory against steps per policy; finite-difference agreement per record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
    rows = record["memory"]
    for policy, count in sorted({(r["policy"], r.get("snapshots")) for r in rows}, key=lambda pc: (pc[0], pc[1] or 0)):
        pts = sorted((r["steps"], r["gradient_bytes"]) for r in rows if (r["policy"], r.get("snapshots")) == (policy, count))
        ax0.loglog(*zip(*pts, strict=True), "o-", label=f"gradient, {policy}" + (f" s={count}" if count else ""))
    fwd = sorted({(r["steps"], r["forward_bytes"]) for r in rows})
    if fwd:
        ax0.loglog(*zip(*fwd, strict=True), "k--", label="forward")
    ax0.set(xlabel="steps", ylabel="planned peak memory (bytes)", title="memory (XLA memory_analysis)")
    ax0.legend(fontsize=8)
    recs = record["records"]
    if recs:
        ax1.bar(range(len(recs)), [max(r["rel_error"], 1e-16) for r in recs], color="tab:blue", label="float64 vs FD")
        ax1.set_yscale("log")
        ax1.set_xticks(range(len(recs)), [f"{r['case']}\n{r['parameter']}" for r in recs], fontsize=7)
        ax1.axhline(1e-6, color="k", ls="--", lw=1, label="1e-6")
        ax1.legend(fontsize=8)
    ax1.set(ylabel="relative error", title="gradient against finite differences of lbm.run")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: list[str]) -> int:
    """Entry point of ``python -m lbm study gradient``."""
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    opts, out_arg = parse(args)
    out = Path(out_arg) if out_arg else Path("outputs/studies/gradient") / datetime.datetime.now().strftime(
        "%Y-%m-%d/%H-%M-%S")
    if (out / "gradient.json").exists():
        raise LbmError(f"{out} already holds a study (gradient.json); choose another --out")
    from lbm.environment import environment

    records = [agreement(*r) for r in RECORDS] if opts["records"] else []
    record = {"environment": environment(), "load_average": list(os.getloadavg()), "options": opts,
              "records": records,
              "timing": timing(opts["timing_grid"], opts["timing_steps"], opts["timing_policy"], opts["repeats"],
                               opts["snapshots"][0]),
              "memory": memory(opts["memory_grid"], opts["memory_steps"], opts["policies"], opts["snapshots"]),
              "memory_source": "XLA memory_analysis of the compiled programs: arguments + outputs - aliased + "
                               "temporaries (planned, before running)"}
    record["load_average_after"] = list(os.getloadavg())
    out.mkdir(parents=True, exist_ok=True)
    (out / "gradient.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    plot(record, out / "gradient.png")
    t = record["timing"]
    passes = ", ".join(f"{k} {v['over_forward_step']:.2f}" for k, v in t["passes"].items()) or "-"
    print(f"value_and_grad {t['value_and_grad_s']:.3f} s over forward (xla engine) {t['forward_s']:.3f} s: ratio "
          f"{t['ratio']:.2f} (CPU time {t['cpu_ratio']:.2f}; {t['grid'][0]}^2, {t['steps']} steps, {t['policy']}; "
          f"load average {t['load_average_before'][0]:.1f} -> {t['load_average_after'][0]:.1f}); per step over the "
          f"forward step: {passes}; "
          f"wrote {out / 'gradient.json'} and gradient.png")
    return 0
