"""The Pallas engine (GPU, TPU; interpret mode on a CPU): lbm.engines.pallas.engine, kernels in lbm.engines.pallas.kernels."""

ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")
"""Platforms where the Pallas kernel is compiled (elsewhere it runs in interpret mode) and ``auto`` picks it."""
