"""KBC's native cell body from other copies of collisions.py against this tree's, with BGK, interleaved in one process.

    git show be28b82:lbm/engines/native/collisions.py > /tmp/col_base.py
    .venv/bin/python scripts/kbc_body_ab.py 64,128 /tmp/col_base.py [/tmp/col_other.py ...]

Each COPY's ``kbc_lines`` replaces this tree's while its library builds (under LBM_NATIVE_EXTRA_FLAGS=-DKBC_AB_<i>,
so it is a separate library and FFI registration); ``kbc_this`` is this tree's. The periodic D3Q27 float32 box of
scripts/collision_cost.py, native engine: per grid, 9 rounds of an even number of steps lasting about 2 s on BGK,
every variant once per round in rotating order. Prints each variant's median time over BGK's and over the first
copy's in the same round (CPU time of the process; wall clock beside it) with the load average.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import collision_cost  # noqa: E402

import lbm.engines.native.collisions as col  # noqa: E402

ROUNDS, MIN_TIME = 9, 2.0


def body_of(path: str) -> Callable:
    """The ``kbc_lines`` of a copy of lbm/engines/native/collisions.py."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kbc_lines


def measure(n: int, variants: list[tuple[str, str, Callable, str]]) -> None:
    """Time every variant on the n³ box, interleaved, and print the ratios."""
    import jax

    this = col.kbc_lines
    prepared, steps = [], 2
    for name, kind, lines, flags in variants:
        col.kbc_lines = lines
        os.environ["LBM_NATIVE_EXTRA_FLAGS"] = flags
        stepper, f0 = collision_cost.prepare("d3q27", (n, n, n), kind, "native", "float32")
        if name == "bgk":
            steps = collision_cost.steps_for(stepper, f0, MIN_TIME)
        stepper.compile(f0, steps)
        f, _ = stepper.advance(f0 + 0, steps)  # builds the library while patched, and warms it
        jax.block_until_ready(f)
        prepared.append((name, stepper, f))
    col.kbc_lines = this
    os.environ.pop("LBM_NATIVE_EXTRA_FLAGS")
    cpu: list[list[float]] = [[] for _ in prepared]
    wall: list[list[float]] = [[] for _ in prepared]
    state = [f for _, _, f in prepared]
    loads = []
    for r in range(ROUNDS):
        for j in np.roll(np.arange(len(prepared)), r):
            c0, t0 = time.process_time(), time.perf_counter()
            state[j], _ = prepared[j][1].advance(state[j], steps)
            jax.block_until_ready(state[j])
            wall[j].append(time.perf_counter() - t0)
            cpu[j].append(time.process_time() - c0)
        loads.append(os.getloadavg()[0])
    print(f"{n}³, {steps} steps per repeat, {ROUNDS} rounds, load average {min(loads):.1f}-{max(loads):.1f}")
    for j, (name, _, _) in enumerate(prepared):
        def ratio(a: list[float], b: list[float]) -> float:
            return statistics.median(x / y for x, y in zip(a, b, strict=True))

        print(f"  {name}: time / BGK {ratio(cpu[j], cpu[0]):.3f} CPU ({ratio(wall[j], wall[0]):.3f} wall); "
              f"time / {prepared[1][0]} {ratio(cpu[j], cpu[1]):.3f} CPU")


def main(argv: list[str]) -> int:
    """Command line: grids (comma-separated), then the copies of collisions.py."""
    if len(argv) < 2:
        print(__doc__)
        return 2
    variants = [("bgk", "bgk", col.kbc_lines, "")]
    variants += [(f"kbc_{Path(p).stem}", "kbc", body_of(p), f"-DKBC_AB_{i}") for i, p in enumerate(argv[1:])]
    variants.append(("kbc_this", "kbc", col.kbc_lines, ""))
    for n in (int(x) for x in argv[0].split(",")):
        measure(n, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
