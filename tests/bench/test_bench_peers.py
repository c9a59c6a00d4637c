"""lbmpy as a same-run peer of ``python -m lbm bench`` (lbm.bench.peers).

The refusals and the grouping run everywhere; the tests that run lbmpy's kernel are skipped where lbmpy is not
installed (CI does not install the peers extra: pip install "lbm[peers]").
"""

import importlib.util
import json
import sys

import numpy as np
import pytest

from lbm.bench.cli import compose_bench, measured_groups, plan
from lbm.bench.throughput import BenchConfig
from lbm.cli import main

needs_lbmpy = pytest.mark.skipif(importlib.util.find_spec("lbmpy") is None,
                                 reason='lbmpy is not installed (pip install "lbm[peers]"); CI does not install it')


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbm: error: ")
    return err[0]


def test_bench_without_lbmpy_says_how_to_install_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "lbmpy", None)  # importlib.util.find_spec("lbmpy") is None: not installed
    assert main(["bench", "variants=[native,lbmpy]", "cases=[periodic]"]) == 2
    line = one_error_line(capsys)
    assert "lbmpy is not installed" in line and 'pip install "lbm[peers]"' in line
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args,words", [
    (["cases=[cylinder]"], "periodic box only"),
    (["cases=[periodic]", "precision=f16-storage"], "compute dtype only"),
])
def test_bench_refuses_what_the_peer_cannot_run_in_one_line(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "variants=[native,lbmpy]", *args]) == 2
    line = one_error_line(capsys)
    assert "variants=lbmpy" in line and words in line
    assert not (tmp_path / "outputs").exists()


def test_plan_skips_the_peer_where_it_cannot_run_beside_where_it_can(monkeypatch):
    monkeypatch.setattr("lbm.bench.peers.missing", lambda peer: None)  # installed or not: the plan imports nothing
    p = plan(compose_bench(["variants=[native,lbmpy]", "cylinder_grid.nx=60", "cylinder_grid.ny=36"]))
    skips = {(c.case, c.variant): skip for c, skip in p["configs"]}
    assert skips[("periodic", "lbmpy")] is None and skips[("periodic", "native")] is None
    assert "periodic box only" in skips[("cylinder", "lbmpy")] and skips[("cylinder", "native")] is None


def test_a_peer_groups_the_variants_of_its_configuration_and_nothing_else():
    def c(variant, n=16, precision="float32"):
        return BenchConfig(case="periodic", lattice="d2q9", grid=(n, n), variant=variant, precision=precision)

    configs = [c("native"), c("lbmpy"), c("xla"), c("native", 32), c("xla", 32), c("native", precision="float64"),
               c("lbmpy", precision="float64")]
    groups = measured_groups(configs)
    assert groups == [[c("native"), c("lbmpy"), c("xla")], [c("native", 32)], [c("xla", 32)],
                      [c("native", precision="float64"), c("lbmpy", precision="float64")]]


def streamed(f, lattice):
    """Each population moved one link along its velocity, periodically (the stream stage, written independently)."""
    return np.stack([np.roll(f[i], tuple(lattice.c[i]), axis=tuple(range(f.ndim - 1))) for i in range(len(f))])


@needs_lbmpy
@pytest.mark.slow
@pytest.mark.parametrize("lattice,grid,precision,collision,bound", [
    ("d2q9", (20, 12), "float64", "bgk", 1e-13),
    ("d2q9", (20, 12), "float64", "trt", 1e-13),
    ("d3q19", (8, 6, 5), "float32", "bgk", 2e-5),  # float32: ~1e-7 measured; lbmpy is compiled with -Ofast
])
def test_lbmpy_steps_equal_the_xla_engine(lattice, grid, precision, collision, bound):
    """The peer computes what lbm computes: lbmpy's pull kernel applies stream then collide, lbm's step collide then
    stream, so n lbm steps from S f0 equal S applied to n lbmpy steps from f0 (S: one stream), to rounding."""
    import jax

    from lbm.bench.peers import LbmpyPeer
    from lbm.bench.throughput import make_setup
    from lbm.engines import make_engine

    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    setup = make_setup(BenchConfig(case="periodic", lattice=lattice, grid=grid, variant="xla", precision=precision,
                                   collision=collision))
    f0 = np.asarray(setup.initial_populations())
    peer = LbmpyPeer(setup, collision)
    peer.build()
    n = 5
    got = streamed(peer.start(f0).run(2).run(n - 2).populations(), setup.lattice)  # two runs: the parities continue
    want = np.asarray(make_engine(setup, "fused", engine="xla").advance(jax.numpy.asarray(streamed(f0, setup.lattice)),
                                                                        n)[0])
    assert got.dtype == want.dtype == np.dtype(precision)
    scale = np.abs(want - streamed(f0, setup.lattice)).max()  # how far n steps move the populations
    assert scale > 1e-4
    assert np.abs(got - want).max() < bound * np.abs(want).max()


@needs_lbmpy
@pytest.mark.slow
def test_bench_measures_native_and_lbmpy_side_by_side(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["bench", "variants=[xla,lbmpy]", "cases=[periodic]", "grid.nx=32", "grid.ny=24", "repeats=3",
                 "steps=4", "kernel_profile=0", "bandwidth.enabled=false", f"hydra.run.dir={run_dir}"]) == 0
    doc = json.loads((run_dir / "bench.json").read_text())
    xla, peer = doc["records"]
    assert (xla["variant"], peer["variant"]) == ("xla", "lbmpy") and peer["mode"] == "peer"
    for r in (xla, peer):  # the same definitions: cells x steps / wall time of a repeat, median of the repeats
        assert r["steps_per_repeat"] == 4 and r["repeats"] == len(r["mlups"]["values"]) == 3
        assert r["mlups"]["median"] == pytest.approx(float(np.median(r["mlups"]["values"])))
        assert r["bytes_per_cell_update"] == 72 and "repeats in turn" in r["interleaved"]
    info = peer["peer"]
    assert info["method"] == "SRT" and info["openmp"] and info["openmp_threads"] >= 1
    assert info["lbmpy"] in peer["engine"] and peer["storage"] == "float32"
    (row,) = doc["summary"]
    assert row["speedup_vs_lbmpy"] == pytest.approx(xla["mlups"]["median"] / peer["mlups"]["median"])


def test_interleaved_repeats_rotate_their_order_and_drop_a_failing_variant(monkeypatch):
    from lbm.bench import throughput

    calls = []

    class Fake:
        def __init__(self, cfg, timing, progress=None):
            if cfg.variant == "xla":
                raise ValueError("cannot set up")
            self.cfg, self.n = cfg, 2

        def repeat(self):
            calls.append(self.cfg.variant)
            if self.cfg.variant == "naive" and calls.count("naive") == 2:
                raise FloatingPointError("blew up")

        def record(self, bandwidth):
            return {"variant": self.cfg.variant}

    monkeypatch.setattr(throughput, "Measurement", Fake)
    cfgs = [BenchConfig(case="periodic", lattice="d2q9", grid=(8, 8), variant=v)
            for v in ("native", "xla", "naive", "lbmpy")]
    out = throughput.measure_interleaved(cfgs, throughput.Timing(repeats=4))
    # round 1 rotated by one (naive fails there), rounds 2 and 3 of the two left rotated again
    assert calls == ["native", "naive", "lbmpy", "lbmpy", "native", "naive", "native", "lbmpy", "lbmpy", "native"]
    assert isinstance(out[1], ValueError) and isinstance(out[2], FloatingPointError)
    assert out[0]["variant"] == "native" and out[3]["variant"] == "lbmpy"
    assert out[0]["interleaved"] == out[3]["interleaved"] and "native / lbmpy" in out[0]["interleaved"]
