"""Every lattice x collision x case x grid x engine compiles for a TPU v5e (issue 37: XLA's TPU compiler aborted the
process on the pallas engine's 3D programs below 128^3), in CI's accelerator lane (scripts/ci_accel.sh, tests marked
accel): the pairwise covering design of scripts/compile_matrix.py, each configuration compiled without the device in
its own process (lbm.bench.probe), so that an abort fails the test that names the configuration instead of ending
pytest. The design itself is checked here too (no accelerator needed).
"""

import dataclasses
import itertools

import pytest
from conftest import load_script
from helpers.inspect_cli import installed

matrix = load_script("compile_matrix")
PAIRWISE = matrix.pairwise()


def test_the_design_covers_every_pair_of_values_lbm_offers():
    factors = (matrix.LATTICES, matrix.COLLISIONS, matrix.CASES, matrix.PAIRWISE_SIZES, matrix.ENGINES)
    offered = [c for c in (matrix.Config(*v) for v in itertools.product(*factors)) if matrix.valid(c)]
    assert all(matrix.valid(c) for c in PAIRWISE)
    for i, j in itertools.combinations(range(len(factors)), 2):
        if not matrix.paired(i, j):
            continue
        wanted = {(dataclasses.astuple(c)[i], dataclasses.astuple(c)[j]) for c in offered}
        got = {(dataclasses.astuple(c)[i], dataclasses.astuple(c)[j]) for c in PAIRWISE}
        assert wanted <= got, sorted(wanted - got)[:5]
    # every lattice, collision, case, grid and engine lbm offers is in it, with every other factor
    assert {c.case for c in PAIRWISE} == set(matrix.CASES) and {c.collision for c in PAIRWISE} == set(matrix.COLLISIONS)
    assert len(PAIRWISE) <= 60  # a covering design, not the product (1 008 configurations)
    # the one pair of factors left uncovered (matrix.UNPAIRED): collision x case
    assert [(i, j) for i, j in itertools.combinations(range(len(factors)), 2) if not matrix.paired(i, j)] == [(1, 2)]


def test_a_configuration_that_aborts_is_one_line_naming_it(tmp_path, monkeypatch):
    """The lane's verdict on a compile that dies by a signal (a child standing in for XLA's abort)."""
    import subprocess
    import sys

    real = subprocess.run

    def aborting(cmd, **kwargs):
        return real([sys.executable, "-c", "import os, sys; sys.stderr.write('F1 x.cc:1] Check failed: "
                               "rank == 3 Cannot find a valid window\\n'); sys.stderr.flush(); os.abort()"], **kwargs)

    monkeypatch.setattr(matrix.subprocess, "run", aborting)
    out = matrix.deviceless(PAIRWISE[0], "v5e", tmp_path, timeout=60)
    assert out.status == "ABORT"
    assert out.line().startswith(f"ABORT   {PAIRWISE[0].name}")
    assert out.line().endswith("SIGABRT: Check failed: rank == 3 Cannot find a valid window")


@pytest.mark.accel
@pytest.mark.parametrize("config", PAIRWISE, ids=[c.name.replace(" ", "-") for c in PAIRWISE])
def test_v5e_compiles(tmp_path, config):
    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    out = matrix.deviceless(config, "v5e", tmp_path, timeout=600)
    assert out.status == "OK", out.line()
    assert out.engine == config.engine  # the engine asked for compiled, not a fallback
