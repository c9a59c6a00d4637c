"""CPU seconds of a first ``lbm.value_and_grad`` call on small runs, where compiling dominates.

Run it with two trees to compare them (the same machine, alternating)::

    PYTHONPATH=<tree> .venv/bin/python scripts/gradient_first_call.py
"""

from __future__ import annotations

import time

import lbm

CYLINDER = ["case=cylinder", "grid.nx=48", "grid.ny=24", "steps=100", "flow.reynolds=10", "case.radius=3.3",
            "case.center=[12.0,12.0]", "case.bounce_back=interpolated", "precision=float64"]
CAVITY = ["case=cavity", "grid.nx=16", "grid.ny=16", "steps=100", "precision=float64"]


def first_call(overrides: list[str], wrt: list[str], objective: str, **options: int) -> tuple[float, dict]:
    """CPU seconds of one value_and_grad call in this process, and its gradient."""
    t = time.process_time()
    _, grads = lbm.value_and_grad(overrides, wrt, objective, **options)
    return time.process_time() - t, grads


if __name__ == "__main__":
    cyl, g_cyl = first_call(CYLINDER, ["case.radius"], "drag", window=20)
    cav, g_cav = first_call(CAVITY, ["flow.u_lattice"], "kinetic_energy")
    print(f"cylinder 48x24, 100 steps: {cyl:.2f} CPU-s {g_cyl}; cavity 16^2, 100 steps: {cav:.2f} CPU-s {g_cav}")
