"""Shape optimisation: the axes of an ellipse in a channel, at fixed area, for the least mean drag (or a target drag).

    python scripts/ellipse_drag.py [--start 4 4] [--grid 100 40] [--steps 1500] [--window 500] [--tau 0.8]
                                   [--u 0.05] [--target CD] [--optimizer lbfgs|adam] [--iterations 50]
                                   [--tol 1e-3] [--s-tol 5e-3] [--precision float64] [--out DIR]

The ellipse (case=cylinder case.shape=ellipse, interpolated walls) starts with the semi-axes --start
(a along the flow, b across it) and keeps their product, its area / pi = R^2: a = R e^s, b = R e^-s, and
the log aspect s is what the optimiser moves. The objective is the drag coefficient on the equal-area
diameter, cd_R = 2 Fx / (u^2 2R) (the mean drag force over the last --window steps, scaled), which at
fixed area is the drag force itself; with --target it is (cd_R / target - 1)^2. Its derivative in s comes
from ``lbm.value_and_grad`` by the ellipse's axes (case.axes.a, case.axes.b): d/ds = a d/da - b d/db.
flow.tau is fixed, so the viscosity does not change with the shape. Each iteration runs the simulation
of the current shape (its own solid mask), and an optax optimiser (L-BFGS without line search, its step
clipped to --max-step and its memory restarted where the last step met no positive curvature, or Adam)
updates s. The drag is smooth in s between changes of the solid mask and jumps where a node changes
side, so its derivative may change sign at a jump without passing through zero: a step out of the
interval where the objective is known to fall at its low end and rise at its high end bisects it instead.
Converged: |d cd_R / ds| < --tol cd_R (least drag), or |cd_R / target - 1| < --tol (target), or that
interval narrower than --s-tol (the minimum at a jump of the mask: the record's shape is the best one
seen, ``at_mask_jump`` true). Writes ellipse_drag.json (the history), ellipse_drag.png (the
objective and its gradient against the iteration) and ellipse_shapes.png (the shapes) into --out.
optax is an optional dependency: pip install "lbm[optim]".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np


def run_overrides(args: argparse.Namespace, a: float, b: float) -> list[str]:
    """The channel with the ellipse of semi-axes (a, b)."""
    nx, ny = args.grid
    return ["case=cylinder", f"grid.nx={nx}", f"grid.ny={ny}", f"steps={args.steps}", f"flow.tau={args.tau!r}",
            f"flow.u_lattice={args.u!r}", "case.shape=ellipse", f"case.axes=[{a!r},{b!r}]",
            f"case.center=[{float(nx // 4)!r},{ny / 2!r}]", "case.bounce_back=interpolated", "engine=xla",
            f"precision={args.precision}", "output.plots=false"]


def drag(args: argparse.Namespace, radius: float, s: float) -> tuple[float, float, float, float]:
    """cd_R and d cd_R / ds at log aspect ``s``, and the semi-axes (a, b)."""
    import lbm

    a, b = radius * math.exp(s), radius * math.exp(-s)
    cd, grads = lbm.value_and_grad(run_overrides(args, a, b), ["case.axes.a", "case.axes.b"], "drag",
                                   window=args.window)
    scale = b / radius  # cd is normalised by the frontal height 2b, cd_R by 2R
    d_cd = a * grads["case.axes.a"] - b * grads["case.axes.b"]  # da/ds = a, db/ds = -b
    return cd * scale, scale * d_cd - cd * scale, a, b


def bounds(args: argparse.Namespace, radius: float) -> tuple[float, float]:
    """The log aspects whose ellipse keeps both semi-axes >= 1 cell and fits the channel with a cell to spare."""
    nx, ny = args.grid
    a_max, b_max = nx // 4 - 2.0, ny / 2 - 3.0  # the case's room about the centre (nx // 4, ny / 2), less a cell
    return max(-math.log(b_max / radius), -math.log(radius)), min(math.log(a_max / radius), math.log(radius))


def optimiser(name: str, rate: float, max_step: float) -> Any:
    """The optax transformation: L-BFGS without line search (clipped steps) or Adam."""
    import optax

    if name == "adam":
        return optax.adam(rate, b1=0.5)
    return optax.chain(optax.lbfgs(rate, linesearch=None, scale_init_precond=False), optax.clip(max_step))


def optimise(args: argparse.Namespace) -> dict[str, Any]:
    """Iterate until converged or --iterations; the history of shapes, objectives and gradients."""
    import jax.numpy as jnp
    import optax

    a0, b0 = args.start
    radius = math.sqrt(a0 * b0)
    lo, hi = bounds(args, radius)
    s = jnp.asarray(min(max(0.5 * math.log(a0 / b0), lo), hi), jnp.float64 if args.precision == "float64" else None)
    opt = optimiser(args.optimizer, args.learning_rate, args.max_step)
    state = opt.init(s)
    history: list[dict[str, Any]] = []
    converged = False
    for it in range(args.iterations):
        cd, d_cd, a, b = drag(args, radius, float(s))
        if args.target is None:
            value, grad, done = cd, d_cd, abs(d_cd) < args.tol * cd
        else:
            miss = cd / args.target - 1.0
            value, grad, done = miss**2, 2 * miss * d_cd / args.target, abs(miss) < args.tol
        history.append({"iteration": it, "s": float(s), "a": a, "b": b, "aspect": a / b, "cd_R": cd,
                        "d_cd_R_ds": d_cd, "objective": value, "gradient": grad})
        print(f"iteration {it}: a {a:.4f} b {b:.4f} (a/b {a / b:.3f}) cd_R {cd:.6f} d cd_R/ds {d_cd:+.3e}", flush=True)
        low, high = bracket(history)
        if done or high - low < args.s_tol:  # a minimum where the gradient is zero, or at a jump of the solid mask
            converged = True
            break
        if args.optimizer == "lbfgs" and len(history) > 1 and (
                (grad - history[-2]["gradient"]) * (float(s) - history[-2]["s"]) <= 0):
            state = opt.init(s)  # no positive curvature (a concave stretch): restart from a (clipped) gradient step
            history[-1]["restart"] = True
        updates, state = opt.update(jnp.asarray(grad, s.dtype), state, s)
        s = jnp.clip(optax.apply_updates(s, updates), lo, hi)
        if not low < float(s) < high:  # out of the bracket of the minimum: bisect it, the optimiser restarted there
            s = jnp.asarray(0.5 * (low + high), s.dtype)
            state = opt.init(s)
            history[-1]["bisect"] = True
    best = min(history, key=lambda h: h["objective"]) if converged and not done else history[-1]
    return {"start": [a0, b0], "equal_area_radius": radius, "grid": list(args.grid), "steps": args.steps,
            "window": args.window, "tau": args.tau, "u_lattice": args.u, "precision": args.precision,
            "optimizer": args.optimizer, "target": args.target, "tol": args.tol, "s_tol": args.s_tol,
            "converged": converged, "at_mask_jump": converged and not done, "iterations": len(history),
            "best_iteration": best["iteration"], "axes": [best["a"], best["b"]], "cd_R": best["cd_R"],
            "history": history}


def bracket(history: list[dict[str, Any]]) -> tuple[float, float]:
    """(low, high): the largest s whose objective falls with s and the smallest above it whose objective rises, the
    interval a minimum is in; (-inf, inf) until both are seen."""
    falling = [h["s"] for h in history if h["gradient"] < 0]
    low = max(falling, default=-math.inf)
    high = min((h["s"] for h in history if h["gradient"] > 0 and h["s"] > low), default=math.inf)
    return low, high


def plot(record: dict[str, Any], out: Path) -> list[Path]:
    """ellipse_drag.png (objective and |gradient| per iteration) and ellipse_shapes.png (the shapes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = record["history"]
    its = [h["iteration"] for h in hist]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(its, [h["cd_R"] for h in hist], "o-")
    if record["target"] is not None:
        ax1.axhline(record["target"], color="k", ls="--", label="target")
        ax1.legend()
    ax1.set(xlabel="iteration", ylabel="cd on the equal-area diameter", title="drag")
    ax2.semilogy(its, [abs(h["d_cd_R_ds"]) for h in hist], "o-")
    ax2.set(xlabel="iteration", ylabel="|d cd / ds|, s = ln(a/b) / 2", title="gradient")
    fig.tight_layout()
    paths = [out / "ellipse_drag.png", out / "ellipse_shapes.png"]
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    t = np.linspace(0, 2 * np.pi, 200)
    colors = plt.cm.viridis(np.linspace(0, 1, len(hist)))
    for k, (h, c) in enumerate(zip(hist, colors, strict=True)):
        ends = k in (0, len(hist) - 1)
        ax.plot(h["a"] * np.cos(t), h["b"] * np.sin(t), color=c, lw=2 if ends else 0.8,
                label=f"iteration {h['iteration']}: a/b {h['aspect']:.2f}, cd {h['cd_R']:.4f}" if ends else None)
    ax.set(aspect="equal", xlabel="x (cells, flow ->)", ylabel="y (cells)",
           title=f"ellipses of equal area pi R^2, R = {record['equal_area_radius']:.2f} cells")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return paths


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--start", type=float, nargs=2, default=[4.0, 4.0], metavar=("A", "B"),
                   help="starting semi-axes along and across the flow (cells); their product is kept")
    p.add_argument("--grid", type=int, nargs=2, default=[100, 40], metavar=("NX", "NY"))
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--window", type=int, default=500, help="last steps the drag is averaged over")
    p.add_argument("--tau", type=float, default=0.8)
    p.add_argument("--u", type=float, default=0.05, help="inflow speed (lattice units)")
    p.add_argument("--target", type=float, default=None, help="reach this cd_R instead of the least drag")
    p.add_argument("--optimizer", choices=("lbfgs", "adam"), default="lbfgs")
    p.add_argument("--learning-rate", type=float, default=None, help="default: 1 (lbfgs), 0.1 (adam)")
    p.add_argument("--max-step", type=float, default=0.2, help="largest change of s per iteration (lbfgs)")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--s-tol", type=float, default=5e-3,
                   help="stop where the objective falls at s and rises at s + S_TOL (a jump of the solid mask)")
    p.add_argument("--precision", choices=("float32", "float64"), default="float64")
    p.add_argument("--out", type=Path, default=Path("outputs/studies/ellipse_drag"))
    args = p.parse_args(argv)
    if args.learning_rate is None:
        args.learning_rate = 1.0 if args.optimizer == "lbfgs" else 0.1
    if min(args.start) < 1 or args.window > args.steps or args.iterations < 1:
        p.error("--start: semi-axes >= 1 cell; --window <= --steps; --iterations >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Optimise, write the record and the plots."""
    args = parse(argv)
    try:
        import optax  # noqa: F401
    except ImportError:
        print("ellipse_drag.py needs optax: pip install \"lbm[optim]\"", file=sys.stderr)
        return 2

    from lbm.environment import use_precision

    use_precision(args.precision)
    args.out.mkdir(parents=True, exist_ok=True)
    record = optimise(args)
    (args.out / "ellipse_drag.json").write_text(json.dumps(record, indent=1))
    paths = plot(record, args.out)
    state = "converged" if record["converged"] else "not converged"
    if record["at_mask_jump"]:
        state += " at a jump of the solid mask (the best shape seen)"
    print(f"{state} in {record['iterations']} iterations: a {record['axes'][0]:.4f} b {record['axes'][1]:.4f} "
          f"cd_R {record['cd_R']:.6f}; wrote {args.out / 'ellipse_drag.json'}, {paths[0]}, {paths[1]}")
    return 0 if record["converged"] else 1


if __name__ == "__main__":
    sys.exit(main())
