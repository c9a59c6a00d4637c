"""Every lattice x collision x case x grid x engine compiles for a TPU v5e (issue 37: XLA's TPU compiler aborted the
process on the pallas engine's 3D programs below 128^3), in CI's accelerator lane (scripts/ci_accel.sh, tests marked
accel): the pairwise covering design of scripts/compile_matrix.py, compiled without the device in child processes
(lbm.bench.probe; a few batches of configurations, BATCHES), so that an abort fails the test that names the
configuration instead of ending pytest. The design itself is checked here too (no accelerator needed).
"""

import dataclasses
import itertools
import json

import pytest
from helpers.inspect_cli import installed
from helpers.scripts import load_script

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


def test_an_abort_or_a_hang_in_a_batch_fails_its_configuration_alone(tmp_path, monkeypatch):
    """A batch's child that dies in its second configuration and hangs in its fourth: each is failed by name (ABORT,
    ERROR after the per-configuration time-out), the others are compiled (the third in a new child), as if each had
    had its own process."""
    import subprocess
    import sys

    real, seen = subprocess.Popen, tmp_path / "children.txt"
    fake = ("import json, os, sys, time\n"
            "got = [json.loads(line) for line in sys.stdin]\n"
            f"open({str(seen)!r}, 'a').write(json.dumps([i for i, _ in got]) + '\\n')\n"
            "for i, argv in got:\n"
            "    print(json.dumps({'config': i}), flush=True)\n"
            "    if i == 1:\n"
            "        sys.stderr.write('F1 x.cc:1] Check failed: rank == 3\\n'); sys.stderr.flush(); os.abort()\n"
            "    if i == 3:\n"
            "        time.sleep(600)\n"
            "    print(json.dumps({'engine': 'pallas', 'compile_s': 0.5}), flush=True)\n"
            "    print(json.dumps({'exit': 0}), flush=True)\n")
    monkeypatch.setattr(matrix.subprocess, "Popen", lambda cmd, **kwargs: real([sys.executable, "-c", fake], **kwargs))
    configs = [c for c in PAIRWISE if c.lattice == "d3q27"][:4]
    outs = matrix.deviceless_batch(configs, "v5e", tmp_path, timeout=3)
    assert [o.status for o in outs] == ["OK", "ABORT", "OK", "ERROR"]
    assert outs[1].line().startswith(f"ABORT   {configs[1].name}") and outs[1].line().endswith(
        "SIGABRT: Check failed: rank == 3")
    assert outs[3].line().startswith(f"ERROR   {configs[3].name}") and outs[3].line().endswith("no answer within 3 s")
    assert outs[0].seconds == outs[2].seconds == 0.5
    assert [json.loads(ln) for ln in seen.read_text().splitlines()] == [[0, 1, 2, 3], [2, 3]]


BATCHES = 4
"""The design's configurations are compiled in this many children (scripts/compile_matrix.deviceless_batch: one start of
Python, jax and libtpu per batch, about 1.9 CPU-s each, instead of one per configuration: 4 cheap configurations took
4.3 CPU-s in one child, 10.1 in four); each batch is an xdist group, so it is compiled once, on one worker. A
configuration that aborts still fails alone, by name: the batch's child dies in it, and the configurations after it
are compiled in a new child."""


def _batches(configs: list, n: int) -> dict:
    """Each configuration's batch: the dearest first into the cheapest batch so far (by compile_matrix.cost)."""
    load, batch = [0.0] * n, {}
    for c in sorted(configs, key=lambda c: -(matrix.cost(c) + matrix.START)):
        k = load.index(min(load))
        batch[c] = k
        load[k] += matrix.cost(c) + matrix.START
    return batch


BATCH = _batches(PAIRWISE, BATCHES)
_compiled: dict = {}


def _v5e_outcome(config, scratch):
    """The deviceless v5e compile of ``config``: its batch compiled (once) in one child, then looked up."""
    if config not in _compiled:
        batch = [c for c in PAIRWISE if BATCH[c] == BATCH[config]]
        _compiled.update(zip(batch, matrix.deviceless_batch(batch, "v5e", scratch, timeout=600), strict=True))
    return _compiled[config]


@pytest.mark.accel
@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.xdist_group(f"v5e_batch{BATCH[c]}"),
                                                 id=c.name.replace(" ", "-")) for c in PAIRWISE])
def test_v5e_compiles(tmp_path, config):
    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    out = _v5e_outcome(config, tmp_path)
    assert out.status == "OK", out.line()
    assert out.engine == config.engine  # the engine asked for compiled, not a fallback
