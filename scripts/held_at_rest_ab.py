"""The native engine on Schafer-Turek 2D-1 in this tree (or the one named by PYTHONPATH), by CPU time: one line with
the grid, the boundary block's cells, the cells held at rest and the median MLUPS of 5 chunks of 200 steps.

Run it from each tree's own folder, in alternation (``python -m``/script runs put the current folder first on the
path), e.g. against the tree before the interior was held at rest:

    git worktree add /tmp/before e2462de
    for i in 1 2; do for t in /tmp/before $PWD; do (cd $t && PYTHONPATH=$t $OLDPWD/.venv/bin/python \
        $OLDPWD/scripts/held_at_rest_ab.py 80); done; done

Measured 2026-12-08 (2 cores, load 0.8-1.5): 1761 x 330 (80 cells per diameter), block 13,690 -> 9,294 cells (4,396
held at rest): 160.1 and 164.3 -> 182.2 and 178.0 MLUPS.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    """Time the native engine on Schafer-Turek 2D-1 at the cells per diameter given (default the case's)."""
    from lbm.engines.native.engine import NativeEngine
    from lbm.simulation import make_case

    sys.path.insert(0, str(Path.cwd() / "tests"))
    from helpers.runs import run_config

    overrides = ["case=schafer_turek", "precision=float32"]
    if len(sys.argv) > 1:
        overrides.append(f"case.cells_per_diameter={int(sys.argv[1])}")
    setup = make_case(run_config(*overrides)).setup()
    engine = NativeEngine(setup)
    f = jnp.array(setup.initial_populations())
    n = 200
    f, _ = engine.advance(f, n)  # compiled and warm
    jax.block_until_ready(f)
    seconds = []
    for _ in range(5):
        t0 = time.process_time()
        f, _ = engine.advance(f, n)
        jax.block_until_ready(f)
        seconds.append(time.process_time() - t0)
    held = getattr(engine.block, "rest", np.zeros(0))
    print(f"{setup.shape}: block {engine.block.cells.size} cells, {held.size} held at rest, "
          f"{np.prod(setup.shape) * n / statistics.median(seconds) / 1e6:.1f} MLUPS (CPU time, median of 5)")


if __name__ == "__main__":
    main()
