"""Variants of a native collision body (or of its compiler flags) against this tree's, with BGK, interleaved in one process.

    git show be28b82:lbm/engines/native/collisions.py > /tmp/col_base.py   # or a copy of lbm/kernels/collisions/kbc.py
    .venv/bin/python scripts/native_body_ab.py 64,128 kbc kbc@/tmp/col_base.py
    .venv/bin/python scripts/native_body_ab.py 64 cumulant "cumulant@/tmp/col_base.py@/tmp/cumulant_base.py~-DX=1"

Each VARIANT is ``KIND[@FILE...][~FLAGS]``: the collision kind (kbc or cumulant), optionally with the body of other
copies of source files (before the collision kinds moved to lbm/kernels/collisions/, lbm/engines/native/collisions.py:
its ``kbc_lines``, ``cumulant_lines`` and ``FUSED``; now lbm/kernels/collisions/kbc.py's ``kbc_lines`` and
lbm/kernels/collisions/cumulant.py's ``cumulant_lines`` and ``relax_cell``), optionally with extra compiler flags
(space-separated, after the kernel cache's own). Every variant builds as a library of its own (under
LBM_NATIVE_EXTRA_FLAGS=-DBODY_AB_<i> ...). The periodic D3Q27 float32 box of scripts/collision_cost.py, native engine:
per grid, 9 rounds of an even number of steps lasting about 2 s on BGK, every variant once per round in rotating
order. Prints each variant's median time over BGK's and over the first variant's in the same round (CPU time of the
process; wall clock beside it) with the load average.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import statistics
import sys
import time
import unittest.mock
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import collision_cost  # noqa: E402

from lbm.kernels.collisions import COLLISION_KINDS  # noqa: E402

kbc_module = importlib.import_module("lbm.kernels.collisions.kbc")  # the package's name kbc is the function
cumulant_module = importlib.import_module("lbm.kernels.collisions.cumulant")

ROUNDS, MIN_TIME = 9, 2.0
PATCHED = ("kbc_lines", "cumulant_lines", "relax_cell", "FUSED")
"""The names a variant's file may replace (by the same name in that file): the two kinds' native cell bodies, the
cumulant's cell function, and FUSED, the kinds whose body is fused (NativeBody.fused; a copy of collisions.py from
before FUSED existed fuses nothing)."""


def own() -> dict[str, Any]:
    """This tree's values of :data:`PATCHED`."""
    return {"kbc_lines": kbc_module.kbc_lines, "cumulant_lines": cumulant_module.cumulant_lines,
            "relax_cell": cumulant_module.relax_cell,
            "FUSED": tuple(k for k in ("kbc", "cumulant") if type(COLLISION_KINDS[k]).native.fused)}


def patches_of(path: str, i: str) -> dict[str, Any]:
    """The names of :data:`PATCHED` that a copy of a source file defines."""
    spec = importlib.util.spec_from_file_location(f"body_ab_{i}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    with unittest.mock.patch("lbm.kernels.collisions.operator.register", lambda op: op):  # a copy of a kind's module
        spec.loader.exec_module(mod)  # registers nothing: this tree's kinds stay the registry
    out = {name: getattr(mod, name) for name in PATCHED if hasattr(mod, name)}
    kind = getattr(mod, "Kbc", None)  # a copy of lbm/kernels/collisions/kbc.py: its own NativeBody.fused
    if "kbc_lines" in out and kind is not None:
        out.setdefault("FUSED", tuple(k for k in own()["FUSED"] if k != "kbc" or kind.native.fused))
    if "kbc_lines" in out:
        out.setdefault("FUSED", ())
    return out


def patch(values: dict[str, Any]) -> None:
    """Set the kbc and cumulant kinds' native bodies (NativeBody.lines, .fused) to the values of :data:`PATCHED`."""
    for kind in ("kbc", "cumulant"):
        op = COLLISION_KINDS[kind]
        op.native = dataclasses.replace(type(op).native, lines=values[f"{kind}_lines"],  # type: ignore[misc]
                                        fused=kind in values["FUSED"])
    values["cumulant_lines"].__globals__["relax_cell"] = values["relax_cell"]  # a copy's cumulant_lines: the variant's


def parse(i: int, text: str) -> tuple[str, str, dict[str, Any], str]:
    """(label, kind, patches, flags) of the variant ``KIND[@FILE...][~FLAGS]``, the i-th on the command line."""
    head, _, flags = text.partition("~")
    kind, *paths = head.split("@")
    if kind not in ("kbc", "cumulant"):
        raise SystemExit(f"native_body_ab: variant {text!r}: the kind is kbc or cumulant")
    patches = {}
    for j, path in enumerate(paths):
        patches.update(patches_of(path, f"{i}_{j}"))
    return text, kind, patches, f"-DBODY_AB_{i} {flags}".strip()


def measure(n: int, variants: list[tuple[str, str, dict[str, Any], str]]) -> None:
    """Time BGK and every variant on the n³ box, interleaved, and print the ratios."""
    import jax

    mine = own()
    prepared, steps = [], 2
    for label, kind, patches, flags in [("bgk", "bgk", {}, ""), *variants]:
        patch({**mine, **patches})
        os.environ["LBM_NATIVE_EXTRA_FLAGS"] = flags
        stepper, f0 = collision_cost.prepare("d3q27", (n, n, n), kind, "native", "float32")
        if kind == "bgk":
            steps = collision_cost.steps_for(stepper, f0, MIN_TIME)
        stepper.compile(f0, steps)
        f, _ = stepper.advance(f0 + 0, steps)  # builds the library while patched, and warms it
        jax.block_until_ready(f)
        prepared.append((label, stepper, f))
    patch(mine)
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

    def ratio(a: list[float], b: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(a, b, strict=True))

    for j, (label, _, _) in enumerate(prepared):
        print(f"  {label}: time / BGK {ratio(cpu[j], cpu[0]):.3f} CPU ({ratio(wall[j], wall[0]):.3f} wall); "
              f"time / {prepared[1][0]} {ratio(cpu[j], cpu[1]):.3f} CPU ({ratio(wall[j], wall[1]):.3f} wall)")


def main(argv: list[str]) -> int:
    """Command line: grids (comma-separated), then the variants."""
    if len(argv) < 2:
        print(__doc__)
        return 2
    variants = [parse(i, text) for i, text in enumerate(argv[1:])]
    for n in (int(x) for x in argv[0].split(",")):
        measure(n, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
