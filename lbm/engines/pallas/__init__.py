"""The Pallas engine (GPU, TPU; interpret mode on a CPU): lbm.engines.pallas.engine, kernels in lbm.engines.pallas.kernels.

The kernels' cell body (lbm.engines.pallas.cell) is a copy of the reference physics of lbm.kernels (which the xla
engine runs); tests/test_engines_pallas.py pins it to the xla engine.
"""

ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")
"""Platforms where the Pallas kernel is compiled (elsewhere it runs in interpret mode) and ``auto`` picks it."""
