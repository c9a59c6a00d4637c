"""lbm.simulation.memory's estimate against the measured peak RSS of real runs (issue 39, item 3).

Each configuration runs twice, at a grid and at twice its cells per axis, as ``python -m lbm run ... steps=4
output.every=2`` under ``ulimit -v`` (``--cap-gib``, default 6), and its peak RSS is read from ``os.wait4``, as
``/usr/bin/time -v`` reads it. The slope between the two runs (bytes per cell; the process's own size, JAX and the
libraries, cancels) is set against the estimate's host bytes per cell::

    PYTHONPATH=. .venv/bin/python scripts/memory_estimate.py [--only taylor_green]

A ratio (estimate over measured) of at least 1 means the estimate bounds the run; the module doc of
lbm.simulation.memory gives the figures measured with it.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from lbm.config import load
from lbm.simulation import make_case
from lbm.simulation.memory import estimate

CONFIGS = {
    "taylor_green": (("case=taylor_green",), (1024, 1024)),
    "taylor_green_3d": (("case=taylor_green_3d",), (64, 64, 64)),
    "cylinder": (("case=cylinder",), (840, 360)),
    "cylinder_d3q19": (("case=cylinder", "lattice=d3q19"), (96, 48, 48)),
    "cavity": (("case=cavity",), (256, 256)),
    "cavity_d3q19": (("case=cavity", "lattice=d3q19"), (64, 64, 64)),
}
"""Name -> (overrides, the smaller grid); the larger doubles every axis."""


def grid_overrides(grid: tuple[int, ...]) -> list[str]:
    """``grid.nx=...`` overrides of a grid."""
    return [f"grid.{axis}={n}" for axis, n in zip(("nx", "ny", "nz"), grid, strict=False)]


def peak_rss(overrides: list[str], cap: int, workdir: Path) -> int:
    """Peak resident bytes of one ``python -m lbm run`` with ``overrides`` under ``ulimit -v cap``."""
    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    command = [sys.executable, "-m", "lbm", "run", *overrides, "steps=4", "output.every=2",
               f"hydra.run.dir={workdir / '_'.join(o.replace('=', '-') for o in overrides)}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=capped,
                            env={**os.environ, "LBM_MEMORY_CHECK": "0"})
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(overrides)}: exit {os.waitstatus_to_exitcode(status)}: {err.strip()[-300:]}")
    return usage.ru_maxrss * 1024  # kB on Linux


def host_per_cell(overrides: list[str]) -> tuple[float, int]:
    """The estimate's host bytes per cell of a run (on a CPU: the device's too), and its cells."""
    need = estimate(make_case(load(overrides)).run, "cpu")
    return (need.host_only + need.populations + need.temporaries) / need.cells, need.cells


def main() -> None:
    """Measure each configuration at two sizes and print the slope against the estimate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="configurations to measure")
    parser.add_argument("--cap-gib", type=float, default=6.0, help="ulimit -v of each run, GiB")
    args = parser.parse_args()
    cap = int(args.cap_gib * 2**30)
    print(f"{'configuration':<18} {'grids':<26} {'measured B/cell':>15} {'estimate B/cell':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or sorted(CONFIGS):
            base, small = CONFIGS[name]
            large = tuple(2 * n for n in small)
            rss = [peak_rss([*base, *grid_overrides(g)], cap, Path(tmp)) for g in (small, large)]
            measured = (rss[1] - rss[0]) / (math.prod(large) - math.prod(small))
            est, _ = host_per_cell([*base, *grid_overrides(large)])
            grids = f"{'x'.join(map(str, small))} / {'x'.join(map(str, large))}"
            print(f"{name:<18} {grids:<26} {measured:>15.0f} {est:>15.0f} {est / measured:>6.2f}")


if __name__ == "__main__":
    main()
