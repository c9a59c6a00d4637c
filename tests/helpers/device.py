"""Marks for the tests that need a GPU or TPU (scripts/device_check.sh runs them: pytest -m device)."""

import os

import jax
import pytest

REHEARSAL = os.environ.get("LBM_DEVICE_REHEARSAL", "") not in ("", "0")
"""LBM_DEVICE_REHEARSAL=1 (device_check.sh with LBM_DEVICE=cpu) runs the device tests on the CPU, the kernels in
interpret mode: the script's rehearsal, so that the first run on a lent device does not fail for a reason a CPU could
have shown."""
ON_DEVICE = jax.default_backend() in ("gpu", "tpu")
on_device = pytest.mark.skipif(not ON_DEVICE and not REHEARSAL,
                               reason="needs a GPU or TPU (LBM_DEVICE_REHEARSAL=1 runs it on the CPU)")
