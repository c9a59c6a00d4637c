"""Running ``python -m lbm inspect`` (in this process or a subprocess) and the identities every inspect record must
satisfy."""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

from lbm.bench.targets import _installed as installed  # noqa: F401  (re-exported for the tests)
from lbm.bench.targets import cuda_plugin

"""The repository root (the subprocesses run from there, with it on PYTHONPATH)."""

CUDA = cuda_plugin() or "jax_plugins.xla_cuda12"
"""The CUDA plugin's module: jax-cuda12-plugin's or jax-cuda13-plugin's, whichever is installed."""


def run_cli(*args):
    """``python -m lbm inspect ARGS`` from the repository root; the completed process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lbm", "inspect", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)


def run_inspect(*args):
    """``lbm inspect ARGS`` in this process (the command line's own entry point, lbm.cli.main), its output captured:
    a completed process's returncode, stdout and stderr. The deviceless compiles (tests marked accel) run so, without
    a start of Python, JAX and the compiler plugins per compile (1-1.5 CPU-s each); run_cli is the real process.
    The suite's persistent compilation cache is off meanwhile: an executable compiled for a device this machine lacks
    cannot be loaded from it (JAX warns at each read)."""
    import jax

    from lbm.cli import main

    out, err = io.StringIO(), io.StringIO()
    cache = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["inspect", *args])
    finally:
        jax.config.update("jax_enable_compilation_cache", cache)
    return subprocess.CompletedProcess(["lbm", "inspect", *args], code, out.getvalue(), err.getvalue())


def inspect_json(out, *args):
    """``inspect ARGS --out OUT`` in this process (which must succeed) and the inspect.json it wrote."""
    res = run_inspect(*args, "--out", str(out))
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



def v5e_planned_over_populations(overrides: list[str], steps: int):
    """The pallas engine of a float32 run of ``overrides`` built for a TPU v5e, and the memory the v5e plans for its
    compiled ``steps``-step chunk (arguments, outputs not aliased to them, temporaries; deviceless, libtpu) over the
    populations' bytes."""
    import jax
    import numpy as np
    from helpers.runs import setup_for

    from lbm.bench.targets import load_target, prepare_environment, target_sharding
    from lbm.engines.pallas.engine import PallasEngine
    from lbm.engines.timestep import step_index

    target = load_target("v5e")
    prepare_environment(target)
    setup = setup_for(overrides, "float32")
    engine = PallasEngine(setup, platform="tpu")
    sharding = target_sharding(target)
    args = (jax.ShapeDtypeStruct(engine.state_shape, setup.dtype), engine.params, step_index(0))
    specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), args)
    m = engine.chunk_function(steps).lower(*specs).compile().memory_analysis()
    planned = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
    return engine, planned / (setup.lattice.q * int(np.prod(setup.shape)) * 4)
