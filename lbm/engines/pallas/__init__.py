"""The Pallas engine (GPU, TPU; interpret mode on a CPU): lbm.engines.pallas.engine, kernels in lbm.engines.pallas.kernels
(push, two buffers) and lbm.engines.pallas.aa (in place, the AA pair: the TPU rows form), on the flat view of a grid's
planes where it takes one (lbm.engines.pallas.planes); the pair's walls and faces in lbm.engines.pallas.walls and
lbm.engines.pallas.faces.

The kernels' cell body (lbm.engines.pallas.cell) runs the reference physics of lbm.kernels (which the xla engine
runs) on per-direction arrays; tests/engines/pallas/test_engines_pallas.py and
tests/engines/pallas/test_pallas_collisions.py pin it to the xla engine.
"""

from typing import Any

ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")
"""Platforms where the Pallas kernel is compiled (elsewhere it runs in interpret mode) and ``auto`` picks it."""


def tpu_interpret(interpret: Any) -> Any:
    """How a TPU kernel (the rows form's push kernel, the AA pair's) runs for ``interpret``: True gives Pallas's TPU
    interpret mode, which models the kernel's DMAs, semaphores and VMEM as the chip runs them (a DMA lands when it is
    waited on, a read of uninitialised VMEM gives NaN, one out of bounds raises); False compiles it; interpret
    parameters pass as they are. The generic interpret mode runs each DMA at once, so it cannot see a missing wait,
    and on a CPU it builds larger programs: tests/engines/pallas took 591 CPU-s with it, 394 with this (cold, 2
    workers, back to back)."""
    if interpret is True:
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.InterpretParams()
    return interpret
