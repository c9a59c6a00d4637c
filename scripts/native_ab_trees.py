"""Interleaved A/B in one process of the native periodic-box kernel of another lbm tree against this one.

    .venv/bin/python scripts/native_ab_trees.py --other /path/to/other/checkout --lattice d2q9 --grid 1024,1024 \\
        [--rounds 7] [--min-time 1.0] [--precision float32]

Both libraries are built from their own tree's kernels.cc and generated header (the other tree's
lbm/engines/native/codegen.py, loaded beside this one) with the same compiler and flags, registered under
different FFI names, and run the same BGK AA-pattern step pairs on a Taylor-Green box, each on its own
populations in the representation its tree uses (``initial_populations`` of its Setup: this tree's is built
here; the other's is this one plus the weights when the other tree's kernels.cc still adds ``SHIFT``, i.e.
holds absolute populations). Each round times both once, in alternating order, for the same number of
steps; the table gives per tree the median MLUPS by the wall clock and by the process's CPU time, and the
ratio this/other of each. Under load the CPU-time figure is the steadier one; both are printed with the load.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def other_library(other: Path, spec: object, tag: str) -> str:
    """Build the other tree's kernel library for ``spec`` (its codegen, its kernels.cc) and register it; FFI prefix."""
    import jax

    from lbm.engines.native import build

    loader = importlib.util.spec_from_file_location("other_codegen", other / "lbm/engines/native/codegen.py")
    codegen = importlib.util.module_from_spec(loader)
    sys.modules["other_codegen"] = codegen  # its dataclasses look their module up
    loader.loader.exec_module(codegen)
    ospec = codegen.KernelSpec(spec.lattice, spec.storage, spec.trt, spec.forced)
    tmp = Path(tempfile.mkdtemp(prefix="lbm_ab_"))
    (tmp / "lbm_generated.h").write_text(codegen.header(ospec))
    (tmp / "kernels.cc").write_text((other / "lbm/engines/native/kernels.cc").read_text())
    cmd = [build.compiler(), *build.cxxflags(), f"-I{jax.ffi.include_dir()}", "-I.", "kernels.cc", "-o", "kernel.so"]
    subprocess.run(cmd, check=True, cwd=tmp, capture_output=True)
    lib = ctypes.cdll.LoadLibrary(str(tmp / "kernel.so"))
    prefix = f"lbm_other_{tag}"
    for k in build.KERNELS:
        jax.ffi.register_ffi_target(f"{prefix}_{k}", jax.ffi.pycapsule(getattr(lib, f"lbm_{k}")), platform="cpu")
    return prefix


def runner(prefix: str, spec: object, omega: float, pairs: int, threading: bool = True) -> object:
    """A jitted function advancing populations by ``pairs`` AA step pairs with the kernels under ``prefix``
    (``threading``: whether its kernels take the threads and pinning attributes)."""
    import jax

    from lbm.engines.native import build

    def step(a: object, parity: int) -> object:
        args = build._step_args(spec, None, None, None, None)
        out = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(args[0].shape, a.dtype),
               jax.ShapeDtypeStruct(args[1].shape, a.dtype))
        call = jax.ffi.ffi_call(f"{prefix}_{'aa_even' if parity == 0 else 'aa_odd'}", out, input_output_aliases={0: 0})
        attrs = build._attrs(omega, omega, None, spec.lattice.d, False, (), None)
        if not threading:
            attrs = {k: v for k, v in attrs.items() if k not in ("threads", "pinning")}
        return call(a, *args, **attrs)[0]

    def run(a: object) -> object:
        return jax.lax.fori_loop(0, pairs, lambda _, x: step(step(x, 0), 1), a)

    return jax.jit(run, donate_argnums=0)


def main() -> None:
    """Time both trees' kernels interleaved and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", type=Path, required=True)
    p.add_argument("--lattice", default="d2q9")
    p.add_argument("--grid", default="1024,1024")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--precision", default="float32")
    args = p.parse_args()
    import jax

    from lbm.engines.native import build
    from lbm.engines.native.codegen import KernelSpec
    from lbm.kernels.equilibrium import absolute
    from lbm.simulation import prepare

    grid = tuple(int(v) for v in args.grid.replace("x", ",").split(","))
    axes = ("nx", "ny", "nz")
    _, setup = prepare(["case=taylor_green", f"lattice={args.lattice}", f"precision={args.precision}", "steps=1",
                        *(f"grid.{a}={n}" for a, n in zip(axes, grid, strict=False))])
    spec = KernelSpec(setup.lattice, args.precision, False, False)
    absolute_other = "SHIFT[i]" in (args.other / "lbm/engines/native/kernels.cc").read_text()
    f_this = setup.initial_populations()
    f_other = absolute(f_this, setup.lattice) if absolute_other else f_this
    prefixes = {"this": build.register(spec), "other": other_library(args.other, spec, spec.tag)}
    cells = math.prod(grid)
    probe = runner(prefixes["this"], spec, setup.omega_plus, 1)
    a = jax.block_until_ready(probe(f_this + 0))
    t0 = time.perf_counter()
    jax.block_until_ready(probe(a))
    pairs = max(1, math.ceil(args.min_time / (time.perf_counter() - t0) / 2))
    other_threading = '"pinning"' in (args.other / "lbm/engines/native/kernels.cc").read_text()
    runs = {k: runner(v, spec, setup.omega_plus, pairs, k == "this" or other_threading) for k, v in prefixes.items()}
    state = {"this": runs["this"](f_this + 0), "other": runs["other"](f_other + 0)}
    times: dict[str, list[tuple[float, float]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        for name in (("other", "this") if r % 2 else ("this", "other")):
            w0, c0 = time.perf_counter(), time.process_time()
            state[name] = jax.block_until_ready(runs[name](state[name]))
            times[name].append((time.perf_counter() - w0, time.process_time() - c0))
    steps = 2 * pairs
    print(f"{args.lattice} {'x'.join(map(str, grid))} {args.precision} BGK, {steps} steps per timing, {args.rounds} "
          f"rounds; other={args.other} (absolute populations: {absolute_other}); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = {}
    for name, ts in times.items():
        wall = statistics.median(cells * steps / t / 1e6 for t, _ in ts)
        cpu = statistics.median(cells * steps / c / 1e6 for _, c in ts)
        med[name] = (wall, cpu)
        print(f"{name:6s} wall {wall:8.1f} MLUPS   cpu {cpu:8.1f} MLUPS per CPU-second")
    print(f"ratio this/other: wall {med['this'][0] / med['other'][0]:.3f}, cpu {med['this'][1] / med['other'][1]:.3f}")
    if not all(np.isfinite(np.asarray(v)).all() for v in state.values()):
        sys.exit("a state became non-finite")


if __name__ == "__main__":
    main()
