"""Run one configuration on every engine that takes it and print how far apart their populations are.

  python scripts/engines_agree.py case=cavity collision=trt grid.nx=12 grid.ny=12 [--steps 3,4] [--rows]

The engines: xla (the reference), native (where it builds), pallas (its flat kernel, in interpret mode on a
CPU; ``--rows`` adds the TPU formulation, interpreted), and the instrumented mode. Each row is the largest
|difference| of the populations (and of the per-step outputs, e.g. forces) from the xla engine after each step
count; an engine that refuses the configuration says why. Agreement means rounding: about 1e-7 of populations
of order 0.1-0.4 in float32 after a few steps, about 1e-16 in float64 (precision=float64).
"""

from __future__ import annotations

import argparse
import sys

import jax.numpy as jnp
import numpy as np

from lbm.config import load
from lbm.engines import EngineUnavailable, make_engine
from lbm.environment import use_precision
from lbm.errors import LbmError
from lbm.simulation import make_case


def main(argv: list[str]) -> int:
    """Print each engine's largest difference from xla; 1 if any exceeds ``--bound``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="run overrides, as for python -m lbm run")
    parser.add_argument("--steps", default="3,4", help="step counts, comma-separated (odd and even: default 3,4)")
    parser.add_argument("--rows", action="store_true", help="also the TPU (rows) kernel, interpreted")
    parser.add_argument("--bound", type=float, default=None,
                        help="largest difference allowed (default 1e-5 in float32, 1e-12 in float64)")
    args = parser.parse_args(argv)
    if any(o.startswith("precision=float64") for o in args.overrides):
        use_precision("float64")
    try:
        setup = make_case(load(args.overrides)).setup()
        steps = [int(s) for s in args.steps.split(",")]
    except (LbmError, ValueError) as exc:
        print(f"engines_agree: {exc}", file=sys.stderr)
        return 2
    bound = args.bound if args.bound is not None else (1e-12 if jnp.dtype(setup.dtype) == jnp.float64 else 1e-5)
    candidates = [("native", lambda: make_engine(setup, engine="native")),
                  ("pallas", lambda: make_engine(setup, engine="pallas")),
                  ("instrumented", lambda: make_engine(setup, "instrumented"))]
    if args.rows:
        from lbm.engines.pallas.engine import PallasEngine

        candidates.append(("pallas rows", lambda: PallasEngine(setup, platform="tpu", interpret=True)))
    f0 = setup.initial_populations()
    reference = {n: make_engine(setup, engine="xla").advance(jnp.array(f0), n) for n in steps}
    worst = 0.0
    print(f"{'engine':14} {'steps':>5} {'max|f - f_xla|':>15} {'max|out - out_xla|':>19}")
    for name, build in candidates:
        try:
            engine = build()
        except EngineUnavailable as exc:
            print(f"{name:14} refused: {exc}")
            continue
        for n in steps:
            f, aux = engine.advance(jnp.array(f0), n)
            f_ref, aux_ref = reference[n]
            df = float(np.abs(np.asarray(f) - np.asarray(f_ref)).max())
            da = max((float(np.abs(np.asarray(aux[k]) - np.asarray(aux_ref[k])).max()) for k in aux_ref), default=0.0)
            worst = max(worst, df, da)
            print(f"{name:14} {n:>5} {df:15.2e} {da:19.2e}")
    verdict = "agree" if worst <= bound else "DIFFER"
    print(f"engines_agree: {verdict}: largest difference {worst:.2e} (bound {bound:.0e})")
    return 0 if worst <= bound else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
