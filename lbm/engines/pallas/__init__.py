"""The Pallas engine (GPU, TPU; interpret mode on a CPU): lbm.engines.pallas.engine, kernels in lbm.engines.pallas.kernels
(push, two buffers) and lbm.engines.pallas.aa (in place, the AA pair: the TPU rows form), on the flat view of a grid's
planes where it takes one (lbm.engines.pallas.planes); the pair's walls and faces in lbm.engines.pallas.walls and
lbm.engines.pallas.faces.

The kernels' cell body (lbm.engines.pallas.cell) runs the reference physics of lbm.kernels (which the xla engine
runs) on per-direction arrays; tests/engines/pallas/test_engines_pallas.py and
tests/engines/pallas/test_pallas_collisions.py pin it to the xla engine.
"""

ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")
"""Platforms where the Pallas kernel is compiled (elsewhere it runs in interpret mode) and ``auto`` picks it."""
