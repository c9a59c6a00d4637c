"""Same-run peers of ``lbm bench``: another code's kernel for the same lattice, collision, precision and box.

``python -m lbm bench variants=[native,lbmpy]`` times lbmpy's generated C kernel beside lbm's engines, with
the same repeats, median and MLUPS definition (lbm.bench.throughput), so that bench.json and its table hold
the two side by side with their ratio. The peer is optional (``pip install "lbm[peers]"``) and imported only
when it is measured.

The lbmpy peer: lbmpy's method for the lattice (SRT for ``collision=bgk``, TRT with the same two rates for
``collision=trt``), the compressible second-order polynomial equilibrium lbm uses (lbmpy's discrete one; its
default continuous one differs on D3Q19) and zero-centred populations (f - w, what lbm's engines hold), in the
bench's precision; one pull stream-and-collide kernel between two population arrays
(structure of arrays, lbmpy's ``fzyx``) swapped every step, the periodic wrap through one ghost layer that
pystencils' data handling copies before every step (as lbmpy's ``LatticeBoltzmannStep`` runs it). pystencils
compiles it with its defaults for this machine (``-Ofast -march=native``, OpenMP) plus what a tuned user turns
on: OpenMP parallel loops and SIMD intrinsics for the widest vector ISA pystencils finds. The OpenMP thread
count is OpenMP's own default (``OMP_NUM_THREADS``, else every CPU the process may use); the record says which.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from typing import Any

import numpy as np

PEERS = ("lbmpy",)
"""The bench variants that run another code's kernel instead of an lbm engine."""
INSTALL = 'pip install "lbm[peers]"'
COLLISIONS = {"bgk": "SRT", "trt": "TRT"}
"""lbm collision -> lbmpy method of the same relaxation."""
STEP = ("stream (pull) then collide in one kernel, two population arrays swapped every step; the periodic wrap "
        "through one ghost layer copied before every step")


def missing(peer: str) -> str | None:
    """Why ``peer`` cannot be imported here (None when it can); imports nothing."""
    if importlib.util.find_spec(peer) is None:
        return f"the same-run peer {peer} is not installed: {INSTALL}"
    return None


def refusal(case: str, collision: str, storage: str) -> str | None:
    """Why the lbmpy peer cannot run a configuration (None when it can)."""
    if case != "periodic":
        return "the lbmpy peer runs the periodic box only (cases=[periodic])"
    if collision not in COLLISIONS:
        return f"the lbmpy peer runs collision={' or '.join(COLLISIONS)} only"
    if storage != "compute":
        return "the lbmpy peer stores populations in the compute dtype only (precision=float32 or float64)"
    return None


def check_peers(configs: list[tuple[Any, str | None]]) -> None:
    """Refuse (LbmError, one line) a bench plan's peer that is not installed, or that would measure nothing.

    ``configs``: the plan's (BenchConfig, reason it is skipped or None). A peer that can run some of them is
    skipped, with its reason, on the others (e.g. the cylinder beside the periodic box).
    """
    from lbm.errors import LbmError

    for peer in dict.fromkeys(c.variant for c, _ in configs if c.variant in PEERS):
        reasons = [skip for c, skip in configs if c.variant == peer]
        reason = reasons[0] if all(reasons) else missing(peer)
        if reason:
            raise LbmError(f"variants={peer}: {reason}")


def _omp_threads() -> int | None:
    """omp_get_max_threads() of the process's OpenMP runtime (libgomp, which the kernels link), or None."""
    import ctypes

    try:
        return int(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())
    except (OSError, AttributeError):
        return None


class LbmpyPeer:
    """lbmpy's kernel for a periodic-box Setup: start from lbm populations, advance, read them back."""

    def __init__(self, setup: Any, collision: str) -> None:
        if collision not in COLLISIONS or setup.collision is not None or setup.force is not None:
            raise ValueError(f"the lbmpy peer runs collision={' or '.join(COLLISIONS)} without a body force only")
        self.setup = setup
        self.method = COLLISIONS[collision]
        self.dtype = np.dtype(setup.dtype)
        self.steps_done = 0
        self.info: dict[str, Any] = {}

    def build(self) -> float:
        """Generate and compile lbmpy's kernel (pystencils caches it on disk); returns the seconds it took."""
        import pystencils as ps
        from lbmpy import LBMConfig, LBMOptimisation, LBStencil, Method, Stencil, create_lb_function

        t0 = time.perf_counter()
        lattice = self.setup.lattice
        target = ps.Target.auto_cpu()
        config = ps.CreateKernelConfig(target=target, default_dtype=self.dtype.name)
        config.cpu.openmp.enable = True
        config.cpu.vectorize.enable = target.is_vector_cpu()
        dh = ps.create_data_handling(tuple(self.setup.shape), periodicity=True, default_target=ps.Target.CPU)
        align = 64 if target.is_vector_cpu() else False
        names = ("pdfs", "pdfs_tmp")
        for name in names:
            dh.add_array(name, values_per_cell=lattice.q, dtype=self.dtype, alignment=align)
        method = Method[self.method]
        rates = [self.setup.omega_plus] if method == Method.SRT else [self.setup.omega_plus, self.setup.omega_minus]
        lbm_config = LBMConfig(stencil=LBStencil(getattr(Stencil, lattice.name.upper())), method=method,
                               relaxation_rates=rates, compressible=True, zero_centered=True, continuous_equilibrium=False,
                               field_name=names[0], temporary_field_name=names[1])
        kernel = create_lb_function(lbm_config=lbm_config, lbm_optimisation=LBMOptimisation(
            symbolic_field=dh.fields[names[0]]), config=config)
        stencil = [tuple(int(v) for v in d) for d in kernel.method.stencil]
        self.order = [stencil.index(tuple(int(v) for v in c)) for c in lattice.c]
        # the two parities of a step pair: sync the array read, run the kernel into the other (LatticeBoltzmannStep)
        self.arrays = [dh.cpu_arrays[n] for n in names]
        syncs = [dh.synchronization_function([n], lattice.name.upper(), ps.Target.CPU) for n in names]
        kwargs = [dh.get_kernel_kwargs(kernel)[0]]
        dh.swap(*names)
        kwargs.append(dh.get_kernel_kwargs(kernel)[0])
        dh.swap(*names)
        self.calls = list(zip(syncs, [kernel] * 2, kwargs, strict=True))
        seconds = time.perf_counter() - t0
        threads = _omp_threads()
        self.info = {
            "peer": "lbmpy", "lbmpy": importlib.metadata.version("lbmpy"),
            "pystencils": importlib.metadata.version("pystencils"),
            "method": method.name, "relaxation_rates": rates,
            "equilibrium": "compressible, second-order polynomial (discrete)",
            "populations": "zero-centred (f - w), layout fzyx (structure of arrays)", "step": STEP,
            "vector_isa": target.name, "openmp": True, "openmp_schedule": config.cpu.openmp.schedule,
            "openmp_threads": threads,
            "openmp_threads_from": ("OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else
                                    "OpenMP's default: the CPUs this process may use"),
            "build_or_load_s": seconds,
        }
        return seconds

    def start(self, f: Any) -> LbmpyPeer:
        """Load lbm populations ``(Q, *grid)`` (deviations f - w) into the peer's arrays; returns the peer."""
        host = np.asarray(f, dtype=self.dtype)
        inner = (slice(1, -1),) * (host.ndim - 1)
        for i, j in enumerate(self.order):
            self.arrays[0][inner + (j,)] = host[i]
        self.steps_done = 0
        return self

    def run(self, n: int) -> LbmpyPeer:
        """Advance ``n`` steps."""
        calls, parity = self.calls, self.steps_done % 2
        for k in range(n):
            sync, kernel, kwargs = calls[(parity + k) % 2]
            sync()
            kernel(**kwargs)
        self.steps_done += n
        return self

    def populations(self) -> np.ndarray:
        """The current populations as lbm holds them: ``(Q, *grid)``, deviations f - w."""
        current = self.arrays[self.steps_done % 2]
        inner = (slice(1, -1),) * (current.ndim - 1)
        return np.stack([current[inner + (j,)] for j in self.order])
