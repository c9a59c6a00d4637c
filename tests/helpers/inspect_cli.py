"""Running ``python -m lbm inspect`` in a subprocess and the identities every inspect record must satisfy."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbm.bench.inspect import _installed as installed  # noqa: F401  (re-exported for the tests)
from lbm.bench.inspect import cuda_plugin

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the subprocesses run from there, with it on PYTHONPATH)."""

CUDA = cuda_plugin() or "jax_plugins.xla_cuda12"
"""The CUDA plugin's module: jax-cuda12-plugin's or jax-cuda13-plugin's, whichever is installed."""


def run_cli(*args):
    """``python -m lbm inspect ARGS`` from the repository root; the completed process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "lbm", "inspect", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def inspect_json(out, *args):
    """``inspect ARGS --out OUT`` (which must succeed) and the inspect.json it wrote."""
    res = run_cli(*args, "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads((Path(out) / "inspect.json").read_text())


def consistent(record, q, itemsize):
    """The identities of an inspect record: the minimum traffic, rows summing to the total, the ratio."""
    assert record["min_bytes_per_cell_step"] == 2 * q * itemsize
    assert record["kernels_per_step"] >= 1 and record["steps_per_loop_body"] >= 1
    rows_sum = sum(k["read_bytes_per_cell_step"] + k["written_bytes_per_cell_step"] for k in record["kernels"])
    assert rows_sum == pytest.approx(record["bytes_per_cell_step"], rel=1e-9)
    assert record["bytes_per_cell_step"] <= record["bytes_per_cell_step_upper_bound"] + 1e-9
    assert record["traffic_ratio"] == pytest.approx(record["bytes_per_cell_step"] / record["min_bytes_per_cell_step"])
